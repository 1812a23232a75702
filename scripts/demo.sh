#!/usr/bin/env bash
# Trains a tiny Differential Transformer and its parameter-matched Transformer
# on the same synthetic token stream, prints both results side by side and
# samples from each. Usage: scripts/demo.sh [path/to/difftx]  (make demo)
# Writes runs/demo/. Takes a few seconds on 2 cores.
set -euo pipefail
trap 'echo "demo: failed at line $LINENO" >&2' ERR

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

# Values go through variables: set -e ignores a failure inside $(...) used as
# an argument, but not in an assignment.
declare -A params final heldout sample
for arch in diff transformer; do
    f=$dir/$arch.safetensors
    info=$("$bin" info "$f")
    params[$arch]=$(awk '$1 == "params" { print $2 }' <<< "$info")
    final[$arch]=$(awk '/^final loss/ { print $3 }' "$dir/$arch.log")
    heldout[$arch]=$("$bin" score --model "$f" --tokens "$dir/heldout.txt" |
                     sed -n 's/^{"loss": \([^,]*\),.*/\1/p' | awk '{ printf "%.4f", $1 }')
    sample[$arch]=$("$bin" sample --model "$f" --prompt '1 2 3 1' --max-tokens 20)
    if [ -z "${params[$arch]}" ] || [ -z "${final[$arch]}" ] || [ -z "${heldout[$arch]}" ]; then
        echo "demo: could not read the results of $arch" >&2
        exit 1
    fi
    if [ "$arch" = diff ]; then diff_line=$(grep '^difference' <<< "$info"); fi
done

echo
row() { printf '%-18s %14s %14s\n' "$@"; }
row "" diff transformer
row params "${params[diff]}" "${params[transformer]}"
row "final train loss" "${final[diff]}" "${final[transformer]}"
row "held-out loss" "${heldout[diff]}" "${heldout[transformer]}"
echo "$diff_line"
echo
echo "greedy samples from the prompt '1 2 3 1' (the pattern continues 4 5 1 6 7 1 8 9 1 2 3 ...):"
for arch in diff transformer; do printf '%-12s %s\n' "$arch" "${sample[$arch]}"; done
