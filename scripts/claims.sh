#!/usr/bin/env bash
# make reproduce STAGE=claims-train, then STAGE=claims: the paper's other
# claims (spec 6.3, 6.6, 6.7) on the main stage's models: many-shot
# in-context learning and its robustness to order, contextual faithfulness,
# and the loss by position over a longer context.
#
# usage: scripts/claims.sh [--quick] [--train-only] [--no-setup] [--no-build] [--jobs N]
#
# It starts from the main stage's final models (make reproduce STAGE=main-train
# makes them: dim 192, 3 seeds per arch) and continues each, both archs under
# one recipe, in two ways:
#   claims  STEPS more steps at the main stage's context with a mixture that
#           holds the tasks (docs/eval_icl.md, docs/eval_halluc.md): ICL_FRAC
#           in-context episodes, HALLUC_FRAC faithfulness documents, FACT_FRAC
#           closed-book fact rows, NEEDLE_FRAC needle documents, COPY_FRAC copy
#           documents, the rest prose; then `difftx eval icl` (6 and 16
#           classes) and `difftx eval halluc`;
#   lrcheck seed 1 again at a lower and a higher learning rate (3e-4, 3e-3),
#           evaluated with 6 classes and the faithfulness tasks: whether the
#           one lr of the comparison favoured an arch;
#   long    LONG_STEPS steps of prose alone at twice the context (--max-seq;
#           RoPE's base unchanged, the weights the same); then `difftx eval ppl
#           --by-position` over the held-out speeches at the long context, and
#           the same at the main context on the model it started from.
# Both archs of a seed train side by side, one thread each; every model is
# cached in DIR/models and resumes from its checkpoint. The full stage keeps
# each finished model's logs and every evaluation's JSON in
# docs/reproduce/claims-results (scripts/repro_keep.sh). tools/claims.py
# writes DIR/CLAIMS.md with the verdicts; REPORT.md includes it.
# --train-only (STAGE=claims-train) trains and stops.
#
# Exit status: 0 done, 1 a step failed, 2 bad usage, 130 interrupted.
set -Eeuo pipefail

stage_name=claims
. "$(dirname "$0")/stage_lib.sh"

main() {
cd "$(dirname "$0")/.."
root=$PWD
bin=${DIFFTX_BIN:-$root/build/difftx}

if [ "${1:-}" = --one ]; then # a worker: KIND NAME FROM ARGS...
    shift
    local kind=$1 name=$2 from=$3 run=$CLAIMS_RUN; shift 3
    local out=$run/models/$name e
    # finished: its weights here, or (on another machine) every evaluation of it kept
    if [ -s "$out.info.json" ]; then
        [ -s "$out.safetensors" ] && exit 0
        local -a needs=("$run/eval/pos-$name.json")
        [ "$kind" = claims ] && needs=("$run/eval/icl6-$name.json" "$run/eval/icl16-$name.json" "$run/eval/halluc-$name.json")
        [ "$kind" = lrcheck ] && needs=("$run/eval/icl6-$name.json" "$run/eval/halluc-$name.json")
        for e in "${needs[@]}"; do [ -s "$e" ] || { rm -f "$out.info.json"; break; }; done
        [ -s "$out.info.json" ] && exit 0
    fi
    [ -s "$from" ] || die "$from: the main stage's model is missing (make reproduce STAGE=main-train$CLAIMS_QUICK)"
    echo "start $name ($(date +%H:%M:%S))"
    local t0; t0=$(date +%s)
    echo "difftx train --init $from $* --log $out.jsonl --out $out.safetensors --resume" > "$out.cmd"
    if [ ! -s "$out.safetensors" ] &&
        ! OMP_NUM_THREADS=1 "$bin" train --init "$from" "$@" --log "$out.jsonl" --out "$out.safetensors" --resume \
            > "$out.out" 2>&1; then
        tail -n 3 "$out.out" >&2
        echo "FAIL  $name" >&2
        exit 1
    fi
    "$bin" info --json "$out.safetensors" > "$out.info.json.tmp" && mv "$out.info.json.tmp" "$out.info.json"
    [ -z "${CLAIMS_KEEP:-}" ] || scripts/repro_keep.sh keep "$run" "$CLAIMS_KEEP"
    echo "done  $name ($kind) in $(( $(date +%s) - t0 ))s"
    exit 0
fi
if [ "${1:-}" = --eval ]; then # a worker: NAME CMD... (the JSON path is eval/NAME.json)
    shift
    local name=$1 run=$CLAIMS_RUN; shift
    local ev=$run/eval/$name
    [ -s "$ev.json" ] && exit 0
    local t0; t0=$(date +%s)
    echo "difftx $* --json $ev.json" > "$ev.cmd"
    if ! OMP_NUM_THREADS=1 "$bin" "$@" --json "$ev.json" > "$ev.txt" 2>&1; then
        tail -n 3 "$ev.txt" >&2
        echo "FAIL  $name" >&2
        exit 1
    fi
    [ -z "${CLAIMS_KEEP:-}" ] || scripts/repro_keep.sh keep "$run" "$CLAIMS_KEEP"
    echo "done  $name in $(( $(date +%s) - t0 ))s"
    exit 0
fi

local quick=0 train_only=0 jobs=${JOBS:-2}
is_true "${QUICK:-}" && quick=1
while [ $# -gt 0 ]; do
    case $1 in
        -h|--help) usage; exit 0 ;;
        --quick) quick=1 ;;
        --train-only) train_only=1 ;;
        --no-setup) NO_SETUP=1 ;;
        --no-build) NO_BUILD=1 ;;
        --jobs) [ $# -ge 2 ] || { echo "claims: --jobs needs a value" >&2; exit 2; }; jobs=$2; shift ;;
        *) echo "claims: unknown argument $1 (scripts/claims.sh --help)" >&2; exit 2 ;;
    esac
    shift
