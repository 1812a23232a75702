#!/usr/bin/env bash
# make reproduce STAGE=induction-time: time to induction as the outcome,
# DIFF against difftx's Transformer and a textbook GPT, each at its own
# learning rate, compared as survival curves (docs/reproduce.md "The
# induction-time stage").
#
# usage: scripts/induction_time.sh [--quick] [--lr-only] [--dir DIR] [--no-setup] [--no-build] [--jobs N]
#        scripts/induction_time.sh --list [--quick]        the runs of each phase
#
# The recipe (everything that decides a result is in this file) is the
# induction study's (scripts/induction.sh): copy documents alone (L random
# ids, 16 <= L <= 32, repeated to fill 128 tokens), 16 rows per step, 600
# steps, vocabulary 4096, width 192, 4 layers, AdamW with 10% warmup and
# cosine decay to 0.1x, one thread per run. Archs: DIFF (3 heads of 32, values
# 64 wide), difftx's Transformer (6 heads of 32: RoPE, RMSNorm, SwiGLU) and a
# textbook GPT (tools/gpt_torch.py: learned positions, LayerNorm, a GELU MLP,
# 6 heads of 32, GPT-2's init; the same rows, optimizer and schedule). Two
# phases:
#   1. learning rate: every arch at 1e-3, 2e-3, 3e-3, 5e-3, 1e-2 and 2e-2,
#      seed 1; the best is the earliest formation (the score's 20-step mean
#      at ln V / 2), then the earliest onset (1 nat), then the final score;
#   2. seeds 2..9 of every arch at its own learning rate: the comparisons
#      use these only (seed 1 chose the rate).
# tools/induction_time.py DIR writes DIR/INDUCTION_TIME.md (Kaplan–Meier
# curves, log-rank tests, restricted mean times; the claims named in
# tools/stats.py). The induction study's finished runs of the same recipe
# (docs/reproduce/induction-logs: DIFF and the Transformer at 1e-3, 3e-3 and
# 1e-2, seeds 1-3) are used, not trained again. Each run resumes from its
# checkpoint; the full stage keeps each finished run's log in
# docs/reproduce/induction-time-results, so a session on another machine
# continues. --lr-only (make reproduce STAGE=induction-time-lr) stops after
# phase 1.
#
# Exit status: 0 done, 1 a step failed, 2 bad usage, 130 interrupted.
set -Eeuo pipefail

stage_name=induction-time
. "$(dirname "$0")/stage_lib.sh"

# The body is one function, read whole before it runs (an edited script
# must not change a running one).
main() {
cd "$(dirname "$0")/.."
root=$PWD
bin=${DIFFTX_BIN:-$root/build/difftx}

if [ "${1:-}" = --one ]; then # a worker: RUN NAME ARGS...
    shift
    local run=$1 name=$2; shift 2
    local out=$run/models/$name
    [ -s "$out.info.json" ] && exit 0
    echo "start $name ($(date +%H:%M:%S))"
    local t0; t0=$(date +%s)
    if [ "${name%%-*}" = gpt ]; then
        if ! env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
            LD_LIBRARY_PATH="${GPT_BLAS:+$GPT_BLAS:}${LD_LIBRARY_PATH:-}" \
            /usr/bin/python3 tools/gpt_torch.py --out "$out.pt" --log "$out.jsonl" --ckpt-every 100 --resume "$@" \
            > "$out.out" 2>&1; then
            tail -n 3 "$out.out" >&2
            echo "FAIL  $name" >&2
            exit 1
        fi
        echo "{\"arch\": \"gpt\", \"params\": $(sed -n 's/.*tied  \([0-9]*\) params.*/\1/p' "$out.out" | head -n 1)}" \
            > "$out.info.json"
    else
        if ! OMP_NUM_THREADS=1 "$bin" train --tokens "$run/ids.txt" --copy-frac 1 --log "$out.jsonl" \
            --log-every 100 --ckpt-every 100 --keep 1 --resume --out "$out.safetensors" "$@" > "$out.out" 2>&1; then
            tail -n 3 "$out.out" >&2
            echo "FAIL  $name" >&2
            exit 1
        fi
        "$bin" info --json "$out.safetensors" > "$out.info.json.tmp" && mv "$out.info.json.tmp" "$out.info.json"
    fi
    echo "$*" > "$out.cmd"
    [ -z "${IT_KEEP:-}" ] || scripts/repro_keep.sh keep "$run" "$IT_KEEP"
    echo "done  $name in $(( $(date +%s) - t0 ))s"
    exit 0
fi

local quick dir list jobs stop_after=2
stage_flag() { case $1 in --lr-only) stop_after=1 ;; *) return 1 ;; esac; }
stage_args "$@"

