#!/usr/bin/env bash
# make demo: a DIFF Transformer and its parameter-matched Transformer learn
# real English (the State of the Union addresses) on this machine's CPU, side
# by side, then both continue the same prompts.
#
# usage: scripts/demo.sh [flags] [path/to/difftx]        (make demo [VAR=value ...])
#
# Steps, each with a header and its time:
#   1. setup     scripts/setup.sh --plot (the build's Debian packages and
#                python3-matplotlib), then make the difftx binary
#   2. data      make data: the corpus in data/sotu/{train,val} (docs/data.md)
#   3. tokenizer difftx tokenizer train on data/sotu/train -> runs/demo/tokenizer-V.txt
#   4. shards    difftx prepare --append-eos, train and val -> runs/demo/{train,val}-V.bin
#   5. train     DIFF (H heads), then the Transformer baseline (2H heads, 2x the KV
#                heads: the same projection shapes) with the same seed (same
#                initial-weight stream and the same batches in the same order),
#                steps, tokens and optimizer settings; validation, a JSONL log
#                and checkpoints for each
#   6. results   parameters, tokens, losses, speed and time of both, side by side
#   7. plot      tools/plot_loss.py -> runs/demo/loss.png
#   8. generate  difftx generate from each model: the same prompts, seed,
#                temperature 0.8 and top-p 0.95
#
# Everything goes under runs/demo/ (runs/demo/quick/ for --quick; git-ignored).
# A rerun reuses the corpus, tokenizer, shards and finished models; a run that
# was interrupted (Ctrl-C) continues from its last checkpoint. Changing any
# setting that decides the result starts the training over.
#
# Flags (each also an environment variable, which `make demo VAR=value` sets):
#   --quick            QUICK=1      a smoke run of seconds (under a minute on a busy
#                                   machine): a tiny model, vocab 1024, 600 steps
#                                   of 8 x 64 tokens, one thread, into runs/demo/quick/
#   --minutes M        MINUTES      the time budget of each run (default 3): a short
#                                   timing run measures this machine's tokens/s
#                                   and picks the steps (kept in runs/demo/
#                                   settings.txt, so a rerun resumes with the same
#                                   schedule); validation adds a little
#   --steps N          STEPS        a fixed number of steps instead (quick: 600), the
#                                   same result on every machine
#   --dim N            DIM          model width (256; quick 64)
#   --layers N         LAYERS       blocks (4; quick 2)
#   --heads H          HEADS        DIFF heads; the baseline gets 2H (4; quick 2)
#   --kv-heads G       KV_HEADS     DIFF KV heads, baseline 2G (= H)
#   --ffn N            FFN          SwiGLU hidden width (688; quick 172)
#   --vocab N          VOCAB        tokenizer and model vocabulary (4096; quick 1024)
#   --seq N            SEQ          tokens per window, the context length (256; quick 64)
#   --batch N          BATCH        windows per step (8)
#   --lr X             LR           peak learning rate (2e-3), cosine to 0.1 x lr
#   --warmup N         WARMUP       warmup steps (5% of the steps)
#   --seed N           SEED         weights, batches and sampling (1)
#   --precision P      PRECISION    fp32 (default) or bf16 matrix products
#   --threads N        THREADS      OpenMP threads (default: OMP_NUM_THREADS, else the
#                                   cores that other processes leave idle, measured
#                                   over a second before training; quick 1)
#   --max-tokens N     GEN_TOKENS   tokens generated per sample (60)
#   --prompt TEXT      PROMPT       one prompt instead of the two defaults
#                                   ("My fellow Americans," and "The state of the Union is")
#   --fresh            FRESH=1      delete this configuration's models, logs and
#                                   checkpoints first (the corpus, tokenizer and
#                                   shards stay)
#   --no-setup         NO_SETUP=1   skip scripts/setup.sh (the packages are there)
#   --no-build         NO_BUILD=1   use the binary as it is
#   --no-plot          NO_PLOT=1    skip the PNG (no python3-matplotlib needed)
#   --corpus DIR       CORPUS       a corpus folder with train/ and val/ instead of
#                                   data/sotu (skips make data)
#   --dir DIR          DEMO_DIR     where everything goes (runs/demo)
#   -h, --help                      this text
#
# Exit status: 0 done, 1 a step failed (named on stderr), 2 bad usage,
# 130 interrupted (rerun the same command to continue).
set -Eeuo pipefail

