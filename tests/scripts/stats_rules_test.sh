#!/usr/bin/env bash
# tools/stats.py's one rule, and tools/report.py's use of it (stats_rules_test.py
# says what each check is): the t distribution against closed forms, bounded
# intervals inside their bounds, the gate of a floor-hit comparison, Holm's
# correction, and a report from hand-made results. Skipped, with the reason,
# where /usr/bin/python3 is missing. Ends with the suite's summary line.
set -u
. "$(dirname "$0")/tools_test_lib.sh"
tools_test_start stats_rules
/usr/bin/python3 tests/scripts/stats_rules_test.py
