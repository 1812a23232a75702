#!/usr/bin/env bash
# make reproduce STAGE=induction: why does induction form in DIFF and not in
# the Transformer under the copy warm-up? (issue: "the induction study")
#
# usage: scripts/induction.sh [--quick] [--dir DIR] [--no-build] [--jobs N]
#        scripts/induction.sh --list [--quick]      the runs, in the order they train
#
# Every run is the reproduction's warm-up (docs/reproduce.md): random-id copy
# documents alone (difftx train --copy-frac 1: L random ids, 16 <= L <= 32,
# repeated to fill 128 tokens), 16 rows per step, 600 steps, vocab 4096,
# dim 192, 4 layers, AdamW with 10% warmup and cosine decay to 0.1x. The
# training log's copy_first / copy_repeat (the loss on each copy row's first
# period and on its repeats) give the induction score per step. What varies:
#   lr       1e-3, 3e-3, 1e-2 for both archs (each arch's own best, and
#            whether one shared value is fair to both)
#   init     --init-scheme gpt2 (N(0, 0.02^2)) beside PyTorch's default, at
#            lr 1e-3 and 3e-3
#   variant  Table 6's: DIFF without the per-head norm (--subln none), DIFF
#            with a constant lambda_init 0.8 and 0.5, the Transformer with a
#            per-head norm (--subln rms), the Transformer with half the heads
#            at twice the width (--heads 3), and that with the norm, at lr 3e-3
#   long     the Transformer at lr 1e-3 and 3e-3 for 4x the steps
#   seeds    1, 2, 3 for every run (the long runs: seed 1)
# The runs train two at a time, one thread each, seed 1 of everything first,
# so that a partial study already answers something. Each run is cached in
# DIR/models/NAME.safetensors and resumes from its checkpoint when
# interrupted; tools/induction.py DIR writes DIR/INDUCTION.md (and REPORT.md
# gets its summary when the main stage's report is written).
#
# Exit status: 0 done, 1 a run failed, 2 bad usage, 130 interrupted.
set -Eeuo pipefail

stage_name=induction
. "$(dirname "$0")/stage_lib.sh"

