#!/usr/bin/env bash
# make reproduce STAGE=v2: DIFF V2 (spec §8) beside DIFF V1 and the
# Transformer, and V2's cheap ablations (λ without the sigmoid; no λ), on
# plain language modelling under the scaling stage's recipe.
#
# usage: scripts/v2.sh [--quick] [--lr-only | --loss-only] [--dir DIR] [--no-setup] [--no-build] [--jobs N]
#        scripts/v2.sh --list [--quick]        the runs of each phase
#
# The recipe is the scaling stage's at its sweep size (scripts/scaling.sh:
# the State of the Union speeches, no needle or copy rows, dim 128, 4
# layers): the Transformer has 2H heads of width d, DIFF H heads (values
# 2d), V2 the Transformer's 2H heads of d as output heads (4H query heads),
# its matched comparison (spec §8.2). Archs: transformer, diff, diff2,
# diff2lin (--v2-lambda linear), diff2none (--v2-lambda none). Three phases:
#   1. learning rate: every arch at each lr of LRS, seed 1, extended (x2 or
#      /2, at most twice each way) while its best lies at the edge; each
#      arch's best (lowest final validation loss; a diverged lr is the
#      worst) is its learning rate (DIR/lr.txt);
#   2. seeds 2 and 3 of every arch at its own learning rate: the loss
#      comparison over 3 seeds, and `difftx eval outliers` of each model;
#   3. stability: every arch at 4x the Transformer's own best lr, seeds
#      1-3 (in DIR/high, apart from the sweep's runs): gradient-norm spikes
#      (count and size) and whether the run diverged; then, while no seed of
#      the Transformer diverged (it is not yet unstable, the paper's
#      premise), the same at 8x (DIR/high8) and 16x (DIR/high16).
# The Transformer and DIFF runs of phases 1 and 2 are the scaling stage's own
# (the same recipe and names): where its kept results exist
# (docs/reproduce/scaling-results) they are put back here and not trained
# again. Each run is cached in DIR/models and resumes from its checkpoint;
# the full stage keeps each finished run's logs and evaluations (not the
# weights) in docs/reproduce/v2-results, so a session on another machine
# continues. tools/v2.py DIR writes DIR/V2.md with the verdicts.
# --lr-only (make reproduce STAGE=v2-lr) stops after phase 1, --loss-only
# (STAGE=v2-loss) after phase 2, so that the stage runs in parts that fit a
# session: a run takes 8-11 minutes on one core of the AVX-512 machine, and
# about 2.4x as long on an AVX2 one (the scaling stage's logs).
#
# Exit status: 0 done, 1 a step failed, 2 bad usage, 130 interrupted.
set -Eeuo pipefail

stage_name=v2
. "$(dirname "$0")/stage_lib.sh"

# The body is one function, read whole before it runs (an edited script
# must not change a running one).
main() {
cd "$(dirname "$0")/.."
root=$PWD
bin=${DIFFTX_BIN:-$root/build/difftx}

if [ "${1:-}" = --outliers ]; then # a worker: RUN NAME
    local run=$2 name=$3 ev
    ev=$run/eval/outliers-$name
    [ -s "$ev.json" ] && exit 0
    OMP_NUM_THREADS=1 "$bin" eval outliers --model "$run/models/$name.safetensors" --tokens "$V2_DATA/val.bin" \
        --count "$V2_OUTLIER_TOKENS" --json "$ev.json" > "$ev.txt" 2>&1 || { tail -n 3 "$ev.txt" >&2; exit 1; }
    [ -z "${SCALING_KEEP:-}" ] || scripts/repro_keep.sh keep "$run" "$SCALING_KEEP"
    exit 0
fi

local quick dir list jobs stop_after=3
stage_flag() { case $1 in --lr-only) stop_after=1 ;; --loss-only) stop_after=2 ;; *) return 1 ;; esac; }
stage_args "$@"

# ---- the recipe: the scaling stage's at its sweep size (everything that decides a result is here)
local data run vocab seq batch steps layers head_width dim ppl_tokens outlier_tokens scaling_keep=""
local -a seeds lrs
local archs=(transformer diff diff2 diff2lin diff2none)
if [ $quick = 1 ]; then
    data=$root/runs/reproduce/quick run=${dir:-$data/v2}
    vocab=2048 seq=256 batch=8 steps=300 layers=3 head_width=16 dim=64
    seeds=(1 2) lrs=(1e-3 3e-3 1e-2) ppl_tokens=20000 outlier_tokens=8192
