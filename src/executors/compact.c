/*
 * compact.c: giving back the space a long-held snapshot made vq.job_active
 * take.
 *
 * Every job passes through vq.job_active and leaves it when it ends (to
 * vq.job_finished), so the table holds few live rows while dead versions come
 * and go at the rate of the jobs; vacuum keeps it at the size that rate fills
 * between two of its runs. A snapshot held for minutes (a report, pg_dump, a
 * session idle in transaction) keeps vacuum from removing anything: the table
 * and its indexes grow by every job that ends meanwhile. Once the snapshot is
 * gone, vacuum makes that space reusable but gives none of it back, and the
 * indexes never shrink by themselves.
 *
 * So executor 0 looks at the table every COMPACT_CHECK_MS, and right after a
 * vacuum (the dead versions and their index entries are gone: a rewrite then
 * reads only the rows that are there) it rewrites the table when it is more
 * than twice the size it needs (its rows, and room for what one vacuum cycle
 * adds) and holds at most COMPACT_MAX_ROWS rows: CLUSTER on the primary key,
 * which rebuilds the indexes too and keeps every version an older snapshot
 * could still see. The rewrite holds an ACCESS EXCLUSIVE lock while it copies
 * those rows (milliseconds for thousands): enqueues and claims wait that
 * long, once. It waits for the lock at most COMPACT_LOCK_TIMEOUT_MS (behind a
 * running inline batch, say) and tries again at the next check otherwise.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "util/spi_util.h"
#include "run/subxact.h"
#include "executors/compact.h"

#define COMPACT_CHECK_MS 5000
/*
 * What the table needs: room for the rows in it and for the row versions one
 * vacuum cycle leaves behind (those its updates and deletes ended between two
 * vacuums, counted by the statistics' cumulative counters: the dead-row count
 * is no measure, on-access pruning lowers it as it goes), at
 * COMPACT_BYTES_PER_ROW each (~400 bytes measured with the index entries,
 * rounded up), plus COMPACT_BASE_BYTES. It is rewritten when it is more than
 * COMPACT_BLOAT times that: steady load keeps it at about half of it.
 */
#define COMPACT_BLOAT 2
#define COMPACT_BYTES_PER_ROW 512
#define COMPACT_BASE_BYTES (1024 * 1024)
/* Only with at most this many rows (live and dead) in the table: the rewrite copies them under its lock. */
#define COMPACT_MAX_ROWS 100000
#define COMPACT_LOCK_TIMEOUT_MS "50"

typedef struct CompactState
{
	TimestampTz last_check;
	int64		vacuums;		/* vacuums of the table seen so far, -1 before the first check */
	int64		cycle_ended;	/* versions ended so far, first seen after the last vacuum */
	int64		last_growth;	/* versions ended in the cycle the last vacuum closed, -1 unknown */
	int64		cycle_growth;	/* the most of that cycle's and the one before, -1 unknown */
	bool		wanted;			/* a vacuum ended a cycle: look whether to rewrite */
} CompactState;

static CompactState state = {0, -1, 0, -1, -1, false};

/*
 * The table's size (heap, indexes, TOAST), rows (live and dead, as counted by
 * the statistics), row versions ended so far (updated and deleted) and vacuum
 * count.
 */
static void
ReadTableFigures(int64 *bytes, int64 *rows, int64 *ended, int64 *vacuums)
{
	static SPIPlanPtr plan = NULL;
	bool		isnull;

	(void) VqKeepPlan(&plan,
					  "SELECT pg_catalog.pg_total_relation_size(c),"
					  " pg_catalog.pg_stat_get_live_tuples(c) OPERATOR(pg_catalog.+) pg_catalog.pg_stat_get_dead_tuples(c),"
					  " pg_catalog.pg_stat_get_tuples_updated(c) OPERATOR(pg_catalog.+) pg_catalog.pg_stat_get_tuples_deleted(c),"
					  " pg_catalog.pg_stat_get_vacuum_count(c) OPERATOR(pg_catalog.+) pg_catalog.pg_stat_get_autovacuum_count(c)"
					  " FROM (SELECT 'vq.job_active'::pg_catalog.regclass) r(c)",
					  0, NULL);
	if (SPI_execute_plan(plan, NULL, NULL, true, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "vq_job: reading the size of vq.job_active failed");
	*bytes = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	*rows = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	*ended = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull));
	*vacuums = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &isnull));
}

