#!/usr/bin/env bash
# make reproduce STAGE=scaling: the paper's scaling claims (Fig 3a, 3b) and
# Table 6's AR-Hit / Others slices on plain language modelling, under a
# recipe fair to both architectures.
#
# usage: scripts/scaling.sh [--quick] [--lr-only] [--dir DIR] [--no-setup] [--no-build] [--jobs N]
#        scripts/scaling.sh --list [--quick]        the runs of each phase
#
# Plain language modelling: the State of the Union speeches (make data), no
# needle and no copy rows, no warm-up. Two phases:
#   1. learning rate: each arch at the sweep size (dim SWEEP_DIM) with every
#      lr of LRS, seed 1, extended (x2 or /2, at most twice each way) while
#      its best lies at the edge of what it was tried at; each arch's best
#      (the lowest final validation loss; a diverged lr is the worst) is its
#      learning rate for phase 2 (the choice is in DIR/lr.txt);
#   2. sizes x seeds: every size of DIMS with seeds 1, 2, 3, each arch at its
#      own learning rate: the same tokens for every size and arch.
# --lr-only (make reproduce STAGE=scaling-lr) stops after phase 1: on 2
# cores phase 1 takes about 50 minutes and phase 2 about 125 (measured), so
# the stage runs in two parts of under 150 minutes each; the full stage runs
# phase 1 first where it is not done.
# Each run ends with difftx eval ppl (held-out speeches; AR hits and
# others). DIFF has H heads of width d, the Transformer 2H of d (the same
# projection shapes). Both archs train side by side, one thread each; every
# run is cached in DIR/models and resumes from its checkpoint. The full
# stage keeps each finished run's logs and evaluation (not the weights) in
# docs/reproduce/scaling-results, so a session on another machine continues.
# tools/scaling.py DIR writes DIR/SCALING.md: the fits with bootstrap
# intervals over seeds, and the verdicts computed from them.
#
# Exit status: 0 done, 1 a step failed, 2 bad usage, 130 interrupted.
set -Eeuo pipefail

stage_name=scaling
. "$(dirname "$0")/stage_lib.sh"

# The body is one function, read whole before it runs (an edited script
# must not change a running one).
main() {
cd "$(dirname "$0")/.."
root=$PWD
bin=${DIFFTX_BIN:-$root/build/difftx}

if [ "${1:-}" = --one ]; then # a worker: NAME ARGS...
    shift
    local run=$1 name=$2 data=$SCALING_DATA ppl_tokens=$SCALING_PPL_TOKENS; shift 2
    local out=$run/models/$name ev=$run/eval/ppl-$name
    # finished here, or on another machine (its results are kept, the weights are not); SCALING_NEED_WEIGHTS:
    # a later evaluation needs the weights, so a run finished elsewhere is trained again here (the same run:
    # same seed, data and thread count)
    [ -s "$ev.json" ] && { [ -s "$out.safetensors" ] || { [ -z "${SCALING_NEED_WEIGHTS:-}" ] && [ -s "$out.info.json" ]; }; } &&
        exit 0
    echo "start $name ($(date +%H:%M:%S))"
    local t0; t0=$(date +%s)
    if [ ! -s "$out.safetensors" ] &&
        ! OMP_NUM_THREADS=1 "$bin" train --log "$out.jsonl" --out "$out.safetensors" --resume "$@" > "$out.out" 2>&1; then
        # a learning rate of the sweep that diverges is a result (the worst), not a failure
        if [ -n "${SCALING_SWEEP:-}" ] && tail -n 1 "$out.jsonl" | grep -q '"error":"[a-z ]* is not finite"'; then
            local at; at=$(tail -n 1 "$out.jsonl" | sed 's/^{"step":\([0-9]*\).*/\1/')
            echo "{\"diverged\":true,\"step\":$at}" > "$ev.json"
            echo "{\"diverged\":true,\"step\":$at}" > "$out.info.json"
            [ -z "${SCALING_KEEP:-}" ] || scripts/repro_keep.sh keep "$run" "$SCALING_KEEP"
            echo "done  $name: diverged at step $at"
            exit 0
        fi
        tail -n 3 "$out.out" >&2
        echo "FAIL  $name" >&2
        exit 1
    fi
    # its perplexity on the held-out speeches; then the info record that marks it finished
    if ! OMP_NUM_THREADS=1 "$bin" eval ppl --model "$out.safetensors" --tokens "$data/val.bin" \
        --max-tokens "$ppl_tokens" --json "$ev.json" > "$ev.txt" 2>&1; then
        tail -n 3 "$ev.txt" >&2
        echo "FAIL  eval ppl of $name" >&2
        exit 1
    fi
    "$bin" info --json "$out.safetensors" > "$out.info.json.tmp" && mv "$out.info.json.tmp" "$out.info.json"
    [ -z "${SCALING_KEEP:-}" ] || scripts/repro_keep.sh keep "$run" "$SCALING_KEEP"
    echo "done  $name in $(( $(date +%s) - t0 ))s"
    exit 0
fi

local quick dir list jobs lr_only=0
stage_flag() { case $1 in --lr-only) lr_only=1 ;; *) return 1 ;; esac; }
stage_args "$@"

# ---- the recipe (everything that decides a result is here)
local data run vocab seq batch steps layers head_width sweep_dim ppl_tokens
local -a dims seeds lrs
if [ $quick = 1 ]; then
    data=$root/runs/reproduce/quick run=${dir:-$data/scaling}
    vocab=2048 seq=256 batch=8 steps=300 layers=3 head_width=16
    dims=(32 64 96) seeds=(1 2) lrs=(1e-3 3e-3 1e-2) sweep_dim=64 ppl_tokens=20000
