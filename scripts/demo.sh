#!/usr/bin/env bash
# Trains a tiny Differential Transformer and its parameter-matched Transformer
# on the same synthetic token stream, prints both results side by side and
# samples from each. Usage: scripts/demo.sh [path/to/difftx]  (make demo)
# Writes runs/demo/. Takes a few seconds on 2 cores.
set -euo pipefail

bin=${1:-build/difftx}
case $bin in /*) ;; *) bin="$PWD/$bin" ;; esac
[ -x "$bin" ] || { echo "demo: $bin is not an executable (run 'make' first)" >&2; exit 1; }
cd "$(dirname "$0")/.."
dir=runs/demo
mkdir -p "$dir"

# The stream: a period-12 "sentence" in which token 1 recurs, so the token
# after a 1 depends on more than the 1 itself (a bigram table cannot learn
# it; attention can), with 3% of positions replaced by random ids (vocab 32).
make_tokens() { # n seed
    awk -v n="$1" -v seed="$2" 'BEGIN {
        split("1 2 3 1 4 5 1 6 7 1 8 9", p, " "); srand(seed)
        for (i = 0; i < n; i++) {
            t = p[i % 12 + 1]
            if (rand() < 0.03) t = int(rand() * 32)
            printf "%d%s", t, (i % 24 == 23 ? "\n" : " ")
        }
        print ""
    }'
}
make_tokens 20000 1 > "$dir/train.txt"
make_tokens 32 2 > "$dir/heldout.txt"

common=(--tokens "$dir/train.txt" --dim 64 --layers 2 --vocab 32 --ffn 128 --seq 32 --batch 8
        --steps 300 --lr 3e-3 --warmup 30 --log-every 100 --seed 1)
declare -A heads=([diff]=2 [transformer]=4) # DIFF with H heads matches a Transformer with 2H

for arch in diff transformer; do
    echo "== training $arch (n_heads ${heads[$arch]})"
    "$bin" train "${common[@]}" --arch "$arch" --heads "${heads[$arch]}" --out "$dir/$arch.safetensors" \
        | tee "$dir/$arch.log"
done

field() { awk -v k="$1" '$1 == k { print $2 }'; } # value after a key in `difftx info` text
json_loss() { sed -n 's/^{"loss": \([^,]*\),.*/\1/p' | awk '{ printf "%.4f", $1 }'; }

echo
printf '%-18s %14s %14s\n' "" diff transformer
row() { printf '%-18s %14s %14s\n' "$1" "$2" "$3"; }
for arch in diff transformer; do
    "$bin" info "$dir/$arch.safetensors" > "$dir/$arch.info"
done
row params "$(field params < "$dir/diff.info")" "$(field params < "$dir/transformer.info")"
row "final train loss" "$(awk '/^final loss/ { print $3 }' "$dir/diff.log")" \
    "$(awk '/^final loss/ { print $3 }' "$dir/transformer.log")"
row "held-out loss" \
    "$("$bin" score --model "$dir/diff.safetensors" --tokens "$dir/heldout.txt" | json_loss)" \
    "$("$bin" score --model "$dir/transformer.safetensors" --tokens "$dir/heldout.txt" | json_loss)"
grep '^difference' "$dir/diff.info"

echo
echo "greedy samples from the prompt '1 2 3 1' (the pattern continues 4 5 1 6 7 1 8 9 1 2 3 ...):"
for arch in diff transformer; do
    printf '%-12s %s\n' "$arch" "$("$bin" sample --model "$dir/$arch.safetensors" --prompt '1 2 3 1' --max-tokens 20)"
done
