#!/usr/bin/env bash
# llama2.c beside difftx's decoding (make bench's decode section calls this):
# builds llama2.c's run (fp32) and runq (int8 weights and activations in
# groups of 64) with the compiler flags of its Makefile's `runomp` target,
# exports a randomly initialised model of the stories110M shape (dim 768,
# 12 layers, 12 heads, vocab 32000, hidden 2048, context 1024) in both of its
# formats with its own export.py (run reads the legacy format, runq version 2), and prints one line per program:
#     run  TOKENS_PER_S
#     runq TOKENS_PER_S
# the median of ROUNDS runs generating N tokens greedily from a short prompt
# (llama2.c's own "achieved tok/s" line). The speed does not depend on the
# weights' values, so random ones measure what a trained model would.
#
# usage: bench/runq.sh WORKDIR [N] [ROUNDS] [PROGRAMS]   (PROGRAMS: "run runq", the default, or one of them)
# LLAMA2C: a llama2.c checkout or a git directory of one (default: the
# mirror /work/.mirror/karpathy+llama2.c/repo). Needs python3-torch
# (scripts/setup.sh --torch). Exit 3 (with the reason on stderr) when
# llama2.c or torch is not here: the bench then says the row was skipped.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: bench/runq.sh WORKDIR [N] [ROUNDS] [PROGRAMS]" >&2; exit 2; }
work=$1 n=${2:-256} rounds=${3:-3} programs=${4:-run runq}
src=${LLAMA2C:-/work/.mirror/karpathy+llama2.c/repo}
mkdir -p "$work"
if [ ! -f "$work/runq.c" ]; then
    if [ -f "$src/runq.c" ]; then
        cp "$src"/{run.c,runq.c,export.py,model.py,tokenizer.bin} "$work"/
    elif git --git-dir="$src" rev-parse HEAD > /dev/null 2>&1; then
        git --git-dir="$src" archive HEAD run.c runq.c export.py model.py tokenizer.bin | tar -x -C "$work"
    else
        echo "runq.sh: no llama2.c at $src (set LLAMA2C to a checkout)" >&2
        exit 3
    fi
fi
cd "$work"
for p in run runq; do # llama2.c's Makefile, target runomp
    [ -x $p ] || gcc -Ofast -fopenmp -march=native $p.c -lm -o $p
done
if [ ! -s q80.bin ] || [ ! -s fp32.bin ]; then
    /usr/bin/python3 -c "import torch" 2> /dev/null || { echo "runq.sh: python3-torch is missing (scripts/setup.sh --torch)" >&2; exit 3; }
    /usr/bin/python3 - >&2 <<'EOF'
import torch
from model import ModelArgs, Transformer
from export import legacy_export, version2_export
torch.manual_seed(0)
m = Transformer(ModelArgs(dim=768, n_layers=12, n_heads=12, n_kv_heads=12, vocab_size=32000, multiple_of=32,
                          max_seq_len=1024, dropout=0.0))
m.eval()
legacy_export(m, "fp32.bin")
version2_export(m, "q80.bin")
EOF
fi
for p in $programs; do
    case $p in run | runq) ;; *) echo "runq.sh: unknown program '$p' (run or runq)" >&2; exit 2 ;; esac
    model=fp32.bin
    [ $p = runq ] && model=q80.bin
    rates=()
    for _ in $(seq "$rounds"); do
        r=$(./$p $model -t 0 -n "$n" -i "Once upon a time" 2>&1 | sed -n 's/.*achieved tok\/s: \([0-9.]*\).*/\1/p')
        [ -n "$r" ] || { echo "runq.sh: $p printed no tok/s line" >&2; exit 1; }
        rates+=("$r")
    done
    printf '%s %s\n' "$p" "$(printf '%s\n' "${rates[@]}" | sort -g | sed -n "$(( (rounds + 1) / 2 ))p")"
done
