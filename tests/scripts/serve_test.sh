#!/usr/bin/env bash
# difftx serve, end to end (docs/serve.md): a small DIFF model and a
# Transformer trained here on the docs' text, served with 4 slots, an API
# key and small limits, then driven by OpenAI's own JavaScript client
# (tests/scripts/serve_client.mjs: answers equal to difftx generate, 16
# concurrent clients, bad requests, clients that hang up or stall); the
# explorer's attention JSON for DIFF and the --compare Transformer; SIGTERM
# with a stream in flight (it finishes, the server exits 0); and, where
# Debian's chromium is installed, the explorer page rendered in a headless
# browser (tests/scripts/serve_page.mjs checks the screenshot). Ends with
# "N passed, N failed[, N skipped]".
set -u
cd "$(dirname "$0")/../.."
bin=${DIFFTX_BIN:-build/difftx}
tmp=$(mktemp -d)
srv=""
cleanup() { [ -n "$srv" ] && kill "$srv" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
[ -n "${SERVE_KEEP:-}" ] && trap - EXIT
passed=0 failed=0 skipped=0
ok() { echo "ok   $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
finish() {
    if [ "$skipped" -gt 0 ]; then echo "$passed passed, $failed failed, $skipped skipped"
    else echo "$passed passed, $failed failed"; fi
    [ "$failed" -eq 0 ]; exit
}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
key=serve-test-key
ctx=96

# ---- two small models and their tokenizer
if ! "$bin" tokenizer train --input docs --vocab-size 384 --out "$tmp/tok.txt" >/dev/null 2>"$tmp/err" ||
   ! "$bin" tokenizer encode --tokenizer "$tmp/tok.txt" --input docs/generate.md > "$tmp/ids.txt" 2>>"$tmp/err"; then
    fail serve_setup "tokenizer: $(tail -n 1 "$tmp/err")"; finish
fi
for arch in diff transformer; do
    if ! "$bin" train --tokens "$tmp/ids.txt" --out "$tmp/$arch.safetensors" --arch $arch --dim 64 --layers 2 \
        --heads $([ $arch = diff ] && echo 2 || echo 4) --vocab 384 --seq $ctx --batch 4 --steps 40 --lr 3e-3 \
        >/dev/null 2>"$tmp/err"; then
        fail serve_setup "train $arch: $(tail -n 1 "$tmp/err")"; finish
    fi
done

start_server() { # extra flags...; sets srv and url
    "$bin" serve --model "$tmp/diff.safetensors" --tokenizer "$tmp/tok.txt" --port 0 --slots 4 --ctx $ctx \
        --api-key $key --max-body 65536 --timeout 3 --compare "$tmp/transformer.safetensors" "$@" \
        > "$tmp/serve.out" 2> "$tmp/serve.err" &
    srv=$!
    url=""
    for _ in $(seq 1 100); do
        url=$(sed -n 's|.*listening on \(http://[^/]*\)/.*|\1|p' "$tmp/serve.out")
        [ -n "$url" ] && return 0
        kill -0 "$srv" 2>/dev/null || break
        sleep 0.1
    done
    return 1
}

if ! start_server; then
    fail serve_starts "$(tail -n 2 "$tmp/serve.err")"; finish
fi
ok serve_starts

# ---- the OpenAI client
out=$(node tests/scripts/serve_client.mjs "$url" $key "$bin" "$tmp/diff.safetensors" "$tmp/tok.txt" $ctx 2>&1)
line=$(printf '%s\n' "$out" | tail -n 1)
printf '%s\n' "$out" | grep -E '^(ok|FAIL) ' | sed 's/^\(ok\|FAIL\) \{1,2\}/&serve_client: /'
case $line in
    *" passed, "*" failed") p=${line%% passed*}; f=${line#*, }; f=${f%% failed*}; passed=$((passed + p)); failed=$((failed + f)) ;;
    *) fail serve_client "no summary; its last lines:"; printf '%s\n' "$out" | grep -v -E '^(ok|FAIL) ' | tail -n 25 ;;
esac

# ---- the explorer's JSON: DIFF's three maps and λ, the Transformer's one map beside
curl -s -X POST "$url/v1/attention" -H "Authorization: Bearer $key" \
    -d '{"prompt":"The state of the union","layer":1,"head":1}' > "$tmp/attn.json"
if node -e '
const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
const m = j.model, c = j.compare, n = m.tokens.length;
const rowsum = (r) => r.reduce((a, b) => a + b, 0);
const ok = m.arch === "diff" && typeof m.lambda === "number" && m.a1.length === n && m.a2.length === n &&
  m.combined.length === n && m.a1.every((r, i) => r.length === i + 1 && Math.abs(rowsum(r) - 1) < 1e-3) &&
  m.combined.every((r, i) => Math.abs(rowsum(r) - (1 - m.lambda)) < 1e-3) &&
  c && c.arch === "transformer" && !c.a2 && c.a1.length === c.tokens.length;
process.exit(ok ? 0 : 1);' "$tmp/attn.json" 2>/dev/null; then
    ok serve_attention_maps
else
    fail serve_attention_maps "$(head -c 300 "$tmp/attn.json")"
fi

# ---- the page in a real browser (Debian's chromium), where it is installed
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
    echo "skip serve_page_renders: no chromium here (scripts/setup.sh --browser installs Debian's)"
    skipped=$((skipped + 1))
else
    page="$url/?auto=1&layer=1&head=0&prompt=The%20state%20of%20the%20union%20is%20strong#key=$key"
    timeout 120 "$browser" --headless=new --no-sandbox --disable-gpu --hide-scrollbars --window-size=1800,1300 \
        --virtual-time-budget=15000 --screenshot="$tmp/page.png" "$page" >/dev/null 2>"$tmp/chromium.err"
    if res=$(node tests/scripts/serve_page.mjs "$tmp/page.png" 2>&1); then
        ok "serve_page_renders ($res)"
        mkdir -p "${DIFFTX_BUILD:-build}" && cp "$tmp/page.png" "${DIFFTX_BUILD:-build}/serve_page.png"
    else
        cp "$tmp/page.png" /tmp/page_fail.png 2>/dev/null; fail serve_page_renders "$res; chromium: $(tail -n 1 "$tmp/chromium.err")"
    fi
fi

# ---- the other weight formats: a 4-bit and a bf16 copy served, 4 requests at once, each equal to generate
"$bin" quantize --model "$tmp/diff.safetensors" --calib "$tmp/ids.txt" --scheme w4a16 --calib-samples 4 \
    --out "$tmp/diff.w4.safetensors" >/dev/null 2>&1
"$bin" train --tokens "$tmp/ids.txt" --init "$tmp/diff.safetensors" --steps 1 --lr 1e-9 --bf16 \
    --out "$tmp/diff.bf16.safetensors" >/dev/null 2>&1
for m in w4 bf16; do
    if [ ! -s "$tmp/diff.$m.safetensors" ]; then fail "serve_${m}_model" "could not make the $m copy"; continue; fi
    "$bin" serve --model "$tmp/diff.$m.safetensors" --tokenizer "$tmp/tok.txt" --port 0 --slots 4 --ctx $ctx \
        > "$tmp/serve2.out" 2> "$tmp/serve2.err" &
    srv2=$!
    url2=""
    for _ in $(seq 1 100); do
        url2=$(sed -n 's|.*listening on \(http://[^/]*\)/.*|\1|p' "$tmp/serve2.out"); [ -n "$url2" ] && break; sleep 0.1
    done
    bad=""
    pids=""
    for i in 1 2 3 4; do
        curl -s -X POST "$url2/v1/completions" -d "{\"prompt\":\"We the people\",\"max_tokens\":$((8 * i)),\"temperature\":0.9,\"seed\":$i}" \
            > "$tmp/q$i.json" &
        pids="$pids $!"
    done
    wait $pids
    for i in 1 2 3 4; do
        "$bin" generate --model "$tmp/diff.$m.safetensors" --tokenizer "$tmp/tok.txt" --prompt "We the people" \
            --max-tokens $((8 * i)) --temperature 0.9 --seed $i > "$tmp/g$i.txt" 2>/dev/null
        node -e 'const fs = require("fs"); const j = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
            process.exit(j.choices[0].text === fs.readFileSync(process.argv[2], "utf8") ? 0 : 1)' \
            "$tmp/q$i.json" "$tmp/g$i.txt" 2>/dev/null || bad="$bad $i"
    done
    kill -TERM $srv2; wait $srv2
    [ -z "$bad" ] && ok "serve_${m}_model_equals_generate" || fail "serve_${m}_model_equals_generate" "requests$bad differ"
done

# ---- SIGTERM with a stream in flight: it finishes, the server exits 0
curl -sN -X POST "$url/v1/completions" -H "Authorization: Bearer $key" \
    -d "{\"prompt\":\"We\",\"max_tokens\":80,\"temperature\":1,\"seed\":3,\"stream\":true}" > "$tmp/stream.txt" &
cpid=$!
for _ in $(seq 1 50); do [ -s "$tmp/stream.txt" ] && break; sleep 0.05; done
kill -TERM "$srv"
wait "$srv"; rc=$?
srv=""
wait "$cpid"
if [ $rc -eq 0 ] && tail -n 2 "$tmp/stream.txt" | grep -q '^data: \[DONE\]$'; then
    ok serve_sigterm_finishes_in_flight
else
    fail serve_sigterm_finishes_in_flight "exit $rc; stream ends '$(tail -c 80 "$tmp/stream.txt" | tr '\n' ' ')'"
fi
finish