else
    data=$root/runs/reproduce run=${dir:-$data/v2}
    vocab=4096 seq=512 batch=4 steps=1500 layers=4 head_width=32 dim=128
    seeds=(1 2 3) lrs=(1e-3 3e-3 6e-3) ppl_tokens=100000 outlier_tokens=65536
    scaling_keep=$root/docs/reproduce/scaling-results
fi
local settings="vocab=$vocab seq=$seq batch=$batch steps=$steps layers=$layers dim=$dim seeds=${seeds[*]}"
settings+=" lrs=${lrs[*]} sweep_dim=$dim head_width=$head_width ppl_tokens=$ppl_tokens outliers=$outlier_tokens"

run_args() { # arch lr seed -> NAME ARGS (the scaling stage's run_args, with V2's heads and variants)
    local a=$1 lr=$2 s=$3 h=$(( dim / (2 * head_width) )) flags
    [ $h -lt 1 ] && h=1
    case $a in
        diff) flags="--arch diff --heads $h" ;;
        transformer) flags="--arch transformer --heads $((2 * h))" ;;
        diff2) flags="--arch diff2 --heads $((2 * h))" ;;
        diff2lin) flags="--arch diff2 --heads $((2 * h)) --v2-lambda linear" ;;
        diff2none) flags="--arch diff2 --heads $((2 * h)) --v2-lambda none" ;;
    esac
    echo "$a-d$dim-lr$lr-s$s --tokens $data/train.bin --val-tokens $data/val.bin $flags --dim $dim --layers $layers" \
        "--ffn $(( (dim * 8 / 3 + 7) / 8 * 8 )) --vocab $vocab --max-seq $seq --seq $seq --batch $batch" \
        "--steps $steps --warmup $((steps / 20)) --lr $lr --seed $s --eval-every $((steps / 10))" \
        "--log-every $((steps / 5)) --ckpt-every $((steps / 5)) --keep 1"
}
lr_of() { awk -v a="$1" '$1 == a { print $2 }' "$run/lr.txt"; }
high_lr() { /usr/bin/python3 -c "import sys; sys.path.insert(0, 'tools'); from scaling import lr_name; print(lr_name(int(sys.argv[2]) * float(sys.argv[1])))" "$(lr_of transformer)" "$1"; } # MULT
high_dir() { if [ "$1" = 4 ]; then echo "$run/high"; else echo "$run/high$1"; fi; } # MULT
phase1() { local lr a; for lr in "${lrs[@]}"; do for a in "${archs[@]}"; do run_args $a $lr 1; done; done; }
phase2() { local s a; for s in "${seeds[@]:1}"; do for a in "${archs[@]}"; do run_args $a "$(lr_of $a)" $s; done; done; }
phase3() { local s a hi; hi=$(high_lr "$1"); for s in "${seeds[@]}"; do for a in "${archs[@]}"; do run_args $a "$hi" $s; done; done; } # MULT
if [ $list = 1 ]; then
    phase1
    if [ -s "$run/lr.txt" ]; then phase2; phase3 4; echo "(then at 8x and 16x while the Transformer stays stable)"; else echo "(phases 2 and 3 follow from $run/lr.txt, written after phase 1)"; fi
    exit 0
fi

local t_all; t_all=$(date +%s)
stage_start
mkdir -p "$run/models" "$run/eval"
stage_settings "$run" "$settings" "remove it or use --dir"
scripts/repro_data.sh "$bin" "$data" "$vocab"

