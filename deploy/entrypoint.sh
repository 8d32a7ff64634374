#!/bin/sh
# The image's entrypoint: one role per container, each the Procfile's own line (so the
# container's pid 1 is gunicorn or Celery itself: `exec` in the line), or the once-per-release
# prestart. `entrypoint.sh print <role>` shows the command instead of running it.
set -eu
cd "${QTG_HOME:-/app}"
procfile="${QTG_PROCFILE:-Procfile}"

usage() {
    echo "usage: entrypoint.sh [print] prestart|web|worker|worker-venues|worker-webhooks|beat|manage ARGS..." >&2
    exit 64
}

line_of() {
    # The command of a Procfile line ("name: command"), exactly as written there.
    sed -n "s/^$1:[[:space:]]*//p" "$procfile"
}

show=""
if [ "${1:-}" = "print" ]; then show=1; shift; fi
role="${1:-}"
[ -n "$role" ] || usage
shift

case "$role" in
    prestart) command="exec python manage.py qtg_prestart" ;;
    manage) command="exec python manage.py $*" ;;
    web|worker|worker-venues|worker-webhooks|beat)
        command="$(line_of "$role")"
        [ -n "$command" ] || { echo "no '$role' line in $procfile" >&2; exit 65; }
        ;;
    *) usage ;;
esac

if [ -n "$show" ]; then
    echo "$command"
    exit 0
fi
eval "$command"