else
    data=$root/runs/reproduce run=${dir:-$data/scaling}
    vocab=4096 seq=512 batch=4 steps=1500 layers=4 head_width=32
    dims=(64 96 128 192) seeds=(1 2 3) lrs=(1e-3 3e-3 6e-3) sweep_dim=128 ppl_tokens=100000
fi
local settings="vocab=$vocab seq=$seq batch=$batch steps=$steps layers=$layers dims=${dims[*]} seeds=${seeds[*]}"
settings+=" lrs=${lrs[*]} sweep_dim=$sweep_dim head_width=$head_width ppl_tokens=$ppl_tokens"

run_args() { # arch dim lr seed -> NAME ARGS
    local a=$1 d=$2 lr=$3 s=$4 h=$(( $2 / (2 * head_width) ))
    [ $h -lt 1 ] && h=1
    [ "$a" = transformer ] && h=$((2 * h))
    echo "$a-d$d-lr$lr-s$s --tokens $data/train.bin --val-tokens $data/val.bin --arch $a --dim $d --layers $layers" \
        "--heads $h --ffn $(( (d * 8 / 3 + 7) / 8 * 8 )) --vocab $vocab --max-seq $seq --seq $seq --batch $batch" \
        "--steps $steps --warmup $((steps / 20)) --lr $lr --seed $s --eval-every $((steps / 10))" \
        "--log-every $((steps / 5)) --ckpt-every $((steps / 5)) --keep 1"
}
phase1() { local lr a; for lr in "${lrs[@]}"; do for a in diff transformer; do run_args $a $sweep_dim $lr 1; done; done; }
phase2() { # needs DIR/lr.txt: "diff LR" and "transformer LR"
    local s d a
    for s in "${seeds[@]}"; do for d in "${dims[@]}"; do for a in diff transformer; do
        run_args $a $d "$(awk -v a=$a '$1 == a { print $2 }' "$run/lr.txt")" $s
    done; done; done
}
if [ $list = 1 ]; then
    phase1
    [ -s "$run/lr.txt" ] && phase2 || echo "(phase 2 follows from $run/lr.txt, written after phase 1)"
    exit 0
fi

local t_all; t_all=$(date +%s)
stage_start
mkdir -p "$run/models" "$run/eval"
stage_settings "$run" "$settings" "remove it or use --dir"
scripts/repro_data.sh "$bin" "$data" "$vocab"

# the workers' common settings; the full stage keeps each finished run's results in the repository
# (docs/reproduce/scaling-results, without the weights: scripts/repro_keep.sh) so that a session on another
# machine continues it (SCALING_KEEP=DIR keeps another run's)
export SCALING_DATA=$data SCALING_PPL_TOKENS=$ppl_tokens SCALING_KEEP=${SCALING_KEEP:-}
[ $quick = 0 ] && [ -z "$dir" ] && SCALING_KEEP=${SCALING_KEEP:-$root/docs/reproduce/scaling-results}
[ -z "$SCALING_KEEP" ] || scripts/repro_keep.sh restore "$SCALING_KEEP" "$run"
echo "phase 1: learning rates ${lrs[*]} at dim $sweep_dim, seed 1"
phase1 > "$run/runs1.txt"
SCALING_SWEEP=1 xargs -P "$jobs" -L 1 "$0" --one "$run" < "$run/runs1.txt" || die "a run failed (see above); run the same command again"
# while an arch's best lies at the edge of the lrs it was tried at, try the next one out (x2 or /2; at most
# two beyond the grid each way): a best at the edge says that arch may do better outside the sweep
local next
while :; do
    next=$(/usr/bin/python3 tools/scaling.py "$run" --sweep-next) || die "tools/scaling.py --sweep-next failed"
    [ -n "$next" ] || break
    echo "phase 1: a best lr at the sweep's edge; trying $(echo $next)"
    while read -r a lr; do run_args "$a" $sweep_dim "$lr" 1; done <<< "$next" > "$run/runs1x.txt"
    SCALING_SWEEP=1 xargs -P "$jobs" -L 1 "$0" --one "$run" < "$run/runs1x.txt" || die "a run failed (see above); run the same command again"
done
# each arch's lr: the lowest final validation loss of the sweep
/usr/bin/python3 tools/scaling.py "$run" --choose-lr > "$run/lr.txt.tmp" && mv "$run/lr.txt.tmp" "$run/lr.txt"
echo "learning rates: $(tr '\n' ' ' < "$run/lr.txt")"
if [ $lr_only = 1 ]; then
    echo "phase 1 done in $(( ($(date +%s) - t_all) / 60 )) min: $run/lr.txt (phase 2: make reproduce STAGE=scaling)"
    exit 0
fi
echo "phase 2: dims ${dims[*]} x seeds ${seeds[*]}"
phase2 > "$run/runs2.txt"
xargs -P "$jobs" -L 1 "$0" --one "$run" < "$run/runs2.txt" || die "a run failed (see above); run the same command again"

/usr/bin/python3 tools/scaling.py "$run" --command "make reproduce STAGE=scaling$( [ $quick = 1 ] && echo ' QUICK=1')"
echo "done in $(( ($(date +%s) - t_all) / 60 )) min: $run/SCALING.md"
}
main "$@"; exit  # one line: bash parses it whole before main runs, so an edit to this file cannot change what follows
