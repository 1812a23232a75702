#!/usr/bin/env bash
# make fuzz: runs every fuzz target (tests/fuzz/fuzz_*.c, built by
# `make fuzz-build` into build-fuzz/fuzz/ with clang, libFuzzer, ASan and
# UBSan) on seed corpora made by difftx's own commands.
#
# usage: scripts/fuzz.sh [--seconds S | --runs N] [--jobs J] [TARGET...]
#        scripts/fuzz.sh --seeds DIR      only write the seed corpora into DIR/TARGET/
#
# Each target runs for S seconds (default 60) or N executions, J processes at
# once (default: the number of cores); its growing corpus is kept in
# build-fuzz/corpus/TARGET (the next run continues from it), a crash in
# build-fuzz/crashes/TARGET/ (libFuzzer's artifact: add it to
# tests/fuzz/regressions/TARGET/ once fixed, so that `make test` replays it).
# The executions and crashes of every target are appended to
# build-fuzz/results.md and printed as a table; exit 1 when a target crashed.
# DIFFTX_BIN (default build/difftx) makes the seeds.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bin=${DIFFTX_BIN:-$root/build/difftx}
seconds=60 runs="" jobs=$(nproc) seeds_only="" targets=()
while [ $# -gt 0 ]; do
    case $1 in
        --seconds) seconds=$2; shift ;;
        --runs) runs=$2; shift ;;
        --jobs) jobs=$2; shift ;;
        --seeds) seeds_only=$2; shift ;;
        -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "fuzz: unknown option $1 (scripts/fuzz.sh --help)" >&2; exit 2 ;;
        *) targets+=("$1") ;;
    esac
    shift
done

