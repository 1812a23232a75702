#!/usr/bin/env bash
# make reproduce [STAGE=main]: the paper's retrieval-side measurements
# (spec §6) on small DIFF and Transformer models trained here under one
# recipe, written up in REPORT.md with the other stages' results
# (STAGE=induction: scripts/induction.sh; STAGE=scaling: scripts/scaling.sh).
#
# usage: scripts/reproduce.sh [--quick] [--train-only | --v2] [--dir DIR] [--no-setup] [--no-build]
#                             (make reproduce [QUICK=1])
#
# --v2 (make reproduce STAGE=v2-needle) trains DIFF V2 (arch diff2, the
# Transformer's 2H heads as output heads, 4H query heads: V2's matched
# comparison) under this recipe, seeds 1-3 at once (one thread each: about
# 55 minutes on 2 cores), then its perplexity, needles, attention on the
# answer and outliers, beside the DIFF and Transformer models of this stage;
# tools/v2.py puts the retrieval comparison into v2/V2.md. V2's warm-up
# runs at the Transformer's warm-up lr (V2 is the Transformer's attention
# with twice the query heads, and the official V2 keeps the baseline's
# settings), its main phase at the stage's lr like the other two.
#
# --train-only (make reproduce STAGE=main-train) trains every model and
# stops before the evaluations: on 2 cores the training takes about 106
# minutes (the logs' clocks, the two archs side by side) and the
# evaluations and report 31 (measured from scratch), so the stage runs in
# two parts well under 150 minutes each; a run without it trains what is
# missing first.
#
# The recipe (docs/reproduce.md has the why of each choice):
#   data      the State of the Union corpus (make data): speeches in train/ and
#             held-out speeches in val/; a BPE tokenizer trained on train/
#   warm-up   WARM_STEPS steps on random-id copy documents alone (context 128):
#             the induction that retrieval needs; without it no model of the
#             earlier recipe retrieved (docs/reproduce/earlier/REPORT-2026-11-29.md)
#   mixture   then every training batch row is, with probability NEEDLE_FRAC,
#             a synthetic multi-needle document (1-6 needles) whose haystack
#             is train/ text; the evaluation's haystack is val/ text
#   pairs     DIFF (H heads) and the Transformer (2H heads, the same projection
#             shapes) with the same seed: the same initial-weight stream, the
#             same batches and needle documents, steps and optimizer settings
#   lr        each arch's warm-up at its own best learning rate from the
#             induction study (tools/induction.py --best-lr) when that stage
#             has run, else 3e-3 for both (the report says which); the main
#             phase at 3e-3 for both
#   seeds     one size (dim 192), seeds 1, 2, 3, every seed reported; the main
#             phase long enough (2500 steps) that a model that can learn
#             retrieval has had the time to (the scaling claims have their own
#             stage on plain language modelling)
#   evals     difftx eval ppl, needle (Table 2 grid; depth x length), attn-mass
#             (split by retrieval), outliers, low-bit attention (8/6/4-bit
#             logits, row and tensor scope, every seed), quantised models
#             (difftx quantize w8a16, w8a8, w4a16: perplexity and needles,
#             every seed; w8a8 with each activation-range method; on seed
#             1 the calibration set's size and w8a8 with one kind of input
#             at a time int8), attn-map
#   report    scripts/report.sh: the stages' write-ups, then tools/report.py ->
#             DIR/REPORT.md and its figures
#
# Seed by seed, both architectures of a pair train at the same time, one
# thread each, then are evaluated the same way. Everything goes under
# runs/reproduce (runs/reproduce/quick for --quick). A rerun reuses every
# finished model and result; an interrupted training run resumes from its
# checkpoint. The full run keeps each seed's results (logs, evaluations, not
# the weights) in docs/reproduce/main-results (scripts/repro_keep.sh), so a
# session on another machine continues from them, and writes REPORT.md at
# the top too.
#
# Exit status: 0 done, 1 a step failed, 2 bad usage, 130 interrupted.
set -Eeuo pipefail

