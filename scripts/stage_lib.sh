# Sourced by the reproduction stages (scripts/reproduce.sh, induction.sh, v2.sh,
# scaling.sh, claims.sh, recall.sh, induction_time.sh, optimal.sh) after they set stage_name: what each of them needs
# around its own runs.
usage() { sed -n '2,/^set -Eeuo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
die() { echo "$stage_name: $*" >&2; exit 1; }
is_true() { case ${1:-} in ''|0|no|false) return 1 ;; *) return 0 ;; esac; }

# stage_settings RUN SETTINGS HINT: a run folder holds the results of one
# recipe: refuses RUN when it was made with other SETTINGS (HINT says what to
# do then), else records them there and says them.
stage_settings() {
    if [ -f "$1/settings.txt" ] && [ "$(cat "$1/settings.txt")" != "$2" ]; then
        die "$1 holds runs made with other settings ($(cat "$1/settings.txt")); $3"
    fi
    echo "$2" > "$1/settings.txt"
    echo "settings: $2"
}

# stage_start: what every stage does before its runs (uses $bin): Ctrl-C says how
# to continue, setup (unless NO_SETUP), the build (unless NO_BUILD).
stage_start() {
    trap 'echo; echo "$stage_name: interrupted; run the same command again to continue" >&2; exit 130' INT TERM
    is_true "${NO_SETUP:-}" || scripts/setup.sh --plot
    is_true "${NO_BUILD:-}" || make --no-print-directory build/difftx
    [ -x "$bin" ] || die "$bin is not an executable"
}

# stage_args "$@": the flags every stage takes (-h, --quick, --no-setup, --no-build, --list, --jobs N,
# --dir DIR) into the caller's quick, list, jobs and dir (declared local there; QUICK, JOBS and REPRO_DIR
# are the defaults; induction, scaling, v2, recall); a flag it does not know goes to the stage's own stage_flag FLAG, which returns 1 for
# one it does not know either.
stage_args() {
    quick=0 dir=${REPRO_DIR:-} list=0 jobs=${JOBS:-2}
    is_true "${QUICK:-}" && quick=1
    while [ $# -gt 0 ]; do
        case $1 in
            -h|--help) usage; exit 0 ;;
            --quick) quick=1 ;;
            --no-setup) NO_SETUP=1 ;;
            --no-build) NO_BUILD=1 ;;
            --list) list=1 ;;
            --jobs) [ $# -ge 2 ] || { echo "$stage_name: --jobs needs a value" >&2; exit 2; }; jobs=$2; shift ;;
            --dir) [ $# -ge 2 ] || { echo "$stage_name: --dir needs a value" >&2; exit 2; }; dir=$2; shift ;;
            *) stage_flag "$1" || { echo "$stage_name: unknown argument $1 (scripts/$stage_name.sh --help)" >&2; exit 2; } ;;
        esac
        shift
    done
    case $dir in ''|/*) ;; *) dir=$root/$dir ;; esac
    case $jobs in [1-9]|[1-9][0-9]) ;; *) echo "$stage_name: --jobs $jobs: expected 1 to 99" >&2; exit 2 ;; esac
}

# stage_lr_sweep RUN TOOL WORKER: a stage's learning-rate phase. The runs the
# caller's phase1 lists (seed 1, every lr of its grid), trained by WORKER --one
# RUN, two (jobs) at a time; then, while TOOL RUN --sweep-next names an arch whose
# best lies at the edge of what it was tried at, that arch at the next lr out
# (the caller's run_args ARCH LR 1); then RUN/lr.txt, each arch's best, from
# TOOL RUN --choose-lr. SCALING_SWEEP=1 tells the scaling stage's worker that a
# diverged run is a result of the sweep (the worst), not a failure.
stage_lr_sweep() {
    local run=$1 tool=$2 worker=$3 next
    phase1 > "$run/runs1.txt"
    SCALING_SWEEP=1 xargs -r -P "$jobs" -L 1 "$worker" --one "$run" < "$run/runs1.txt" ||
        die "a run failed (see above); run the same command again"
    while :; do
        next=$(/usr/bin/python3 "$tool" "$run" --sweep-next) || die "$tool --sweep-next failed"
        [ -n "$next" ] || break
        echo "phase 1: a best lr at the sweep's edge; trying $(echo $next)"
        while read -r a lr; do run_args "$a" "$lr" 1; done <<< "$next" > "$run/runs1x.txt"
        SCALING_SWEEP=1 xargs -r -P "$jobs" -L 1 "$worker" --one "$run" < "$run/runs1x.txt" ||
            die "a run failed (see above); run the same command again"
    done
    /usr/bin/python3 "$tool" "$run" --choose-lr > "$run/lr.txt.tmp" && mv "$run/lr.txt.tmp" "$run/lr.txt"
}
