# Sourced by the reproduction stages (scripts/reproduce.sh, induction.sh, v2.sh,
# scaling.sh, claims.sh) after they set stage_name: what each of them needs
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
