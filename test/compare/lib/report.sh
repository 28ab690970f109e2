# shellcheck shell=bash
# test/compare/lib/report.sh — the results of scripts/compare: results.md (the table, every drain
# setting tried, the steady-load windows), throughput.png, latency.png, steady.png and raw/.
#
#   cmp_report DIR      needs CMP_RESULTS, CMP_WORK, CMP_MODE, CMP_SYSTEMS and the counts of cmp_sizes

declare -A CMP_NAMES=([vq]=vq_job [vq-defaults]=vq_job [vq-node]=vq_job [graphile]=graphile-worker [pgboss]=pg-boss [sql]="plain SQL")

# The goals of the external-worker protocol (handlers in the application's language), checked in the goal column.
CMP_GOAL_NODE_PEER=1.3       # Node drain >= 1.3 x the best peer's drain
CMP_GOAL_NODE_CEIL=0.7       # ... and >= 0.7 x the two-step SQL ceiling's best
CMP_GOAL_COPROC=20000        # vq_consumer --coprocess, jobs/s
CMP_GOAL_PY=15000            # Python library, jobs/s
CMP_GOAL_LAT_P50=1           # idle Node worker, commit -> handler start (ms)
CMP_GOAL_LAT_P99=3
CMP_GOAL_STEADY_P99=50       # held snapshot, 3,000 jobs/s: every window's p99 (ms)
CMP_GOAL_STEADY_BACKLOG=3000 # ... and the largest due backlog (jobs)

cmp_v() { local v; v="$(cmp_lookup "$1" "$2")"; echo "${v:--}"; }
# cmp_ratio A B: A / B as "1.23×" ("-" when either is missing or B is 0)
cmp_ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || a == "-" || b == "" || b == "-" || b + 0 == 0) print "-"; else printf "%.2f×\n", a / b }'; }
# cmp_goal FIGURE OP LIMIT: PASS or MISS for FIGURE OP (le or ge) LIMIT; "-" without a figure
cmp_goal() {
    if [[ -z "$1" || "$1" == - ]]; then echo "-"; elif "$2" "$1" "$3"; then echo PASS; else echo MISS; fi
}
# cmp_goal_ratio A B MIN: PASS or MISS for A >= MIN x B; "-" when either is missing
cmp_goal_ratio() {
    if [[ -z "$1" || "$1" == - || -z "$2" || "$2" == - ]]; then echo "-"
    elif awk -v a="$1" -v b="$2" -v m="$3" 'BEGIN { exit !(a >= m * b) }'; then echo PASS; else echo MISS; fi
}
# cmp_best_peer KEY: the best figure of the peers that ran ("-" when none did)
cmp_best_peer() {
    local s v best=""
    for s in graphile pgboss; do
        [[ " $CMP_SYSTEMS " == *" $s "* ]] || continue
        v="$(cmp_v "$s" "$1")"
        [[ "$v" == - ]] && continue
        if [[ -z "$best" ]] || ge "$v" "$best"; then best="$v"; fi
    done
    echo "${best:--}"
}
cmp_thousands() { awk -v x="$1" 'BEGIN { if (x == "" || x == "-") { print "-"; exit }
    s = sprintf("%.0f", x); o = ""; while (length(s) > 3) { o = "," substr(s, length(s) - 2) o; s = substr(s, 1, length(s) - 3) }
    print s o }'; }
cmp_lat3() {  # cmp_lat3 SYSTEM TAG KIND: "p50 / p95 / p99"
    local a b c
    a="$(cmp_v "$1" "lat_$2:$3_p50")"; b="$(cmp_v "$1" "lat_$2:$3_p95")"; c="$(cmp_v "$1" "lat_$2:$3_p99")"
    [[ "$a" == - ]] && { echo "-"; return; }
    awk -v a="$a" -v b="$b" -v c="$c" 'BEGIN { f = (a < 10) ? "%.2f" : "%.0f"
        printf f " / " f " / " f "\n", a, b, c }'
}