done
case $jobs in [1-9]|[1-9][0-9]) ;; *) echo "claims: --jobs $jobs: expected 1 to 99" >&2; exit 2 ;; esac

# ---- the recipe (everything that decides a result is here)
local data main_models run seq batch steps lr long_steps queries episodes orders halluc_samples ppl_tokens dim
local icl_frac=0.3 halluc_frac=0.2 fact_frac=0.15 needle_frac=0.15 copy_frac=0.1 needle_max=6
local -a seeds=(1 2 3) check_lrs=(3e-4 3e-3)
if [ $quick = 1 ]; then
    data=$root/runs/reproduce/quick dim=128 seq=256 batch=8 steps=150 lr=1e-3 long_steps=60 needle_max=3
    queries=100 episodes=2 orders=10 halluc_samples=40 ppl_tokens=20000 seeds=(1 2)
else
    data=$root/runs/reproduce dim=192 seq=512 batch=4 steps=1000 lr=1e-3 long_steps=500
    queries=200 episodes=5 orders=10 halluc_samples=100 ppl_tokens=60000
fi
main_models=$data/models run=$data/claims
local long=$((2 * seq)) long_batch=$((batch / 2))
local settings="dim=$dim seq=$seq batch=$batch steps=$steps lr=$lr long=$long long_batch=$long_batch"
settings+=" long_steps=$long_steps icl_frac=$icl_frac halluc_frac=$halluc_frac fact_frac=$fact_frac"
settings+=" needle_frac=$needle_frac copy_frac=$copy_frac needle_max=$needle_max seeds=${seeds[*]}"
settings+=" check_lrs=${check_lrs[*]}"
# (the evaluations' settings are in each one's command, eval/NAME.cmd)
local tok=$data/tokenizer.txt text=$root/data/sotu/train val_text=$root/data/sotu/val

