#!/usr/bin/env bash
# upgrade.sh: a fresh install and every upgrade path to the installed version create the same
# catalog, as test/upgrade/catalog.sql describes it (compared by test/upgrade/compare.sh):
#   1. the description of the fresh install in $PGDATABASE is the same in a second database
#      installed the same way (it holds nothing particular to one database: OIDs, times,
#      creation order), and it names what the install script creates: the extension's version,
#      schema vq, the default queue's row, the config-dump registrations, the privileges;
#   2. the comparison sees a change: after a GRANT, a column default, a comment, a function
#      body and a member dropped from the extension, changed in the second database, it fails
#      and its diff names each of them;
#   3. for every older version with an update path to the installed one
#      (pg_extension_update_paths), a database created at that version (CREATE EXTENSION ...
#      VERSION) and updated (ALTER EXTENSION ... UPDATE) describes the same as the fresh install.
#      Until a second version exists there is no path, and the step says so.
# Runs against $PGDATABASE (a database with vq_job, nothing else); creates and drops databases
# named after it.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=test/scenarios/lib/common.sh
. "$HERE/lib/common.sh"

ROOT="${VQ_REPO_ROOT:-$(cd "$HERE/../.." && pwd -P)}"
COMPARE="$ROOT/test/upgrade/compare.sh"
FRESH="$PGDATABASE"
OTHER="${FRESH:0:40}_other"
OUT="$(mktemp -d)"
created=()
cleanup() {
    local rc=$? db
    for db in "${created[@]}"; do
        dropdb --if-exists --force "$db" >/dev/null 2>&1 || true
    done
    rm -rf "$OUT"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# fresh_db NAME [VERSION]: a new database with the extension (at VERSION).
fresh_db() {
    dropdb --if-exists --force "$1" >/dev/null 2>&1 || true
    createdb "$1"
    created+=("$1")
    psql -X -q -v ON_ERROR_STOP=1 -d "$1" -c "CREATE EXTENSION vq_job${2:+ VERSION '$2'}" >/dev/null
}

VERSION="$(q "SELECT extversion FROM pg_extension WHERE extname = 'vq_job'")"
[[ -n "$VERSION" ]] || fail "vq_job is not installed in $FRESH"

log "1. two fresh installs of $VERSION describe the same"
fresh_db "$OTHER"
CATALOG_KEEP="$OUT/fresh" "$COMPARE" "$FRESH" "$OTHER" >"$OUT/diff.txt" ||
    fail "two fresh installs differ:$(printf '\n%s' "$(head -n 60 "$OUT/diff.txt")")"
DESC="$OUT/fresh/a.txt"
n_lines="$(wc -l <"$DESC")"
((n_lines >= 1000)) || fail "expected a description of at least 1000 lines, got $n_lines"
for line in "extension vq_job: version $VERSION, schema public, not relocatable" \
            "schema vq" \
            "acl schema vq: OWNER=UC/OWNER PUBLIC=U/OWNER" \
            "config dump table vq.queue: condition ''" \
            "config dump sequence vq.callback_event_id_seq: condition ''" \
            "initial privileges (extension) function vq.all_job_counts(): OWNER=X/OWNER pg_monitor=X/OWNER" \
            "policy callback_event_visible_to_nobody on vq.callback_event: PERMISSIVE for SELECT to public using (false)"; do
    grep -qxF -- "$line" "$DESC" || fail "the description has no line: $line"
done
grep -q '^row vq.queue: {"name": "default", ' "$DESC" || fail "the description has no row for the default queue"
grep -q '^function public.vq_enqueue(.*language c; volatile; parallel unsafe; .*symbol vq_enqueue$' "$DESC" ||
    fail "the description has no line for vq_enqueue"
log "the same $n_lines lines"

log "2. changes in one database show in the diff"
qs -d "$OTHER" >/dev/null <<'SQL'
GRANT INSERT ON vq.queue TO PUBLIC;
ALTER TABLE vq.queue ALTER COLUMN sleep_delay_ms SET DEFAULT 1000;
COMMENT ON TABLE vq.handler IS 'changed';
CREATE OR REPLACE FUNCTION vq.visible_outbox_counts(OUT status text, OUT n bigint) RETURNS SETOF record
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT o.status, count(*) FROM vq.outbox o GROUP BY 1 $$;
ALTER EXTENSION vq_job DROP TABLE vq.queue_grant;
SQL
rc=0
"$COMPARE" "$FRESH" "$OTHER" >"$OUT/diff.txt" || rc=$?
assert_eq 1 "$rc" "compare.sh's exit status for databases that differ"
for pattern in '^+acl table vq\.queue: OWNER=arwdDxt/OWNER PUBLIC=ar/OWNER$' \
               '^+table column vq\.queue\.sleep_delay_ms: 2 integer not null default 1000$' \
               '^+comment table vq\.handler: changed$' \
               '^+function vq\.visible_outbox_counts() body: .*GROUP BY 1 $' \
               '^-member table vq\.queue_grant$' \
               '^-config dump table vq\.queue_grant: '; do
    grep -q -- "$pattern" "$OUT/diff.txt" ||
        fail_later "the diff has no line matching $pattern"
done
fail_summary
log "each change named ($(grep -c '^[-+][^-+]' "$OUT/diff.txt") lines of diff)"

log "3. every update path to $VERSION gives the fresh install's catalog"
mapfile -t sources < <(q "SELECT source FROM pg_extension_update_paths('vq_job')
                           WHERE target = '$VERSION' AND path IS NOT NULL ORDER BY source")
if ((${#sources[@]} == 0)); then
    log "no version has an update path to $VERSION yet: nothing to update"
fi
for source in "${sources[@]}"; do
    db="${FRESH:0:40}_from_$(tr -c 'a-z0-9' '_' <<<"$source" | cut -c1-12)"
    log "$source -> $VERSION ($(q "SELECT path FROM pg_extension_update_paths('vq_job')
                                   WHERE source = '$source' AND target = '$VERSION'"))"
    fresh_db "$db" "$source"
    q "ALTER EXTENSION vq_job UPDATE TO '$VERSION'" -d "$db" >/dev/null
    "$COMPARE" "$FRESH" "$db" >"$OUT/diff.txt" ||
        fail_later "$source updated to $VERSION differs from a fresh install (- fresh, + updated):$(printf '\n%s' "$(head -n 60 "$OUT/diff.txt")")"
done
fail_summary
log "PASS"
