#!/usr/bin/env bash
# scripts/repro_keep.sh: a stage's results survive the trip through the
# repository (keep, then restore into an empty run folder, byte for byte),
# a model still training is not kept, a restore never replaces a file, and
# two folders of different settings are refused with one line. Ends with
# the suite's "N passed, N failed" line.
set -u
cd "$(dirname "$0")/../.."
keep_sh=scripts/repro_keep.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
check() { # name command...: passes when the command succeeds
    local name=$1; shift
    if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL repro_keep_$name"; fi
}

run=$tmp/run keep=$tmp/keep back=$tmp/back
mkdir -p "$run/models" "$run/eval"
echo "vocab=64 seq=16 dims=8 16" > "$run/settings.txt"
echo "diff 3e-3" > "$run/lr.txt"
for m in diff-d8-s1 transformer-d8-s1; do # finished: an info record
    printf '{"step": 1, "loss": 4.1}\n{"step": 2, "loss": 3.9}\n' > "$run/models/$m.jsonl"
    printf '{"step": 1, "loss": 5.0}\n' > "$run/models/$m.warm.jsonl"
    echo "difftx train --arch ${m%%-*}" > "$run/models/$m.cmd"
    echo "{\"arch\": \"${m%%-*}\", \"params\": 123}" > "$run/models/$m.info.json"
done
printf '{"step": 1, "loss": 4.5}\n' > "$run/models/diff-d16-s1.jsonl" # still training: no info record
echo "weights" > "$run/models/diff-d8-s1.safetensors"
echo '{"ppl": 12.5}' > "$run/eval/ppl-diff-s1.json"
echo 'difftx eval ppl' > "$run/eval/ppl-diff-s1.cmd"

check keeps "$keep_sh" keep "$run" "$keep"
check leaves_out_the_weights test ! -e "$keep/models/diff-d8-s1.safetensors.gz"
check leaves_out_a_model_in_training test ! -e "$keep/models/diff-d16-s1.jsonl.gz"
check compresses gzip -t "$keep/eval/ppl-diff-s1.json.gz"
mkdir -p "$back"
check restores "$keep_sh" restore "$keep" "$back"
same=1
for f in settings.txt lr.txt eval/ppl-diff-s1.json eval/ppl-diff-s1.cmd \
    models/diff-d8-s1.{jsonl,warm.jsonl,cmd,info.json} models/transformer-d8-s1.{jsonl,warm.jsonl,cmd,info.json}; do
    cmp -s "$run/$f" "$back/$f" || { same=0; echo "differs: $f"; }
done
check round_trip_is_byte_identical test $same = 1
check restores_nothing_else test "$(find "$back" -type f | wc -l)" = 12

# a restore keeps the run's own files; a second keep does not rewrite what is kept
echo '{"ppl": 99}' > "$back/eval/ppl-diff-s1.json"
"$keep_sh" restore "$keep" "$back"
check restore_never_replaces grep -q 99 "$back/eval/ppl-diff-s1.json"
touch -d '2000-01-01' "$keep/eval/ppl-diff-s1.json.gz"
old=$(stat -c %Y "$keep/eval/ppl-diff-s1.json.gz")
"$keep_sh" keep "$run" "$keep"
check keep_does_not_rewrite test "$(stat -c %Y "$keep/eval/ppl-diff-s1.json.gz")" = "$old"

# another recipe's results are refused, in one line, with a non-zero exit
other=$tmp/other
mkdir -p "$other"
echo "vocab=128 seq=16 dims=8 16" > "$other/settings.txt"
err=$("$keep_sh" restore "$keep" "$other" 2>&1); rc=$?
check refuses_other_settings test $rc != 0
check refuses_in_one_line test "$(printf '%s\n' "$err" | wc -l)" = 1
case $err in *"different settings"*) ok=1 ;; *) ok=0; echo "message: $err" ;; esac
check names_the_reason test $ok = 1
"$keep_sh" keep "$other" "$keep" 2> /dev/null
check refuses_to_keep_other_settings test $? != 0
"$keep_sh" frobnicate "$run" "$keep" 2> /dev/null
check refuses_an_unknown_operation test $? != 0

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