# The body is one function, read whole before it runs: the study takes hours,
# and bash would otherwise read an edited script from the running one's offset.
main() {
cd "$(dirname "$0")/.."
root=$PWD
bin=${DIFFTX_BIN:-$root/build/difftx}

# ---- one run (the workers call the script again with --one)
if [ "${1:-}" = --one ]; then
    shift
    run=$1 name=$2; shift 2
    out=$run/models/$name
    [ -s "$out.safetensors" ] && exit 0
    # finished on an earlier machine: its log is committed (the models are not needed by the study)
    [ -n "${INDUCTION_LOGS:-}" ] && [ -s "$INDUCTION_LOGS/$name.jsonl.gz" ] && exit 0
    echo "start $name ($(date +%H:%M:%S))"
    t0=$(date +%s)
    if OMP_NUM_THREADS=1 "$bin" train --tokens "$run/ids.txt" --copy-frac 1 --log "$out.jsonl" --log-every 100 \
        --ckpt-every 100 --keep 1 --resume --out "$out.safetensors" "$@" > "$out.out" 2>&1; then
        echo "done  $name in $(( $(date +%s) - t0 ))s"
        [ -n "${INDUCTION_LOGS:-}" ] && gzip -9 -n -c "$out.jsonl" > "$INDUCTION_LOGS/$name.jsonl.gz"
    else
        rc=$?
        tail -n 3 "$out.out" >&2
        echo "FAIL  $name (exit $rc)" >&2
        exit 1
    fi
    exit 0
fi

stage_flag() { return 1; } # no flags of its own
stage_args "$@"

# ---- the study's settings (everything that decides a result is here)
if [ $quick = 1 ]; then
    run=${dir:-$root/runs/reproduce/quick/induction}
    dim=96 layers=3 steps=300 seeds=(1) lrs=(1e-3 3e-3 1e-2) head_width=16
else
    run=${dir:-$root/runs/reproduce/induction}
    dim=192 layers=4 steps=600 seeds=(1 2 3) lrs=(1e-3 3e-3 1e-2) head_width=32
fi
vocab=4096 seq=128 batch=16 long_factor=4
ffn=$(( (dim * 8 / 3 + 7) / 8 * 8 ))
h_diff=$(( dim / (2 * head_width) )) h_tf=$(( dim / head_width ))
settings="dim=$dim layers=$layers steps=$steps vocab=$vocab seq=$seq batch=$batch lrs=${lrs[*]} seeds=${seeds[*]}"
settings+=" head_width=$head_width ffn=$ffn long_factor=$long_factor"

# NAME ARGS... lines, in training order
runs() {
    local s lr
    for s in "${seeds[@]}"; do
        for lr in "${lrs[@]}"; do
            echo "diff-lr$lr-s$s --arch diff --heads $h_diff --lr $lr --seed $s"
            echo "transformer-lr$lr-s$s --arch transformer --heads $h_tf --lr $lr --seed $s"
        done
        echo "diff-nosubln-lr3e-3-s$s --arch diff --heads $h_diff --subln none --lr 3e-3 --seed $s"
        echo "diff-li0.8-lr3e-3-s$s --arch diff --heads $h_diff --lambda-init 0.8 --lr 3e-3 --seed $s"
        echo "diff-li0.5-lr3e-3-s$s --arch diff --heads $h_diff --lambda-init 0.5 --lr 3e-3 --seed $s"
        echo "transformer-subln-lr3e-3-s$s --arch transformer --heads $h_tf --subln rms --lr 3e-3 --seed $s"
        echo "transformer-wide-lr3e-3-s$s --arch transformer --heads $h_diff --lr 3e-3 --seed $s"
        echo "transformer-wide-subln-lr3e-3-s$s --arch transformer --heads $h_diff --subln rms --lr 3e-3 --seed $s"
        for lr in 1e-3 3e-3; do
            echo "diff-gpt2-lr$lr-s$s --arch diff --heads $h_diff --init-scheme gpt2 --lr $lr --seed $s"
            echo "transformer-gpt2-lr$lr-s$s --arch transformer --heads $h_tf --init-scheme gpt2 --lr $lr --seed $s"
        done
        if [ "$s" = "${seeds[0]}" ]; then
            for lr in 1e-3 3e-3; do
                echo "transformer-long-lr$lr-s$s --arch transformer --heads $h_tf --lr $lr --seed $s --long"
            done
        fi
    done
}
# the common flags of every run, then its own; --long multiplies the steps
expand() {
    local name=$1; shift
    local n=$steps own=()
    for a in "$@"; do [ "$a" = --long ] && n=$((steps * long_factor)) || own+=("$a"); done
    printf '%s' "$name --dim $dim --layers $layers --ffn $ffn --vocab $vocab --max-seq $seq --seq $seq"
    printf ' %s' --batch "$batch" --steps "$n" --warmup $((n / 10)) "${own[@]}"
    echo
}

if [ $list = 1 ]; then runs | while read -r line; do expand $line; done; exit 0; fi

t_all=$(date +%s)
trap 'echo; echo "induction: interrupted; run the same command again to continue" >&2; exit 130' INT TERM
is_true "${NO_BUILD:-}" || make --no-print-directory build/difftx
[ -x "$bin" ] || die "$bin is not an executable"
mkdir -p "$run/models"
stage_settings "$run" "$settings" "remove it or use --dir"
# The full study's finished runs' logs are kept in the repository (gzipped, about 40 KB each), so that
# a session on another machine continues it: a run whose log is there is not trained again.
export INDUCTION_LOGS=
if [ $quick = 0 ] && [ -z "$dir" ]; then
    INDUCTION_LOGS=$root/docs/reproduce/induction-logs
    mkdir -p "$INDUCTION_LOGS"
    if [ -f "$INDUCTION_LOGS/settings.txt" ] && [ "$(cat "$INDUCTION_LOGS/settings.txt")" != "$settings" ]; then
        die "$INDUCTION_LOGS holds logs of other settings ($(cat "$INDUCTION_LOGS/settings.txt")); move them away"
    fi
    echo "$settings" > "$INDUCTION_LOGS/settings.txt"
    for m in "$run"/models/*.safetensors; do # runs finished before their logs were kept
        [ -e "$m" ] || continue
        n=$(basename "$m" .safetensors)
        [ -s "$INDUCTION_LOGS/$n.jsonl.gz" ] || gzip -9 -n -c "$run/models/$n.jsonl" > "$INDUCTION_LOGS/$n.jsonl.gz"
    done
fi
# The copy documents replace every row, so the token stream only has to exist: fixed pseudo-random ids.
[ -s "$run/ids.txt" ] || awk -v v=$vocab 'BEGIN { x = 1; for (i = 0; i < 4096; i++) { x = (x * 1103515245 + 12345) % 2147483648; print x % v } }' > "$run/ids.txt"
n_runs=$(runs | wc -l)
echo "$n_runs runs, $jobs at a time, into $run"
runs | while read -r line; do expand $line; done > "$run/runs.txt"
[ -n "$INDUCTION_LOGS" ] && cp "$run/runs.txt" "$INDUCTION_LOGS/runs.txt"
rc=0
# shellcheck disable=SC2016
xargs -P "$jobs" -L 1 "$0" --one "$run" < "$run/runs.txt" || rc=$?
echo $(( $(cat "$run/seconds.txt" 2>/dev/null || echo 0) + $(date +%s) - t_all )) > "$run/seconds.txt"
[ -n "$INDUCTION_LOGS" ] && cp "$run/seconds.txt" "$INDUCTION_LOGS/seconds.txt"
[ $rc = 0 ] || die "a run failed (see above); run the same command again to retry it"
/usr/bin/python3 tools/induction.py "$run" ${INDUCTION_LOGS:+--logs "$INDUCTION_LOGS"} \
    --command "make reproduce STAGE=induction$( [ $quick = 1 ] && echo ' QUICK=1')" --seconds "$(cat "$run/seconds.txt")"
if [ $quick = 0 ] && [ -z "$dir" ]; then # the full study's write-up is committed beside the report's figures
    mkdir -p docs/reproduce
    cp "$run/INDUCTION.md" docs/reproduce/INDUCTION.md
    cp "$run/induction.png" docs/reproduce/ 2>/dev/null || true
fi
echo "done in $(( ($(date +%s) - t_all) / 60 )) min: $run/INDUCTION.md"
}
main "$@"; exit  # one line: bash parses it whole before main runs, so an edit to this file cannot change what follows
