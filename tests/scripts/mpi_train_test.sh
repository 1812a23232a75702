#!/usr/bin/env bash
# difftx train under mpirun (the MPI plugin, src/train/mpi_plugin.h): two
# ranks train the model one rank does (the same losses and validation to
# fp32 rounding, the same final model to the sums' order), rank 0 alone
# writes the log, the checkpoints and the model; a run stopped under 2 ranks
# resumes under 1 to the uninterrupted run's end, and one stopped under 1
# resumes under 2 (plain and ZeRO-1); the same with --zero1
# (sharded AdamW moments, a checkpoint of the whole state) and with the
# gradient summed in buckets during the backward; a rank out of memory or
# killed stops every rank, named, leaving whole checkpoints that resume; a
# batch that does not
# divide over the ranks is refused; without the plugin, a launched difftx
# says so in one line. Skipped (with the reason) where MPI is
# not installed. Ends with the suite's "N passed, N failed" line.
set -u
cd "$(dirname "$0")/../.."
bin=${DIFFTX_BIN:-build/difftx}
plugin=$(dirname "$bin")/libdifftx_mpi.so
# started by a launcher without the plugin: one line saying what is missing (no MPI needed to check)
noplug=$(OMPI_COMM_WORLD_SIZE=2 DTX_MPI_PLUGIN=/nonexistent/libdifftx_mpi.so "$bin" train --tokens /dev/null --out /dev/null 2>&1)
noplug_rc=$?
if [ "$noplug_rc" = 1 ] && [ "$(printf '%s\n' "$noplug" | wc -l)" = 1 ] &&
    printf '%s' "$noplug" | grep -q "MPI plugin /nonexistent/libdifftx_mpi.so does not load"; then
    pre_passed=1 pre_failed=0
else
    pre_passed=0 pre_failed=1
    echo "FAIL mpi_train_without_plugin_one_line (exit $noplug_rc): $noplug"
fi
if ! command -v mpirun > /dev/null; then
    echo "skip mpi_train: mpirun is not installed (scripts/setup.sh installs OpenMPI)"
    echo "$pre_passed passed, $pre_failed failed, 1 skipped"
    exit "$pre_failed"
fi
if [ ! -f "$plugin" ]; then
    echo "skip mpi_train: $plugin was not built (mpicc missing at build time)"
    echo "$pre_passed passed, $pre_failed failed, 1 skipped"
    exit "$pre_failed"
fi
mpi=(timeout 300 mpirun --oversubscribe -np) # a hang fails the test instead of the suite
[ "$(id -u)" = 0 ] && mpi=(timeout 300 mpirun --allow-run-as-root --oversubscribe -np)
export OMP_NUM_THREADS=1
# OpenMPI's own allocations outlive MPI_Finalize (in libmpi and its plugins): under `make test-asan`
# LeakSanitizer reports them at every rank's exit, lines that are not difftx's. The leak check of
# difftx's own code is the rest of the suite's, which runs without MPI.
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=$pre_passed failed=$pre_failed
check() { # name command...: passes when the command succeeds
    local name=$1; shift
    if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL mpi_train_$name"; return 1; fi
}
awk 'BEGIN { srand(3); for (i = 0; i < 4000; i++) printf "%d ", int(rand() * 64); print "" }' > "$tmp/ids.txt"
args=(--arch diff --dim 32 --layers 2 --heads 2 --vocab 64 --seq 16 --batch 4 --accum 2 --steps 8 --lr 3e-3
    --tokens "$tmp/ids.txt" --val-tokens "$tmp/ids.txt" --eval-every 4 --copy-frac 0.25)