# ---- the recipe
local run dim layers steps head_width vocab=4096 seq=128 batch=16
local -a seeds lrs
if [ $quick = 1 ]; then
    run=${dir:-$root/runs/reproduce/quick/induction-time}
    dim=64 layers=2 steps=200 head_width=16 seeds=(1 2 3 4) lrs=(3e-3 1e-2)
else
    run=${dir:-$root/runs/reproduce/induction-time}
    dim=192 layers=4 steps=600 head_width=32 seeds=(1 2 3 4 5 6 7 8 9) lrs=(1e-3 2e-3 3e-3 5e-3 1e-2 2e-2)
fi
local ffn=$(( (dim * 8 / 3 + 7) / 8 * 8 )) h_diff=$(( dim / (2 * head_width) )) h_tf=$(( dim / head_width ))
local settings="dim=$dim layers=$layers steps=$steps vocab=$vocab seq=$seq batch=$batch head_width=$head_width"
settings+=" ffn=$ffn lrs=$(IFS=,; echo "${lrs[*]}") seeds=$(IFS=,; echo "${seeds[*]}") archs=diff,transformer,gpt"

run_args() { # arch lr seed -> NAME ARGS
    local a=$1 lr=$2 s=$3
    case $a in
        diff) echo "$a-lr$lr-s$s --arch diff --heads $h_diff --lr $lr --seed $s --dim $dim --layers $layers" \
            "--ffn $ffn --vocab $vocab --max-seq $seq --seq $seq --batch $batch --steps $steps --warmup $((steps / 10))" ;;
        transformer) echo "$a-lr$lr-s$s --arch transformer --heads $h_tf --lr $lr --seed $s --dim $dim" \
            "--layers $layers --ffn $ffn --vocab $vocab --max-seq $seq --seq $seq --batch $batch --steps $steps" \
            "--warmup $((steps / 10))" ;;
        gpt) echo "$a-lr$lr-s$s --heads $h_tf --lr $lr --seed $s --dim $dim --layers $layers --vocab $vocab" \
            "--seq $seq --batch $batch --steps $steps --warmup $((steps / 10))" ;;
    esac
}
local archs=(diff transformer gpt)
lr_of() { awk -v a="$1" '$1 == a { print $2 }' "$run/lr.txt"; }
phase1() { local lr a; for lr in "${lrs[@]}"; do for a in "${archs[@]}"; do run_args $a $lr 1; done; done; }
phase2() { local s a; for s in "${seeds[@]:1}"; do for a in "${archs[@]}"; do run_args $a "$(lr_of $a)" $s; done; done; }
if [ $list = 1 ]; then
    phase1
    if [ -s "$run/lr.txt" ]; then phase2; else echo "(phase 2 follows from $run/lr.txt, written after phase 1)"; fi
    exit 0
fi

local t_all; t_all=$(date +%s)
stage_start
/usr/bin/python3 -c 'import torch' 2> /dev/null ||
    die "the textbook GPT needs PyTorch for /usr/bin/python3 (scripts/setup.sh --torch installs python3-torch)"