usage() { sed -n '2,/^set -Eeuo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
die() { echo "demo: ${step:+[$step] }$*" >&2; exit 1; }
bad_usage() { echo "demo: $*  (scripts/demo.sh --help)" >&2; exit 2; }

# ---- settings: flags override the environment, which overrides the defaults
bin=
while [ $# -gt 0 ]; do
    case $1 in
        -h|--help) usage; exit 0 ;;
        --quick) QUICK=1 ;;
        --fresh) FRESH=1 ;;
        --no-setup) NO_SETUP=1 ;;
        --no-build) NO_BUILD=1 ;;
        --no-plot) NO_PLOT=1 ;;
        --steps|--minutes|--dim|--layers|--heads|--kv-heads|--ffn|--vocab|--seq|--batch|--lr|--warmup|\
        --seed|--precision|--threads|--max-tokens|--prompt|--corpus|--dir)
            [ $# -ge 2 ] || bad_usage "$1 needs a value"
            case $1 in
                --steps) STEPS=$2 ;; --minutes) MINUTES=$2 ;; --dim) DIM=$2 ;; --layers) LAYERS=$2 ;;
                --heads) HEADS=$2 ;; --kv-heads) KV_HEADS=$2 ;; --ffn) FFN=$2 ;; --vocab) VOCAB=$2 ;;
                --seq) SEQ=$2 ;; --batch) BATCH=$2 ;; --lr) LR=$2 ;; --warmup) WARMUP=$2 ;;
                --seed) SEED=$2 ;; --precision) PRECISION=$2 ;; --threads) THREADS=$2 ;;
                --max-tokens) GEN_TOKENS=$2 ;; --prompt) PROMPT=$2 ;; --corpus) CORPUS=$2 ;;
                --dir) DEMO_DIR=$2 ;;
            esac
            shift ;;
        -*) bad_usage "unknown flag $1" ;;
        *) [ -z "$bin" ] || bad_usage "one binary path only (got '$bin' and '$1')"; bin=$1 ;;
    esac
    shift
done

is_true() { case ${1:-} in ''|0|no|false) return 1 ;; *) return 0 ;; esac; }
quick=0; is_true "${QUICK:-}" && quick=1
if [ $quick = 1 ]; then
    d_dim=64 d_layers=2 d_heads=2 d_ffn=172 d_vocab=1024 d_seq=64 d_steps=600
else
    d_dim=256 d_layers=4 d_heads=4 d_ffn=688 d_vocab=4096 d_seq=256 d_steps=
fi
dim=${DIM:-$d_dim} layers=${LAYERS:-$d_layers} heads=${HEADS:-$d_heads} kv_heads=${KV_HEADS:-}
ffn=${FFN:-$d_ffn} vocab=${VOCAB:-$d_vocab} seq=${SEQ:-$d_seq} batch=${BATCH:-8}
# QUICK runs one thread: a model this small gains little from two, and loses
# much when another process keeps a core busy (each OpenMP barrier waits).
d_threads=; [ $quick = 1 ] && d_threads=1
lr=${LR:-2e-3} seed=${SEED:-1} precision=${PRECISION:-fp32} threads=${THREADS:-${OMP_NUM_THREADS:-$d_threads}}
minutes=${MINUTES:-} steps=${STEPS:-} warmup=${WARMUP:-} gen_tokens=${GEN_TOKENS:-60}
[ -n "$kv_heads" ] || kv_heads=$heads