# the same numbers, to rounding: every logged loss, grad norm and validation loss within 1e-5 (relative),
# line by line (awk: the suite needs no Python)
close_logs() { # a.jsonl b.jsonl
    awk -v other="$2" '
        function val(line, key,   m) { return match(line, "\"" key "\":[-0-9.eE+]+") ? substr(line, RSTART + length(key) + 3, RLENGTH - length(key) - 3) : "" }
        {
            if ((getline o < other) <= 0) { bad = 1; exit }
            split("loss grad_norm val_loss", keys, " ")
            for (k in keys) {
                a = val($0, keys[k]); b = val(o, keys[k])
                if ((a == "") != (b == "")) { bad = 1; exit }
                if (a != "") { n++; d = a - b; if (d < 0) d = -d; m = a < 0 ? -a : a; if (d > 1e-5 * m) { bad = 1; exit } }
            }
        }
        END { if ((getline o < other) > 0) bad = 1; exit bad || n == 0 }' "$1"
}

"$bin" train "${args[@]}" --log "$tmp/one.jsonl" --out "$tmp/one.safetensors" > "$tmp/one.out" 2>&1
check plain_run_trains [ -s "$tmp/one.safetensors" ]
"${mpi[@]}" 2 "$bin" train "${args[@]}" --log "$tmp/two.jsonl" --out "$tmp/two.safetensors" > "$tmp/two.out" 2>&1
check two_ranks_train [ -s "$tmp/two.safetensors" ]
check two_ranks_say_so grep -q "ranks 2 (MPI): 2 of the 4 rows" "$tmp/two.out"
check one_machine_sums_after_the_backward grep -q "the gradient summed after the backward" "$tmp/two.out"
check rank0_alone_speaks [ "$(grep -c '^final loss' "$tmp/two.out")" = 1 ]
check same_log_to_rounding close_logs "$tmp/one.jsonl" "$tmp/two.jsonl"
head -c 60 "$tmp/ids.txt" | awk '{ for (i = 1; i <= 16 && i <= NF; i++) printf "%s ", $i; print "" }' > "$tmp/seq.txt"
score_of() { "$bin" score --model "$1" --tokens "$tmp/seq.txt" 2> /dev/null | sed -n 's/.*"loss": *\([-0-9.eE+]*\).*/\1/p'; }
same_score() { # two models score the same sequence within 1e-5 (relative)
    local a b
    a=$(score_of "$1") b=$(score_of "$2")
    [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5 * (a < 0 ? -a : a)) }'
}
check same_model_to_rounding same_score "$tmp/one.safetensors" "$tmp/two.safetensors"

# stopped under 2 ranks, resumed under 1: the uninterrupted run's log
ck=(--ckpt-every 2 --ckpt-dir "$tmp/ck")
"${mpi[@]}" 2 "$bin" train "${args[@]}" "${ck[@]}" --stop-after 4 --log "$tmp/r.jsonl" --out "$tmp/r.safetensors" \
    > "$tmp/r1.out" 2>&1
check stop_after_writes_one_checkpoint_set [ "$(ls "$tmp/ck" | wc -l)" -ge 1 ]
"$bin" train "${args[@]}" "${ck[@]}" --resume --log "$tmp/r.jsonl" --out "$tmp/r.safetensors" > "$tmp/r2.out" 2>&1
grep -v resumed_from "$tmp/r.jsonl" | grep -v checkpoint > "$tmp/r.clean.jsonl"
grep -v checkpoint "$tmp/one.jsonl" > "$tmp/one.clean.jsonl"
check resume_under_other_ranks close_logs "$tmp/one.clean.jsonl" "$tmp/r.clean.jsonl"

# stopped under 1 rank, resumed under 2 (plain, and with ZeRO-1 sharding the whole optimizer it reads):
# the uninterrupted run's log
for z in plain zero1; do
    uk=(--ckpt-every 2 --ckpt-dir "$tmp/uk-$z")
    "$bin" train "${args[@]}" "${uk[@]}" --stop-after 4 --log "$tmp/u-$z.jsonl" --out "$tmp/u-$z.safetensors" \
        > "$tmp/u1-$z.out" 2>&1
    "${mpi[@]}" 2 "$bin" train "${args[@]}" "${uk[@]}" $([ $z = zero1 ] && echo --zero1) --resume \
        --log "$tmp/u-$z.jsonl" --out "$tmp/u-$z.safetensors" > "$tmp/u2-$z.out" 2>&1
    grep -v resumed_from "$tmp/u-$z.jsonl" | grep -v checkpoint > "$tmp/u-$z.clean.jsonl"
    check "resume_one_to_two_ranks_$z" close_logs "$tmp/one.clean.jsonl" "$tmp/u-$z.clean.jsonl"