# cmp_row LABEL BETTER [GOAL]: one table row from CELL[sys] (the text) and SCORE[sys] (the number
# compared) of vq, graphile, pgboss (and CELL[sql]); the best score among the systems that ran
# (BETTER: max or min) is bold, ties included. GOAL: the goal column's text (default "-").
cmp_row() {
    local label="$1" better="$2" goal="${3:--}" s best="" cells=() score verdict="-" ran=()
    for s in vq graphile pgboss; do
        score="${SCORE[$s]:--}"
        [[ "$score" == - || " $CMP_SYSTEMS " != *" $s "* ]] && continue
        ran+=("$s")
        if [[ -z "$best" ]] || { [[ "$better" == max ]] && ge "$score" "$best"; } ||
                               { [[ "$better" == min ]] && le "$score" "$best"; }; then
            best="$score"
        fi
    done
    for s in vq graphile pgboss; do
        if [[ " ${ran[*]-} " == *" $s "* ]] && le "${SCORE[$s]}" "$best" && ge "${SCORE[$s]}" "$best"; then
            cells+=("**${CELL[$s]:--}**")
            [[ "$s" == vq ]] && verdict=yes
        else
            cells+=("${CELL[$s]:--}")
            [[ "$s" == vq && " ${ran[*]-} " == *" vq "* ]] && verdict=no
        fi
    done
    ((${#ran[@]} > 1)) || verdict="-"
    printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$label" "${cells[0]}" "${cells[1]}" "${cells[2]}" "${CELL[sql]:--}" "$verdict" "$goal"
}

cmp_table() {
    local -A CELL SCORE
    local s k
    echo "| workload | vq_job | graphile-worker | pg-boss | plain SQL | vq_job leads | goal |"
    echo "|---|---:|---:|---:|---:|:-:|:-:|"
    for k in enq_api enq_sql batch; do
        CELL=(); SCORE=()
        for s in vq graphile pgboss sql; do
            SCORE[$s]="$(cmp_v "$s" "$k")"; CELL[$s]="$(cmp_thousands "${SCORE[$s]}")"
        done
        case "$k" in
            enq_api) CELL[sql]="-"
                cmp_row "enqueue, 1 job/txn, $CMP_ENQ_CLIENTS clients, $(cmp_thousands "$CMP_ENQ_JOBS") jobs, client API (jobs/s)" max ;;
            enq_sql) cmp_row "enqueue, 1 job/txn, $CMP_ENQ_CLIENTS clients, $(cmp_thousands "$CMP_ENQ_JOBS") jobs, SQL via pgbench (jobs/s)" max ;;
            batch) cmp_row "batch enqueue, $(cmp_thousands "$CMP_BATCH_JOBS") jobs in batches of $(cmp_thousands "$CMP_BATCH"), client API (jobs/s; plain SQL: INSERT ... SELECT)" max ;;
        esac
    done
    CELL=(); SCORE=()
    for s in vq graphile pgboss sql; do
        SCORE[$s]="$(cmp_v "$s" drain)"
        CELL[$s]="$(cmp_thousands "${SCORE[$s]}") ($(cmp_v "$s" drain_setting))"
        [[ "${SCORE[$s]}" == - ]] && CELL[$s]="-"
    done
    cmp_row "drain of $(cmp_thousands "$CMP_DRAIN_JOBS") no-op jobs, best setting (jobs/s; vq_job: PL/pgSQL handler run by its executors; plain SQL: the one-step ceiling, claim and complete in one transaction)" max
    # The handler outside the server, through the worker protocol, beside the peers' best drain
    # (every peer runs its handler in Node) and the two-step SQL ceiling's best.
    local peer ceil v ratios goal
    peer="$(cmp_best_peer drain)"
    ceil="$(cmp_v sql ceil2)"
    for k in node py coproc; do
        CELL=(); SCORE=()
        v="$(cmp_v vq "$k")"
        SCORE[vq]="$v"
        ratios=""
        [[ "$(cmp_ratio "$v" "$peer")" == - ]] || ratios+="; $(cmp_ratio "$v" "$peer") the best peer"
        [[ "$(cmp_ratio "$v" "$ceil")" == - ]] || ratios+="; $(cmp_ratio "$v" "$ceil") the two-step ceiling"
        CELL[vq]="$(cmp_thousands "$v") ($(cmp_v vq "${k}_setting"))$ratios"
        [[ "$v" == - ]] && CELL[vq]="-"
        for s in graphile pgboss; do
            SCORE[$s]="$(cmp_v "$s" drain)"; CELL[$s]="$(cmp_thousands "${SCORE[$s]}") (as above)"
            [[ "${SCORE[$s]}" == - ]] && CELL[$s]="-"
        done
        CELL[sql]="$(cmp_thousands "$ceil") (two-step, $(cmp_v sql ceil2_setting))"
        [[ "$ceil" == - ]] && CELL[sql]="-"
        case "$k" in
            node) cmp_row "drain of $(cmp_thousands "$CMP_DRAIN_JOBS") no-op jobs, handler in Node: vq_job's external handler run by clients/node's Worker (best setting), the peers' best, plain SQL: the two-step ceiling's best (jobs/s)" max \
                "≥ ${CMP_GOAL_NODE_PEER}× best peer: $(cmp_goal_ratio "$v" "$peer" "$CMP_GOAL_NODE_PEER"); ≥ ${CMP_GOAL_NODE_CEIL}× ceiling: $(cmp_goal_ratio "$v" "$ceil" "$CMP_GOAL_NODE_CEIL")" ;;
            py) cmp_row "drain, handler in Python: vq_job through clients/python, Worker (threads) or AsyncWorker (best setting; Debian's python3, psycopg 3.1) (jobs/s)" max \
                "≥ $(cmp_thousands "$CMP_GOAL_PY") jobs/s: $(cmp_goal "$v" ge "$CMP_GOAL_PY")" ;;
            coproc) cmp_row "drain, handler in a coprocess: vq_job through vq_consumer --coprocess (best setting) (jobs/s)" max \
                "≥ $(cmp_thousands "$CMP_GOAL_COPROC") jobs/s: $(cmp_goal "$v" ge "$CMP_GOAL_COPROC")" ;;
        esac
    done
    CELL=(); SCORE=()
    CELL[sql]="$(for c in "${CMP_CEIL2_CLIENTS[@]}"; do cmp_thousands "$(cmp_v sql "ceil2:c=$c")"; done | paste -sd/ | sed 's|/| / |g')"
    local clients="${CMP_CEIL2_CLIENTS[*]}"
    cmp_row "two-step SQL ceiling, ${clients// / \/ } pgbench clients: a transaction claims $CMP_CEIL2_CLAIM rows FOR UPDATE SKIP LOCKED, marks them running and returns their payloads, a second marks them done by id (jobs/s)" max
    for k in ack call; do
        CELL=(); SCORE=()
        for s in vq graphile pgboss; do SCORE[$s]="$(cmp_v "$s" "lat_default:${k}_p50")"; CELL[$s]="$(cmp_lat3 "$s" default "$k")"; done
        cmp_row "latency, $(cmp_lat_what "$k"), idle workers at their defaults, p50 / p95 / p99 (ms)" min
    done
    for k in ack call; do
        CELL=(); SCORE=()
        SCORE[vq]="$(cmp_v vq "lat_default:${k}_p50")"; CELL[vq]="$(cmp_lat3 vq default "$k") (no polling)"
        for s in graphile pgboss; do
            SCORE[$s]="$(cmp_v "$s" "lat_minpoll:${k}_p50")"; CELL[$s]="$(cmp_lat3 "$s" minpoll "$k") (poll ${CMP_MIN_POLL_MS[$s]} ms)"
        done
        cmp_row "latency, $(cmp_lat_what "$k"), lowest poll interval, p50 / p95 / p99 (ms)" min
    done
    # The handler in Node: an idle clients/node Worker (woken by LISTEN), beside the peers' at their defaults.
    for k in ack call; do
        CELL=(); SCORE=()
        SCORE[vq]="$(cmp_v vq "lat_node:${k}_p50")"; CELL[vq]="$(cmp_lat3 vq node "$k") (clients/node Worker)"
        for s in graphile pgboss; do SCORE[$s]="$(cmp_v "$s" "lat_default:${k}_p50")"; CELL[$s]="$(cmp_lat3 "$s" default "$k") (as above)"; done
        goal="-"
        [[ "$k" == ack ]] && goal="p50 ≤ $CMP_GOAL_LAT_P50 ms: $(cmp_goal "$(cmp_v vq lat_node:ack_p50)" le "$CMP_GOAL_LAT_P50"); p99 ≤ $CMP_GOAL_LAT_P99 ms: $(cmp_goal "$(cmp_v vq lat_node:ack_p99)" le "$CMP_GOAL_LAT_P99")"
        cmp_row "latency, $(cmp_lat_what "$k"), idle worker in Node: vq_job's external handler run by clients/node's Worker, the peers at their defaults, p50 / p95 / p99 (ms)" min "$goal"
    done
    CELL=(); SCORE=()
    for s in vq graphile pgboss; do
        SCORE[$s]="$(cmp_v "$s" steady_p99_max)"
        CELL[$s]="$(fmt "$(cmp_v "$s" steady_p50_max)" 0) / $(fmt "$(cmp_v "$s" steady_p99_max)" 0) ($(cmp_thousands "$(cmp_v "$s" steady_offered)") jobs/s enqueued)"
        [[ "${SCORE[$s]}" == - ]] && CELL[$s]="-"
    done
    [[ "$(cmp_v vq-defaults steady_p99_max)" == - ]] ||
        CELL[vq]+="; queue max_concurrent_jobs 100 (as shipped, 5: $(cmp_thousands "$(cmp_v vq-defaults steady_p50_max)") / $(cmp_thousands "$(cmp_v vq-defaults steady_p99_max)"))"
    cmp_row "steady load, $(cmp_thousands $((CMP_STEADY_RATE * CMP_STEADY_PER_TXN))) jobs/s offered for $CMP_STEADY_SECS s, held REPEATABLE READ snapshot: worst ${CMP_STEADY_WINDOW}-s window start latency p50 / p99 (ms)" min
    CELL=(); SCORE=()
    for s in vq graphile pgboss; do SCORE[$s]="$(cmp_v "$s" steady_backlog_max)"; CELL[$s]="$(cmp_thousands "${SCORE[$s]}")"; done
    [[ "$(cmp_v vq-defaults steady_backlog_max)" == - ]] ||
        CELL[vq]+=" (as shipped: $(cmp_thousands "$(cmp_v vq-defaults steady_backlog_max)"))"
    cmp_row "steady load, held snapshot: largest due backlog (jobs)" min
    # The same load for vq_job's external handler, run by a clients/node Worker.
    CELL=(); SCORE=()
    for s in vq graphile pgboss; do
        local n="$s"; [[ "$s" == vq ]] && n=vq-node
        SCORE[$s]="$(cmp_v "$n" steady_p99_max)"
        CELL[$s]="$(fmt "$(cmp_v "$n" steady_p50_max)" 0) / $(fmt "$(cmp_v "$n" steady_p99_max)" 0) ($(cmp_thousands "$(cmp_v "$n" steady_offered)") jobs/s enqueued)"
        [[ "${SCORE[$s]}" == - ]] && CELL[$s]="-"
    done
    [[ "${SCORE[vq]}" == - ]] || CELL[vq]+="; clients/node Worker $(cmp_v vq-node steady_setting)"
    v="$(cmp_v vq-node steady_p99_max)"
    goal="every window p99 ≤ $CMP_GOAL_STEADY_P99 ms: $(cmp_goal "$v" le "$CMP_GOAL_STEADY_P99")"
    # (a window in which no job started is a miss whatever the others' p99)
    [[ "$v" == - || "$(cmp_v vq-node steady_empty_windows)" == 0 ]] || goal="every window p99 ≤ $CMP_GOAL_STEADY_P99 ms: MISS ($(cmp_v vq-node steady_empty_windows) window(s) with no job started)"
    cmp_row "steady load, held snapshot, handler in Node: vq_job's external handler run by clients/node's Worker (best drain setting), the peers as above: worst ${CMP_STEADY_WINDOW}-s window start latency p50 / p99 (ms)" min "$goal"
    CELL=(); SCORE=()
    for s in vq graphile pgboss; do
        local n="$s"; [[ "$s" == vq ]] && n=vq-node
        SCORE[$s]="$(cmp_v "$n" steady_backlog_max)"; CELL[$s]="$(cmp_thousands "${SCORE[$s]}")"
    done
    cmp_row "steady load, held snapshot, handler in Node: largest due backlog (jobs)" min \
        "≤ $(cmp_thousands "$CMP_GOAL_STEADY_BACKLOG"): $(cmp_goal "$(cmp_v vq-node steady_backlog_max)" le "$CMP_GOAL_STEADY_BACKLOG")"
}
cmp_lat_what() { if [[ "$1" == ack ]]; then echo "enqueue commit acknowledged → handler start"; else echo "enqueue call → handler start"; fi; }

