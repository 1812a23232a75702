#!/usr/bin/env bash
# A model trained by difftx loads into PyTorch and back (issue 2):
#   1. difftx trains a tiny DIFF model and a tiny baseline (GQA, untied), and Table 6's variants
#      (DIFF without the per-head norm and with lambda_init 0.5, the Transformer with the norm),
#      and scores a sequence;
#   2. the independent PyTorch reference loads each file, scores the same sequence
#      (float64) and writes the model back out;
#   3. difftx loads the round-tripped file and scores it again.
# All three losses must agree (fp32 vs float64: 1e-4 relative). Needs python3-torch.
set -euo pipefail
BIN=${1:-build/difftx}
PY=/usr/bin/python3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for i in $(seq 1 400); do echo $(( (i * 7 + i / 5) % 23 )); done > "$dir/train.txt"
for i in $(seq 1 40); do echo $(( (i * 5 + 3) % 23 )); done > "$dir/score.txt"
rel() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(d <= 1e-4 * m) }'; }
loss_of() { sed -E 's/.*"loss": *([^,}]+).*/\1/' <<<"$1"; }
for model in diff transformer diff-variant transformer-variant; do
    arch=${model%-variant}; heads=2; kv=1; variant=()
    [ "$arch" = transformer ] && { heads=4; kv=2; }
    [ "$model" = diff-variant ] && variant=(--subln none --lambda-init 0.5)
    [ "$model" = transformer-variant ] && variant=(--subln rms)
    "$BIN" train --arch $arch "${variant[@]}" --dim 32 --layers 2 --heads $heads --kv-heads $kv --vocab 23 --ffn 48 \
        --no-tie --max-seq 64 --seq 32 --batch 4 --steps 30 --lr 3e-3 --tokens "$dir/train.txt" \
        --out "$dir/$model.safetensors" >/dev/null
    a=$("$BIN" score --model "$dir/$model.safetensors" --tokens "$dir/score.txt")
    b=$("$PY" tools/torch_roundtrip.py "$dir/$model.safetensors" "$dir/score.txt" "$dir/$model.back.safetensors")
    c=$("$BIN" score --model "$dir/$model.back.safetensors" --tokens "$dir/score.txt")
    echo "$model: difftx $a | pytorch $b | difftx after round trip $c"
    rel "$(loss_of "$a")" "$(loss_of "$b")" || { echo "interop-check: $model: difftx and PyTorch disagree" >&2; exit 1; }
    [ "$(loss_of "$a")" = "$(loss_of "$c")" ] || { echo "interop-check: $model: round trip changed the model" >&2; exit 1; }
done
echo "interop-check: ok"
