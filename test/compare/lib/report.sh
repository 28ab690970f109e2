# shellcheck shell=bash
# test/compare/lib/report.sh — the results of scripts/compare: results.md (the table, every drain
# setting tried, the steady-load windows), throughput.png, latency.png, steady.png and raw/.
#
#   cmp_report DIR      needs CMP_RESULTS, CMP_WORK, CMP_MODE, CMP_SYSTEMS and the counts of cmp_sizes

declare -A CMP_NAMES=([vq]=vq_job [vq-defaults]=vq_job [graphile]=graphile-worker [pgboss]=pg-boss [sql]="plain SQL")

cmp_v() { local v; v="$(cmp_lookup "$1" "$2")"; echo "${v:--}"; }
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

# cmp_row LABEL BETTER: one table row from CELL[sys] (the text) and SCORE[sys] (the number
# compared) of vq, graphile, pgboss (and CELL[sql]); the best score among the systems that ran
# (BETTER: max or min) is bold, ties included.
cmp_row() {
    local label="$1" better="$2" s best="" cells=() score verdict="-" ran=()
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
    printf '| %s | %s | %s | %s | %s | %s |\n' "$label" "${cells[0]}" "${cells[1]}" "${cells[2]}" "${CELL[sql]:--}" "$verdict"
}

cmp_table() {
    local -A CELL SCORE
    local s k
    echo "| workload | vq_job | graphile-worker | pg-boss | plain SQL | vq_job leads |"
    echo "|---|---:|---:|---:|---:|:-:|"
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
    cmp_row "drain of $(cmp_thousands "$CMP_DRAIN_JOBS") no-op jobs, best setting (jobs/s; vq_job: PL/pgSQL handler; plain SQL: the ceiling)" max
    CELL=(); SCORE=()
    SCORE[vq]="$(cmp_v vq coproc)"; CELL[vq]="$(cmp_thousands "${SCORE[vq]}") ($(cmp_v vq coproc_setting))"
    for s in graphile pgboss; do SCORE[$s]="$(cmp_v "$s" drain)"; CELL[$s]="$(cmp_thousands "${SCORE[$s]}") (as above)"; done
    cmp_row "drain, vq_job: handler outside the server (vq_consumer --coprocess) vs the peers' best (jobs/s)" max
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
}
cmp_lat_what() { if [[ "$1" == ack ]]; then echo "enqueue commit acknowledged → handler start"; else echo "enqueue call → handler start"; fi; }

cmp_settings_table() {
    echo "| system | setting | jobs/s |"
    echo "|---|---|---:|"
    awk -F'\t' '$2 ~ /^(drain|coproc):/ { split($2, k, ":"); print $1 "\t" k[1] "\t" substr($2, length(k[1]) + 2) "\t" $3 }' "$CMP_RESULTS" |
        while IFS=$'\t' read -r s kind setting rate; do
            [[ "$kind" == coproc ]] && setting="vq_consumer --coprocess, $setting"
            [[ "$s" == vq && "$kind" == drain ]] && setting="PL/pgSQL handler, $setting"
            printf '| %s | %s | %s |\n' "${CMP_NAMES[$s]}" "$setting" "$(cmp_thousands "$rate")"
        done
}

cmp_steady_table() {
    local s f
    echo "| system | worker setting | window end (s) | jobs started | p50 (ms) | p99 (ms) | due backlog |"
    echo "|---|---|---:|---:|---:|---:|---:|"
    for s in ${CMP_SYSTEMS/vq/vq-defaults vq}; do
        f="$CMP_WORK/raw/$s.steady.windows"
        [[ -f "$f" ]] || continue
        while read -r end n p50 p99 backlog; do
            printf '| %s | %s | %s | %s | %s | %s | %s |\n' "${CMP_NAMES[$s]}" "$(cmp_v "$s" steady_setting)" \
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
    for s in ${CMP_SYSTEMS/vq/vq-defaults vq}; do
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
