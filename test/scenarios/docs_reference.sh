#!/usr/bin/env bash
# docs_reference.sh: the documentation (README.md and docs/*.md) covers what the installed
# extension offers, so that a reader who has only the repository finds every entry point.
#
# Which objects count as the user's: every function of the extension (pg_depend, deptype 'e')
# outside schema vq (the vq_* API, whether PUBLIC may call it or an administrator grants it),
# and every function inside schema vq that PUBLIC may execute (vq.running_jobs_now). The other
# functions in schema vq are internal: PUBLIC may not execute them and only the extension's own
# code calls them (trigger functions, validation helpers, vq.redrive, vq.wake_executors ...).
#
# Checks, each failing with the list of what is missing:
#   1. every user function has, somewhere in the docs, its signature written `name(...)` with
#      the arguments the catalog has, in its order, with their types and defaults
#      (`vq_take_jobs(handlers text[], max_jobs integer DEFAULT 1, lease interval DEFAULT NULL)`;
#      compared with pg_get_function_arguments after collapsing whitespace, dropping OUT
#      arguments and the casts of defaults, and writing timestamptz): argument order is part
#      of the contract, so a signature that drops, adds, swaps or retypes an argument does not
#      count; and the function index of docs/reference.md has a row "| `name` | WHO |" where
#      WHO starts with PUBLIC exactly when PUBLIC may execute it (else "granted ...");
#      and its result: among the places that write that exact signature followed by
#      `RETURNS ...`, at least one, and every one, gives the catalog's result type
#      (pg_get_function_result; `int`, `bool` and timestamptz accepted for the long names); a
#      function with OUT arguments as `RETURNS TABLE (name type, ...)` (or `SETOF record (...)`)
#      when it returns a set, `RETURNS record (name type, ...)` when it returns one row, with
#      the OUT arguments in order;
#   2. every view of schema vq, every table of schema vq that PUBLIC may read, and every type
#      of schema vq is named in the docs as `vq.name`; and the row of docs/reference.md whose
#      first cell names it lists, in its second cell, the catalog's columns in order (views,
#      tables: the names, annotations in parentheses aside; composite types: `name type`;
#      enums: the labels);
#   3. every vq.* setting (pg_settings) has a row in docs/reference.md's settings table whose
#      default, unit and context cells are pg_settings' boot_val (`(empty)` for ''), unit
#      (`—` for none) and context;
#   4. every VQxxx SQLSTATE the code can raise (the sources under src/ and sql/) has a row
#      "| `VQxxx` |" in an errors table of the docs;
#   5. notes no catalog shows are still there, as sentences (line breaks aside): a worker's
#      LISTEN, and vq_consumer, need a session of their own, never a transaction pooler
#      (docs/guide.md, consumer/README.md); DROP EXTENSION vq_job CASCADE drops the functions
#      that use the extension's types and keeps (jsonb) handler functions (docs/operations.md,
#      docs/reference.md; the behaviour: test/sql/drop_extension.sql).
# Runs against $PGDATABASE (a database with vq_job); reads the docs from the repository.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=test/scenarios/lib/common.sh
. "$HERE/lib/common.sh"

