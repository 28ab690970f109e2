# shellcheck shell=bash
# test/bench/lib/common.sh — helpers shared by the benchmark scripts. Source it after setting
#   PSQL (array: psql and its options), DB (the bench database), PARTS (the parts to run) and
#   CHANGED_SETTINGS=() (what set_guc changed, for reset_gucs).
#
#   log MSG...            print MSG
#   q SQL / qa SQL        run SQL in the bench / maintenance database, print the bare result
#   has_part NAME         is NAME among PARTS?
#   loadavg               the 1-minute load average
#   le A B / ge A B       numeric comparisons (false when A is empty)
#   ratio A B             A / B with two decimals ("-" when either is missing or B is 0)
#   fmt NUMBER DECIMALS   NUMBER rounded ("-" when empty)
#   set_guc NAME VALUE    ALTER SYSTEM SET + reload, remembered for reset_gucs
#   reset_gucs            ALTER SYSTEM RESET of every setting set_guc changed, + reload

log() { printf '%s\n' "$*"; }
q() { "${PSQL[@]}" -d "$DB" -At -c "$1"; }
qa() { "${PSQL[@]}" -d postgres -At -c "$1"; }
has_part() { [[ " $PARTS " == *" $1 "* ]]; }
loadavg() { cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?"; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "" && a + 0 <= b + 0) }'; }
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "" && a + 0 >= b + 0) }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "-"; else printf "%.2f", a / b }'; }
# median X... -> the median of the numbers, 2 decimals ("-" when there are none)
median() {
    printf '%s\n' "$@" | grep -E '^[0-9.]+$' | sort -g |
        awk '{ a[NR] = $1 } END { if (NR == 0) print "-"; else printf "%.2f", (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
fmt() { awk -v x="$1" -v d="$2" 'BEGIN { if (x == "") print "-"; else printf "%.*f", d, x }'; }

set_guc() {
    qa "ALTER SYSTEM SET $1 = '$2'" >/dev/null
    qa "SELECT pg_reload_conf()" >/dev/null
    [[ " ${CHANGED_SETTINGS[*]-} " == *" $1 "* ]] || CHANGED_SETTINGS+=("$1")
}
reset_gucs() {
    local s
    for s in "${CHANGED_SETTINGS[@]-}"; do
        [[ -n "$s" ]] && qa "ALTER SYSTEM RESET $s" >/dev/null
    done
    qa "SELECT pg_reload_conf()" >/dev/null
    CHANGED_SETTINGS=()
}
