#!/usr/bin/env bash
# make reproduce STAGE=optimal-lr | optimal-seeds | optimal | optimal-tokens:
# one size trained properly (docs/reproduce.md "The optimal stage"): about 20
# tokens per non-embedding parameter, each arch at its own learning rate, 6
# seeds, DIFF without the per-head norm and DIFF V2 in the same table, and
# separate cosine runs at smaller token budgets for the tokens claim.
#
# usage: scripts/optimal.sh [--quick] [--lr-only | --seeds-only | --tokens | --conversion] [--dir DIR] [--no-setup]
#                           [--no-build] [--jobs N]
#        scripts/optimal.sh --list [--quick]        the runs of each phase
#
# The recipe (everything that decides a result is in this file): plain
# language modelling on the State of the Union speeches (make data; vocab
# 4096, context 512, batch 4: the scaling stage's data), width 96, 4 layers,
# heads of 16 (DIFF 3 heads with values 32 wide, the Transformer 6, V2 6
# output heads), 4330 steps: 8.87M tokens, 20.0 per non-embedding parameter
# of the Transformer (443,232). Archs: transformer, diff, diffnonorm (DIFF
# --subln none), diff2 (V2). Phases:
#   1. learning rate: every arch at 1e-3, 3e-3 and 6e-3, seed 1, extended
#      (x2 or /2, at most twice each way) while its best lies at the edge;
#      the best is the lowest final validation loss (--lr-only stops here);
#   2. seeds 2..6 of every arch at its own learning rate (--seeds-only stops
#      after seeds 2..4);
#   3. (--tokens) DIFF and the Transformer at 1/4 and 1/2 of the tokens,
#      each its own cosine run (the steps scaled, the rest the same), seeds
#      1..6, in DIR/tokens-F;
#   4. (--conversion) the Transformer's seeds 1..3 trained on for a quarter
#      more tokens three ways (DIR/conversion): converted to DIFF (difftx
#      convert --to-diff, the second maps phased in by --diff-warmup over the
#      first fifth), and continued as the Transformer, both at the
#      Transformer's learning rate with a fresh warmup and cosine; and DIFF
#      from scratch for the same total tokens at its own rate (DIR/tokens-1.25).
# Each run ends with difftx eval ppl on the held-out speeches (the scaling
# stage's worker, scripts/scaling.sh --one). tools/optimal.py DIR writes
# DIR/OPTIMAL.md with the verdicts. Each run is cached in DIR/models and
# resumes from its checkpoint; the full stage keeps each finished run's logs
# and evaluations in docs/reproduce/optimal-results.
#
# Exit status: 0 done, 1 a step failed, 2 bad usage, 130 interrupted.
set -Eeuo pipefail

stage_name=optimal
. "$(dirname "$0")/stage_lib.sh"

# The body is one function, read whole before it runs (an edited script
# must not change a running one).
main() {
cd "$(dirname "$0")/.."
root=$PWD
bin=${DIFFTX_BIN:-$root/build/difftx}

local quick dir list jobs stop_after=3
stage_flag() {
    case $1 in
        --lr-only) stop_after=1 ;; --seeds-only) stop_after=2 ;; --tokens) stop_after=4 ;; --conversion) stop_after=5 ;;
        *) return 1 ;;
    esac
}
stage_args "$@"

# ---- the recipe
local data run vocab seq batch steps layers head_width dim ppl_tokens
local -a seeds early_seeds lrs fractions conv_seeds
local archs=(transformer diff diffnonorm diff2)
if [ $quick = 1 ]; then
    data=$root/runs/reproduce/quick run=${dir:-$data/optimal}
    vocab=2048 seq=256 batch=8 steps=300 layers=2 head_width=16 dim=48
    seeds=(1 2 3 4) early_seeds=(2 3) lrs=(3e-3 1e-2) ppl_tokens=20000 fractions=(0.5) conv_seeds=(1 2 3)
else
    data=$root/runs/reproduce run=${dir:-$data/optimal}
    vocab=4096 seq=512 batch=4 steps=4330 layers=4 head_width=16 dim=96
    seeds=(1 2 3 4 5 6) early_seeds=(2 3 4) lrs=(1e-3 3e-3 6e-3) ppl_tokens=100000 fractions=(0.25 0.5) conv_seeds=(1 2 3)
fi
local settings="vocab=$vocab seq=$seq batch=$batch steps=$steps layers=$layers dim=$dim seeds=${seeds[*]}"
settings+=" lrs=${lrs[*]} sweep_dim=$dim head_width=$head_width ppl_tokens=$ppl_tokens fractions=${fractions[*]}"