trains() {
    local s a from
    for s in "${seeds[@]}"; do for a in diff transformer; do
        from=$main_models/$a-d$dim-s$s.safetensors
        echo "claims $a-s$s $from --tokens $data/train.bin --val-tokens $data/val.bin --seq $seq --batch $batch" \
            "--steps $steps --warmup $((steps / 20)) --lr $lr --seed $s --eval-every $((steps / 4))" \
            "--log-every $((steps / 5)) --ckpt-every $((steps / 4)) --keep 1 --needle-frac $needle_frac" \
            "--copy-frac $copy_frac --icl-frac $icl_frac --halluc-frac $halluc_frac --fact-frac $fact_frac" \
            "--needle-max $needle_max --needle-text $text --needle-tokenizer $tok"
    done; done
    # the learning-rate check: seed 1 again at a lower and a higher lr, so that the write-up can say whether
    # the one lr of the comparison favoured one arch
    local lr2
    for lr2 in "${check_lrs[@]}"; do for a in diff transformer; do
        from=$main_models/$a-d$dim-s1.safetensors
        echo "lrcheck $a-lr$lr2-s1 $from --tokens $data/train.bin --val-tokens $data/val.bin --seq $seq --batch $batch" \
            "--steps $steps --warmup $((steps / 20)) --lr $lr2 --seed 1 --eval-every $((steps / 4))" \
            "--log-every $((steps / 5)) --ckpt-every $((steps / 4)) --keep 1 --needle-frac $needle_frac" \
            "--copy-frac $copy_frac --icl-frac $icl_frac --halluc-frac $halluc_frac --fact-frac $fact_frac" \
            "--needle-max $needle_max --needle-text $text --needle-tokenizer $tok"
    done; done
    for s in "${seeds[@]}"; do for a in diff transformer; do
        from=$main_models/$a-d$dim-s$s.safetensors
        echo "long $a-long-s$s $from --tokens $data/train.bin --val-tokens $data/val.bin --max-seq $long" \
            "--seq $long --batch $long_batch --steps $long_steps --warmup $((long_steps / 20)) --lr $lr --seed $s" \
            "--eval-every $((long_steps / 5)) --log-every $((long_steps / 5)) --ckpt-every $((long_steps / 5)) --keep 1"
    done; done
}
evals() {
    local s a m
    for s in "${seeds[@]}"; do for a in diff transformer; do
        m=$run/models/$a-s$s.safetensors
        echo "icl6-$a-s$s eval icl --model $m --tokenizer $tok --classes 6 --queries $queries --episodes $episodes --orders $orders --seed 1"
        echo "icl16-$a-s$s eval icl --model $m --tokenizer $tok --classes 16 --queries $queries --episodes $episodes --orders $orders --seed 1"
        echo "halluc-$a-s$s eval halluc --model $m --tokenizer $tok --haystack $val_text --samples $halluc_samples --seed 1"
        echo "pos-$a-long-s$s eval ppl --model $run/models/$a-long-s$s.safetensors --tokens $data/val.bin --by-position --max-tokens $ppl_tokens"
        echo "pos-$a-s$s eval ppl --model $main_models/$a-d$dim-s$s.safetensors --tokens $data/val.bin --by-position --max-tokens $ppl_tokens"
    done; done
    local lr2
    for lr2 in "${check_lrs[@]}"; do for a in diff transformer; do
        m=$run/models/$a-lr$lr2-s1.safetensors
        echo "icl6-$a-lr$lr2-s1 eval icl --model $m --tokenizer $tok --classes 6 --queries $queries --episodes $episodes --orders $orders --seed 1"
        echo "halluc-$a-lr$lr2-s1 eval halluc --model $m --tokenizer $tok --haystack $val_text --samples $halluc_samples --seed 1"
    done; done
}

local t_all; t_all=$(date +%s)
stage_start
mkdir -p "$run/models" "$run/eval"
stage_settings "$run" "$settings" "remove it"
export CLAIMS_RUN=$run CLAIMS_KEEP= CLAIMS_QUICK=
[ $quick = 1 ] && CLAIMS_QUICK=" QUICK=1"
[ $quick = 0 ] && CLAIMS_KEEP=$root/docs/reproduce/claims-results
[ -z "$CLAIMS_KEEP" ] || scripts/repro_keep.sh restore "$CLAIMS_KEEP" "$run"
trains > "$run/trains.txt"
xargs -P "$jobs" -L 1 "$0" --one < "$run/trains.txt" || die "a run failed (see above); run the same command again"
if [ $train_only = 1 ]; then
    echo "trained in $(( ($(date +%s) - t_all) / 60 )) min (the evaluations: make reproduce STAGE=claims$CLAIMS_QUICK)"
    exit 0
fi
evals > "$run/evals.txt"
xargs -P "$jobs" -L 1 "$0" --eval < "$run/evals.txt" || die "an evaluation failed (see above); run the same command again"
/usr/bin/python3 tools/claims.py "$run" --command "make reproduce STAGE=claims$CLAIMS_QUICK"
echo "done in $(( ($(date +%s) - t_all) / 60 )) min: $run/CLAIMS.md"
}
main "$@"; exit  # one line: bash parses it whole before main runs, so an edit to this file cannot change what follows
