#!/usr/bin/env bash
# A reproduction stage's results kept in the repository, so that a session on
# another machine continues the stage where this one stopped: what the
# write-ups read, without the weights (megabytes each).
#
# usage: scripts/repro_keep.sh keep RUN KEEP     copy RUN's finished results into KEEP
#        scripts/repro_keep.sh restore KEEP RUN  put KEEP's results back into RUN
#
# Kept: settings.txt, lr.txt and seconds.txt (the work's time) as they are; gzipped (-n: the same bytes on
# every machine), each finished model's training logs, commands and
# `difftx info --json` record (models/NAME.{jsonl,warm.jsonl,cmd,info.json}:
# a model is finished once its info record exists) and every evaluation's
# JSON and command (eval/NAME.{json,cmd}). A file already kept is not
# rewritten; restore never replaces a file of RUN. The two folders must hold
# the same settings.txt (results of another recipe are refused).
set -euo pipefail
die() { echo "repro_keep: $*" >&2; exit 1; }
[ $# = 3 ] || { echo "usage: scripts/repro_keep.sh keep RUN KEEP | restore KEEP RUN" >&2; exit 2; }
op=$1 from=$2 to=$3

same_settings() { # A B: refuses two folders of different recipes
    [ -f "$1/settings.txt" ] && [ -f "$2/settings.txt" ] || return 0
    cmp -s "$1/settings.txt" "$2/settings.txt" ||
        die "$1 and $2 hold results of different settings ($1/settings.txt: $(cat "$1/settings.txt")); move one away"
}

case $op in
keep)
    run=$from keep=$to
    [ -f "$run/settings.txt" ] || die "$run/settings.txt: no such file (not a run folder)"
    same_settings "$keep" "$run"
    mkdir -p "$keep/models" "$keep/eval"
    for f in settings.txt lr.txt seconds.txt; do
        [ -f "$run/$f" ] && ! cmp -s "$run/$f" "$keep/$f" && cp "$run/$f" "$keep/$f"
    done
    for info in "$run"/models/*.info.json; do
        [ -e "$info" ] || continue
        base=${info%.info.json}
        for ext in jsonl warm.jsonl cmd info.json; do
            src=$base.$ext dst=$keep/models/$(basename "$base").$ext.gz
            [ -s "$src" ] && [ ! -s "$dst" ] && { gzip -9 -n -c "$src" > "$dst.tmp.$$" && mv "$dst.tmp.$$" "$dst"; }
        done
    done
    for src in "$run"/eval/*.json "$run"/eval/*.cmd; do
        [ -s "$src" ] || continue
        dst=$keep/eval/$(basename "$src").gz
        [ -s "$dst" ] || { gzip -9 -n -c "$src" > "$dst.tmp.$$" && mv "$dst.tmp.$$" "$dst"; }
    done
    ;;
restore)
    keep=$from run=$to
    [ -f "$keep/settings.txt" ] || exit 0 # nothing kept yet
    same_settings "$keep" "$run"
    mkdir -p "$run/models" "$run/eval"
    for f in settings.txt lr.txt seconds.txt; do
        [ -f "$keep/$f" ] && [ ! -f "$run/$f" ] && cp "$keep/$f" "$run/$f"
    done
    for src in "$keep"/models/*.gz "$keep"/eval/*.gz; do
        [ -e "$src" ] || continue
        rel=${src#"$keep"/} dst=$run/${rel%.gz}
        [ -e "$dst" ] || { gzip -d -c "$src" > "$dst.tmp.$$" && mv "$dst.tmp.$$" "$dst"; }
    done
    ;;
*) die "$op: expected keep or restore" ;;
esac
exit 0
