#!/usr/bin/env bash
# make reproduce STAGE=report: REPORT.md and every stage's write-up written
# again from results alone, with no training, no evaluation and no difftx
# build. The default folder (runs/reproduce) first gets back what the
# repository keeps (docs/reproduce/{main,scaling,claims,v2,recall,recall-deep,induction-time,optimal}-results and the
# induction study's logs: scripts/repro_keep.sh), so a fresh clone writes
# the committed REPORT.md again, its verdicts computed anew by tools/stats.py
# (docs/reproduce.md, "How a verdict is reached"). scripts/reproduce.sh ends
# with this script too, so a report always comes from one path.
#
# usage: scripts/report.sh [--quick | --dir DIR] [--no-setup] [--command CMD] [--seconds S]
#
#   (no flag)   runs/reproduce, the kept results restored first; the report
#               and the stages' write-ups and figures are also published:
#               REPORT.md at the top, the rest in docs/reproduce/
#   --quick     runs/reproduce/quick (make reproduce QUICK=1), nothing restored
#               or published
#   --dir DIR   that run folder, nothing restored or published
#
# Each stage's write-up is written where its folder holds results
# (DIR/scaling, DIR/claims, DIR/v2, DIR/induction or the kept induction logs);
# REPORT.md takes in those that exist. Needs /usr/bin/python3 (Debian's) and,
# for the figures, python3-matplotlib (installed by the setup step).
#
# Exit status: 0 done, 1 a step failed, 2 bad usage.
set -Eeuo pipefail

stage_name=report
. "$(dirname "$0")/stage_lib.sh"

main() {
local quick=0 dir="" command="" seconds=""
while [ $# -gt 0 ]; do
    case $1 in
        -h|--help) usage; exit 0 ;;
        --quick) quick=1 ;;
        --no-setup) NO_SETUP=1 ;;
        --dir|--command|--seconds)
            [ $# -ge 2 ] || { echo "report: $1 needs a value" >&2; exit 2; }
            case $1 in --dir) dir=$2 ;; --command) command=$2 ;; --seconds) seconds=$2 ;; esac
            shift ;;
        *) echo "report: unknown argument $1 (scripts/report.sh --help)" >&2; exit 2 ;;
    esac
    shift
done
case $dir in ''|/*) ;; *) dir=$PWD/$dir ;; esac
cd "$(dirname "$0")/.."
local kept=docs/reproduce run publish=0 py=/usr/bin/python3
if [ -n "$dir" ]; then run=$dir
elif [ $quick = 1 ]; then run=runs/reproduce/quick
else run=runs/reproduce publish=1
fi
[ -x $py ] || die "$py is not installed (the report's tools are Python: apt-get install python3)"
is_true "${NO_SETUP:-}" || scripts/setup.sh --plot

if [ $publish = 1 ]; then
    [ -f $kept/main-results/settings.txt ] || die "$kept/main-results holds no results to write a report from"
    mkdir -p "$run"
    scripts/repro_keep.sh restore $kept/main-results "$run"
    local s h
    for s in scaling claims v2 recall recall-deep induction-time optimal; do
        [ -f $kept/$s-results/settings.txt ] || continue
        mkdir -p "$run/$s"
        scripts/repro_keep.sh restore $kept/$s-results "$run/$s"
    done
    for h in v2/high v2/high8 v2/high16 optimal/tokens-0.25 optimal/tokens-0.5 optimal/tokens-1.25 optimal/conversion; do
        [ -f $kept/${h%%/*}-results/${h#*/}/settings.txt ] || continue
        mkdir -p "$run/$h"
        scripts/repro_keep.sh restore $kept/${h%%/*}-results/${h#*/} "$run/$h"
    done
    [ -n "$seconds" ] || seconds=$(cat "$run/seconds.txt" 2>/dev/null || true)
    [ -n "$command" ] || command="make reproduce STAGE=report"