# ---- seeds: small, valid inputs of every reader, from difftx itself
make_seeds() { # DIR
    local out=$1 w
    w=$(mktemp -d)
    mkdir -p "$out"/{fuzz_model,fuzz_checkpoint,fuzz_tokenizer_file,fuzz_shard,fuzz_token_text,fuzz_cli_numbers,fuzz_encode,fuzz_hf}
    mkdir -p "$out"/{fuzz_tokenizer_json,fuzz_tokenizer_model,fuzz_serve_request}
    awk 'BEGIN { srand(5); for (i = 0; i < 3000; i++) printf "%d ", int(rand() * 16); print "" }' > "$w/toks.txt"
    printf 'The Differential Transformer cancels attention noise.\nIt subtracts two softmax maps; 12 345.\n' > "$w/a.txt"
    printf 'Ünïcödé, 日本語 and <|bos|> in plain text.\n\n\tTabs, spaces  and 1234567 numbers.\n' > "$w/b.txt"
    local small="--dim 8 --layers 1 --heads 1 --vocab 16 --max-seq 8 --seq 4 --batch 2 --steps 2 --tokens $w/toks.txt"
    "$bin" train $small --arch diff --ffn 8 --out "$out/fuzz_model/diff.safetensors" > /dev/null &&
        "$bin" train $small --arch diff2 --heads 2 --ffn 8 --out "$out/fuzz_model/diff2.safetensors" > /dev/null &&
        "$bin" train $small --arch transformer --heads 2 --kv-heads 1 --ffn 8 --no-tie --bf16 \
            --out "$out/fuzz_model/transformer-bf16.safetensors" > /dev/null &&
        "$bin" quantize --model "$out/fuzz_model/diff.safetensors" --calib "$w/toks.txt" --scheme w8a8 \
            --calib-samples 4 --out "$out/fuzz_model/diff-w8a8.safetensors" > /dev/null 2>&1 &&
        "$bin" quantize --model "$out/fuzz_model/diff.safetensors" --calib "$w/toks.txt" --scheme w4a16 \
            --calib-samples 4 --out "$out/fuzz_model/diff-w4a16.safetensors" > /dev/null 2>&1 &&
        "$bin" train $small --arch diff --ffn 8 --ckpt-every 2 --out "$w/c.safetensors" > /dev/null &&
        cp "$w/c.safetensors.ckpt/ckpt_00000002.safetensors" "$out/fuzz_checkpoint/diff.safetensors" &&
        "$bin" tokenizer train --input "$w/a.txt" --input "$w/b.txt" --vocab-size 300 \
            --out "$out/fuzz_tokenizer_file/ours.txt" > /dev/null &&
        "$bin" prepare --tokenizer "$out/fuzz_tokenizer_file/ours.txt" --input "$w/a.txt" --input "$w/b.txt" \
            --append-eos --out "$out/fuzz_shard/eos.bin" > /dev/null &&
        "$bin" prepare --tokenizer "$out/fuzz_tokenizer_file/ours.txt" --input "$w/a.txt" \
            --out "$out/fuzz_shard/plain.bin" > /dev/null ||
        { echo "fuzz: making the seeds with $bin failed" >&2; rm -rf "$w"; return 1; }
    # a tiktoken rank file: the first ranks of cl100k_base when fetched (make test fetches it), else a hand-made one
    if [ -s data/tiktoken/cl100k_base.tiktoken ]; then head -n 300 data/tiktoken/cl100k_base.tiktoken
    else for i in $(seq 0 255); do printf '%s %d\n' "$(printf "\\x$(printf %02x "$i")" | base64)" "$i"; done
    fi > "$out/fuzz_tokenizer_file/ranks.tiktoken"
    printf '1 2 3 4\n' > "$out/fuzz_token_text/small.txt"
    head -c 400 "$w/toks.txt" | sed 's/ [0-9]*$//' > "$out/fuzz_token_text/line.txt"
    printf '  7\n\n31\t0 \n' > "$out/fuzz_token_text/spaces.txt"
    local i=0 s
    for s in 12 -3 0 9223372036854775807 -9223372036854775808 1e5 3.5e-3 -0.25 1,2,3 5,-5,1000 0x10 nan inf 1e400; do
        printf '%s' "$s" > "$out/fuzz_cli_numbers/$i.txt"; i=$((i + 1))
    done
    cp "$w/a.txt" "$w/b.txt" "$out/fuzz_encode/"
    # Hugging Face folders (tests/fuzz/fuzz_hf.c): the committed fixtures' files joined by the separator
    local d
    for d in tests/fixtures/hf/*/; do
        [ -f "$d/config.json" ] || continue
        {
            cat "$d/config.json"
            if [ -f "$d/model.safetensors" ]; then printf '\0\0HF\0\0'; cat "$d/model.safetensors"
            elif [ -f "$d/model-00001-of-00002.safetensors" ]; then
                printf '\0\0HF\0\0'; cat "$d/model.safetensors.index.json"
                printf '\0\0HF\0\0'; cat "$d/model-00001-of-00002.safetensors"
                printf '\0\0HF\0\0'; cat "$d/model-00002-of-00002.safetensors"
            fi
        } > "$out/fuzz_hf/$(basename "$d").bin"
    done
    printf '<|bos|>x<|eos|><|pad|>' > "$out/fuzz_encode/specials.txt"
    # difftx serve's bodies: the first byte picks the route (0 completion, 1 chat, 2 tokenize, 3 detokenize, 4 attention)
    printf '\0{"model":"m","prompt":"Hi","max_tokens":5,"temperature":0.5,"top_p":0.9,"seed":3,"stop":["\\n"],"stream":true,"stream_options":{"include_usage":true}}' > "$out/fuzz_serve_request/completion.json"
    printf '\0{"prompt":[1,2,3],"n":1,"logprobs":null}' > "$out/fuzz_serve_request/ids.json"
    printf '\1{"messages":[{"role":"system","content":"Be brief"},{"role":"user","content":[{"type":"text","text":"\\u00e9t\\u00e9"}]}],"max_completion_tokens":8}' > "$out/fuzz_serve_request/chat.json"
    printf '\2{"content":"Hello world","add_special":true}' > "$out/fuzz_serve_request/tokenize.json"
    printf '\3{"tokens":[72,101,108]}' > "$out/fuzz_serve_request/detokenize.json"
    printf '\4{"prompt":"The cat","layer":0,"head":1}' > "$out/fuzz_serve_request/attention.json"
    # Hugging Face tokenizers (data/hf-tokenizers, scripts/fetch_hf_tokenizers.sh; make test fetches them), cut
    # small so that an execution is quick: tokenizer.json with the first merges, tokenizer.model with the first pieces
    if [ -d data/hf-tokenizers ] && command -v node > /dev/null; then
        node tools/hf_tokenizer_seeds.mjs data/hf-tokenizers "$out/fuzz_tokenizer_json" "$out/fuzz_tokenizer_model" ||
            { echo "fuzz: cutting the tokenizer seeds failed" >&2; rm -rf "$w"; return 1; }
    else
        echo "fuzz: no data/hf-tokenizers (or no node): fuzz_tokenizer_json and fuzz_tokenizer_model start without seeds" >&2
    fi
    rm -rf "$w"
}

if [ -n "$seeds_only" ]; then make_seeds "$seeds_only"; exit $?; fi

[ ${#targets[@]} -gt 0 ] || targets=($(cd tests/fuzz && ls fuzz_*.c | grep -v '^fuzz_path.c$' | sed 's/\.c$//'))
fz=$root/build-fuzz
# the seeds once, again when a target is newer than them
for t in "${targets[@]}"; do [ -d "$fz/seeds/$t" ] || rm -rf "$fz/seeds"; done
[ -d "$fz/seeds" ] || make_seeds "$fz/seeds" || exit 1
limit="-max_total_time=$seconds"
[ -n "$runs" ] && limit="-runs=$runs"
status=0
last=$fz/last.$$.md # this invocation's table (two may run at once)
trap 'rm -f "$last"' EXIT
printf '| target | executions | seconds | exec/s | crashes |\n|---|---:|---:|---:|---:|\n' > "$last"
for t in "${targets[@]}"; do
    [ -x "$fz/fuzz/$t" ] || { echo "fuzz: $fz/fuzz/$t is not built (make fuzz-build)" >&2; exit 2; }
    mkdir -p "$fz/corpus/$t" "$fz/crashes/$t"
    regs=()
    [ -d "tests/fuzz/regressions/$t" ] && regs=("tests/fuzz/regressions/$t")
    echo "== $t ($limit, $jobs jobs)"
    t0=$(date +%s)
    # -jobs runs J fuzzers on one shared corpus; each writes fuzz-N.log; the executions are summed below
    (cd "$fz/crashes/$t" && rm -f fuzz-*.log &&
        ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
        "$fz/fuzz/$t" "$limit" -jobs="$jobs" -workers="$jobs" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
            -artifact_prefix="$fz/crashes/$t/" "$fz/corpus/$t" "$fz/seeds/$t" "${regs[@]/#/$root/}" > /dev/null 2>&1)
    secs=$(( $(date +%s) - t0 ))
    execs=$(cat "$fz/crashes/$t"/fuzz-*.log 2>/dev/null | awk '/stat::number_of_executed_units/ { s += $NF } END { print s + 0 }')
    crashes=$(ls "$fz/crashes/$t" | grep -c -E '^(crash|leak|timeout|oom)-')
    rate=$(( execs / (secs > 0 ? secs : 1) ))
    echo "   $execs executions in ${secs} s ($rate/s), $crashes crash files in $fz/crashes/$t"
    [ "$crashes" -gt 0 ] && { status=1; grep -h -m 3 -E 'ERROR|invariant|runtime error' "$fz/crashes/$t"/fuzz-*.log | head -n 3; }
    printf '| %s | %s | %s | %s | %s |\n' "$t" "$execs" "$secs" "$rate" "$crashes" >> "$last"
done
{ echo; echo "## $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"; echo; cat "$last"; } >> "$fz/results.md"
echo; cat "$last"
exit $status
