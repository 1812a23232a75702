#!/usr/bin/env bash
# PyTorch on Debian links the generic libblas.so.3; without OpenBLAS that is
# the reference BLAS (~6 GFLOP/s here), which would make the PyTorch side of
# `make bench` ~30x slower than PyTorch can be. When OpenBLAS (pthreads) is not
# installed system-wide, this unpacks Debian's libopenblas0-pthread into
# DIR (default build/openblas) without installing it; bench/bench then points
# LD_LIBRARY_PATH there for the PyTorch commands only. Nothing else changes.
set -euo pipefail
dir="${1:-build/openblas}"
sys=/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3
[ -e "$sys" ] && exit 0
[ -e "$dir/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3" ] && exit 0
command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || {
    echo "bench: no OpenBLAS and no apt-get: PyTorch will use the reference BLAS" >&2; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if (cd "$tmp" && apt-get download -qq libopenblas0-pthread >/dev/null 2>&1); then
    mkdir -p "$dir"
    dpkg-deb -x "$tmp"/libopenblas0-pthread_*.deb "$dir"
    echo "bench: unpacked libopenblas0-pthread into $dir (for PyTorch only)" >&2
else
    echo "bench: could not download libopenblas0-pthread: PyTorch will use the reference BLAS" >&2
fi
