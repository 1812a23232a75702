#!/usr/bin/env bash
# The reproduction's data, shared by its stages: the corpus (make data), a
# BPE tokenizer of VOCAB tokens trained on its train/ speeches, and the
# train/ and val/ shards, in DIR (each made once; a rerun reuses them).
#
# usage: scripts/repro_data.sh DIFFTX DIR VOCAB
set -euo pipefail
[ $# = 3 ] || { echo "usage: scripts/repro_data.sh DIFFTX DIR VOCAB" >&2; exit 2; }
bin=$1 dir=$2 vocab=$3 corpus=data/sotu
cd "$(dirname "$0")/.."
make --no-print-directory data
mkdir -p "$dir"
tok=$dir/tokenizer.txt
[ -s "$tok" ] || "$bin" tokenizer train --input "$corpus/train" --vocab-size "$vocab" --out "$tok"
for s in train val; do
    [ -s "$dir/$s.bin" ] || "$bin" prepare --tokenizer "$tok" --input "$corpus/$s" --out "$dir/$s.bin" --append-eos
done