run_args() { # arch lr seed [steps] -> NAME ARGS (the scaling stage's run_args with heads of 16 and the variants)
    local a=$1 lr=$2 s=$3 n=${4:-$steps} h=$(( dim / (2 * head_width) )) flags
    case $a in
        diff) flags="--arch diff --heads $h" ;;
        diffnonorm) flags="--arch diff --heads $h --subln none" ;;
        transformer) flags="--arch transformer --heads $((2 * h))" ;;
        diff2) flags="--arch diff2 --heads $((2 * h))" ;;
    esac
    echo "$a-d$dim-lr$lr-s$s --tokens $data/train.bin --val-tokens $data/val.bin $flags --dim $dim --layers $layers" \
        "--ffn $(( (dim * 8 / 3 + 7) / 8 * 8 )) --vocab $vocab --max-seq $seq --seq $seq --batch $batch" \
        "--steps $n --warmup $((n / 20)) --lr $lr --seed $s --eval-every $((n / 10))" \
        "--log-every $((n / 5)) --log-steps 10 --ckpt-every $((n / 5)) --keep 1"
}
lr_of() { awk -v a="$1" '$1 == a { print $2 }' "$run/lr.txt"; }
phase1() { local lr a; for lr in "${lrs[@]}"; do for a in "${archs[@]}"; do run_args $a $lr 1; done; done; }
phase2() { # SEEDS...
    local s a
    for s in "$@"; do for a in "${archs[@]}"; do run_args $a "$(lr_of $a)" $s; done; done
}
frac_steps() { awk -v f="$1" -v s=$steps 'BEGIN { printf "%d", f * s + 0.5 }'; } # FRACTION
phase3() { # FRACTION: DIFF and the Transformer at FRACTION of the steps
    local s a n
    n=$(frac_steps "$1")
    for s in "${seeds[@]}"; do for a in diff transformer; do run_args $a "$(lr_of $a)" $s $n; done; done
}
conv_steps() { frac_steps 0.25; }
phase4() { # the conversion runs (NAME ARGS), for the worker in DIR/conversion
    local s t=transformer-d$dim-lr$(lr_of transformer) n; n=$(conv_steps)
    for s in "${conv_seeds[@]}"; do
        for k in convdiff contransformer; do
            # (no trailing blank: xargs -L would join the next line to this one)
            echo "$k-d$dim-lr$(lr_of transformer)-s$s --init $run/conversion/start-$k-s$s.safetensors" \
                "--tokens $data/train.bin --val-tokens $data/val.bin --seq $seq --batch $batch --steps $n" \
                "--warmup $((n / 20)) --lr $(lr_of transformer) --seed $((s + 100)) --eval-every $((n / 10))" \
                "--log-every $((n / 5)) --log-steps 10 --ckpt-every $((n / 5)) --keep 1$([ $k = convdiff ] &&
                    echo " --diff-warmup $((n / 5))")"
        done
    done
}
if [ $list = 1 ]; then
    phase1
    if [ -s "$run/lr.txt" ]; then
        phase2 "${seeds[@]:1}"
        local f; for f in "${fractions[@]}"; do echo "# tokens-$f:"; phase3 $f; done
        echo "# conversion:"; phase4; echo "# tokens-1.25 (DIFF from scratch):"; phase3 1.25 | grep '^diff-' | grep -E -- "-s($(IFS='|'; echo "${conv_seeds[*]}")) "
    else echo "(phases 2 and 3 follow from $run/lr.txt, written after phase 1)"; fi
    exit 0
fi

local t_all; t_all=$(date +%s)
stage_start
mkdir -p "$run/models" "$run/eval"
stage_settings "$run" "$settings" "remove it or use --dir"
scripts/repro_data.sh "$bin" "$data" "$vocab"
local train_tokens; train_tokens=$(( ($(stat -c %s "$data/train.bin") - 64) / 2 )) # a 64-byte header, then 2-byte ids (vocab 4096)
echo "training data: $train_tokens tokens; a run reads $(( steps * seq * batch )) ($(awk -v a=$(( steps * seq * batch )) -v b=$train_tokens 'BEGIN { printf "%.2f", a / b }') epochs)"

export SCALING_DATA=$data SCALING_PPL_TOKENS=$ppl_tokens SCALING_KEEP=${SCALING_KEEP:-}
[ $quick = 0 ] && [ -z "$dir" ] && SCALING_KEEP=${SCALING_KEEP:-$root/docs/reproduce/optimal-results}
[ -z "$SCALING_KEEP" ] || scripts/repro_keep.sh restore "$SCALING_KEEP" "$run"
local worker=$root/scripts/scaling.sh keep_main=$SCALING_KEEP
# sub_folder DIR STEPS TAG: a folder of runs of another length (phases 3, 4), with its own settings (its
# steps: tools/scaling.py reads a run as finished at them) and its kept results put back; sub_keep DIR: where
# the full stage keeps them (empty: not kept)
sub_keep() { [ -z "$keep_main" ] || echo "$keep_main/${1##*/}"; }
sub_folder() {
    mkdir -p "$1/models" "$1/eval"
    stage_settings "$1" "$(echo "$settings" | sed "s/ steps=$steps / steps=$2 /") $3" "remove it or use --dir" > /dev/null
    [ -z "$keep_main" ] || scripts/repro_keep.sh restore "$(sub_keep "$1")" "$1"
}
echo "phase 1: learning rates ${lrs[*]}, every arch, seed 1"
stage_lr_sweep "$run" tools/optimal.py "$worker"
[ -z "$SCALING_KEEP" ] || scripts/repro_keep.sh keep "$run" "$SCALING_KEEP"
echo "learning rates: $(tr '\n' ' ' < "$run/lr.txt")"
local q=""; [ $quick = 1 ] && q=" QUICK=1"
if [ $stop_after = 1 ]; then
    echo "phase 1 done in $(( ($(date +%s) - t_all) / 60 )) min: $run/lr.txt (next: make reproduce STAGE=optimal-seeds$q)"
    exit 0