cmp_settings_table() {
    echo "| system | setting | jobs/s | jobs/s from the first handler start |"
    echo "|---|---|---:|---:|"
    # grouped: vq_job's PL/pgSQL handler, its Node, Python and vq_consumer workers, the peers, the ceilings
    awk -F'\t' 'BEGIN { split("vq:drain vq:node vq:py vq:coproc graphile:drain pgboss:drain sql:drain sql:ceil2", o, " ")
                        for (i in o) rank[o[i]] = i }
                 $2 ~ /^(drain|coproc|node|py|ceil2):/ { split($2, k, ":")
                     printf "%d\t%06d\t%s\t%s\t%s\t%s\n", rank[$1 ":" k[1]], NR, $1, k[1], substr($2, length(k[1]) + 2), $3 }' "$CMP_RESULTS" |
        sort -t$'\t' -k1,1n -k2,2n | cut -f3- |
        while IFS=$'\t' read -r s kind setting rate; do
            local first="-" text="$setting"
            case "$s:$kind" in
                vq:drain) text="PL/pgSQL handler, $setting" ;;
                vq:coproc) text="vq_consumer --coprocess, $setting" ;;
                vq:node) text="clients/node Worker, $setting"; first="$(cmp_thousands "$(cmp_v vq "node_first:$setting")")" ;;
                vq:py) text="clients/python $setting"; first="$(cmp_thousands "$(cmp_v vq "py_first:$setting")")" ;;
                sql:drain) text="one-step ceiling, $setting" ;;
                sql:ceil2) text="two-step ceiling, pgbench ${setting#c=} client(s), $CMP_CEIL2_CLAIM rows per claim" ;;
                graphile:*|pgboss:*) first="(as measured)" ;;
            esac
            printf '| %s | %s | %s | %s |\n' "${CMP_NAMES[$s]}" "$text" "$(cmp_thousands "$rate")" "$first"
        done
}