fi
[ -d "$run/models" ] || die "$run/models: no such folder (run make reproduce first)"
local q=""; [ $quick = 1 ] && q=" QUICK=1"

# the stages' write-ups, each from its own folder
stage_tool() { # sub tool STAGE: DIR/sub's write-up, where that stage has run
    [ -f "$run/$1/settings.txt" ] || return 0
    $py "tools/$2" "$run/$1" --command "make reproduce STAGE=$3$q" ||
        die "tools/$2 $run/$1 failed (its stage may be unfinished: make reproduce STAGE=$3)"
}
stage_tool scaling scaling.py scaling
stage_tool claims claims.py claims
stage_tool v2 v2.py v2
stage_tool recall recall.py recall
stage_tool recall-deep recall.py recall-deep
stage_tool induction-time induction_time.py induction-time
stage_tool optimal optimal.py optimal
local logs=()
[ $publish = 1 ] && [ -f $kept/induction-logs/settings.txt ] && logs=(--logs $kept/induction-logs)
if [ -f "$run/induction/settings.txt" ] || [ ${#logs[@]} -gt 0 ]; then
    mkdir -p "$run/induction"
    local isec; isec=$(cat "$run/induction/seconds.txt" 2>/dev/null || cat $kept/induction-logs/seconds.txt 2>/dev/null || true)
    $py tools/induction.py "$run/induction" "${logs[@]}" --command "make reproduce STAGE=induction$q" \
        ${isec:+--seconds "$isec"} ||
        die "tools/induction.py failed"
fi
local from_kept=(); [ $publish = 1 ] && [ "$command" = "make reproduce STAGE=report" ] && from_kept=(--kept)
$py tools/report.py --run "$run" --command "${command:-make reproduce$q}" ${seconds:+--seconds "$seconds"} "${from_kept[@]}"

[ $publish = 1 ] || return 0
# the full run's report also goes to the top, its figures and the stages' write-ups to docs/reproduce/
cp "$run"/*.png $kept/ 2>/dev/null || true
local f
for f in scaling/SCALING.md scaling/scaling.png induction/INDUCTION.md induction/induction.png \
    claims/CLAIMS.md claims/claims.png v2/V2.md recall/RECALL.md induction-time/INDUCTION_TIME.md \
    induction-time/induction-time.png optimal/OPTIMAL.md; do
    [ -f "$run/$f" ] && cp "$run/$f" $kept/
done
[ -f "$run/recall-deep/RECALL.md" ] && cp "$run/recall-deep/RECALL.md" $kept/RECALL_DEEP.md
sed -e 's|](\([a-z_]*\.png\))|](docs/reproduce/\1)|' -e 's|](induction/INDUCTION.md)|](docs/reproduce/INDUCTION.md)|' \
    -e 's#](scaling/\(SCALING.md\|scaling.png\))#](docs/reproduce/\1)#g' \
    -e 's#](claims/\(CLAIMS.md\|claims.png\))#](docs/reproduce/\1)#g' \
    -e 's#](v2/V2.md)#](docs/reproduce/V2.md)#g' -e 's#](recall/RECALL.md)#](docs/reproduce/RECALL.md)#g' \
    -e 's#](recall-deep/RECALL.md)#](docs/reproduce/RECALL_DEEP.md)#g' \
    -e 's#](optimal/OPTIMAL.md)#](docs/reproduce/OPTIMAL.md)#g' -e 's#](induction-time/\(INDUCTION_TIME.md\|induction-time.png\))#](docs/reproduce/\1)#g' -e 's#](earlier/#](docs/reproduce/earlier/#g' \
    "$run/REPORT.md" > REPORT.md.tmp
mv REPORT.md.tmp REPORT.md
echo "report: REPORT.md, docs/reproduce/"
}
main "$@"; exit  # one line: bash parses it whole before main runs, so an edit to this file cannot change what follows