done

# ZeRO-1: the same log as one rank; its checkpoint (the whole optimizer) resumes under one rank
"${mpi[@]}" 2 "$bin" train "${args[@]}" --zero1 --log "$tmp/z.jsonl" --out "$tmp/z.safetensors" > "$tmp/z.out" 2>&1
check zero1_same_log_to_rounding close_logs "$tmp/one.jsonl" "$tmp/z.jsonl"
zk=(--ckpt-every 2 --ckpt-dir "$tmp/zk")
"${mpi[@]}" 2 "$bin" train "${args[@]}" --zero1 "${zk[@]}" --stop-after 4 --log "$tmp/zr.jsonl" \
    --out "$tmp/zr.safetensors" > "$tmp/zr1.out" 2>&1
"$bin" train "${args[@]}" "${zk[@]}" --resume --log "$tmp/zr.jsonl" --out "$tmp/zr.safetensors" > "$tmp/zr2.out" 2>&1
grep -v resumed_from "$tmp/zr.jsonl" | grep -v checkpoint > "$tmp/zr.clean.jsonl"
check zero1_resume_under_one_rank close_logs "$tmp/one.clean.jsonl" "$tmp/zr.clean.jsonl"

# the gradient in buckets summed while the backward runs (every layer's range a bucket): the same log;
# the log says how long the sums took
b=(--grad-bucket-mb 0.001)
"${mpi[@]}" 2 "$bin" train "${args[@]}" "${b[@]}" --log "$tmp/b.jsonl" --out "$tmp/b.safetensors" > "$tmp/b.out" 2>&1
check buckets_same_log_to_rounding close_logs "$tmp/one.jsonl" "$tmp/b.jsonl"
check buckets_log_their_time grep -q '"grad_sum_s":[0-9]' "$tmp/b.jsonl"
check buckets_say_so grep -q "the gradient summed in buckets during the backward" "$tmp/b.out"
"${mpi[@]}" 2 "$bin" train "${args[@]}" "${b[@]}" --zero1 --log "$tmp/bz.jsonl" --out "$tmp/bz.safetensors" \
    > "$tmp/bz.out" 2>&1
check buckets_zero1_same_log_to_rounding close_logs "$tmp/one.jsonl" "$tmp/bz.jsonl"

# a rank out of memory while training (the test hook fails the last rank's step 5): every rank stops,
# one line naming the rank and the cause (mpirun -q), non-zero; the checkpoint of step 4 stays good
# and resumes (under one rank) to the uninterrupted run's end
mpiq=("${mpi[@]:0:3}" -q "${mpi[@]:3}") # timeout 300 mpirun -q ...
ok=(--ckpt-every 2 --ckpt-dir "$tmp/oom")
"${mpiq[@]}" 2 "$bin" train "${args[@]}" "${ok[@]}" --debug-oom-at 5 --log "$tmp/oom.jsonl" \
    --out "$tmp/oom.safetensors" > "$tmp/oom.out" 2>&1
rc=$?
check oom_stops_every_rank [ "$rc" != 0 ] && [ "$rc" != 124 ]
check oom_one_line_names_rank_and_cause [ "$(grep -c -v -E '^(model|data|val|checkpoints?|ranks|eval|step) ' "$tmp/oom.out")" = 1 ] &&
    grep -q "^difftx train (rank 1 of 2): out of memory at step 5" "$tmp/oom.out" ||
    { echo "  its output:"; tail -n 4 "$tmp/oom.out" | sed 's/^/    /'; }
check oom_writes_no_model [ ! -e "$tmp/oom.safetensors" ]
"$bin" train "${args[@]}" "${ok[@]}" --resume --log "$tmp/oom.jsonl" --out "$tmp/oom.safetensors" > "$tmp/oom2.out" 2>&1
grep -v resumed_from "$tmp/oom.jsonl" | grep -v checkpoint > "$tmp/oom.clean.jsonl"
check oom_resumes_from_the_last_checkpoint close_logs "$tmp/one.clean.jsonl" "$tmp/oom.clean.jsonl"