cmp_steady_table() {
    local s f
    echo "| system | worker setting | window end (s) | jobs started | p50 (ms) | p99 (ms) | due backlog |"
    echo "|---|---|---:|---:|---:|---:|---:|"
    for s in ${CMP_SYSTEMS/vq/vq-defaults vq vq-node}; do
        f="$CMP_WORK/raw/$s.steady.windows"
        [[ -f "$f" ]] || continue
        local setting
        setting="$(cmp_v "$s" steady_setting)"
        [[ "$s" == vq-node ]] && setting="external handler, clients/node Worker $setting"
        [[ "$s" == vq || "$s" == vq-defaults ]] && setting="PL/pgSQL handler, $setting"
        while read -r end n p50 p99 backlog; do
            printf '| %s | %s | %s | %s | %s | %s | %s |\n' "${CMP_NAMES[$s]}" "$setting" \
                "$end" "$(cmp_thousands "$n")" "$p50" "$p99" "$(cmp_thousands "$backlog")"
        done <"$f"
    done
}

cmp_join() { local IFS=';'; local x="$*"; echo "${x//;/, }"; }
cmp_machine() {
    local cpu mem
    cpu="$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1)"
    mem="$(awk '/^MemTotal/ { printf "%.1f GB", $2 / 1048576 }' /proc/meminfo)"
    echo "$(nproc) CPUs ($cpu), $mem RAM, $(uname -sr)"
}

