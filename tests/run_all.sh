#!/usr/bin/env bash
# Runs each test binary given, shows its output, and ends with the combined
# "N passed, N failed" line. Exit status is non-zero when anything failed.
set -u
total_p=0; total_f=0; status=0
for bin in "$@"; do
    echo "== $bin"
    out=$("$bin" 2>&1); rc=$?
    printf '%s\n' "$out" | grep -v -E '^[0-9]+ passed, [0-9]+ failed$'
    line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    if [ -z "$line" ]; then
        echo "$bin: crashed or printed no summary (exit $rc)"; total_f=$((total_f + 1)); status=1; continue
    fi
    p=${line%% passed*}; f=${line#*, }; f=${f%% failed*}
    total_p=$((total_p + p)); total_f=$((total_f + f))
    [ "$rc" -ne 0 ] && status=1
done
echo "$total_p passed, $total_f failed"
exit $status
