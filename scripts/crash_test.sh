#!/usr/bin/env bash
# make test-crash: nothing a killed, starved or doubled `difftx train` does may
# lose or corrupt a file, or change where the run ends.
#
# usage: scripts/crash_test.sh [--kills N] [--seed S] [--keep-dir] [BIN]
#
#  1. kills: a small run is started with --resume again and again and killed
#     with SIGKILL at a random moment, N times (default 24). Every other start
#     sets DTX_TEST_COMMIT_DELAY_MS (the atomic writer sleeps between writing a
#     file and renaming it), so that many kills land inside a checkpoint write.
#     After every kill each checkpoint and the model file, where present, must
#     load whole (`difftx info` reads and checks a checkpoint: model and
#     moments); then the run is finished and its model must be byte-identical
#     to that of the same run never interrupted.
#  2. a full disk: a run stops after its first checkpoint; resumed with
#     `ulimit -f` below a checkpoint's size, its next checkpoint write fails
#     (EFBIG, as ENOSPC would): the run must exit 1 with one line, leave the
#     earlier checkpoint byte-identical and no temporary file; resumed without
#     the limit it must end byte-identical. Where a tmpfs can be mounted (root
#     with CAP_SYS_ADMIN), the same with a real full file system (ENOSPC);
#     elsewhere that part is reported as skipped.
#  3. two runs on one --out: the second must refuse at once with one line
#     naming the lock, and the first must finish unharmed.
# Ends with "N passed, N failed[, N skipped]"; exit 0 when none failed.
set -uo pipefail

kills=24 seed=$$ keep=0 bin=""
while [ $# -gt 0 ]; do
    case $1 in
        --kills) kills=$2; shift ;;
        --seed) seed=$2; shift ;;
        --keep-dir) keep=1 ;;
        -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "crash_test: unknown option $1" >&2; exit 2 ;;
        *) bin=$1 ;;
    esac
    shift
done
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${bin:-${DIFFTX_BIN:-$root/build/difftx}}
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
[ -x "$bin" ] || { echo "crash_test: $bin is not built (make)" >&2; exit 2; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/difftx-crash.XXXXXX")
[ $keep = 1 ] || trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 2
RANDOM=$seed
export OMP_NUM_THREADS=1 # a resumed run is bit-identical on the same thread count
passed=0 failed=0 skipped=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }
skip() { skipped=$((skipped + 1)); echo "skip $1"; }

awk -v s="$seed" 'BEGIN { srand(s); for (i = 0; i < 30000; i++) printf "%d ", int(rand() * 64); print "" }' > toks.txt
args="--arch diff --dim 32 --layers 2 --heads 2 --vocab 64 --tokens toks.txt --batch 4 --seq 32 --steps 400
      --ckpt-every 10 --keep 2 --seed 7 --lr 3e-3 --warmup 10 --log-every 1000"
train() { "$bin" train $args "$@"; }
# in the background: the pid must be difftx's own, not a subshell's (kill -9 goes to it)
train_bg() { "$bin" train $args "$@" & }

# Every checkpoint and the model that exist must load whole; temporaries may
# be left by the killed process (the next start removes them).
files_whole() {
    local f
    for f in "$1".ckpt/ckpt_*.safetensors "$1"; do
        [ -e "$f" ] || continue
        "$bin" info "$f" > info.out 2>&1 || { echo "  $f does not load: $(tail -n 1 info.out)"; return 1; }
    done
}

echo "== reference: the run never interrupted"
train --out ref.safetensors > ref.log 2>&1 || { cat ref.log; exit 1; }

echo "== $kills kills at random moments (seed $seed)"
in_write=0 broken=0 n=0 done_early=0
while [ $n -lt "$kills" ]; do
    delay=0
    [ $((n % 2)) = 1 ] && delay=200
    DTX_TEST_COMMIT_DELAY_MS=$delay train_bg --out k.safetensors --resume > k.log 2>&1
    pid=$!
    # 0.05 to 1.5 s: from loading through steps and checkpoint writes
    sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.3f", 0.05 + 1.45 * r / 32767 }')"
    if ! kill -0 $pid 2>/dev/null; then # it finished before the kill: start over (keeps N kills)
        wait $pid
        done_early=$((done_early + 1))
        rm -rf k.safetensors k.safetensors.ckpt
        [ $done_early -gt $((kills * 4)) ] && { bad "the run is too fast to kill (finished $done_early times)"; break; }
        continue
    fi
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    n=$((n + 1))
    compgen -G "k.safetensors.ckpt/*.tmp.*" > /dev/null && in_write=$((in_write + 1))
    files_whole k.safetensors || broken=$((broken + 1))
done
if [ $broken = 0 ]; then ok "after each of $n kills ($in_write inside a checkpoint write) every file loads whole"
else bad "$broken of $n kills left a file that does not load"; fi
[ $in_write -gt 0 ] && ok "kills landed inside checkpoint writes ($in_write of $n)" ||
    bad "no kill landed inside a checkpoint write (the window is too narrow)"
if train --out k.safetensors --resume > k.log 2>&1 && cmp -s ref.safetensors k.safetensors; then
    ok "the run resumed after $n kills ends byte-identical to the uninterrupted one"