cmp_label() {
    case "$1" in
        vq-defaults) echo "vq_job (queue as shipped)" ;;
        vq) echo "vq_job (max_concurrent_jobs 100)" ;;
        vq-node) echo "vq_job (clients/node Worker)" ;;
        *) echo "${CMP_NAMES[$1]}" ;;
    esac
}

cmp_plots() {
    local dir="$1" s
    # throughput.dat: workload vq graphile pgboss sql
    {
        echo "workload vq_job graphile-worker pg-boss plain-SQL"
        for k in enq_api:"enqueue\\nclient API" enq_sql:"enqueue\\nSQL" batch:"batch\\nenqueue" drain:"drain\\n(best)"; do
            printf '"%s"' "${k#*:}"
            for s in vq graphile pgboss sql; do
                v="$(cmp_v "$s" "${k%%:*}")"; [[ "$v" == - ]] && v=NaN
                printf ' %s' "$v"
            done
            printf '\n'
        done
        # the handler outside the server: vq_job's clients/node Worker, the peers' best, the two-step ceiling
        printf '"drain, handler\\nin Node"'
        for v in "$(cmp_v vq node)" "$(cmp_v graphile drain)" "$(cmp_v pgboss drain)" "$(cmp_v sql ceil2)"; do
            [[ "$v" == - ]] && v=NaN
            printf ' %s' "$v"
        done
        printf '\n'
    } >"$dir/raw/throughput.dat"
    {
        echo "run p50 p95 p99"
        for s in vq graphile pgboss; do
            for t in default minpoll; do
                [[ "$(cmp_v "$s" "lat_$t:ack_p50")" == - ]] && continue
                local lbl="${CMP_NAMES[$s]}"
                [[ "$t" == minpoll ]] && lbl="$lbl\\npoll ${CMP_MIN_POLL_MS[$s]} ms"
                printf '"%s" %s %s %s\n' "$lbl" "$(cmp_v "$s" "lat_$t:ack_p50")" "$(cmp_v "$s" "lat_$t:ack_p95")" "$(cmp_v "$s" "lat_$t:ack_p99")"
            done
        done
        [[ "$(cmp_v vq lat_node:ack_p50)" == - ]] ||
            printf '"%s" %s %s %s\n' 'vq_job\nNode worker' "$(cmp_v vq lat_node:ack_p50)" "$(cmp_v vq lat_node:ack_p95)" "$(cmp_v vq lat_node:ack_p99)"
    } >"$dir/raw/latency.dat"
    # One bar per system that ran (a column with no value at all is an error for gnuplot).
    local plot_tp="" col=2 sys_sql="vq graphile pgboss sql" sep=""
    for s in $sys_sql; do
        if [[ " $CMP_SYSTEMS " == *" $s "* || ("$s" == sql && " $CMP_SYSTEMS " == *" vq "*) ]]; then
            plot_tp+="$sep\"$dir/raw/throughput.dat\" using $col:xtic(1) title col"
            sep=", "
        fi
        col=$((col + 1))
    done
    gnuplot <<GP
set terminal pngcairo noenhanced size 900,500 font "sans,10"
set style data histograms
set style histogram clustered gap 1
set bmargin 5
set style fill solid 0.85 border -1
set key top right
set grid ytics
set logscale y
set output "$dir/throughput.png"
set title "Throughput (jobs/s, log scale; higher is better) — $CMP_MODE mode"
plot $plot_tp
set output "$dir/latency.png"
set title "Idle workers: enqueue commit acknowledged → handler start (ms, log scale; lower is better)"
plot "$dir/raw/latency.dat" using 2:xtic(1) title col, '' using 3 title col, '' using 4 title col
GP
    local plot_lat="" plot_bl=""
    sep=""
    for s in ${CMP_SYSTEMS/vq/vq-defaults vq vq-node}; do
        [[ -f "$dir/raw/$s.steady.windows" ]] || continue
        awk 'NR == 1 { t0 = $1 } { printf "%.1f %s\n", ($1 - t0) / 1000, $2 }' "$CMP_WORK/raw/$s.steady.backlog" >"$dir/raw/$s.steady.backlog.dat"
        plot_lat+="$sep\"$dir/raw/$s.steady.windows\" using 1:(\$4 > 0 ? \$4 : NaN) with linespoints lw 2 title \"$(cmp_label "$s") p99\""
        plot_bl+="$sep\"$dir/raw/$s.steady.backlog.dat\" using 1:(\$2 + 1) with lines lw 2 title \"$(cmp_label "$s")\""
        sep=", "
    done
    [[ -n "$plot_lat" ]] || return 0
    gnuplot <<GP
set terminal pngcairo noenhanced size 900,700 font "sans,10"
set output "$dir/steady.png"
set multiplot layout 2,1 title "Steady load, $((CMP_STEADY_RATE * CMP_STEADY_PER_TXN)) jobs/s offered, REPEATABLE READ snapshot held throughout"
set grid
set logscale y
set xlabel "s"
set ylabel "start latency p99 (ms)"
plot $plot_lat
set ylabel "due backlog + 1 (jobs)"
plot $plot_bl
unset multiplot
GP
}

