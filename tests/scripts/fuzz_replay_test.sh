#!/usr/bin/env bash
# The fuzz targets (tests/fuzz/) without libFuzzer: each one, built against
# the ordinary library with tests/fuzz/replay.c, runs over its seed corpus
# (made by difftx's own commands: scripts/fuzz.sh --seeds), 16 damaged copies
# of every seed (cut short at 8 places, one byte changed at 8 places), and
# the committed regression inputs (tests/fuzz/regressions/TARGET/: inputs
# that once crashed). Every input must run to the end: a crash or a broken
# invariant of the target fails it. Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
dir=${FUZZ_REPLAY_DIR:-build/fuzz}
export DIFFTX_BIN=${DIFFTX_BIN:-build/difftx}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
if ! scripts/fuzz.sh --seeds "$tmp/seeds" > "$tmp/seeds.log" 2>&1; then
    echo "FAIL fuzz_replay_seeds: $(tail -n 1 "$tmp/seeds.log")"
    echo "0 passed, 1 failed"
    exit 1
fi

# damaged copies of f into d: cut at 8 places, and 8 single-byte changes
damage() { # FILE DIR
    local f=$1 d=$2 n k at b
    n=$(stat -c %s "$f")
    [ "$n" -gt 0 ] || return 0
    for k in 1 2 3 4 5 6 7 8; do
        at=$(( n * k / 9 ))
        head -c "$at" "$f" > "$d/$(basename "$f").cut$k"
        at=$(( (n * k * 7919 / 9) % n ))
        b=$(( (k * 37 + 11) % 256 ))
        cp "$f" "$d/$(basename "$f").flip$k"
        printf "$(printf '\\%03o' "$b")" | dd of="$d/$(basename "$f").flip$k" bs=1 seek="$at" conv=notrunc status=none
    done
}

for bin in "$dir"/fuzz_*; do
    [ -x "$bin" ] || continue
    t=$(basename "$bin")
    inputs=$tmp/in-$t
    mkdir -p "$inputs"
    for f in "$tmp/seeds/$t"/*; do
        [ -f "$f" ] || continue
        cp "$f" "$inputs/"
        damage "$f" "$inputs"
    done
    [ -d "tests/fuzz/regressions/$t" ] && cp "tests/fuzz/regressions/$t"/* "$inputs/" 2>/dev/null
    n=$(ls "$inputs" | wc -l)
    if [ "$n" -gt 0 ] && out=$("$bin" "$inputs"/* 2>&1); then
        passed=$((passed + 1))
        echo "ok   fuzz_replay_$t ($n inputs)"
    else
        failed=$((failed + 1))
        echo "FAIL fuzz_replay_$t ($n inputs): $(printf '%s\n' "$out" | grep -m 3 -E 'invariant|ERROR|error|Assertion' | tr '\n' ' ')"
    fi
done
[ $((passed + failed)) -gt 0 ] || { echo "FAIL fuzz_replay: no target in $dir (make $dir/fuzz_model ...)"; failed=1; }
echo "$passed passed, $failed failed"
[ $failed = 0 ]
