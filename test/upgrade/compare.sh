#!/usr/bin/env bash
# test/upgrade/compare.sh: do two databases hold the same extension objects? Describes each with
# catalog.sql (next to this script) and compares the descriptions.
#
#   test/upgrade/compare.sh DB_A DB_B [psql option...]
#
# DB_A and DB_B are database names or connection strings (what psql -d takes), on the server the
# environment names (PGHOST, PGPORT, PGUSER: a superuser); the psql options go to both
# descriptions (-v extension=NAME, -v rows=off). Exits 0 when the two descriptions are the same
# (and says how many lines they have), 1 when they differ (a unified diff: - DB_A, + DB_B), 2
# when one of them cannot be described. CATALOG_KEEP=DIR keeps both in DIR (a.txt, b.txt).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"

if (($# < 2)); then
    sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
a="$1" b="$2"
shift 2
out="${CATALOG_KEEP:-}"
if [[ -z "$out" ]]; then
    out="$(mktemp -d)"
    trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"

# describe DB FILE [psql option...]
describe() {
    local db="$1" file="$2"
    shift 2
    if ! psql -X -q -v ON_ERROR_STOP=1 -d "$db" "$@" -f "$HERE/catalog.sql" </dev/null >"$file"; then
        echo "compare.sh: could not describe $db" >&2
        exit 2
    fi
}
describe "$a" "$out/a.txt" "$@"
describe "$b" "$out/b.txt" "$@"
if diff -u --label "$a" --label "$b" "$out/a.txt" "$out/b.txt"; then
    echo "compare.sh: $a and $b: the same $(wc -l <"$out/a.txt") lines" >&2
    exit 0
fi
exit 1