stage_name=reproduce
. "$(dirname "$0")/stage_lib.sh"

# The body is one function, read whole before it runs (an edited script
# must not change a running one, which takes hours).
main() {
quick=0 train_only=0 v2_only=0; is_true "${QUICK:-}" && quick=1
dir=${REPRO_DIR:-}
while [ $# -gt 0 ]; do
    case $1 in
        -h|--help) usage; exit 0 ;;
        --quick) quick=1 ;;
        --train-only) train_only=1 ;;
        --v2) v2_only=1 ;;
        --no-setup) NO_SETUP=1 ;;
        --no-build) NO_BUILD=1 ;;
        --dir) [ $# -ge 2 ] || { echo "reproduce: --dir needs a value" >&2; exit 2; }; dir=$2; shift ;;
        *) echo "reproduce: unknown argument $1 (scripts/reproduce.sh --help)" >&2; exit 2 ;;
    esac
    shift
done
case $dir in ''|/*) ;; *) dir=$PWD/$dir ;; esac
cd "$(dirname "$0")/.."
root=$PWD
bin=${DIFFTX_BIN:-$root/build/difftx}

# ---- the recipe's settings (everything that decides a result is here)
if [ $quick = 1 ]; then
    run=${dir:-runs/reproduce/quick}
    vocab=2048 seq=256 batch=8 steps=400 layers=3
    dims=(128)                 # DIFF heads = dim / 32 (head width 16), baseline twice as many
    head_width=16
    samples=10 mass_samples=10 outlier_tokens=16384 ppl_tokens=30000 quant_samples=10 quant_tokens=10000
    heat_grid=2x1 lengths=152,184,216,248 needle_max=3 warm_steps=${WARM_STEPS:-250}
else
    run=${dir:-runs/reproduce}
    vocab=4096 seq=512 batch=4 steps=2500 layers=4
    dims=(192)                 # DIFF heads = dim / 64 (head width 32), baseline twice as many
    head_width=32
    samples=50 mass_samples=20 outlier_tokens=65536 ppl_tokens=100000 quant_samples=20 quant_tokens=30000
    heat_grid=4x1 lengths=192,256,384,504 needle_max=6 warm_steps=${WARM_STEPS:-600}
fi
lr=3e-3 needle_frac=${NEEDLE_FRAC:-0.6} copy_frac=${COPY_FRAC:-0.2} seeds=(1 2 3)
# each arch's warm-up lr: its best in the induction study, when that stage is done
declare -A warm_lr=([diff]=$lr [transformer]=$lr [diff2]=$lr)
warm_lr_from=default
induction_logs=()  # the full study's committed logs (scripts/induction.sh), for a run in the default folder
[ $quick = 0 ] && [ -z "$dir" ] && induction_logs=(--logs docs/reproduce/induction-logs)
if best=$(/usr/bin/python3 tools/induction.py "$run/induction" "${induction_logs[@]}" --best-lr 2>/dev/null); then
    while read -r a v; do warm_lr[$a]=$v; done <<<"$best"
    warm_lr_from=induction
fi
warm_lr[diff2]=${warm_lr[transformer]}
warm_seq=128
warm_batch=$((batch * seq / warm_seq))  # the warm-up: as many tokens per step as the main phase
headline=${dims[-1]}
eval_len=$((seq - 8))  # the prompt; --max-new 8 answer tokens fill the context
corpus=data/sotu
settings="vocab=$vocab seq=$seq batch=$batch steps=$steps layers=$layers dims=${dims[*]} lr=$lr"
settings+=" needle_frac=$needle_frac copy_frac=$copy_frac needle_max=$needle_max samples=$samples"
settings+=" warm_steps=$warm_steps warm_seq=$warm_seq warm_batch=$warm_batch"
settings+=" warm_lr_diff=${warm_lr[diff]} warm_lr_transformer=${warm_lr[transformer]} warm_lr_from=$warm_lr_from"

t_all=$(date +%s)
section() { printf '\n== %s  (%ds so far)\n' "$1" $(( $(date +%s) - t_all )); }

section "setup and build"
stage_start
mkdir -p "$run"
stage_settings "$run" "$settings" "remove it or use --dir"
# The full run's results are kept in the repository (docs/reproduce/main-results, without the weights), so
# that a session on another machine continues it: a model whose evaluations are all there is not trained again.
# (REPRO_KEEP=DIR keeps another run's results in DIR.)
keep=${REPRO_KEEP:-}
[ $quick = 0 ] && [ -z "$dir" ] && keep=${keep:-$root/docs/reproduce/main-results}
[ -z "$keep" ] || scripts/repro_keep.sh restore "$keep" "$run"
keep_results() { [ -z "$keep" ] || scripts/repro_keep.sh keep "$run" "$keep"; }

section "data, tokenizer, shards"
scripts/repro_data.sh "$bin" "$run" "$vocab"
tok=$run/tokenizer.txt

# ---- training
model_name() { echo "$run/models/$1-d$2-s$3"; }  # arch dim seed
cmdline() { printf 'difftx'; printf ' %q' "$@"; echo; }  # a difftx command as it would be typed (for the report)
train_one() { # arch dim seed: the warm-up, then the main phase from its weights
    local a=$1 dim=$2 seed=$3 h=$(( $2 / (2 * head_width) )) out
    out=$(model_name "$a" "$dim" "$seed")
    [ "$a" = diff ] || h=$((2 * h))  # the Transformer's 2H heads; V2's 2H output heads
    local warm=(train --tokens "$run/train.bin" \
        --arch "$a" --dim "$dim" --layers "$layers" --heads "$h" --ffn $(( (dim * 8 / 3 + 7) / 8 * 8 )) \
        --vocab "$vocab" --max-seq "$seq" --seq "$warm_seq" --batch "$warm_batch" --steps "$warm_steps" \
        --warmup $((warm_steps / 10)) --lr "${warm_lr[$a]}" --seed "$seed" --copy-frac 1 \
        --log "$out.warm.jsonl" --log-every $((warm_steps / 4)) --out "$out.warm.safetensors")
    set -- train --init "$out.warm.safetensors" --tokens "$run/train.bin" --val-tokens "$run/val.bin" \
        --seq "$seq" --batch "$batch" --steps "$steps" --warmup $((steps / 20)) --lr "$lr" \
        --seed "$seed" --eval-every $((steps / 10)) --log "$out.jsonl" --log-every $((steps / 5)) \
        --ckpt-every $((steps / 5)) --keep 1 --resume \
        --needle-frac "$needle_frac" --copy-frac "$copy_frac" --needle-max "$needle_max" --needle-text "$corpus/train" \
        --needle-tokenizer "$tok" --out "$out.safetensors"
    { cmdline "${warm[@]}"; cmdline "$@"; } > "$out.cmd"
    if [ -s "$out.safetensors" ]; then # trained before its info record was written
        [ -s "$out.info.json" ] || "$bin" info --json "$out.safetensors" > "$out.info.json"
        return 0
    fi
    evals_done "$a" "$seed" && return 0 # its results are kept; the weights stayed on another machine
    if [ ! -s "$out.warm.safetensors" ]; then
        OMP_NUM_THREADS=1 "$bin" "${warm[@]}" > "$out.warm.out" 2>&1 || return 1
    fi
    OMP_NUM_THREADS=1 "$bin" "$@" > "$out.out" 2>&1 || return 1
    "$bin" info --json "$out.safetensors" > "$out.info.json.tmp" && mv "$out.info.json.tmp" "$out.info.json"
}
train_pair() { # dim seed: DIFF and the Transformer side by side
    local rc1=0 rc2=0
    echo "train dim $1 seed $2: DIFF and Transformer ($(date +%H:%M:%S))"
    train_one diff "$1" "$2" & local p1=$!
    train_one transformer "$1" "$2" & local p2=$!
    wait $p1 || rc1=$?
    wait $p2 || rc2=$?
    for a in diff transformer; do
        local f; f=$(model_name "$a" "$1" "$2")
        [ -s "$f.safetensors" ] || evals_done "$a" "$2" || { tail -n 3 "$f.warm.out" "$f.out" >&2 2>/dev/null; die "training $a dim $1 seed $2 failed ($rc1/$rc2)"; }
    done
}
# ---- evaluations (each skipped when its JSON exists)
ev() { # name model-base command...: runs difftx eval into $run/eval/NAME.json (with EV_LIST: names it)
    local name=$1; shift
    if [ -n "${EV_LIST:-}" ]; then echo "$name"; return 0; fi
    cmdline eval "$@" --json "$run/eval/$name.json" > "$run/eval/$name.cmd"
    [ -s "$run/eval/$name.json" ] && return 0
    "$bin" eval "$@" --json "$run/eval/$name.json" > "$run/eval/$name.txt" 2> "$run/eval/$name.err" ||
        { cat "$run/eval/$name.err" >&2; die "difftx eval $1 for $name failed"; }
}
quantize_for() { # TAG QM "EVAL..." ARGS...: evals_of's model $m quantised into QM (difftx quantize ARGS, calibrated
    # on the training tokens; its command and output in eval/TAG-quantize-$n.*), unless QM is there or every
    # evaluation named (eval/EVAL-$n.json) is done already
    local tag=$1 qm=$2 evs=$3 e; shift 3
    [ -z "${EV_LIST:-}" ] && [ ! -s "$qm" ] || return 0
    for e in $evs; do [ -s "$run/eval/$e-$n.json" ] || break; done
    [ -s "$run/eval/$e-$n.json" ] && return 0
    set -- quantize --model "$m" --calib "$run/train.bin" "$@" --out "$qm"
    cmdline "$@" > "$run/eval/$tag-quantize-$n.cmd"
    "$bin" "$@" > "$run/eval/$tag-quantize-$n.txt" 2>&1 ||
        { cat "$run/eval/$tag-quantize-$n.txt" >&2; die "difftx $* failed"; }
}
retrieval_evals() { # arch seed: perplexity, needles, attention on the answer, outliers
    local m n=$1-s$2
    m=$(model_name "$1" "$headline" "$2").safetensors
    [ -n "${EV_LIST:-}" ] || echo "eval $n ($(date +%H:%M:%S))"
    ev "ppl-$n" ppl --model "$m" --tokens "$run/val.bin" --max-tokens "$ppl_tokens"
    ev "needle-$n" needle --model "$m" --tokenizer "$tok" --haystack "$corpus/val" --lengths "$eval_len" \
        --samples "$samples" --seed 1
    ev "mass-$n" attn-mass --model "$m" --tokenizer "$tok" --haystack "$corpus/val" --length "$eval_len" \
        --samples "$mass_samples" --seed 1
    ev "outliers-$n" outliers --model "$m" --tokens "$run/val.bin" --count "$outlier_tokens"
}
evals_of() { # arch seed: every evaluation of that model, in order
    local a=$1 s=$2 m n b sc
    m=$(model_name "$a" "$headline" "$s").safetensors n=$a-s$s
    retrieval_evals "$a" "$s"
    # low-bit attention: the unquantised baseline on the same tokens and prompts, then 8/6/4 bits in
    # both scopes (perplexity) and 4 bits in both (needles)
    ev "quant16-ppl-$n" ppl --model "$m" --tokens "$run/val.bin" --max-tokens "$quant_tokens"
    ev "quant16-needle-$n" needle --model "$m" --tokenizer "$tok" --haystack "$corpus/val" --lengths "$eval_len" \
        --samples "$quant_samples" --seed 1
    for sc in row tensor; do
        for b in 8 6 4; do
            ev "quant$b-$sc-ppl-$n" ppl --model "$m" --tokens "$run/val.bin" --max-tokens "$quant_tokens" \
                --attn-bits "$b" --attn-scope "$sc"
        done
        ev "quant4-$sc-needle-$n" needle --model "$m" --tokenizer "$tok" --haystack "$corpus/val" \
            --lengths "$eval_len" --samples "$quant_samples" --seed 1 --attn-bits 4 --attn-scope "$sc"
    done
    # quantised models (docs/quantize.md): each scheme calibrated on 300 training windows, then the same
    # perplexity and needles as the unquantised baseline above (quant16-*)
    local q qm
    for q in w8a16 w8a8 w4a16; do
        qm=${m%.safetensors}.$q.safetensors
        quantize_for "wq-$q" "$qm" "wq-$q-ppl wq-$q-needle" --scheme "$q"
        ev "wq-$q-ppl-$n" ppl --model "$qm" --tokens "$run/val.bin" --max-tokens "$quant_tokens"
        ev "wq-$q-needle-$n" needle --model "$qm" --tokenizer "$tok" --haystack "$corpus/val" --lengths "$eval_len" \
            --samples "$quant_samples" --seed 1
    done
    # w8a8's activation ranges by the other two methods (every seed): absmax is the one the outlier argument is
    # about, but a fair comparison gives each arch its best method (the report's verdict does)
    local am
    for am in percentile mse; do
        qm=${m%.safetensors}.w8a8-$am.safetensors
        quantize_for "wq-w8a8-$am" "$qm" "wq-w8a8-$am-ppl" --scheme w8a8 --act-method "$am"
        ev "wq-w8a8-$am-ppl-$n" ppl --model "$qm" --tokens "$run/val.bin" --max-tokens "$quant_tokens"
    done
    [ "$s" = "${seeds[0]}" ] || return 0
    # the calibration set's size (seed 1): w8a8, whose activation ranges come from it, calibrated on N windows
    local nc
    for nc in 16 32 100 300 1000; do
        qm=${m%.safetensors}.w8a8-c$nc.safetensors
        quantize_for "calib$nc-w8a8" "$qm" "calib$nc-w8a8-ppl" --scheme w8a8 --calib-samples "$nc"
        ev "calib$nc-w8a8-ppl-$n" ppl --model "$qm" --tokens "$run/val.bin" --max-tokens "$quant_tokens"
    done
    # where w8a8 loses (seed 1): one kind of input at a time on its int8 grid, every other kept bf16
    local kind kinds=(attn_in attn_out ffn_in ffn_hidden qk output) rest
    for kind in "${kinds[@]}"; do
        qm=${m%.safetensors}.a8only-$kind.safetensors
        rest=$(printf '%s\n' "${kinds[@]}" | grep -vx "$kind" | paste -sd, -)
        quantize_for "a8only-$kind" "$qm" "a8only-$kind-ppl" --scheme w8a8 --a16-inputs "$rest"
        ev "a8only-$kind-ppl-$n" ppl --model "$qm" --tokens "$run/val.bin" --max-tokens "$quant_tokens"
    done
    [ -n "${EV_LIST:-}" ] || echo "eval $n: depth x length, maps ($(date +%H:%M:%S))"
    ev "heatmap-$a" needle --model "$m" --tokenizer "$tok" --haystack "$corpus/val" --lengths "$lengths" \
        --grid "$heat_grid" --samples "$samples" --seed 2
    ev "map-$a" attn-map --model "$m" --tokenizer "$tok" --layer $((layers - 1)) --head 0 --text \
        "There is a special magic number inside a lot of irrelevant text. Find it and memorize them. I will quiz you about the magic number there.
The special magic Lisbon number is: 40817. We will keep our promises to the people who sent us here.
What is the special magic Lisbon number? The special magic Lisbon number is "
}
evals_done() { # arch seed: whether every evaluation of that model has its JSON
    local name
    for name in $(EV_LIST=1 evals_of "$1" "$2"); do [ -s "$run/eval/$name.json" ] || return 1; done
}
evals_pair() { # seed: both archs' evaluations side by side, one thread each
    local a rc=0 pids=()
    for a in diff transformer; do
        OMP_NUM_THREADS=1 evals_of "$a" "$1" > "$run/eval/$a-s$1.log" 2>&1 & pids+=($!)
    done
    for a in "${pids[@]}"; do wait "$a" || rc=1; done
    cat "$run/eval/diff-s$1.log" "$run/eval/transformer-s$1.log"
    [ $rc = 0 ] || die "an evaluation failed (see above)"
}

v2_evals_of() { # seed: V2's evaluations (the retrieval side; its quantisation is not part of the comparison)
    retrieval_evals diff2 "$1"
}
v2_seed() { # seed: train V2 (unless its evaluations are kept), then evaluate it
    local out name
    out=$(model_name diff2 "$headline" "$1")
    for name in $(EV_LIST=1 v2_evals_of "$1"); do [ -s "$run/eval/$name.json" ] || break; done
    [ -s "$run/eval/$name.json" ] && return 0
    train_one diff2 "$headline" "$1" || { tail -n 3 "$out.warm.out" "$out.out" >&2 2>/dev/null; return 1; }
    OMP_NUM_THREADS=1 v2_evals_of "$1"
}

mkdir -p "$run/models" "$run/eval"
if [ $v2_only = 1 ]; then
    section "DIFF V2, dim $headline, seeds ${seeds[*]} at once: $warm_steps warm-up + $steps steps, then its evaluations"
    pids=() rc=0
    for s in "${seeds[@]}"; do v2_seed "$s" > "$run/eval/diff2-s$s.log" 2>&1 & pids+=($!); done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    cat "$run/eval"/diff2-s*.log
    keep_results
    [ $rc = 0 ] || die "a V2 run failed (see above); run the same command again"
    if [ -d "$run/v2" ]; then
        /usr/bin/python3 tools/v2.py "$run/v2" --command "make reproduce STAGE=v2$( [ $quick = 1 ] && echo ' QUICK=1')"
    else
        echo "(no $run/v2: make reproduce STAGE=v2 writes V2.md, with this retrieval comparison)"
    fi
    echo "done in $(( ($(date +%s) - t_all) / 60 )) min"
    exit 0
fi
section "dim $headline, seeds ${seeds[*]}: $warm_steps warm-up + $steps steps x $((batch * seq)) tokens, then the evaluations"
for s in "${seeds[@]}"; do
    train_pair "$headline" "$s"
    [ $train_only = 1 ] || evals_pair "$s"
    keep_results
done
if [ $train_only = 1 ]; then
    echo "trained in $(( ($(date +%s) - t_all) / 60 )) min; the evaluations and the report: make reproduce"
    exit 0
fi

section "report"
# the time of every invocation that did work adds up (a rerun that only reuses adds little)
echo $(( $(cat "$run/seconds.txt" 2>/dev/null || echo 0) + $(date +%s) - t_all )) > "$run/seconds.txt"
keep_results
# the stages' write-ups and REPORT.md, from one path (scripts/report.sh; the full run's also published at the top)
if [ -n "$dir" ]; then where=(--dir "$run"); elif [ $quick = 1 ]; then where=(--quick); else where=(); fi
scripts/report.sh --no-setup "${where[@]}" --command "make reproduce$( [ $quick = 1 ] && echo ' QUICK=1')" \
    --seconds "$(cat "$run/seconds.txt")"
echo "done in $(( ($(date +%s) - t_all) / 60 )) min: $run/REPORT.md"
}
main "$@"; exit  # one line: bash parses it whole before main runs, so an edit to this file cannot change what follows