ROOT="${VQ_REPO_ROOT:-$(cd "$HERE/../.." && pwd -P)}"
DOCS=("$ROOT/README.md" "$ROOT"/docs/*.md)
REFERENCE="$ROOT/docs/reference.md"
[[ -f "$REFERENCE" ]] || fail "missing $REFERENCE"

# missing_list WHAT ITEMS...: fail_later naming WHAT and the items, if any.
missing_list() {
    local what="$1"
    shift
    (($# == 0)) && return 0
    fail_later "$what ($#): $*"
}

# ---------------------------------------------------------------------------
log "1. every user function has its exact signature in the docs"
# One line per function: "name|arguments|PUBLIC or granted|result", the arguments as
# pg_get_function_arguments writes them (names, types, defaults, in order; OUT arguments too),
# the result as the docs must write it (TABLE (...) / record (...) for OUT arguments).
FUNCTIONS="$(q "
SELECT CASE WHEN n.nspname = 'vq' THEN 'vq.' ELSE '' END || p.proname || '|' ||
       pg_get_function_arguments(p.oid) || '|' ||
       CASE WHEN has_function_privilege('public', p.oid, 'EXECUTE') THEN 'PUBLIC' ELSE 'granted' END || '|' ||
       CASE WHEN p.proargmodes IS NOT NULL AND p.proargmodes && ARRAY['o', 'b', 't']::\"char\"[]
            THEN CASE WHEN p.proretset THEN 'TABLE' ELSE 'record' END || ' (' ||
                 (SELECT string_agg(format('%s %s', a.name, format_type(a.type, NULL)), ', ' ORDER BY a.ord)
                    FROM unnest(p.proargnames, p.proallargtypes, p.proargmodes) WITH ORDINALITY
                         AS a(name, type, mode, ord)
                   WHERE a.mode IN ('o', 'b', 't')) || ')'
            ELSE pg_get_function_result(p.oid) END
  FROM pg_proc p
  JOIN pg_namespace n ON n.oid = p.pronamespace
  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'vq_job'
 WHERE n.nspname <> 'vq' OR has_function_privilege('public', p.oid, 'EXECUTE')
 ORDER BY 1")"
n_functions="$(grep -c . <<<"$FUNCTIONS" || true)"
((n_functions >= 40)) || fail "expected at least 40 user functions in the catalog, found $n_functions"

# NORMALIZE (perl): an argument list in one comparable form: whitespace collapsed, OUT
# arguments dropped (the docs give them as the result), casts of defaults dropped
# ('{}'::jsonb -> '{}'), "timestamp with time zone" written timestamptz.
# shellcheck disable=SC2016  # perl code, expanded by perl
NORMALIZE='
    sub normalize {
        my ($args) = @_;
        $args =~ s/\s+/ /g;
        $args =~ s/timestamp with time zone/timestamptz/g;
        my @items;
        for my $item (split /,(?=(?:[^\x27]*\x27[^\x27]*\x27)*[^\x27]*$)/, $args) {
            $item =~ s/^\s+|\s+$//g;
            next if $item eq "" || $item =~ /^OUT\s/;
            $item =~ s/::[^\x27]*$//;
            push @items, $item;
        }
        return join(", ", @items);
    }'
# doc_signatures: every argument list the docs write as `$FN(...)` (balanced parentheses),
# normalized, one per line.
doc_signatures() {
    perl -0777 -ne "$NORMALIZE"'
        my $name = quotemeta($ENV{FN});
        while (/(?<![\w.])$name(\(((?:[^()]++|(?1))*)\))/g) {
            print normalize($2), "\n";
        }' "${DOCS[@]}"
}
bad=()
while IFS='|' read -r fn args _; do
    want="$(ARGS="$args" perl -e "$NORMALIZE"' print normalize($ENV{ARGS}), "\n";')"
    if ! FN="$fn" doc_signatures | grep -qxF -- "$want"; then
        bad+=("$fn($want)")
    fi
done <<<"$FUNCTIONS"
missing_list "functions whose exact signature (argument names, types, defaults, order) is in no doc" \
    "${bad[@]}"

# and the function index of docs/reference.md says who may call each: "| `name` | PUBLIC |"
# when PUBLIC has EXECUTE, "| `name` | granted ... |" otherwise.
bad=()
while IFS='|' read -r fn _ who _; do
    row="$(grep -F -- "| \`$fn\` |" "$REFERENCE" | head -n 1 || true)"
    IFS='|' read -r _ _ cell _ <<<"$row"
    cell="$(sed -e 's/^ *//' -e 's/ *$//' <<<"$cell")"
    [[ "${cell%% *}" == "$who" ]] || bad+=("$fn (index: [${cell:-no row}], catalog: $who)")
done <<<"$FUNCTIONS"
missing_list "functions whose row in the index of docs/reference.md is missing or names the wrong callers" \
    "${bad[@]}"

# and the result each place with that exact signature gives after RETURNS.
# NORMALIZE_RESULT (perl): a result in one comparable form (spaces collapsed, short type names
# and "SETOF record (...)" for "TABLE (...)" accepted, the columns as normalize() writes them).
# shellcheck disable=SC2016  # perl code, expanded by perl
NORMALIZE_RESULT='
    sub normalize_result {
        my ($r) = @_;
        $r =~ s/\s+/ /g;
        $r =~ s/^\s+|\s+$//g;
        $r =~ s/^SETOF record\s*\(/TABLE (/i;
        if ($r =~ /^(TABLE|record)\s*\((.*)\)$/is) {
            my ($kind, $cols) = (uc($1) eq "TABLE" ? "TABLE" : "record", $2);
            $cols =~ s/\bint\b/integer/g;
            $cols =~ s/\bbool\b/boolean/g;
            return "$kind (" . normalize($cols) . ")";
        }
        $r =~ s/timestamp with time zone/timestamptz/g;
        $r =~ s/\bint\b/integer/g;
        $r =~ s/\bbool\b/boolean/g;
        return $r;
    }'
# doc_results: "arguments|result" for every place the docs write `$FN(...) RETURNS result`.
doc_results() {
    perl -0777 -ne "$NORMALIZE$NORMALIZE_RESULT"'
        my $name = quotemeta($ENV{FN});
        while (/(?<![\w.])$name(\(((?:[^()]++|(?1))*)\))\s*RETURNS\s+((?:TABLE|SETOF\s+record|record)\s*(\((?:[^()]++|(?-1))*\))|SETOF\s+[\w.]+(?:\[\])?|[\w.]+(?:\[\])?|\S+)/g) {
            print normalize($2), "|", normalize_result($3), "\n";
        }' "${DOCS[@]}"
}
bad=()
while IFS='|' read -r fn args _ result; do
    want_args="$(ARGS="$args" perl -e "$NORMALIZE"' print normalize($ENV{ARGS}), "\n";')"
    want="$(R="$result" perl -e "$NORMALIZE$NORMALIZE_RESULT"' print normalize_result($ENV{R}), "\n";')"
    found="$(FN="$fn" doc_results | awk -F'|' -v a="$want_args" '$1 == a { print $2 }' | sort -u)"
    if ! grep -qxF -- "$want" <<<"$found"; then
        bad+=("$fn (catalog: RETURNS $want; docs: $(paste -sd ';' <<<"${found:-no RETURNS after the exact signature}"))")
    elif [[ "$(grep -cvxF -- "$want" <<<"$found" || true)" != 0 ]]; then
        bad+=("$fn (catalog: RETURNS $want; docs also: $(grep -vxF -- "$want" <<<"$found" | paste -sd ';'))")
    fi
done <<<"$FUNCTIONS"
missing_list "functions whose result type the docs give wrongly" "${bad[@]}"
log "checked $n_functions functions"

# ---------------------------------------------------------------------------
log "2. views, readable tables and types of schema vq are named"
OBJECTS="$(q "
SELECT 'vq.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'vq' AND (c.relkind = 'v'
        OR (c.relkind IN ('r', 'p') AND has_table_privilege('public', c.oid, 'SELECT')))
UNION
SELECT 'vq.' || t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
 WHERE n.nspname = 'vq' AND (t.typtype = 'e' OR (t.typtype = 'c'
        AND (SELECT relkind FROM pg_class WHERE oid = t.typrelid) = 'c'))
 ORDER BY 1")"
bad=()
while read -r obj; do
    grep -qF -- "\`$obj\`" "${DOCS[@]}" || bad+=("$obj")
done <<<"$OBJECTS"
missing_list "objects not named as \`vq.name\` in the docs" "${bad[@]}"

# and their columns (fields, labels) in the second cell of their row of docs/reference.md.
# One line per object: "vq.name|column list" as the docs must write it, annotations aside.
COLUMNS="$(q "
SELECT 'vq.' || c.relname || '|' || string_agg(a.attname, ', ' ORDER BY a.attnum)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
 WHERE n.nspname = 'vq' AND (c.relkind = 'v'
        OR (c.relkind IN ('r', 'p') AND has_table_privilege('public', c.oid, 'SELECT')))
 GROUP BY c.relname
UNION ALL
SELECT 'vq.' || t.typname || '|' || string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
  FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
  JOIN pg_class c ON c.oid = t.typrelid AND c.relkind = 'c'
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
 WHERE n.nspname = 'vq' GROUP BY t.typname
UNION ALL
SELECT 'vq.' || t.typname || '|' || string_agg(e.enumlabel, ', ' ORDER BY e.enumsortorder)
  FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
  JOIN pg_enum e ON e.enumtypid = t.oid
 WHERE n.nspname = 'vq' GROUP BY t.typname
 ORDER BY 1")"
# doc_cell OBJ: the second cell of the first row of docs/reference.md whose first cell names
# \`OBJ\`, as a column list: parenthesized annotations, backticks and the word "enum" removed,
# items trimmed, timestamptz for "timestamp with time zone".
doc_cell() {
    OBJ="$1" perl -ne '
        next unless /^\|/;
        my @cells = split /\|/;
        next unless @cells > 2 && index($cells[1], "`$ENV{OBJ}`") >= 0;
        my $cell = $cells[2];
        1 while $cell =~ s/\([^()]*\)//g;
        $cell =~ s/`//g;
        $cell =~ s/^\s*enum\s+//;
        $cell =~ s/timestamp with time zone/timestamptz/g;
        print join(", ", grep { $_ ne "" } map { s/^\s+|\s+$//gr =~ s/\s+/ /gr } split /,/, $cell), "\n";
        exit;' "$REFERENCE"
}
bad=()
while IFS='|' read -r obj cols; do
    cols="${cols//timestamp with time zone/timestamptz}"
    got="$(doc_cell "$obj")"
    [[ "$got" == "$cols" ]] || bad+=("$obj (catalog: [$cols]; docs/reference.md: [${got:-no row}])")
done <<<"$COLUMNS"
missing_list "views, tables and types whose columns docs/reference.md lists wrongly" "${bad[@]}"
log "checked $(grep -c . <<<"$OBJECTS" || true) views, tables and types"

# ---------------------------------------------------------------------------
log "3. every vq.* setting has a row in docs/reference.md with its default, unit and context"
SETTINGS="$(q "
SELECT name || E'\t' || CASE WHEN coalesce(boot_val, '') = '' THEN '(empty)' ELSE boot_val END
            || E'\t' || coalesce(unit, '—') || E'\t' || context
  FROM pg_settings WHERE name LIKE 'vq.%' ORDER BY name")"
n_settings="$(grep -c . <<<"$SETTINGS" || true)"
((n_settings >= 20)) || fail "expected at least 20 vq.* settings, found $n_settings"
bad=()
while IFS=$'\t' read -r name default unit context; do
    # the row: | `name` | type | default | unit | range | context | meaning |
    row="$(grep -F -- "| \`$name\` |" "$REFERENCE" | head -n 1 || true)"
    if [[ -z "$row" ]]; then
        bad+=("$name (no row)")
        continue
    fi
    IFS='|' read -r _ _ _ d u _ c _ <<<"$row"
    d="$(sed -e 's/`//g' -e 's/^ *//' -e 's/ *$//' <<<"$d")"
    u="$(sed -e 's/`//g' -e 's/^ *//' -e 's/ *$//' <<<"$u")"
    c="$(sed -e 's/`//g' -e 's/^ *//' -e 's/ *$//' <<<"$c")"
    [[ "$d|$u|$c" == "$default|$unit|$context" ]] ||
        bad+=("$name (docs: default [$d] unit [$u] context [$c]; server: [$default] [$unit] [$context])")
done <<<"$SETTINGS"
missing_list "settings missing from docs/reference.md or documented wrongly" "${bad[@]}"
log "checked $n_settings settings"

# ---------------------------------------------------------------------------
log "4. every VQxxx SQLSTATE in the code has a row in an errors table"
CODES="$( {
    grep -rohE --include='*.[ch]' "MAKE_SQLSTATE\('V', *'Q', *'[0-9]', *'[0-9]', *'[0-9]'\)" "$ROOT"/src |
        tr -dc '0-9\n' | sed 's/^/VQ/'
    grep -rohE --include='*.[ch]' --include='*.sql' "\bVQ[0-9]{3}\b" "$ROOT"/src "$ROOT"/sql/schema
} | sort -u)"
n_codes="$(grep -c . <<<"$CODES" || true)"
((n_codes >= 15)) || fail "expected at least 15 VQ SQLSTATEs in the code, found $n_codes"
bad=()
while read -r code; do
    grep -qF -- "| \`$code\` |" "${DOCS[@]}" || bad+=("$code")
done <<<"$CODES"
missing_list "SQLSTATEs without a row in an errors table" "${bad[@]}"
log "checked $n_codes SQLSTATEs"

# ---------------------------------------------------------------------------
log "5. the notes on a session for LISTEN and on DROP EXTENSION vq_job CASCADE"
# says FILE PHRASE: FILE (under the repository) has PHRASE, any run of white space counting as one space.
says() {
    # shellcheck disable=SC2016  # perl code, expanded by perl
    PHRASE="$2" perl -0777 -ne 'my $p = $ENV{PHRASE} =~ s/\s+/ /gr; s/\s+/ /g; exit(index($_, $p) >= 0 ? 0 : 1)' "$ROOT/$1"
}
bad=()
while IFS='|' read -r file phrase; do
    says "$file" "$phrase" || bad+=("$file: [$phrase]")
done <<'NOTES'
docs/guide.md|A worker needs a session of its own for `LISTEN`: a direct connection, or a pooler in session mode.
consumer/README.md|`vq_consumer` needs a database session of its own for as long as it runs
consumer/README.md|Behind a pooler in transaction mode the `LISTEN` is lost
docs/operations.md|`DROP EXTENSION vq_job CASCADE` **drops those functions and views too**
docs/operations.md|(handler functions `fn(jsonb)` stay
docs/reference.md|`DROP EXTENSION vq_job CASCADE` also drops every function of yours whose arguments or result use the extension's types
docs/reference.md|a `(jsonb)` handler function stays. Without `CASCADE` the drop is refused and lists them.
NOTES
missing_list "notes no longer in the docs (reworded: keep the point, and this list with it)" "${bad[@]}"

fail_summary
log "ok: the docs cover $n_functions functions, $n_settings settings and $n_codes SQLSTATEs, and keep the notes"