# Debian's torch links the generic BLAS, the reference one unless OpenBLAS is there: unpack it aside (as make bench)
bash bench/openblas.sh build/openblas
export GPT_BLAS=
[ -e build/openblas/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3 ] &&
    GPT_BLAS=$root/build/openblas/usr/lib/x86_64-linux-gnu/openblas-pthread
mkdir -p "$run/models"
stage_settings "$run" "$settings" "remove it or use --dir"
export IT_KEEP=
[ $quick = 0 ] && [ -z "$dir" ] && IT_KEEP=$root/docs/reproduce/induction-time-results
[ -z "$IT_KEEP" ] || scripts/repro_keep.sh restore "$IT_KEEP" "$run"
# the token stream only has to exist (copy documents replace every row): the induction study's ids
[ -s "$run/ids.txt" ] || awk -v v=$vocab 'BEGIN { x = 1; for (i = 0; i < 4096; i++) { x = (x * 1103515245 + 12345) % 2147483648; print x % v } }' > "$run/ids.txt"
# the induction study's finished runs of this very recipe: used as they are
local study=$root/docs/reproduce/induction-logs
if [ $quick = 0 ] && [ -f "$study/settings.txt" ] &&
    [ "$(cat "$study/settings.txt")" = "dim=$dim layers=$layers steps=$steps vocab=$vocab seq=$seq batch=$batch lrs=1e-3 3e-3 1e-2 seeds=1 2 3 head_width=$head_width ffn=$ffn long_factor=4" ]; then
    local f n
    for f in "$study"/diff-lr*-s*.jsonl.gz "$study"/transformer-lr*-s*.jsonl.gz; do
        [ -e "$f" ] || continue
        n=$(basename "$f" .jsonl.gz)
        [ -s "$run/models/$n.info.json" ] && continue
        gzip -d -c "$f" > "$run/models/$n.jsonl"
        echo "{\"arch\": \"${n%%-*}\", \"from\": \"docs/reproduce/induction-logs/$n.jsonl.gz\"}" > "$run/models/$n.info.json"
    done
fi
echo "phase 1: learning rates ${lrs[*]}, every arch, seed 1"
phase1 > "$run/runs1.txt"
xargs -r -P "$jobs" -L 1 "$0" --one "$run" < "$run/runs1.txt" || die "a run failed (see above); run the same command again"
/usr/bin/python3 tools/induction_time.py "$run" --choose-lr > "$run/lr.txt.tmp" && mv "$run/lr.txt.tmp" "$run/lr.txt"
[ -z "$IT_KEEP" ] || scripts/repro_keep.sh keep "$run" "$IT_KEEP"
echo "learning rates: $(tr '\n' ' ' < "$run/lr.txt")"
if [ $stop_after = 1 ]; then
    echo "phase 1 done in $(( ($(date +%s) - t_all) / 60 )) min: $run/lr.txt (next: make reproduce STAGE=induction-time)"
    exit 0
fi
echo "phase 2: seeds ${seeds[*]:1} at each arch's learning rate"
phase2 > "$run/runs2.txt"
xargs -r -P "$jobs" -L 1 "$0" --one "$run" < "$run/runs2.txt" || die "a run failed (see above); run the same command again"
/usr/bin/python3 tools/induction_time.py "$run" --command "make reproduce STAGE=induction-time$( [ $quick = 1 ] && echo ' QUICK=1')"
if [ $quick = 0 ] && [ -z "$dir" ]; then
    cp "$run/INDUCTION_TIME.md" docs/reproduce/INDUCTION_TIME.md
    cp "$run/induction-time.png" docs/reproduce/ 2>/dev/null || true
fi
echo "done in $(( ($(date +%s) - t_all) / 60 )) min: $run/INDUCTION_TIME.md"
}
main "$@"; exit  # one line: bash parses it whole before main runs, so an edit to this file cannot change what follows
