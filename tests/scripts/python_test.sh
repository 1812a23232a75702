#!/usr/bin/env bash
# The Python package (python/difftx): tests/python/test_difftx.py against
# the checkout's library and difftx command, then `pip install ./python` into
# a fresh virtual environment, offline (--no-index: the in-tree build backend
# needs nothing from a package index), and the installed package, imported
# from outside the checkout, runs the library bundled in it. Skipped, with
# the reason, where no python3 has numpy (scripts/setup.sh --python) or,
# for the install, where venv or pip is missing. Ends with
# "N passed, N failed[, N skipped]".
set -u
cd "$(dirname "$0")/../.."
root=$PWD
build=${DIFFTX_BUILD:-build}
export DIFFTX_BIN=${DIFFTX_BIN:-$build/difftx}
export DIFFTX_LIB=$root/$build/libdifftx.so.1
py=""
for c in ${PYTHON:-} /usr/bin/python3 python3; do
    if command -v "$c" > /dev/null 2>&1 && "$c" -c 'import numpy' > /dev/null 2>&1; then py=$c; break; fi
done
if [ -z "$py" ]; then
    echo "skip python: no python3 with numpy here (scripts/setup.sh --python installs it)"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
# an ASan build's library loads into python only behind its runtime
if [ -n "${DIFFTX_SAN:-}" ]; then
    export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
    export ASAN_OPTIONS=detect_leaks=0:${ASAN_OPTIONS:-}
fi
out=$("$py" tests/python/test_difftx.py 2>&1); rc=$?
summary='^[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$'
printf '%s\n' "$out" | grep -v -E "$summary"
line=$(printf '%s\n' "$out" | grep -E "$summary" | tail -n 1)
skipped=0
if [ -z "$line" ]; then
    echo "FAIL python: tests/python/test_difftx.py crashed or printed no summary (exit $rc)"
    passed=0 failed=1
else
    passed=${line%% passed*}; failed=${line#*, }; failed=${failed%% failed*}
    case $line in *skipped) skipped=${line##*failed, }; skipped=${skipped%% skipped*} ;; esac
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -n "${DIFFTX_SAN:-}" ]; then
    echo "skip python_pip_install: the ASan build is not installed (make test installs the plain one)"
    skipped=$((skipped + 1))
elif ! "$py" -m venv --system-site-packages "$tmp/venv" > "$tmp/log" 2>&1 || [ ! -x "$tmp/venv/bin/pip" ]; then
    echo "skip python_pip_install: $py has no venv with pip ($(tail -n 1 "$tmp/log"); scripts/setup.sh --python)"
    skipped=$((skipped + 1))
elif ! DIFFTX_LIB= "$tmp/venv/bin/pip" install --no-index -q ./python > "$tmp/log" 2>&1; then
    echo "FAIL python_pip_install: pip install --no-index ./python: $(tail -n 3 "$tmp/log" | tr '\n' ' ')"
    failed=$((failed + 1))
else
    # from another folder, without DIFFTX_LIB: the installed package and its own library
    got=$(cd "$tmp" && env -u DIFFTX_LIB "$tmp/venv/bin/python" -c '
import difftx, difftx._lib as l, numpy as np, sys
m = difftx.Model.load(sys.argv[1])
print(l.PATH.startswith(sys.argv[2]), repr(m.score(np.arange(12) % 61)))' \
        "$root/tests/fixtures/diff_mha_tied.model.safetensors" "$tmp/venv/" 2>&1)
    want=$(cd "$root" && "$py" -c '
import sys; sys.path.insert(0, "python")
import difftx, numpy as np
print(True, repr(difftx.Model.load("tests/fixtures/diff_mha_tied.model.safetensors").score(np.arange(12) % 61)))' 2>&1)
    if [ "$got" = "$want" ]; then echo "ok   python_pip_install"; passed=$((passed + 1))
    else echo "FAIL python_pip_install: installed package gave '$got', the checkout '$want'"; failed=$((failed + 1)); fi
fi
[ "$rc" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1
if [ "$skipped" -gt 0 ]; then echo "$passed passed, $failed failed, $skipped skipped"; else echo "$passed passed, $failed failed"; fi
[ "$failed" -eq 0 ]
