#!/usr/bin/env bash
# make bench-mpi: data-parallel training measured on this machine, and a
# model of its step time on N machines (docs/training.md, "More than one
# process"). Writes bench/results-mpi.md (or OUT).
#
# usage: bench/mpi.sh [--quick] [OUT]
#
#   1. the all-reduce (bench/allreduce.c, 2 ranks on loopback / shared
#      memory): time and bandwidth by size up to the gradients' size;
#   2. training, configs S and L of make bench (QUICK: S at batch 2, and a
#      small stand-in for L), the same global batch run as 1 rank x T
#      threads and as T ranks x 1 thread (T = the cores), the latter with
#      the gradient in buckets summed during the backward (--grad-bucket-mb
#      4, the default across machines) and in one sum after it (0, the
#      default on one machine): tokens/s of the median
#      step, the share of the step spent waiting for sums (the log's
#      comm_s) and the share the gradient's sums took (grad_sum_s);
#   3. the model: a step on N machines = compute + the all-reduce's exposed
#      part, where compute is the 1-rank step measured here (each machine
#      keeping the batch of one, the global batch N times larger) and a ring
#      all-reduce of the fp32 gradient moves 2 (N - 1) / N of its bytes over
#      each link (10 and 100 Gb/s). Without overlap all of it is exposed;
#      with the buckets, what does not fit in the backward pass after the
#      output layer's gradient is ready (the backward taken as 2/3 of the
#      step, as its share of the products), and at least the embedding's
#      bucket, the last to be ready: efficiency = compute / (compute +
#      exposed).
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
[ "${1:-}" = --quick ] && { quick=1; shift; }
out=${1:-bench/results-mpi.md}
bin=build/difftx
command -v mpirun > /dev/null || { echo "bench-mpi: mpirun is not installed (scripts/setup.sh)" >&2; exit 3; }
[ -f build/libdifftx_mpi.so ] || { echo "bench-mpi: build/libdifftx_mpi.so is missing (make with mpicc installed)" >&2; exit 3; }
mpicc -std=c11 -O2 bench/allreduce.c -o build/bench/allreduce
mpi=(mpirun --oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
cores=$(nproc)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# configs: name dim layers heads ffn vocab seq batch steps
if [ $quick = 1 ]; then
    configs=("S 512 8 4 1408 8192 1024 2 3" "Lsmall 256 4 2 688 8192 512 4 3")
else
    configs=("S 512 8 4 1408 8192 1024 8 3" "L 768 12 6 2048 8192 2048 4 3")
fi
awk 'BEGIN { srand(5); for (i = 0; i < 400000; i++) printf "%d%s", int(rand() * 8192), (i % 32 == 31 ? "\n" : " ") }' \
    > "$tmp/ids.txt"

median() { sort -g | awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : "nan" }'; }
field() { sed -n "s/.*\"$1\":\([-0-9.eE+]*\).*/\1/p"; } # field NAME < jsonl

{
    echo "# Data-parallel training (bench/mpi.sh)"
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $cores cores"
    echo "- ISA: $("$bin" info --system | sed -n 's/^isa *//p'); MPI: $(mpirun --version | head -1)"
    echo "- load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo
    echo "## All-reduce, 2 ranks on this machine"
    echo
    "${mpi[@]}" -np 2 build/bench/allreduce $([ $quick = 1 ] && echo 64 || echo 512)
    echo
} > "$tmp/head.md"
bw=$(sed -n 's/^| \([0-9]*\) | 2 | [0-9.]* ms | [0-9.]* | \([0-9.]*\) |$/\2/p' "$tmp/head.md" | tail -1)

rows=() model=()
for c in "${configs[@]}"; do
    read -r name dim layers heads ffn vocab seq batch steps <<< "$c"
    args=(--arch diff --dim "$dim" --layers "$layers" --heads "$heads" --ffn "$ffn" --vocab "$vocab" --no-tie
        --max-seq "$seq" --seq "$seq" --batch "$batch" --steps $((steps + 1)) --warmup 0 --tokens "$tmp/ids.txt")
    OMP_NUM_THREADS=$cores "$bin" train "${args[@]}" --log "$tmp/$name-1.jsonl" --out "$tmp/$name-1.safetensors" \
        > "$tmp/$name-1.out" 2>&1
    for k in n 0; do # buckets of 4 MiB (the default across machines), one sum after the backward (on one)
        OMP_NUM_THREADS=1 "${mpi[@]}" -np "$cores" "$bin" train "${args[@]}" --log "$tmp/$name-$k.jsonl" \
            --grad-bucket-mb "$([ $k = 0 ] && echo 0 || echo 4)" --out "$tmp/$name-$k.safetensors" > "$tmp/$name-$k.out" 2>&1
    done
    # the steps after the first (warm-up), from the JSONL logs
    med() { grep "\"$2\"" "$tmp/$name-$1.jsonl" | tail -n "$steps" | field "$2" | median; } # run key
    t1=$(med 1 tokens_per_s) tn=$(med n tokens_per_s) t0=$(med 0 tokens_per_s)
    csn=$(med n comm_s) cs0=$(med 0 comm_s) gsn=$(med n grad_sum_s)
    params=$("$bin" info "$tmp/$name-1.safetensors" | sed -n 's/^params *\([0-9]*\).*/\1/p')
    tokens=$((batch * seq))
    rows+=("$(awk -v n="$name" -v a="$t1" -v b="$tn" -v z="$t0" -v csn="$csn" -v cs0="$cs0" -v gsn="$gsn" \
        -v tok="$tokens" 'BEGIN {
        printf "| %s | %.1f | %.1f | %.3f | %.1f%% | %.1f%% | %.1f | %.3f | %.1f%% |", n, a, b, b / a,
            100 * csn * b / tok, 100 * gsn * b / tok, z, z / a, 100 * cs0 * z / tok }')")
    model+=("$(awk -v n="$name" -v p="$params" -v a="$t1" -v tok="$tokens" -v emb="$((vocab * dim))" 'BEGIN {
        comp = tok / a; g = 4 * p
        split("2 8 64", nodes, " "); split("10 100", gbps, " ")
        line = sprintf("| %s | %.1f M | %.1f MB | %.2f s |", n, p / 1e6, g / 1e6, comp)
        for (j = 1; j <= 2; j++) for (i = 1; i <= 3; i++) {
            N = nodes[i]; link = gbps[j] * 1e9 / 8; ar = 2 * (N - 1) / N * g / link
            window = 2 / 3 * comp * (1 - emb / p) # the backward after the (untied) output layer
            exposed = ar - window; last = 2 * (N - 1) / N * 4 * emb / link
            if (exposed < last) exposed = last
            line = line sprintf(" %.1f%% / %.1f%% |", 100 * comp / (comp + ar), 100 * comp / (comp + exposed))
        }
        print line }')")
done

{
    cat "$tmp/head.md"
    echo "## Training: 1 rank x $cores threads against $cores ranks x 1 thread (the same global batch)"
    echo
    echo "tokens/s of the median of the steps after the first; *waited*: the log's comm_s over the step (the sums"
    echo "the overlap did not hide); *sums took*: grad_sum_s over the step (wherever they ran)."
    echo
    echo "| config | 1 rank tokens/s | $cores ranks, buckets: tokens/s | ratio | waited | sums took | one sum after the backward: tokens/s | ratio | waited |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    printf '%s\n' "${rows[@]}"
    echo
    echo "## Model: the step on N machines, each keeping this machine's batch"
    echo
    echo "compute = this machine's 1-rank step; all-reduce = 2 (N - 1) / N x the fp32 gradient over a link of"
    echo "10 or 100 Gb/s; efficiency = compute / (compute + exposed), each cell *without overlap / with the buckets*:"
    echo "exposed = all of the all-reduce, or what exceeds the backward pass after the output layer (2/3 of the"
    echo "step x the share of the parameters not in it) but at least the embedding's bucket (ready last)."
    echo "Loopback bus bandwidth measured above, for scale: ${bw:-?} GB/s."
    echo
    echo "| config | params | gradient | compute per step | 10 Gb/s N=2 | N=8 | N=64 | 100 Gb/s N=2 | N=8 | N=64 |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    printf '%s\n' "${model[@]}"
    echo
    echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$out"
cat "$out"