posint() { [[ $2 =~ ^[1-9][0-9]*$ ]] || bad_usage "$1 must be a positive integer, not '$2'"; }
for v in dim:$dim layers:$layers heads:$heads kv-heads:$kv_heads ffn:$ffn vocab:$vocab seq:$seq \
         batch:$batch seed:$seed max-tokens:$gen_tokens; do
    posint "--${v%%:*}" "${v#*:}"
done
[ -z "$steps" ] || posint --steps "$steps"
[ -z "$threads" ] || posint --threads "$threads"
[ -z "$warmup" ] || [[ $warmup =~ ^[0-9]+$ ]] || bad_usage "--warmup must be a whole number, not '$warmup'"
if [ -n "$minutes" ]; then
    [[ $minutes =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)$ ]] && awk -v m="$minutes" 'BEGIN { exit !(m > 0) }' ||
        bad_usage "--minutes must be a positive number, not '$minutes'"
fi
[ -z "$steps" ] || [ -z "$minutes" ] || bad_usage "give --steps or --minutes, not both"
[[ $lr =~ ^[0-9.]+([eE][-+]?[0-9]+)?$ ]] || bad_usage "--lr must be a number, not '$lr'"
case $precision in fp32|bf16) ;; *) bad_usage "--precision must be fp32 or bf16, not '$precision'" ;; esac
[ $((dim % (2 * heads))) = 0 ] || bad_usage "--dim $dim must be a multiple of 2 x --heads $heads (DIFF head width dim/2H)"
[ $((heads % kv_heads)) = 0 ] || bad_usage "--heads $heads must be a multiple of --kv-heads $kv_heads"
if [ -z "$steps" ] && [ -z "$minutes" ]; then
    if [ $quick = 1 ]; then steps=$d_steps; else minutes=3; fi
fi
if [ -n "${PROMPT:-}" ]; then prompts=("$PROMPT"); else prompts=("My fellow Americans," "The state of the Union is"); fi

# Paths given are relative to the caller's folder; the defaults to the repository.
abspath() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
[ -z "$bin" ] || bin=$(abspath "$bin")
[ -z "${CORPUS:-}" ] || CORPUS=$(abspath "$CORPUS")
[ -z "${DEMO_DIR:-}" ] || DEMO_DIR=$(abspath "$DEMO_DIR")
cd "$(dirname "$0")/.."
root=$PWD
bin=${bin:-$root/build/difftx}
corpus=${CORPUS:-data/sotu}
top=${DEMO_DIR:-runs/demo}
run=$top; [ $quick = 1 ] && run=$top/quick
[ -n "$threads" ] && export OMP_NUM_THREADS=$threads
tps=$((batch * seq)) # tokens per step

# ---- sections, timings, failures
step="start"; t_all=$(date +%s.%N); t_step=$t_all; timings=(); sub_timings=(); n_section=0
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
hms() { awk -v s="$1" 'BEGIN { s = int(s + 0.5); if (s >= 60) printf "%dm%02ds", s / 60, s % 60; else printf "%ds", s }'; }
end_section() {
    [ "$step" = start ] && return 0
    local t; t=$(now)
    timings+=("$(printf '%-13s %7s s' "$step" "$(secs "$t_step" "$t")")" ${sub_timings[@]+"${sub_timings[@]}"})
    sub_timings=()
    echo "   ($step: $(secs "$t_step" "$t") s)"
}
section() { # name, title
    end_section
    step=$1; t_step=$(now); n_section=$((n_section + 1))
    printf '\n== %s. %s\n' "$n_section" "$2"
}
on_err() {
    local rc=$?
    [ "$BASH_SUBSHELL" -gt 0 ] && exit "$rc" # inside $(...): the caller reports it
    echo "demo: step '$step' failed (exit status $rc, line $1)" >&2
    exit 1
}
on_int() {
    echo >&2
    echo "demo: interrupted during '$step'. Run the same command again to continue:" >&2
    echo "      the corpus, tokenizer, shards and finished models are kept, and a training run resumes from its last checkpoint." >&2
    exit 130
}
trap 'on_err $LINENO' ERR
trap on_int INT TERM

