#!/usr/bin/env bash
# tools/scaling.py's learning-rate sweep (make reproduce STAGE=scaling): an
# arch whose best lr lies at the top (bottom) of the lrs it was tried at gets
# the next one out (x2, /2), at most two beyond the grid; a best inside gets
# none; a diverged lr counts as the worst; an unfinished grid run is refused.
# Skipped, with the reason, where /usr/bin/python3 is missing (the tools are
# Python; the C build never needs it). Ends with the suite's summary line.
set -u
. "$(dirname "$0")/tools_test_lib.sh"
tools_test_start scaling_sweep
run=$tmp/run
mkdir -p "$run/models"
echo "steps=10 batch=2 seq=8 lrs=1e-3 3e-3 6e-3 sweep_dim=16 vocab=64 layers=2 seeds=1 dims=16" > "$run/settings.txt"
finished() { # arch lr final-val-loss
    local b=$run/models/$1-d16-lr$2-s1
    printf '{"step":5,"val_loss":9.0}\n{"step":10,"val_loss":%s}\n' "$3" > "$b.jsonl"
    echo '{"params":100,"params_nonembed":50,"n_heads":2}' > "$b.info.json"
}
diverged() { # arch lr
    local b=$run/models/$1-d16-lr$2-s1
    printf '{"step":5,"val_loss":9.0}\n{"step":7,"loss":null,"error":"the loss is not finite"}\n' > "$b.jsonl"
    echo '{"diverged":true,"step":7}' > "$b.info.json"
}
next() { /usr/bin/python3 tools/scaling.py "$run" --sweep-next 2>&1 | tr '\n' ';'; }
choose() { /usr/bin/python3 tools/scaling.py "$run" --choose-lr 2>&1 | tr '\n' ';'; }

finished diff 1e-3 4.5; finished diff 3e-3 4.2
finished transformer 1e-3 4.3; finished transformer 3e-3 4.0; finished transformer 6e-3 3.9
out=$(next)
check refuses_an_unfinished_grid "scaling: the sweep run diff lr 6e-3 is not finished;" "$out"
finished diff 6e-3 4.3
check best_inside_and_best_at_the_top "transformer 1.2e-2;" "$(next)"
finished transformer 1.2e-2 3.8
check extends_again "transformer 2.4e-2;" "$(next)"
finished transformer 2.4e-2 3.7
check at_most_two_beyond_the_grid "" "$(next)"
check chooses_the_best_tried "diff 3e-3;transformer 2.4e-2;" "$(choose)"
rm "$run"/models/transformer-d16-lr2.4e-2-s1.*
diverged transformer 2.4e-2
check a_diverged_lr_is_the_worst "diff 3e-3;transformer 1.2e-2;" "$(choose)"
check a_best_below_a_diverged_lr_is_bracketed "" "$(next)"
finished diff 1e-3 4.0
check extends_down "diff 5e-4;" "$(next)"
tools_test_end
