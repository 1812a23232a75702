#!/usr/bin/env bash
# tools/recall.py (make reproduce STAGE=recall) on hand-made results: the
# learning rate chosen per arch on the selection episodes (a diverged run
# the worst, ties to the lower lr), the sweep extended only at an edge, the
# accuracy verdict from per-seed differences where every model learned the
# task, and confounded where some or none did; the attention claims at the
# most distractors where every model answers. Skipped, with the reason,
# where /usr/bin/python3 is missing. Ends with the suite's summary line.
set -u
. "$(dirname "$0")/tools_test_lib.sh"
tools_test_start recall_verdicts
run=$tmp/run
mkdir -p "$run/models" "$run/eval"
echo "vocab=256 queries=8 distractors=0-32 counts=0,8 seeds=1,2,3 lrs=1e-3,3e-3,1e-2" > "$run/settings.txt"
# result ARCH LR SEED KIND ACC0 ACC8 [ANSWER8 PERDIST8]: one eval JSON (KIND recall or select)
result() {
    local a=$1 lr=$2 s=$3 kind=$4 a0=$5 a8=$6 ans=${7:-0.1} per=${8:-0.05}
    local grp="{\"answers\":160,\"a1\":{\"answer\":$ans,\"per_distractor\":$per},\"combined\":{\"answer\":$ans,\"per_distractor\":$per}}"
    printf '{"counts":[{"distractors":0,"acc":%s,"n":160,"all":%s},{"distractors":8,"acc":%s,"n":160,"all":%s}]}\n' \
        "$a0" "$grp" "$a8" "$grp" > "$run/eval/$kind-$a-lr$lr-s$s.json"
    echo '{}' > "$run/models/$a-lr$lr-s$s.info.json"
}
# the sweep (seed 1): transformer best at 3e-3; diff best at the top edge; diffnonorm ties (the lower wins,
# at the bottom edge: extended too);
# diff2 diverged at 1e-2
for lr in 1e-3 3e-3 1e-2; do
    case $lr in 1e-3) t=0.5 d=0.5 n=0.6 v=0.4 ;; 3e-3) t=0.7 d=0.6 n=0.6 v=0.6 ;; 1e-2) t=0.6 d=0.8 n=0.5 v=0 ;; esac
    for a in transformer diff diffnonorm diff2; do
        case $a in transformer) x=$t ;; diff) x=$d ;; diffnonorm) x=$n ;; diff2) x=$v ;; esac
        result $a $lr 1 select "$x" "$x"
        result $a $lr 1 recall "$x" "$x"
    done
done
echo '{"diverged":true,"step":40}' > "$run/eval/select-diff2-lr1e-2-s1.json"
echo '{"diverged":true,"step":40}' > "$run/eval/recall-diff2-lr1e-2-s1.json"
check sweep_next "diff 2e-2;diffnonorm 5e-4" "$(/usr/bin/python3 tools/recall.py "$run" --sweep-next | tr '\n' ';' | sed 's/;$//')"
check choose_lr "transformer 3e-3;diff 1e-2;diffnonorm 1e-3;diff2 3e-3" \
    "$(/usr/bin/python3 tools/recall.py "$run" --choose-lr | tr '\n' ';' | sed 's/;$//')"
# seeds 2 and 3 at those lrs: every model learned (>= 0.5 at 0 distractors); DIFF ahead at 8 by 0.2 in each seed
for s in 1 2 3; do
    result transformer 3e-3 $s recall 0.9 0.5$s 0.10 0.45
    result diff 1e-2 $s recall 0.95 0.7$s 0.60 0.00
    result diffnonorm 1e-3 $s recall 0.4 0.3 0.1 0.05   # never learned: its comparison is confounded
    result diff2 3e-3 $s recall 0.9 0.5$s 0.10 0.05
done
/usr/bin/python3 tools/recall.py "$run" --command test > /dev/null
md=$run/RECALL.md
row() { grep -F "| $1 " "$md" | head -n 1; }
check acc_held "+0.200" "$(row 'DIFF answers more associative-recall queries among' | awk -F'|' '{print $3}' | awk '{print $1}')"
check acc_verdict 1 "$(row 'DIFF answers more associative-recall queries among' | grep -c 'held\*\* before correction')"
check answer_held 1 "$(row "DIFF's queries put more attention" | grep -c 'held\*\* before correction')"
check answer_at "at 8 distractors" "$(row "DIFF's queries put more attention" | awk -F'|' '{gsub(/^ +| +$/, "", $6); print $6}' | sed 's/;.*//')"
check noise_held 1 "$(row "DIFF's queries put less attention" | grep -c '\*\*held\*\*')"
check v2_equal 1 "$(row 'V2 answers more' | grep -c '\*\*not resolved\*\*')"
check norm_confounded 1 "$(row 'DIFF answers more associative-recall queries with its per-head norm' | grep -c 'confounded')"
check learned_col "0 of 3" "$(grep -F '| DIFF, no per-head norm | 1e-3 |' "$md" | awk -F'|' '{gsub(/^ +| +$/, "", $5); print $5}')"
# the tie-break's check: diffnonorm's chosen 1e-3 (tied with 3e-3 on seed 1) taught no seed: its seeds
# again at 3e-3 (with seed 1 of the sweep: 2 of 3 learned), in a table of their own and in no verdict
check sensitivity "diffnonorm 3e-3" "$(/usr/bin/python3 tools/recall.py "$run" --sensitivity | tr '\n' ';' | sed 's/;$//')"
for s in 2 3; do result diffnonorm 3e-3 $s recall 0.9 0.6 0.1 0.05; done
/usr/bin/python3 tools/recall.py "$run" --command test > /dev/null
check sensitivity_row "2 of 3" "$(grep -F '| DIFF, no per-head norm | 3e-3 |' "$md" | awk -F'|' '{gsub(/^ +| +$/, "", $5); print $5}')"
check sensitivity_not_in_verdict 1 "$(row 'DIFF answers more associative-recall queries with its per-head norm' | grep -c 'confounded')"
check sensitivity_no_conclusion 0 "$(grep -c "comes from the rule's tie-break" "$md")"
# every seed at the tied rate learns (seed 1's reported episodes too; its selection score stays the sweep's):
# the write-up says the confound is the tie-break's
result diffnonorm 3e-3 1 recall 0.9 0.6 0.1 0.05
/usr/bin/python3 tools/recall.py "$run" --command test > /dev/null
check sensitivity_conclusion 1 "$(grep -c "DIFF, no per-head norm learned the task in every seed at 3e-3 (3 of 3) and in 0 of 3 at 1e-3, the rate the rule chose" "$md")"
check sensitivity_choice_kept "transformer 3e-3;diff 1e-2;diffnonorm 1e-3;diff2 3e-3" \
    "$(/usr/bin/python3 tools/recall.py "$run" --choose-lr | tr '\n' ';' | sed 's/;$//')"
check verdicts_json 5 "$(/usr/bin/python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))))" "$run/verdicts.json")"
tools_test_end