echo "difftx demo: DIFF Transformer vs. its parameter-matched Transformer on the State of the Union"
echo "  model   dim $dim, $layers layers, DIFF $heads heads (kv $kv_heads, head width $((dim / (2 * heads)))) vs. Transformer $((2 * heads)) heads (kv $((2 * kv_heads))), ffn $ffn"
echo "  data    vocab $vocab, $batch x $seq = $tps tokens/step, $( [ -n "$steps" ] && echo "$steps steps" || echo "$minutes min per run" ), lr $lr, seed $seed, $precision"
echo "  output  $run/   ($( [ $quick = 1 ] && echo "QUICK mode; " )'scripts/demo.sh --help' lists the flags)"

# ---- 1. setup and build
section setup "setup: packages and build"
if is_true "${NO_SETUP:-}"; then echo "skipped (--no-setup)"
elif is_true "${NO_PLOT:-}"; then scripts/setup.sh
else scripts/setup.sh --plot
fi
if is_true "${NO_BUILD:-}"; then echo "using $bin as it is (--no-build)"
else make --no-print-directory "${bin#"$root"/}" # the target as the Makefile names it: build/difftx
fi
[ -x "$bin" ] || die "$bin is not an executable"
echo "binary  $bin"

# ---- 2. data
section data "data: the State of the Union corpus"
if [ -n "${CORPUS:-}" ]; then echo "using $corpus (--corpus)"
else make --no-print-directory data
fi
for s in train val; do [ -d "$corpus/$s" ] || die "$corpus/$s is not a folder"; done
echo "train   $(ls "$corpus/train" | wc -l) files, $(cat "$corpus"/train/* | wc -c) bytes"
echo "val     $(ls "$corpus/val" | wc -l) files, $(cat "$corpus"/val/* | wc -c) bytes"

# ---- 3. tokenizer
mkdir -p "$run"
tok=$top/tokenizer-$vocab.txt
section tokenizer "tokenizer: byte-level BPE, vocab $vocab"
if [ -s "$tok" ]; then
    echo "reusing $tok"
else
    "$bin" tokenizer train --input "$corpus/train" --vocab-size "$vocab" --out "$tok"
fi

# ---- 4. shards
section shards "shards: train and val tokens"
for s in train val; do
    shard=$top/$s-$vocab.bin
    if [ -s "$shard" ] && [ "$shard" -nt "$tok" ]; then
        echo "reusing $shard"
    else
        "$bin" prepare --tokenizer "$tok" --input "$corpus/$s" --out "$shard" --append-eos
    fi
done
train_bin=$top/train-$vocab.bin val_bin=$top/val-$vocab.bin

# ---- 5. training
declare -A arch_heads=([diff]=$heads [transformer]=$((2 * heads)))
declare -A arch_kv=([diff]=$kv_heads [transformer]=$((2 * kv_heads)))
declare -A arch_name=([diff]=DIFF [transformer]=Transformer)
train_args() { # arch steps warmup -> targs: the flags of one run (without log and output)
    local a=$1
    targs=(--tokens "$train_bin" --arch "$a" --heads "${arch_heads[$a]}" --kv-heads "${arch_kv[$a]}"
           --dim "$dim" --layers "$layers" --ffn "$ffn" --vocab "$vocab" --seq "$seq" --batch "$batch"
           --steps "$2" --lr "$lr" --warmup "$3" --seed "$seed" --precision "$precision")
}
default_warmup() { local w=$(($1 / 20)); [ -n "$warmup" ] && w=$warmup; echo "$w"; }