fi
echo "phase 2: seeds ${early_seeds[*]} at each arch's learning rate"
phase2 "${early_seeds[@]}" > "$run/runs2a.txt"
xargs -r -P "$jobs" -L 1 "$worker" --one "$run" < "$run/runs2a.txt" || die "a run failed (see above); run the same command again"
if [ $stop_after = 2 ]; then
    echo "seeds ${early_seeds[*]} done in $(( ($(date +%s) - t_all) / 60 )) min (next: make reproduce STAGE=optimal$q)"
    exit 0
fi
echo "phase 2: seeds ${seeds[*]:1} at each arch's learning rate"
phase2 "${seeds[@]:1}" > "$run/runs2.txt"
xargs -r -P "$jobs" -L 1 "$worker" --one "$run" < "$run/runs2.txt" || die "a run failed (see above); run the same command again"
if [ $stop_after -ge 4 ]; then
    local f td
    for f in "${fractions[@]}"; do
        td=$run/tokens-$f
        echo "phase 3: DIFF and the Transformer at $f of the tokens, seeds ${seeds[*]}"
        sub_folder "$td" "$(frac_steps $f)" "fraction=$f"
        phase3 $f > "$run/runs3-$f.txt"
        SCALING_KEEP=$(sub_keep "$td") xargs -r -P "$jobs" -L 1 "$worker" --one "$td" < "$run/runs3-$f.txt" ||
            die "a run failed (see above); run the same command again"
    done
fi
if [ $stop_after = 5 ]; then
    local cd=$run/conversion td=$run/tokens-1.25 s k
    echo "phase 4: the Transformer's seeds ${conv_seeds[*]} trained on for $(conv_steps) steps, converted and not;" \
        "DIFF from scratch for $(frac_steps 1.25)"
    # the Transformers' weights (a run finished on another machine is trained again here: the same run)
    for s in "${conv_seeds[@]}"; do run_args transformer "$(lr_of transformer)" $s; done > "$run/runs4w.txt"
    SCALING_NEED_WEIGHTS=1 xargs -r -P "$jobs" -L 1 "$worker" --one "$run" < "$run/runs4w.txt" ||
        die "a run failed (see above); run the same command again"
    sub_folder "$cd" "$(conv_steps)" conversion=0.25
    sub_folder "$td" "$(frac_steps 1.25)" fraction=1.25
    for s in "${conv_seeds[@]}"; do
        for k in convdiff contransformer; do
            [ -s "$cd/start-$k-s$s.safetensors" ] && continue
            if [ $k = convdiff ]; then
                "$bin" convert --to-diff "$run/models/transformer-d$dim-lr$(lr_of transformer)-s$s.safetensors" \
                    --seed $s --out "$cd/start-$k-s$s.safetensors" > "$cd/start-$k-s$s.out" 2>&1 ||
                    die "convert --to-diff of seed $s failed: $(tail -n 1 "$cd/start-$k-s$s.out")"
            else
                cp "$run/models/transformer-d$dim-lr$(lr_of transformer)-s$s.safetensors" "$cd/start-$k-s$s.safetensors"
            fi
        done
    done
    phase4 > "$run/runs4.txt"
    SCALING_KEEP=$(sub_keep "$cd") xargs -r -P "$jobs" -L 1 "$worker" --one "$cd" < "$run/runs4.txt" ||
        die "a run failed (see above); run the same command again"
    phase3 1.25 | grep '^diff-' | grep -E -- "-s($(IFS='|'; echo "${conv_seeds[*]}")) " > "$run/runs4s.txt"
    SCALING_KEEP=$(sub_keep "$td") xargs -r -P "$jobs" -L 1 "$worker" --one "$td" < "$run/runs4s.txt" ||
        die "a run failed (see above); run the same command again"
fi
local stage=optimal; [ $stop_after = 4 ] && stage=optimal-tokens; [ $stop_after = 5 ] && stage=optimal-conversion
/usr/bin/python3 tools/optimal.py "$run" --command "make reproduce STAGE=$stage$q"
echo "done in $(( ($(date +%s) - t_all) / 60 )) min: $run/OPTIMAL.md"
}
main "$@"; exit  # one line: bash parses it whole before main runs, so an edit to this file cannot change what follows