cmp_report() {
    local dir="$1" s
    rm -rf "$dir/raw"
    mkdir -p "$dir/raw"
    # Keep the small raw files (logs, windows, samples); not the per-job steady-load records.
    cp "$CMP_RESULTS" "$dir/raw/results.tsv"
    for f in "$CMP_WORK"/raw/*; do
        [[ "$f" == *.steady.jobs ]] || cp "$f" "$dir/raw/"
    done
    cmp_plots "$dir"
    {
        echo "# vq_job, graphile-worker and pg-boss side by side"
        echo
        echo "Run of \`./scripts/compare$([[ "$CMP_MODE" == quick ]] && echo " --quick")\` started $CMP_STARTED."
        echo
        echo "- Machine: $(cmp_machine); load average before / after: $CMP_LOAD_BEFORE / $CMP_LOAD_AFTER"
        echo "- PostgreSQL $("$VQ_PG_BIN/postgres" --version | awk '{ print $3 }'), node $(node --version), pg (node-postgres) $(node -p "require('$CMP_DIR/node_modules/pg/package.json').version")"
        printf -- '- Versions:'
        for s in $CMP_SYSTEMS; do printf ' %s %s;' "${CMP_NAMES[$s]}" "$(cmp_v "$s" version)"; done
        echo
        echo "- One fresh cluster per system, same settings: $(cmp_join "${CMP_PG_SETTINGS[@]}") (vq_job's adds shared_preload_libraries = 'vq_job'). Plain SQL ran on vq_job's cluster."
        echo
        cmp_table
        echo
        echo "Bold: the best of the three systems in the row. Throughput rows: more is better; latency and backlog rows: less is better (latency rows compare p50; steady-load rows the worst window's p99 and the largest backlog). Steady load: \"enqueued\" is the rate the producers reached (a system whose enqueue is slower than the offered rate gets less load)."
        echo
        echo "![throughput](throughput.png)"
        echo "![latency](latency.png)"
        echo "![steady load](steady.png)"
        echo
        echo "## Drain settings tried"
        echo
        cmp_settings_table
        echo
        echo "## Steady load with a held snapshot, per window"
        echo
        cmp_steady_table
        echo
        echo "Method: see test/compare/README.md. Raw figures: raw/results.tsv; logs in raw/."
    } >"$dir/results.md"
}