# The scaling stage's worker trains a run and evaluates its perplexity; the full stage keeps each
# finished run's results in docs/reproduce/v2-results (scripts/repro_keep.sh).
export SCALING_DATA=$data SCALING_PPL_TOKENS=$ppl_tokens SCALING_KEEP=${SCALING_KEEP:-}
export V2_DATA=$data V2_OUTLIER_TOKENS=$outlier_tokens
[ $quick = 0 ] && [ -z "$dir" ] && SCALING_KEEP=${SCALING_KEEP:-$root/docs/reproduce/v2-results}
[ -z "$SCALING_KEEP" ] || scripts/repro_keep.sh restore "$SCALING_KEEP" "$run"
# the scaling stage's Transformer and DIFF runs at this size are these runs: put them back (same recipe)
if [ -n "$scaling_keep" ] && [ -d "$scaling_keep/models" ]; then
    local f rel
    for f in "$scaling_keep"/models/{diff,transformer}-d$dim-*.gz "$scaling_keep"/eval/ppl-{diff,transformer}-d$dim-*.gz; do
        [ -e "$f" ] || continue
        rel=${f#"$scaling_keep"/}
        rel=${rel%.gz}
        [ -e "$run/$rel" ] || { gzip -d -c "$f" > "$run/$rel.tmp.$$" && mv "$run/$rel.tmp.$$" "$run/$rel"; }
    done
fi
local worker=$root/scripts/scaling.sh
echo "phase 1: learning rates ${lrs[*]}, every arch, seed 1"
stage_lr_sweep "$run" tools/v2.py "$worker"
[ -z "$SCALING_KEEP" ] || scripts/repro_keep.sh keep "$run" "$SCALING_KEEP"
echo "learning rates: $(tr '\n' ' ' < "$run/lr.txt")"
if [ $stop_after = 1 ]; then
    echo "phase 1 done in $(( ($(date +%s) - t_all) / 60 )) min: $run/lr.txt (next: make reproduce STAGE=v2-loss)"
    exit 0
fi
echo "phase 2: seeds ${seeds[*]:1} at each arch's learning rate"
phase2 > "$run/runs2.txt"
xargs -r -P "$jobs" -L 1 "$worker" --one "$run" < "$run/runs2.txt" || die "a run failed (see above); run the same command again"
echo "phase 2: activation outliers of every model at its learning rate"
local s a name
# a model trained on another machine (the scaling stage's, or a kept run) is trained again here for its weights
for s in "${seeds[@]}"; do for a in "${archs[@]}"; do
    name=$a-d$dim-lr$(lr_of $a)-s$s
    [ -s "$run/models/$name.safetensors" ] || [ -s "$run/eval/outliers-$name.json" ] || run_args $a "$(lr_of $a)" $s
done; done > "$run/runs2w.txt"
SCALING_NEED_WEIGHTS=1 xargs -r -P "$jobs" -L 1 "$worker" --one "$run" < "$run/runs2w.txt" ||
    die "a run failed (see above); run the same command again"
for s in "${seeds[@]}"; do for a in "${archs[@]}"; do echo "$run $a-d$dim-lr$(lr_of $a)-s$s"; done; done |
    xargs -r -P "$jobs" -L 1 "$0" --outliers || die "an evaluation failed (see above); run the same command again"
if [ $stop_after = 2 ]; then
    /usr/bin/python3 tools/v2.py "$run" --command "make reproduce STAGE=v2-loss$( [ $quick = 1 ] && echo ' QUICK=1')"
    echo "phases 1, 2 done in $(( ($(date +%s) - t_all) / 60 )) min: $run/V2.md (next: make reproduce STAGE=v2)"
    exit 0
fi
local keep_main=$SCALING_KEEP mult hd unstable
for mult in 4 8 16; do
    hd=$(high_dir $mult)
    echo "phase 3: every arch at $(high_lr $mult) (${mult}x the Transformer's $(lr_of transformer)), seeds ${seeds[*]}"
    mkdir -p "$hd/models" "$hd/eval"
    stage_settings "$hd" "$settings" "remove it or use --dir" > /dev/null
    [ -z "$keep_main" ] || { SCALING_KEEP=$keep_main/${hd##*/}; scripts/repro_keep.sh restore "$SCALING_KEEP" "$hd"; }
    phase3 $mult > "$run/runs3-$mult.txt"
    SCALING_SWEEP=1 xargs -r -P "$jobs" -L 1 "$worker" --one "$hd" < "$run/runs3-$mult.txt" ||
        die "a run failed (see above); run the same command again"
    SCALING_KEEP=$keep_main
    unstable=$(/usr/bin/python3 tools/v2.py "$run" --unstable $mult) || die "tools/v2.py --unstable failed"
    [ "$unstable" = no ] || { echo "phase 3: the Transformer diverged at ${mult}x"; break; }
    [ $mult = 16 ] || echo "phase 3: no seed of the Transformer diverged at ${mult}x: the next multiple"
done
/usr/bin/python3 tools/v2.py "$run" --command "make reproduce STAGE=v2$( [ $quick = 1 ] && echo ' QUICK=1')"
echo "done in $(( ($(date +%s) - t_all) / 60 )) min: $run/V2.md"
}
main "$@"; exit  # one line: bash parses it whole before main runs, so an edit to this file cannot change what follows