# The settings that decide the result; a change starts the runs over.
base="dim=$dim layers=$layers heads=$heads kv_heads=$kv_heads ffn=$ffn vocab=$vocab seq=$seq batch=$batch"
base+=" lr=$lr warmup=${warmup:-auto} seed=$seed precision=$precision corpus=$corpus"
budget=$( [ -n "$steps" ] && echo "steps=$steps" || echo "minutes=$minutes" )
stamp=$run/settings.txt
section train "training: DIFF, then the Transformer baseline, on the same batches"
# Other processes slow the runs down, and OpenMP threads on busy cores wait for
# each other at every barrier: without --threads, use the cores that are idle.
cores=$(nproc 2>/dev/null || echo 1)
if [ -z "$threads" ] && [ -r /proc/stat ]; then
    a=$(head -n 1 /proc/stat); sleep 1; b=$(head -n 1 /proc/stat)
    busy=$(awk -v a="$a" -v b="$b" -v c="$cores" 'BEGIN { split(a, x); split(b, y); t = 0
        for (i = 2; i <= 9; i++) t += y[i] - x[i]   # user .. steal
        idle = (y[5] - x[5]) + (y[6] - x[6])        # idle + iowait
        printf "%.1f", (t > 0 ? c * (1 - idle / t) : 0) }')
    free=$(awk -v b="$busy" -v c="$cores" 'BEGIN { f = int(c - b + 0.5); print (f < 1 ? 1 : f) }')
    if [ "$free" -lt "$cores" ]; then
        threads=$free; export OMP_NUM_THREADS=$threads
        echo "other processes keep $busy of $cores cores busy: training with $threads thread(s) (THREADS=N to choose)"
    fi
fi
clear_runs() {
    rm -rf "$run"/diff.* "$run"/transformer.* "$run"/loss.png "$run"/results.txt "$run"/samples.txt "$run"/timing
}
if is_true "${FRESH:-}"; then
    echo "--fresh: removing the earlier runs in $run"; clear_runs; rm -f "$stamp"
fi
if [ -f "$stamp" ] && [ "$(sed -n 1p "$stamp")" = "$base $budget" ]; then
    steps=$(sed -n 2p "$stamp")
    echo "same settings as the runs in $run: $steps steps (reusing finished models, resuming unfinished ones)"
else
    # runs without a settings file are not ours to reuse (an older demo's, say)
    if [ -f "$stamp" ]; then
        echo "the settings differ from those of the runs in $run: starting over"
    fi
    clear_runs
    if [ -z "$steps" ]; then
        # Time one short DIFF run (the baseline runs at about the same speed)
        # and turn the budget into steps; validation costs ~10% on top.
        probe=$run/timing; rm -rf "$probe"; mkdir -p "$probe"
        n_probe=12; [ $quick = 1 ] && n_probe=40
        echo "timing $n_probe steps of DIFF to turn $minutes min into steps..."
        train_args diff "$n_probe" 0
        "$bin" train "${targs[@]}" --log "$probe/t.jsonl" --log-every 1000 \
            --out "$probe/t.safetensors" > "$probe/t.out"
        # the median over the steps after the first four (the first are slower)
        rate=$(awk -F'"tokens_per_s":' 'NR > 4 && NF > 1 { split($2, a, /[,}]/); print a[1] }' "$probe/t.jsonl" |
               sort -g | awk '{ r[++n] = $1 } END { if (n) print r[int((n + 1) / 2)] }')
        [ -n "$rate" ] || die "could not read tokens/s from the timing run ($probe/t.jsonl)"
        # (a multiple of 10 from 100 on, so validations can fall on a divisor)
        steps=$(awk -v m="$minutes" -v r="$rate" -v t="$tps" 'BEGIN { s = int(m * 60 * r / t / 1.1)
            if (s >= 100) s -= s % 10; print (s < 10 ? 10 : s) }')
        echo "measured $(printf '%.0f' "$rate") tokens/s -> $steps steps of $tps tokens per run"
        rm -rf "$probe"
    fi
    printf '%s\n%s\n' "$base $budget" "$steps" > "$stamp"