# a rank killed (SIGKILL: it says nothing) while training: mpirun stops the others at once and names it,
# non-zero; the checkpoints left are whole (the newest resumes)
long=("${args[@]}" --steps 300 --ckpt-every 5 --ckpt-dir "$tmp/kill")
timeout 120 "${mpi[@]:2}" 2 "$bin" train "${long[@]}" --log "$tmp/kill.jsonl" --out "$tmp/kill.safetensors" \
    > "$tmp/kill.out" 2>&1 &
pid=$!
for _ in $(seq 300); do [ -s "$tmp/kill.jsonl" ] && [ "$(wc -l < "$tmp/kill.jsonl")" -ge 12 ] && break; sleep 0.1; done
for p in $(pgrep -f -- "^$bin train .*--out $tmp/kill.safetensors"); do
    tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' && kill -9 "$p"
done
t0=$(date +%s)
wait "$pid"
rc=$?
check killed_rank_stops_every_rank [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ $(( $(date +%s) - t0 )) -lt 60 ]
check killed_rank_named grep -q "process rank 1 .*exited on signal 9" "$tmp/kill.out" ||
    { echo "  its output:"; tail -n 4 "$tmp/kill.out" | sed 's/^/    /'; }
check killed_rank_no_partial_checkpoint [ -z "$(ls "$tmp/kill" | grep -v '^ckpt_[0-9]*\.safetensors$')" ]
"$bin" train "${long[@]}" --resume --log "$tmp/kill.jsonl" --out "$tmp/kill.safetensors" > "$tmp/kill2.out" 2>&1
check killed_rank_resumes [ -s "$tmp/kill.safetensors" ] && grep -q "resumed" "$tmp/kill2.out"

# Ctrl-C at a terminal (SIGINT to every rank of the foreground group; mpirun itself, signalled, kills
# the ranks a second later, too soon for a loaded machine): one checkpoint, written once, said once;
# then resumed
"${mpi[@]}" 2 "$bin" train "${args[@]}" --steps 2000 --zero1 --log "$tmp/c.jsonl" --out "$tmp/c.safetensors" \
    > "$tmp/c.out" 2>&1 &
pid=$!
for _ in $(seq 300); do [ -s "$tmp/c.jsonl" ] && [ "$(wc -l < "$tmp/c.jsonl")" -ge 5 ] && break; sleep 0.1; done
pkill -INT -f -- "^$bin train .*--out $tmp/c.safetensors" # the ranks, not mpirun
wait "$pid"
check ctrl_c_said_once [ "$(grep -c 'interrupted at step' "$tmp/c.out")" = 1 ] ||
    { echo "  its output:"; tail -n 5 "$tmp/c.out" | sed 's/^/    /'; }
check ctrl_c_one_checkpoint [ "$(ls "$tmp/c.safetensors.ckpt" | wc -l)" = 1 ]
"${mpi[@]}" 2 "$bin" train "${args[@]}" --steps 2000 --zero1 --resume --log "$tmp/c.jsonl" \
    --out "$tmp/c.safetensors" > "$tmp/c2.out" 2>&1
check ctrl_c_resumes [ -s "$tmp/c.safetensors" ]

# a batch that does not divide over the ranks: one line (mpirun -q keeps mpirun's own lines out)
"${mpi[@]}" 2 "$bin" train "${args[@]}" --batch 3 --out "$tmp/bad.safetensors" > "$tmp/bad.out" 2>&1
rc=$?
check odd_batch_refused [ "$rc" != 0 ]
check odd_batch_says_why grep -q -- "batch 3 does not divide over 2 ranks" "$tmp/bad.out"
"${mpiq[@]}" 2 "$bin" train "${args[@]}" --batch 3 --out "$tmp/bad.safetensors" > "$tmp/badq.out" 2>&1
check odd_batch_one_line [ "$(grep -c . "$tmp/badq.out")" = 1 ]
check odd_batch_writes_nothing [ ! -e "$tmp/bad.safetensors" ]

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
