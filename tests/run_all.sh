#!/usr/bin/env bash
# Runs each test binary given, shows its output, and ends with the combined
# "N passed, N failed" line (", N skipped" when tests could not run on this
# CPU; each skip is listed with its reason). Exit status is non-zero when
# anything failed.
set -u
total_p=0; total_f=0; total_s=0; status=0
summary='^[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$'
for bin in "$@"; do
    echo "== $bin"
    out=$("$bin" 2>&1); rc=$?
    printf '%s\n' "$out" | grep -v -E "$summary"
    line=$(printf '%s\n' "$out" | grep -E "$summary" | tail -n 1)
    if [ -z "$line" ]; then
        echo "$bin: crashed or printed no summary (exit $rc)"; total_f=$((total_f + 1)); status=1; continue
    fi
    p=${line%% passed*}; f=${line#*, }; f=${f%% failed*}
    s=0; case $line in *skipped) s=${line##*failed, }; s=${s%% skipped*} ;; esac
    total_p=$((total_p + p)); total_f=$((total_f + f)); total_s=$((total_s + s))
    [ "$rc" -ne 0 ] && status=1
done
if [ "$total_s" -gt 0 ]; then
    echo "$total_p passed, $total_f failed, $total_s skipped"
else
    echo "$total_p passed, $total_f failed"
fi
exit $status