else
    bad "the run resumed after $n kills does not end as the uninterrupted one: $(tail -n 1 k.log)"
fi
[ -z "$(compgen -G 'k.safetensors.ckpt/*.tmp.*')" ] && ok "the finished run left no temporary file" ||
    bad "temporary files left: $(ls k.safetensors.ckpt)"

echo "== a full disk during a checkpoint write"
train --out f.safetensors --stop-after 10 > f.log 2>&1 || { cat f.log; exit 1; }
first=f.safetensors.ckpt/ckpt_00000010.safetensors
cp "$first" first.copy
size_kb=$(( $(stat -c %s "$first") / 1024 ))
# a file may grow to half a checkpoint: the next checkpoint's write fails (SIGXFSZ ignored: EFBIG)
( trap '' XFSZ; ulimit -f $((size_kb / 2)); exec "$bin" train $args --out f.safetensors --resume ) > f.log 2>&1
rc=$?
if [ $rc = 1 ] && [ "$(grep -c . f.log | tail -n 1)" -ge 1 ] && grep -q "writing the checkpoint of step 20" f.log &&
    [ "$(grep -c '^difftx' f.log)" = 1 ]; then
    ok "a failed checkpoint write stops the run with one line (exit 1): $(grep '^difftx' f.log)"
else
    bad "a failed checkpoint write: exit $rc, $(tail -n 2 f.log | tr '\n' ' ')"
fi
cmp -s "$first" first.copy && ok "the earlier checkpoint is unchanged" || bad "the earlier checkpoint changed"
[ -z "$(compgen -G 'f.safetensors.ckpt/*.tmp.*')" ] && [ ! -e f.safetensors.ckpt/ckpt_00000020.safetensors ] &&
    ok "no temporary or partial checkpoint is left" || bad "left behind: $(ls f.safetensors.ckpt)"
if train --out f.safetensors --resume > f.log 2>&1 && cmp -s ref.safetensors f.safetensors; then
    ok "resumed with room again, the run ends byte-identical"
else
    bad "resumed with room again: $(tail -n 1 f.log)"
fi
# a real ENOSPC: a tmpfs with room for one checkpoint and a half
mnt=$dir/small
mkdir -p "$mnt"
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=$((size_kb * 3 / 2 + 64))k tmpfs "$mnt" 2>/dev/null; then
    cp toks.txt "$mnt/"
    train --out "$mnt/s.safetensors" --stop-after 10 --keep 1 > s.log 2>&1
    cp "$mnt/s.safetensors.ckpt/ckpt_00000010.safetensors" first.copy
    train --out "$mnt/s.safetensors" --resume --keep 1 > s.log 2>&1
    rc=$?
    if [ $rc = 1 ] && grep -q "No space left on device" s.log &&
        cmp -s "$mnt/s.safetensors.ckpt/ckpt_00000010.safetensors" first.copy &&
        [ -z "$(compgen -G "$mnt/s.safetensors.ckpt/*.tmp.*")" ]; then
        ok "a full file system (ENOSPC): one line, exit 1, the earlier checkpoint unchanged, nothing partial"
    else
        bad "a full file system: exit $rc, $(tail -n 1 s.log), files: $(ls "$mnt/s.safetensors.ckpt")"
    fi
    umount "$mnt"
else
    skip "a real full file system: cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN); EFBIG above stands in"
fi

echo "== two runs on one --out"
DTX_TEST_COMMIT_DELAY_MS=300 train_bg --out c.safetensors > c1.log 2>&1
pid=$!
for _ in $(seq 100); do [ -e c.safetensors.lock ] && break; sleep 0.05; done
train --out c.safetensors > c2.log 2>&1
rc=$?
if [ $rc = 1 ] && [ "$(wc -l < c2.log)" = 1 ] && grep -q "another difftx train is writing it" c2.log &&
    grep -q "c.safetensors.lock" c2.log; then
    ok "the second run refuses in one line: $(cat c2.log)"
else
    bad "the second run: exit $rc, $(head -n 3 c2.log | tr '\n' ' ')"
fi
wait $pid
rc=$?
if [ $rc = 0 ] && cmp -s ref.safetensors c.safetensors; then ok "the first run finished unharmed (byte-identical)"
else bad "the first run: exit $rc, $(tail -n 1 c1.log)"; fi
[ ! -e c.safetensors.lock ] && ok "the lock file is gone after the run" || bad "c.safetensors.lock left behind"
# a killed holder leaves the file, not the lock
DTX_TEST_COMMIT_DELAY_MS=300 train_bg --out d.safetensors > d1.log 2>&1
pid=$!
for _ in $(seq 100); do [ -e d.safetensors.lock ] && break; sleep 0.05; done
kill -9 $pid; wait $pid 2>/dev/null
if train --out d.safetensors --resume > d2.log 2>&1 && cmp -s ref.safetensors d.safetensors; then
    ok "after a killed run its lock is free: the next run resumes and ends byte-identical"
else
    bad "after a killed run: $(tail -n 1 d2.log)"
fi

[ $keep = 1 ] && echo "files kept in $dir"
if [ $skipped -gt 0 ]; then echo "$passed passed, $failed failed, $skipped skipped"
else echo "$passed passed, $failed failed"; fi
[ $failed = 0 ]