fi
warm=$(default_warmup "$steps")
# about 8-16 validations, at steps that divide the run (so the last is not a
# near-duplicate of the final one); checkpoints about 5 times a run
divisor() { # steps, n -> a divisor of steps in [steps/2n, steps/n], else steps/n
    awk -v s="$1" -v n="$2" 'BEGIN { e = int(s / n); if (e < 1) e = 1; f = e
        for (; e >= 1 && e * 2 * n >= s; e--) if (s % e == 0) { print e; exit }
        print f }'
}
eval_every=$(divisor "$steps" 8)
ckpt_every=$(divisor "$steps" 5)
log_every=$(( steps / 15 > 0 ? steps / 15 : 1 ))
echo "each run: $steps steps x $tps tokens = $((steps * tps)) tokens, warmup $warm, validation every $eval_every steps"
echo "          on the first 10 x $tps tokens of $val_bin, checkpoints every $ckpt_every steps"
declare -A t_train
for a in diff transformer; do
    model=$run/$a.safetensors
    echo
    echo "-- ${arch_name[$a]} (--arch $a --heads ${arch_heads[$a]} --kv-heads ${arch_kv[$a]})"
    if [ -s "$model" ]; then
        echo "already trained: $model  (--fresh to train again)"
        continue
    fi
    t0=$(now)
    rc=0
    train_args "$a" "$steps" "$warm"
    "$bin" train "${targs[@]}" --val-tokens "$val_bin" --eval-every "$eval_every" \
        --log "$run/$a.jsonl" --log-every "$log_every" --ckpt-every "$ckpt_every" --keep 1 --resume \
        --out "$model" || rc=$?
    case $rc in
        0) ;;
        130|143) on_int ;;
        *) die "difftx train --arch $a failed (exit status $rc)" ;;
    esac
    t_train[$a]=$(secs "$t0" "$(now)")
    echo "   (${arch_name[$a]}: ${t_train[$a]} s)"
    sub_timings+=("$(printf '%-13s %7s s' "  $a" "${t_train[$a]}")")
done
echo
"$bin" info "$run/diff.safetensors" | grep -E '^(params|baseline|difference)'

# ---- 6. results
section results "results"
# One run's numbers from its JSONL log (docs/training.md): entries after a
# "resumed_from" line at step S replace those the killed process logged past S;
# the wall time sums the elapsed_s of each process.
summary() { # log -> "last_loss mean_last_20 val_loss steps train_tok_s wall_s"
    awk -v tps="$tps" '
    function get(k,   p) {
        if (!match($0, "\"" k "\":[^,}]*")) return ""
        p = substr($0, RSTART + length(k) + 3, RLENGTH - length(k) - 3)
        return p == "null" ? "" : p
    }
    {
        s = get("step"); if (s == "") next; s += 0
        if (index($0, "\"resumed_from\"")) {
            for (k in loss) if (k + 0 > s) { delete loss[k]; delete dt[k] }
            for (k in vl) if (k + 0 > s) delete vl[k]
            wall += seg; seg = 0; next
        }
        e = get("elapsed_s"); if (e != "" && e + 0 > seg) seg = e + 0
        l = get("loss")
        if (l != "") { loss[s] = l + 0; r = get("tokens_per_s"); if (r + 0 > 0) dt[s] = tps / r }
        v = get("val_loss"); if (v != "") vl[s] = v + 0
    }
    END {
        wall += seg; last = -1; lv = -1
        for (k in loss) if (k + 0 > last) last = k + 0
        for (k in vl) if (k + 0 > lv) lv = k + 0
        if (last < 0 || lv < 0) exit 1
        n = 0; sum = 0; for (k in loss) if (k + 0 > last - 20) { n++; sum += loss[k] }
        t = 0; m = 0; for (k in dt) { t += dt[k]; m++ }
        printf "%.4f %.4f %.4f %d %.0f %.1f\n", loss[last], sum / n, vl[lv], last, (t > 0 ? m * tps / t : 0), wall
    }' "$1"
}
declare -A params R
for a in diff transformer; do
    params[$a]=$("$bin" info "$run/$a.safetensors" | awk '$1 == "params" { print $2 }')
    R[$a]=$(summary "$run/$a.jsonl") || die "$run/$a.jsonl holds no final losses"
