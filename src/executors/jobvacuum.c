/*
 * jobvacuum.c: vacuuming vq.job_active as often as the jobs need it.
 *
 * Every job that ends leaves a dead version of its row (and its index
 * entries) in vq.job_active, so under steady load the table is as big as
 * what the jobs fill between two vacuums. Autovacuum visits a database only
 * once per autovacuum_naptime (a minute by default) whatever the per-table
 * thresholds say: at thousands of jobs a second the table would swing
 * between a few MB and a hundred, and its size would depend on where in that
 * minute one looks.
 *
 * So executor 0 vacuums the table itself every JOB_VACUUM_INTERVAL_MS when
 * there is something to remove: enough dead versions, and a removal horizon
 * that moved since its last vacuum (while a snapshot is held it does not, and
 * a vacuum would only read the whole table to remove nothing; autovacuum's
 * visits go on as configured). A vacuum by autovacuum counts too: the next
 * one comes an interval after it. The vacuum runs in its own transactions,
 * skips the table if another vacuum holds it, and takes milliseconds for the
 * few MB the table then stays at; the other executors keep claiming. A heap
 * over JOB_VACUUM_MAX_PAGES is left to autovacuum.
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/transam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "commands/vacuum.h"
#include "nodes/makefuncs.h"
#include "parser/parse_node.h"
#include "pgstat.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/procarray.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "main/compat.h"
#include "executors/jobvacuum.h"

#define JOB_VACUUM_INTERVAL_MS 10000
/* Fewer dead versions than this are not worth a vacuum (the table's own autovacuum threshold). */
#define JOB_VACUUM_MIN_DEAD 1000
/*
 * A bigger heap (128 MB) is what a held snapshot leaves behind, or a backlog
 * of hundreds of thousands of jobs: vacuuming it takes seconds and a burst of
 * WAL that executor 0 would spend instead of claiming. Autovacuum's own
 * worker vacuums it then (and executor 0 rewrites it after that, compact.c).
 */
#define JOB_VACUUM_MAX_PAGES 16384

typedef struct JobVacuumState
{
	TimestampTz last_vacuum;	/* when a vacuum of the table was last seen or run */
	int64		vacuums;		/* the table's vacuum count then, -1 before the first look */
	TransactionId horizon;		/* the removal horizon at our last vacuum */
} JobVacuumState;

static JobVacuumState state = {0, -1, InvalidTransactionId};

/* What the table looks like now: its OID, dead versions, vacuum count and removal horizon. */
typedef struct JobTableFigures
{
	Oid			relid;
	BlockNumber pages;
	int64		dead;
	int64		vacuums;
	TransactionId horizon;
} JobTableFigures;

/* Read the figures in a short transaction of their own; false if the table is not there. */
static bool
ReadFigures(JobTableFigures *figures)
{
	Oid			namespace;
	PgStat_StatTabEntry *stats;
	Relation	rel;

	StartTransactionCommand();
	namespace = get_namespace_oid("vq", true);
	figures->relid = OidIsValid(namespace) ? get_relname_relid("job_active", namespace) : InvalidOid;
	rel = NULL;
	if (OidIsValid(figures->relid) && ConditionalLockRelationOid(figures->relid, AccessShareLock))
		rel = try_relation_open(figures->relid, NoLock);
	if (rel == NULL)
	{
		CommitTransactionCommand();
		return false;			/* gone, or locked by a rewrite: look again later */
	}
	figures->horizon = GetOldestNonRemovableTransactionId(rel);
	figures->pages = RelationGetNumberOfBlocks(rel);
	relation_close(rel, NoLock);
	stats = pgstat_fetch_stat_tabentry(figures->relid);
	figures->dead = stats ? vq_stat_dead_tuples(stats) : 0;
	figures->vacuums = stats ? vq_stat_vacuums(stats) : 0;
	CommitTransactionCommand();
	return true;
}

/* Whether a vacuum would remove enough to be worth its reading the table. */
static bool
VacuumDue(const JobTableFigures *figures, TimestampTz now)
{
	if (figures->vacuums != state.vacuums)
	{
		/* someone vacuumed it (autovacuum, a user, or it is the first look): an interval from now */
		state.vacuums = figures->vacuums;
		state.last_vacuum = now;
		return false;
	}
	if (!TimestampDifferenceExceeds(state.last_vacuum, now, JOB_VACUUM_INTERVAL_MS))
		return false;
	if (figures->dead < JOB_VACUUM_MIN_DEAD || figures->pages > JOB_VACUUM_MAX_PAGES)
		return false;
	return !TransactionIdIsValid(state.horizon) || TransactionIdFollows(figures->horizon, state.horizon);
}

/* VACUUM (SKIP_LOCKED) the table, as the VACUUM command would from a session of its own. */
static void
Vacuum(Oid relid)
{
	MemoryContext portal = AllocSetContextCreate(TopMemoryContext, "vq_job vacuum", ALLOCSET_DEFAULT_SIZES);
	MemoryContext old_portal = PortalContext;
	MemoryContext old = MemoryContextSwitchTo(portal);
	VacuumStmt *stmt = makeNode(VacuumStmt);

	/*
	 * VACUUM commits and starts transactions as it goes: the statement must
	 * live outside them, and so must what VACUUM keeps across them (in a
	 * child of PortalContext).
	 */
	/*
	 * (PARALLEL 0: whatever min_parallel_index_scan_size says, never parallel
	 * workers, which a stop or a full max_worker_processes could leave
	 * failing to initialize, an error that would end the executor)
	 */
	stmt->options = list_make2(makeDefElem("skip_locked", (Node *) makeBoolean(true), -1),
							   makeDefElem("parallel", (Node *) makeInteger(0), -1));
	/* by OID: a table skipped because another vacuum holds it is skipped without a warning */
	stmt->rels = list_make1(makeVacuumRelation(NULL, relid, NIL));
	stmt->is_vacuumcmd = true;
	PortalContext = portal;
	StartTransactionCommand();
	ExecVacuum(make_parsestate(NULL), stmt, true);
	CommitTransactionCommand();
	PortalContext = old_portal;
	MemoryContextSwitchTo(old);
	MemoryContextDelete(portal);
}

void
VqVacuumJobTable(TimestampTz now)
{
	JobTableFigures figures;

	if (!ReadFigures(&figures) || !VacuumDue(&figures, now))
		return;
	Vacuum(figures.relid);
	state.horizon = figures.horizon;
	state.last_vacuum = GetCurrentTimestamp();
	state.vacuums = -1;			/* the next look takes the count this vacuum left */
}