/* Whether the table is worth a rewrite now; keeps track of the vacuum cycles. */
static bool
RewriteDue(int64 bytes, int64 rows, int64 ended, int64 vacuums)
{
	int64		needed;

	if (vacuums != state.vacuums)
	{
		/*
		 * Vacuums closed one cycle or more since the last check (a share of
		 * the versions ended meanwhile each): unknown for the first one seen,
		 * and after the statistics were reset (the counters went back)
		 */
		int64		growth = state.vacuums < 0 || vacuums < state.vacuums || ended < state.cycle_ended ? -1 :
			(ended - state.cycle_ended) / (vacuums - state.vacuums);

		/*
		 * Vacuums come at uneven intervals (executor 0's every 10 s, and
		 * autovacuum's): a cycle that a second vacuum cut short says little
		 * of what the table needs, the longer of two cycles says more.
		 */
		state.cycle_growth = growth < 0 ? -1 : Max(growth, state.last_growth);
		state.last_growth = growth;
		state.wanted = state.cycle_growth >= 0;
		state.vacuums = vacuums;
		state.cycle_ended = ended;
	}
	if (!state.wanted)
		return false;
	if (rows > COMPACT_MAX_ROWS)
	{
		state.wanted = false;	/* too much to copy under the lock; after the next vacuum maybe */
		return false;
	}
	needed = (rows + state.cycle_growth) * COMPACT_BYTES_PER_ROW + COMPACT_BASE_BYTES;
	if (bytes <= COMPACT_BLOAT * needed)
	{
		state.wanted = false;
		return false;
	}
	return true;
}

/*
 * How many rows the table holds, counted up to limit + 1: the statistics'
 * count starts again from zero after a crash or pg_stat_reset(), and the
 * rewrite must not find a big backlog it did not expect under its lock.
 */
static int64
CountRowsUpTo(int64 limit)
{
	static SPIPlanPtr plan = NULL;
	Datum		value = Int64GetDatum(limit + 1);
	bool		isnull;
	int			level = VqIndexScansBegin();	/* the heap is mostly empty pages: read by an index */

	(void) VqKeepPlan(&plan, "SELECT pg_catalog.count(*) FROM (SELECT FROM vq.job_active LIMIT $1) s",
					  1, (Oid[]) {INT8OID});
	if (SPI_execute_plan(plan, &value, NULL, true, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "vq_job: counting the rows of vq.job_active failed");
	VqIndexScansEnd(level);
	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/* CLUSTER the table by its primary key (in the caller's subtransaction, which keeps it). */
static bool
Cluster(void *arg)
{
	int			level = VqIndexScansBegin();	/* copy by the index: the heap is mostly empty pages */

	(void) set_config_option("lock_timeout", COMPACT_LOCK_TIMEOUT_MS, PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	/* (its index builds without parallel workers, whatever the database says) */
	(void) set_config_option("max_parallel_maintenance_workers", "0", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	if (SPI_execute("CLUSTER vq.job_active USING job_active_pkey", false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "vq_job: CLUSTER vq.job_active failed");
	VqIndexScansEnd(level);
	return true;
}

/*
 * Rewrite the table in a subtransaction: a lock not granted in time (or any
 * other error) rolls back only the attempt; returns whether it was done.
 */
static bool
RewriteTable(void)
{
	ErrorData  *edata = VqTryInSubtransaction(Cluster, NULL);

	if (edata == NULL)
		return true;
	if (edata->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE)
		ereport(DEBUG1,
				(errmsg("vq_job: rewriting vq.job_active: %s; trying again in %d s",
						edata->message, COMPACT_CHECK_MS / 1000)));
	else
	{
		state.wanted = false;
		ereport(WARNING,
				(errmsg("vq_job: rewriting vq.job_active to give back its free space failed: %s", edata->message),
				 errdetail("It is tried again after the next vacuum of the table.")));
	}
	FreeErrorData(edata);
	return false;
}

void
VqCompactJobTable(TimestampTz now)
{
	int64		bytes,
				rows,
				ended,
				vacuums;
	bool		rewrote = false;
	TimestampTz started = 0;

	if (!TimestampDifferenceExceeds(state.last_check, now, COMPACT_CHECK_MS))
		return;
	state.last_check = now;
	VqBeginTransaction();
	ReadTableFigures(&bytes, &rows, &ended, &vacuums);
	if (RewriteDue(bytes, rows, ended, vacuums))
	{
		rows = CountRowsUpTo(COMPACT_MAX_ROWS);
		started = GetCurrentTimestamp();
		rewrote = rows <= COMPACT_MAX_ROWS && RewriteTable();
		if (rewrote || rows > COMPACT_MAX_ROWS)
			state.wanted = false;	/* else the lock was not granted in time: again at the next check */
	}
	VqCommitTransaction();
	if (rewrote)
		ereport(LOG,
				(errmsg("vq_job: rewrote vq.job_active (%lld MB, %lld rows) to give back the space vacuum had freed, in %ld ms",
						(long long) (bytes / (1024 * 1024)), (long long) rows,
						(long) ((GetCurrentTimestamp() - started) / 1000)),
				 errdetail("A snapshot held for long had kept vacuum from removing the versions of ended jobs.")));
}