done
col() { awk -v i="$2" '{ print $i }' <<< "${R[$1]}"; }
row() { printf '%-28s %14s %14s %12s\n' "$@"; }
diffcol() { awk -v a="$1" -v b="$2" -v f="$3" 'BEGIN { printf f, a - b }'; }
{
    row "" DIFF Transformer "DIFF - Tr."
    row "heads (kv heads)" "$heads ($kv_heads)" "$((2 * heads)) ($((2 * kv_heads)))" ""
    row "parameters" "${params[diff]}" "${params[transformer]}" "$((params[diff] - params[transformer]))"
    row "tokens trained" "$(( $(col diff 4) * tps ))" "$(( $(col transformer 4) * tps ))" ""
    row "train loss, last step" "$(col diff 1)" "$(col transformer 1)" "$(diffcol "$(col diff 1)" "$(col transformer 1)" %+.4f)"
    row "train loss, last 20 steps" "$(col diff 2)" "$(col transformer 2)" "$(diffcol "$(col diff 2)" "$(col transformer 2)" %+.4f)"
    row "validation loss (final)" "$(col diff 3)" "$(col transformer 3)" "$(diffcol "$(col diff 3)" "$(col transformer 3)" %+.4f)"
    row "training tokens/s" "$(col diff 5)" "$(col transformer 5)" ""
    row "wall time (with validation)" "$(hms "$(col diff 6)")" "$(hms "$(col transformer 6)")" ""
} | tee "$run/results.txt"
echo "(losses in nats per token; validation on the same $((10 * tps)) tokens for both; $run/results.txt)"

# ---- 7. plot
section plot "plot: loss curves"
if is_true "${NO_PLOT:-}"; then
    echo "skipped (--no-plot)"
else
    /usr/bin/python3 tools/plot_loss.py --tokens-per-step "$tps" \
        --title "State of the Union, vocab $vocab: DIFF ($heads heads) vs Transformer ($((2 * heads)) heads), dim $dim, $layers layers" \
        "$run/loss.png" "$run/diff.jsonl:DIFF" "$run/transformer.jsonl:Transformer"
fi

# ---- 8. generate
section generate "generate: the same prompts, seed $seed, temperature 0.8, top-p 0.95, $gen_tokens tokens"
# The shards end every speech with <|eos|> and have no <|bos|>, so a prompt
# starts after an <|eos|>, as a new speech does in training.
: > "$run/samples.txt"
for p in "${prompts[@]}"; do
    for a in diff transformer; do
        text=$("$bin" generate --model "$run/$a.safetensors" --tokenizer "$tok" --prompt "<|eos|>$p" \
               --special --no-bos --max-tokens "$gen_tokens" --temperature 0.8 --top-p 0.95 \
               --seed "$seed" --precision "$precision" 2> "$run/generate.err") ||
            { cat "$run/generate.err" >&2; die "difftx generate failed for $a"; }
        speed=$(sed -n 's/.*decode: [0-9]* tokens in [0-9.]* ms (\([0-9.]*\) tok\/s).*/\1/p' "$run/generate.err")
        printf '\n[%s]%s\n%s%s\n' "${arch_name[$a]}" "${speed:+  (decode $speed tok/s)}" "$p" "$text" | tee -a "$run/samples.txt"
    done
done
rm -f "$run/generate.err"
end_section

echo
echo "== timings"
printf '   %s\n' "${timings[@]}"
echo "   total         $(printf '%7s' "$(secs "$t_all" "$(now)")") s"
echo
echo "results: $run/results.txt   loss curves: $run/loss.png   samples: $run/samples.txt"
