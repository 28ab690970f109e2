/*
 * launcher.c: the launcher background worker. It owns every served
 * database's lifecycle: it is connected to no database (it reads only the
 * shared catalog pg_database), assigns each served database a shared-memory
 * slot, starts and stops its executors (executor.c), and moves the slot's
 * state; other processes only send it requests (main/requests.h) and wake it.
 *
 *   FREE --launcher starts executor 0--> STARTING
 *   STARTING --executor 0 reports the extension present--> ACTIVE (the others start)
 *   STARTING or ACTIVE --an executor reports it absent--> NO_EXTENSION
 *   NO_EXTENSION --10 s passed, or CREATE EXTENSION vq_job committed--> STARTING
 *
 * A report counts only if no CREATE or DROP EXTENSION committed since its
 * executor looked (the slot's extension_generation), so a report that
 * crossed a CREATE EXTENSION cannot leave the database unserved.
 *
 * Stopping executors. A stop request (a utility statement needs the database
 * alone, see guard.c) or the launcher's own shutdown stops them the same
 * way: SIGTERM; an executor then claims nothing more, lets its running
 * handler finish, records the outcome and exits. A handler still running
 * vq.shutdown_grace_ms later is cancelled (SIGINT: the job is recorded
 * INTERRUPTED, its attempt not consumed), and an executor still alive
 * SHUTDOWN_DIE_AFTER_MS after that is told to die (SIGUSR2; it records its job
 * INTERRUPTED as it exits). The launcher restarts an executor that exited (at
 * most once a second), which also restarts everything after a crash; on start, the
 * executors rescue jobs left RUNNING by dead processes. While the server is
 * in recovery (a hot standby) it starts nothing; after promotion it serves as
 * usual.
 */
#include "postgres.h"

#include <signal.h>

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_database.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"
#include "utils/wait_event.h"

#include "main/guc.h"
#include "main/requests.h"
#include "main/shmem.h"
#include "main/wake.h"
#include "claim/claimpos.h"
#include "claim/inflight.h"
#include "claim/take.h"
#include "executors/pool.h"
#include "executors/saver.h"
#include "launcher/launcher.h"

PGDLLEXPORT void vq_launcher_main(Datum arg);

/* How long a database without the extension waits before it is checked again. */
#define NO_EXTENSION_RECHECK_MS 10000
/* Least time between two probes of databases without the extension (each starts an executor). */
#define PROBE_INTERVAL_MS 100
/* Least time between two starts of the same executor. */
#define RESTART_INTERVAL_MS 1000
/* After the grace, how long a cancelled handler has before its executor is told to die. */
#define SHUTDOWN_DIE_AFTER_MS 2000
/* A WARNING that would repeat (a resource is full, retried every second) is logged at most this often per cause. */
#define THROTTLE_MS 60000

/* How the launcher is stopping one executor. */
typedef struct ExecutorStop
{
	TimestampTz sigterm_at;		/* when it was asked to stop (0: it was not) */
	bool		cancelled;		/* its handler was cancelled after the grace */
	bool		killed;			/* it was told to die */
} ExecutorStop;

/* Launcher-local bookkeeping per database. */
typedef struct LauncherDatabase
{
	Oid			dboid;			/* hash key */
	char		name[NAMEDATALEN];
	bool		seen;			/* still in pg_database at the last scan */
	BackgroundWorkerHandle *handles[VQ_MAX_EXECUTORS];
	TimestampTz last_start[VQ_MAX_EXECUTORS];
	ExecutorStop stops[VQ_MAX_EXECUTORS];
	/* found without the extension: its slot was given back (see ServeDatabase) */
	bool		parked;
	TimestampTz parked_since;
	uint64		changes_at_probe;	/* VqShared->extension_changes when its last probe began */
	uint64		reloads_at_park;	/* config_reloads when it was parked */
	/* the saver of its running jobs' progress and logs (see SaveRunningJobs) */
	BackgroundWorkerHandle *saver;
	TimestampTz save_looked_at;
	VqRunningJob saved[VQ_MAX_EXECUTORS];	/* each executor's job as the last saver started saw it */
	/* who gets the background worker slots (see ServeDatabases) */
	bool		served;			/* reported present since it last held a slot: warnings name it */
	bool		probe_may_preempt;	/* its probe was asked for, not periodic: it may take a slot */
	bool		first_failed;	/* its first executor's last start found no background worker slot */
	VqDatabaseSlot *pass_slot;	/* this pass: its slot when ACTIVE and not stopped (else NULL) */
	int			wanted;			/* this pass: executors asked for on demand, not started yet */
	int			next_extra;		/* this pass: the next executor number to look at for them */
	bool		cap_reported;	/* the LOG line about vq.max_executors was written for this streak */
} LauncherDatabase;

/*
 * A WARNING about a full resource, logged at most once per THROTTLE_MS per
 * cause (the next says how many it stood for), never for a database known
 * to have no vq_job.
 */
typedef struct Throttle
{
	TimestampTz logged_at;
	int			suppressed;
} Throttle;

static Throttle executor_slot_throttle;	/* no background worker slot for an executor */
static Throttle saver_slot_throttle;	/* ... for a saver */
static Throttle database_slot_throttle; /* no vq.max_databases slot */

/* What one pass over the databases found (ServeDatabases). */
typedef struct ServePass
{
	long		timeout;		/* ms until some database needs attention */
	int			waiting;		/* databases whose first executor does not run */
	int			waiting_probes;	/* those of them not known to be served: probes asked for */
	bool		may_preempt;	/* one of them found no slot and may take another database's executor's */
} ServePass;

/* The executor asked to stop so that a database waiting for its first gets its slot (see PreemptOneExecutor). */
static Oid	preempted_db = InvalidOid;
static int	preempted_index = 0;
static pid_t preempted_pid = 0;

static void ParkDatabase(LauncherDatabase *db, TimestampTz now);

static HTAB *launcher_databases = NULL;
/* Configuration reloads so far (one may make a parked database served: it is probed again). */
static uint64 config_reloads = 0;

/* Mark every database of pg_database that accepts connections as seen (and add new ones). */
static void
ScanDatabases(void)
{
	HASH_SEQ_STATUS seq;
	LauncherDatabase *db;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;

	hash_seq_init(&seq, launcher_databases);
	while ((db = hash_seq_search(&seq)) != NULL)
		db->seen = false;

	StartTransactionCommand();
	(void) GetTransactionSnapshot();
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while (HeapTupleIsValid(tup = heap_getnext(scan, ForwardScanDirection)))
	{
		Form_pg_database form = (Form_pg_database) GETSTRUCT(tup);
		bool		found;

		if (!form->datallowconn || form->datistemplate || !VqDatabaseSelected(NameStr(form->datname)))
			continue;
		db = hash_search(launcher_databases, &form->oid, HASH_ENTER, &found);
		if (!found)
		{
			memset(db->handles, 0, sizeof(db->handles));
			memset(db->last_start, 0, sizeof(db->last_start));
			memset(db->stops, 0, sizeof(db->stops));
			db->saver = NULL;
			db->save_looked_at = 0;
			memset(db->saved, 0, sizeof(db->saved));
			db->served = false;
			db->probe_may_preempt = true;	/* (never looked at since the launcher started) */
			db->first_failed = false;
			db->cap_reported = false;
			db->parked = false;
			db->changes_at_probe = pg_atomic_read_u64(&VqShared->extension_changes);
		}
		strlcpy(db->name, NameStr(form->datname), NAMEDATALEN);
		db->seen = true;
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();
}

/* Is the executor behind this handle running (or about to)? */
static bool
HandleAlive(BackgroundWorkerHandle *handle)
{
	pid_t		pid;

	if (handle == NULL)
		return false;
	return GetBackgroundWorkerPid(handle, &pid) != BGWH_STOPPED;
}

/* Whether a throttled WARNING may be logged now; *suppressed: how many were not since the last one. */
static bool
ThrottleAllows(Throttle *t, int *suppressed)
{
	TimestampTz now = GetCurrentTimestamp();

	if (t->logged_at != 0 && !TimestampDifferenceExceeds(t->logged_at, now, THROTTLE_MS))
	{
		t->suppressed++;
		return false;
	}
	*suppressed = t->suppressed;
	t->suppressed = 0;
	t->logged_at = now;
	return true;
}

/* The hint of every "no background worker slot" WARNING: how to size max_worker_processes. */
#define WORKER_SLOTS_HINT \
	"Raise max_worker_processes: it must leave room for vq_job's launcher and, per served database, " \
	"vq.executors_per_database executors (more on demand, up to vq.max_executors in all) and a saver, " \
	"besides parallel workers and other extensions' workers."

/* A served database's executor (or saver) found no background worker slot: say so, throttled. */
static void
WarnNoWorkerSlot(LauncherDatabase *db, int index)
{
	int			n;

	if (index >= 0 && ThrottleAllows(&executor_slot_throttle, &n))
		ereport(WARNING,
				(errmsg("vq_job: could not start executor %d for database \"%s\": no background worker slot is free",
						index, db->name),
				 n > 0 ? errdetail("%d more executor start(s) failed the same way since the last such warning.", n) : 0,
				 errhint(WORKER_SLOTS_HINT)));
	else if (index < 0 && ThrottleAllows(&saver_slot_throttle, &n))
		ereport(WARNING,
				(errmsg("vq_job: could not start a saver for database \"%s\": no background worker slot is free; the progress and logs of its running jobs are saved when they end",
						db->name),
				 n > 0 ? errdetail("%d more saver start(s) failed the same way since the last such warning.", n) : 0,
				 errhint(WORKER_SLOTS_HINT)));
}

/* Is executor index of the database running (or starting)? */
static bool
ExecutorRunning(VqDatabaseSlot *slot, LauncherDatabase *db, int index)
{
	bool		attached;

	LWLockAcquire(slot->lock, LW_SHARED);
	attached = slot->executors[index].pid != 0;
	LWLockRelease(slot->lock);
	/* (attached without a handle: started by a launcher that was restarted since) */
	return attached || HandleAlive(db->handles[index]);
}

/* Start executor number index of a database; false when no background worker slot was free. */
static bool
StartExecutor(LauncherDatabase *db, int index)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;	/* the launcher restarts it */
	strlcpy(worker.bgw_library_name, "vq_job", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "vq_executor_main", BGW_MAXLEN);
	snprintf(worker.bgw_name, BGW_MAXLEN, "vq_job executor %d for database %s", index, db->name);
	strlcpy(worker.bgw_type, "vq_job executor", BGW_MAXLEN);
	worker.bgw_main_arg = Int64GetDatum(((int64) db->dboid << 16) | index);
	worker.bgw_notify_pid = MyProcPid;

	if (db->handles[index] != NULL)
		pfree(db->handles[index]);
	db->handles[index] = NULL;
	db->last_start[index] = GetCurrentTimestamp();
	memset(&db->stops[index], 0, sizeof(ExecutorStop));
	return RegisterDynamicBackgroundWorker(&worker, &db->handles[index]);
}

/*
 * Every vq.max_databases slot is taken: when served databases hold them all
 * (probes give theirs back in a moment), say so, throttled, naming no
 * database (the one that found none may have no vq_job).
 */
static void
WarnNoDatabaseSlot(void)
{
	int			active = 0;
	int			n;

	LWLockAcquire(VqShared->lock, LW_SHARED);
	for (int i = 0; i < VqShared->nslots; i++)
		active += VqShared->slots[i].state == VQ_DB_ACTIVE;
	LWLockRelease(VqShared->lock);
	if (active == VqShared->nslots && ThrottleAllows(&database_slot_throttle, &n))
		ereport(WARNING,
				(errmsg("vq_job: all %d vq.max_databases slots are held by served databases: other databases are neither served nor looked at",
						VqShared->nslots),
				 n > 0 ? errdetail("%d more database(s) found no slot since the last such warning.", n) : 0,
				 errhint("Raise vq.max_databases (a restart is needed).")));
}

/* The slot of a database, assigned now if it has none; NULL when all are taken. */
static VqDatabaseSlot *
AssignSlot(LauncherDatabase *db, TimestampTz now)
{
	VqDatabaseSlot *slot;

	LWLockAcquire(VqShared->lock, LW_EXCLUSIVE);
	slot = VqFindDatabaseSlot(db->dboid);
	if (slot == NULL && (slot = VqFindDatabaseSlot(InvalidOid)) != NULL)
	{
		LWLockAcquire(slot->lock, LW_EXCLUSIVE);
		slot->dboid = db->dboid;
		slot->state = VQ_DB_STARTING;
		slot->state_since = now;
		/* what another database (or this one, before) asked for and learnt does not carry over */
		VqRequestsReset(slot);
		/* commits made while the database had no slot lowered nothing: learn positions afresh */
		VqClaimPositionsForget(slot);
		VqTakersForget(slot);
		VqNotifyBoundsForget(slot);
		VqHandlerTimingsForget(slot);
		LWLockRelease(slot->lock);
	}
	LWLockRelease(VqShared->lock);
	if (slot == NULL)
		WarnNoDatabaseSlot();
	return slot;
}

/*
 * Move a database's state on what its executors reported (caller holds the
 * slot's lock exclusively). A report made before the last CREATE or DROP
 * EXTENSION is stale: executor 0 is started to look again.
 */
static void
ApplyReports(VqDatabaseSlot *slot, LauncherDatabase *db, TimestampTz now)
{
	VqLauncherRequest *r = &slot->request;
	bool		current = r->extension_seen_at == pg_atomic_read_u64(&slot->extension_generation);
	VqDatabaseState state = slot->state;

	if (r->extension == VQ_EXT_PRESENT && current && state == VQ_DB_STARTING)
		state = VQ_DB_ACTIVE;
	else if (r->extension == VQ_EXT_ABSENT && current && state != VQ_DB_NO_EXTENSION)
		state = VQ_DB_NO_EXTENSION;
	else if (state == VQ_DB_NO_EXTENSION &&
			 (!current || TimestampDifferenceExceeds(slot->state_since, now, NO_EXTENSION_RECHECK_MS)))
	{
		state = VQ_DB_STARTING;
		VqForgetExtensionReport(slot);
		db->last_start[0] = 0;	/* executor 0 exited normally: restarting it now is no crash loop */
	}
	if (state != slot->state)
	{
		slot->state = state;
		slot->state_since = now;
	}
}

/* The earlier of a deadline so far (-1: none) and at, as ms from now. */
static long
EarlierDeadline(long next, TimestampTz now, TimestampTz at)
{
	long		ms = at <= now ? 0 : TimestampDifferenceMilliseconds(now, at) + 1;

	return next < 0 ? ms : Min(next, ms);
}

/*
 * Stop one executor, a step at a time: SIGTERM; after the grace, SIGINT if it
 * still runs a handler; SHUTDOWN_DIE_AFTER_MS later, SIGUSR2 (die). Returns
 * ms until its next step (-1: none).
 */
static long
StopExecutor(ExecutorStop *stop, VqExecutorSlot *e, TimestampTz now)
{
	TimestampTz cancel_at;
	TimestampTz die_at;
	VqRunningJob job;

	if (stop->sigterm_at == 0)
	{
		stop->sigterm_at = now;
		kill(e->pid, SIGTERM);
	}
	cancel_at = TimestampTzPlusMilliseconds(stop->sigterm_at, vq_shutdown_grace_ms);
	die_at = TimestampTzPlusMilliseconds(cancel_at, SHUTDOWN_DIE_AFTER_MS);
	if (!stop->cancelled && now >= cancel_at && VqReadRunningJob(e, &job))
	{
		stop->cancelled = true;
		kill(e->pid, SIGINT);
	}
	if (!stop->killed && now >= die_at)
	{
		stop->killed = true;
		kill(e->pid, SIGUSR2);
	}
	if (!stop->cancelled)
		return EarlierDeadline(-1, now, cancel_at);
	return stop->killed ? -1 : EarlierDeadline(-1, now, die_at);
}

/* Stop every executor of a database (see StopExecutor); returns ms until a next step, or -1. */
static long
StopExecutors(VqDatabaseSlot *slot, LauncherDatabase *db, TimestampTz now)
{
	long		next = -1;

	LWLockAcquire(slot->lock, LW_SHARED);
	for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
	{
		long		step;

		if (slot->executors[i].pid == 0)
			continue;
		step = StopExecutor(&db->stops[i], &slot->executors[i], now);
		if (step >= 0)
			next = next < 0 ? step : Min(next, step);
	}
	LWLockRelease(slot->lock);
	/* an executor's exit sets our latch (bgw_notify_pid); until then look at least every second */
	return next < 0 ? 1000 : Min(next, 1000);
}

/* Executors alive in the whole cluster (started by this launcher), for vq.max_executors. */
static int
ExecutorsAlive(void)
{
	HASH_SEQ_STATUS seq;
	LauncherDatabase *db;
	int			n = 0;

	hash_seq_init(&seq, launcher_databases);
	while ((db = hash_seq_search(&seq)) != NULL)
		for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
			n += HandleAlive(db->handles[i]) ? 1 : 0;
	return n;
}

/*
 * Start one more of the executors a database asked for on demand
 * (executors_wanted, see AskForExecutors in pool.c), numbered from
 * vq.executors_per_database on, counting those already starting, within
 * vq.max_executors in the cluster (*alive). Returns 1 when it started one, 0
 * when it has none to start (or the cap stops it), -1 when no background
 * worker slot was free.
 */
static int
StartOneWanted(LauncherDatabase *db, int *alive)
{
	while (db->wanted > 0 && db->next_extra < VQ_MAX_EXECUTORS)
	{
		int			i = db->next_extra++;
		bool		attached;

		LWLockAcquire(db->pass_slot->lock, LW_SHARED);
		attached = db->pass_slot->executors[i].pid != 0;
		LWLockRelease(db->pass_slot->lock);
		if (attached)
			continue;
		db->wanted--;			/* starting already, or started now */
		if (HandleAlive(db->handles[i]))
			continue;
		if (*alive >= vq_max_executors || !StartExecutor(db, i))
		{
			db->wanted++;
			db->next_extra--;
			if (*alive >= vq_max_executors)
				return 0;
			WarnNoWorkerSlot(db, i);
			return -1;
		}
		(*alive)++;
		return 1;
	}
	return 0;
}

/* Say (LOG, once per streak) that vq.max_executors keeps executors a database asked for from starting. */
static void
ReportCap(LauncherDatabase *db, int alive)
{
	if (db->wanted > 0 && !db->cap_reported)
		ereport(LOG,
				(errmsg("vq_job: %d more executor(s) wanted for database \"%s\" not started: %d executors run (vq.max_executors = %d, at most %d per database)",
						db->wanted, db->name, alive, vq_max_executors, VQ_MAX_EXECUTORS),
				 errhint("Jobs of slow handlers wait for a free executor; raise vq.max_executors (and max_worker_processes) to run more at once.")));
	db->cap_reported = db->wanted > 0;
}

/*
 * Start the executors the served databases asked for on demand, one
 * database at a time in turn, so that slots or vq.max_executors too few for
 * all go round instead of to the first database; until no slot is left.
 */
static void
StartWantedExecutors(int base)
{
	HASH_SEQ_STATUS seq;
	LauncherDatabase *db;
	int			alive = ExecutorsAlive();
	int			started = 1;

	hash_seq_init(&seq, launcher_databases);
	while ((db = hash_seq_search(&seq)) != NULL)
	{
		db->wanted = db->pass_slot ? VqTakeExecutorsWanted(db->pass_slot) : 0;
		db->next_extra = base;
	}
	while (started > 0)
	{
		started = 0;
		hash_seq_init(&seq, launcher_databases);
		while ((db = hash_seq_search(&seq)) != NULL)
		{
			int			r = db->pass_slot ? StartOneWanted(db, &alive) : 0;

			if (r < 0)
			{
				hash_seq_term(&seq);
				started = 0;
				break;
			}
			started += r;
		}
	}
	hash_seq_init(&seq, launcher_databases);
	while ((db = hash_seq_search(&seq)) != NULL)
		if (db->pass_slot)
			ReportCap(db, alive);
}

/*
 * Executor index of a database that always runs (restarted when it exits,
 * at most once a second); returns ms until a restart is allowed, or -1;
 * false in *no_slot when no background worker slot was free.
 */
static long
StartAlwaysRunning(VqDatabaseSlot *slot, LauncherDatabase *db, int index, TimestampTz now, bool *no_slot)
{
	TimestampTz allowed = TimestampTzPlusMilliseconds(db->last_start[index], RESTART_INTERVAL_MS);

	*no_slot = false;
	if (ExecutorRunning(slot, db, index))
		return -1;
	if (now < allowed)
		return EarlierDeadline(-1, now, allowed);
	*no_slot = !StartExecutor(db, index);
	return *no_slot ? RESTART_INTERVAL_MS : -1;
}

/*
 * A database's first executor (executor 0, the one that looks for the
 * extension), before any database gets a second. One that does not run is
 * counted in pass->waiting (no database gets more meanwhile: a slot that
 * frees up goes to it first); one that found no background worker slot
 * makes the pass have another database's executor (not its first) give its
 * slot up (PreemptOneExecutor). A database found without vq_job before waits
 * only when its probe was asked for (a CREATE EXTENSION, a reload); its
 * periodic probe that finds no slot gives up until the next, silently.
 * Returns ms until a restart is allowed, or -1.
 */
static long
StartFirstExecutor(VqDatabaseSlot *slot, LauncherDatabase *db, TimestampTz now, ServePass *pass)
{
	bool		no_slot;
	long		next = StartAlwaysRunning(slot, db, 0, now, &no_slot);

	if (ExecutorRunning(slot, db, 0))
	{
		db->first_failed = false;
		return next;
	}
	if (no_slot)
		db->first_failed = true;
	if (no_slot && !db->served && !db->probe_may_preempt)
	{
		ParkDatabase(db, now);
		return -1;
	}
	if (no_slot && db->served)
		WarnNoWorkerSlot(db, 0);
	pass->waiting++;
	pass->waiting_probes += !db->served;
	pass->may_preempt |= db->first_failed;
	return next;
}

/*
 * Once no database waits for its first executor: the others that always run,
 * level by level across the served databases (every database's second
 * before any third), then those asked for on demand, in turn. Returns ms
 * until a restart is allowed, or -1.
 */
static long
StartMoreExecutors(TimestampTz now)
{
	int			base = Min(vq_executors_per_database, VQ_MAX_EXECUTORS);
	long		next = -1;
	HASH_SEQ_STATUS seq;
	LauncherDatabase *db;

	for (int i = 1; i < base; i++)
	{
		hash_seq_init(&seq, launcher_databases);
		while ((db = hash_seq_search(&seq)) != NULL)
		{
			bool		no_slot;
			long		step;

			if (db->pass_slot == NULL)
				continue;
			step = StartAlwaysRunning(db->pass_slot, db, i, now, &no_slot);
			if (no_slot)
				WarnNoWorkerSlot(db, i);
			if (step >= 0)
				next = next < 0 ? step : Min(next, step);
		}
	}
	StartWantedExecutors(base);
	return next;
}

/* Is an executor asked to give its slot up (PreemptOneExecutor) still there? */
static bool
PreemptionUnderWay(void)
{
	LauncherDatabase *db;
	pid_t		pid;

	if (preempted_pid == 0)
		return false;
	db = hash_search(launcher_databases, &preempted_db, HASH_FIND, NULL);
	if (db != NULL && db->handles[preempted_index] != NULL &&
		GetBackgroundWorkerPid(db->handles[preempted_index], &pid) == BGWH_STARTED && pid == preempted_pid)
		return true;
	preempted_pid = 0;
	return false;
}

/*
 * A database waits for its first executor and no background worker slot is
 * free: ask the highest-numbered executor of the database that has the most
 * to stop (SIGTERM: it finishes its job, records it and exits; no database
 * gets a second executor while one waits), so that its slot goes to the one
 * waiting. One at a time; never a database's last executor. Returns whether
 * an executor gives its slot up (now or from an earlier call).
 */
static bool
PreemptOneExecutor(void)
{
	HASH_SEQ_STATUS seq;
	LauncherDatabase *db;
	LauncherDatabase *victim = NULL;
	int			index = -1;
	int			most = 1;
	pid_t		pid;

	if (PreemptionUnderWay())
		return true;
	hash_seq_init(&seq, launcher_databases);
	while ((db = hash_seq_search(&seq)) != NULL)
	{
		int			n = 0;
		int			last = -1;

		for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
		{
			if (!HandleAlive(db->handles[i]))
				continue;
			n++;
			last = i;
		}
		if (db->pass_slot == NULL || n <= most)
			continue;
		victim = db;
		index = last;
		most = n;
	}
	if (victim == NULL || GetBackgroundWorkerPid(victim->handles[index], &pid) != BGWH_STARTED)
		return false;
	preempted_db = victim->dboid;
	preempted_index = index;
	preempted_pid = pid;
	kill(pid, SIGTERM);
	ereport(LOG,
			(errmsg("vq_job: stopping executor %d of database \"%s\": a database waits for its first executor and no background worker slot is free",
					index, victim->name),
			 errhint(WORKER_SLOTS_HINT)));
	return true;
}

/* Give a database's slot back (its executors have exited). */
static void
GiveBackSlot(LauncherDatabase *db)
{
	VqDatabaseSlot *slot;

	LWLockAcquire(VqShared->lock, LW_EXCLUSIVE);
	slot = VqFindDatabaseSlot(db->dboid);
	if (slot != NULL)
	{
		LWLockAcquire(slot->lock, LW_EXCLUSIVE);
		slot->dboid = InvalidOid;
		slot->state = VQ_DB_FREE;
		LWLockRelease(slot->lock);
	}
	LWLockRelease(VqShared->lock);
}

/* Does any executor (or the saver) of the database still run (or is one starting)? */
static bool
AnyHandleAlive(LauncherDatabase *db)
{
	for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
		if (HandleAlive(db->handles[i]))
			return true;
	return HandleAlive(db->saver);
}

/*
 * A database found without the extension (or not to be served) gives its
 * slot back once its executor has exited, so that databases without vq_job
 * (which any role with CREATEDB can make) never take the slots of those with
 * it. It is probed again when a CREATE or DROP EXTENSION vq_job commits
 * anywhere (VqShared->extension_changes), after a configuration reload, and
 * every NO_EXTENSION_RECHECK_MS;
 * probes start at most one per PROBE_INTERVAL_MS. Returns the ms until it
 * needs attention, or -2 when it should be probed now.
 */
static long
ParkedDatabase(LauncherDatabase *db, TimestampTz now)
{
	static TimestampTz last_probe = 0;
	TimestampTz recheck = TimestampTzPlusMilliseconds(db->parked_since, NO_EXTENSION_RECHECK_MS);
	bool		asked = pg_atomic_read_u64(&VqShared->extension_changes) != db->changes_at_probe ||
		db->reloads_at_park != config_reloads;

	if (!asked && now < recheck)
		return EarlierDeadline(-1, now, recheck);
	if (!TimestampDifferenceExceeds(last_probe, now, PROBE_INTERVAL_MS))
		return EarlierDeadline(-1, now, TimestampTzPlusMilliseconds(last_probe, PROBE_INTERVAL_MS));
	last_probe = now;
	db->parked = false;
	db->probe_may_preempt = asked;	/* (a periodic probe finding no slot waits for the next) */
	/* a change committed from here on is one this probe may miss: it probes again */
	db->changes_at_probe = pg_atomic_read_u64(&VqShared->extension_changes);
	db->last_start[0] = 0;		/* executor 0 exited normally: starting it now is no crash loop */
	return -2;
}

/*
 * Has executor e of the database a running job with log lines or progress not
 * saved yet (caller holds the slot's lock)? Progress counts only for a job
 * claimed visibly (an inline job's row is not RUNNING: its progress is
 * written with its outcome), and only when it changed since the last saver
 * was started; *job: the job now.
 */
static bool
UnsavedWork(VqExecutorSlot *e, VqRunningJob *seen, VqRunningJob *job)
{
	uint64		log_seq = pg_atomic_read_u64(&e->log.seq);

	if (e->pid == 0 || !VqReadRunningJob(e, job))
		return false;
	if (log_seq == job->seq && pg_atomic_read_u32(&e->log.head) != pg_atomic_read_u32(&e->log.tail))
		return true;
	return e->running_visible &&
		(job->progress_total >= 0 || job->progress_succeeded > 0 || job->progress_failed > 0) &&
		(job->seq != seen->seq || job->progress_total != seen->progress_total ||
		 job->progress_succeeded != seen->progress_succeeded || job->progress_failed != seen->progress_failed);
}

/*
 * Every vq.progress_flush_interval_ms, start a saver (saver.c) for a served
 * database where a running job has log lines or progress that are not saved
 * yet: the executor running it cannot commit them, and the launcher has no
 * database. At most one saver per database at a time; none while nothing
 * changed. Returns ms until the next look (-1: never, the interval is 0).
 */
static long
SaveRunningJobs(VqDatabaseSlot *slot, LauncherDatabase *db, TimestampTz now)
{
	VqRunningJob jobs[VQ_MAX_EXECUTORS];
	bool		unsaved = false;

	if (vq_progress_flush_interval_ms <= 0)
		return -1;
	if (!TimestampDifferenceExceeds(db->save_looked_at, now, vq_progress_flush_interval_ms))
		return EarlierDeadline(-1, now, TimestampTzPlusMilliseconds(db->save_looked_at, vq_progress_flush_interval_ms));
	db->save_looked_at = now;
	if (HandleAlive(db->saver))
		return vq_progress_flush_interval_ms;
	memset(jobs, 0, sizeof(jobs));
	LWLockAcquire(slot->lock, LW_SHARED);
	for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
		unsaved |= UnsavedWork(&slot->executors[i], &db->saved[i], &jobs[i]);
	LWLockRelease(slot->lock);
	if (unsaved && VqStartSaver(db->dboid, db->name, &db->saver))
		memcpy(db->saved, jobs, sizeof(jobs));
	else if (unsaved)
		WarnNoWorkerSlot(db, -1);
	return vq_progress_flush_interval_ms;
}

/* Park a database: found without the extension, or not probed for want of a slot (see ParkedDatabase). */
static void
ParkDatabase(LauncherDatabase *db, TimestampTz now)
{
	GiveBackSlot(db);
	db->parked = true;
	db->served = false;
	db->parked_since = now;
	db->reloads_at_park = config_reloads;
}

/*
 * Serve one database: apply its executors' reports and the requests sent to
 * the launcher, then stop executors, or start its first one (the others
 * and its saver once every database has its first: ServeDatabases). Returns
 * the time (ms) until this database next needs attention, or -1 for "no
 * deadline".
 */
static long
ServeDatabase(LauncherDatabase *db, ServePass *pass)
{
	TimestampTz now = GetCurrentTimestamp();
	VqDatabaseSlot *slot;
	VqDatabaseState state;
	TimestampTz stop_until;
	long		next;

	db->pass_slot = NULL;
	if (db->parked && (next = ParkedDatabase(db, now)) != -2)
		return next;
	slot = AssignSlot(db, now);
	if (slot == NULL)
		return -1;
	LWLockAcquire(slot->lock, LW_EXCLUSIVE);
	ApplyReports(slot, db, now);
	state = slot->state;
	stop_until = slot->request.stop_until;
	LWLockRelease(slot->lock);

	if (stop_until > now)
		return Min(StopExecutors(slot, db, now), EarlierDeadline(-1, now, stop_until));
	if (state == VQ_DB_NO_EXTENSION)
	{
		if (AnyHandleAlive(db))
			return 100;			/* (its exit sets our latch too) */
		ParkDatabase(db, now);
		return EarlierDeadline(-1, now, TimestampTzPlusMilliseconds(now, NO_EXTENSION_RECHECK_MS));
	}
	db->served |= state == VQ_DB_ACTIVE;
	if (state == VQ_DB_ACTIVE)
		db->pass_slot = slot;
	return StartFirstExecutor(slot, db, now, pass);
}

/* Free the slots of databases that are gone (or no longer selected) once their executors exited. */
static void
ForgetDatabases(void)
{
	HASH_SEQ_STATUS seq;
	LauncherDatabase *db;

	hash_seq_init(&seq, launcher_databases);
	while ((db = hash_seq_search(&seq)) != NULL)
	{
		if (db->seen)
			continue;
		if (AnyHandleAlive(db))
			continue;
		GiveBackSlot(db);
		for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
			if (db->handles[i] != NULL)
				pfree(db->handles[i]);
		if (db->saver != NULL)
			pfree(db->saver);
		hash_search(launcher_databases, &db->dboid, HASH_REMOVE, NULL);
	}
}

/* Does any executor of any database still run? */
static bool
AnyExecutorAttached(void)
{
	bool		any = false;

	LWLockAcquire(VqShared->lock, LW_SHARED);
	for (int s = 0; s < VqShared->nslots && !any; s++)
	{
		VqDatabaseSlot *slot = &VqShared->slots[s];

		LWLockAcquire(slot->lock, LW_SHARED);
		for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
			any |= slot->executors[i].pid != 0;
		LWLockRelease(slot->lock);
	}
	LWLockRelease(VqShared->lock);
	return any;
}

/*
 * The launcher was told to stop (the server shuts down, and the postmaster
 * has sent the executors SIGTERM too; or someone terminated the launcher):
 * stop every executor as above, then exit. (The postmaster restarts a
 * launcher that was terminated alone, and it starts them again.)
 */
static void
ShutDownExecutors(void)
{
	while (AnyExecutorAttached())
	{
		TimestampTz now = GetCurrentTimestamp();
		HASH_SEQ_STATUS seq;
		LauncherDatabase *db;
		long		timeout = 1000;

		hash_seq_init(&seq, launcher_databases);
		while ((db = hash_seq_search(&seq)) != NULL)
		{
			VqDatabaseSlot *slot;

			LWLockAcquire(VqShared->lock, LW_SHARED);
			slot = VqFindDatabaseSlot(db->dboid);
			LWLockRelease(VqShared->lock);
			if (slot != NULL)
				timeout = Min(timeout, StopExecutors(slot, db, now));
		}
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Max(timeout, 10), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

/* Clear the launcher's entry in shared memory when it exits. */
static void
LauncherShmemExit(int code, Datum arg)
{
	LWLockAcquire(VqShared->lock, LW_EXCLUSIVE);
	VqShared->launcher_pid = 0;
	VqShared->launcher_latch = NULL;
	LWLockRelease(VqShared->lock);
}

/* Lower a pass's timeout to next ms (-1: no deadline). */
static void
PassDeadline(ServePass *pass, long next)
{
	if (next >= 0)
		pass->timeout = Min(pass->timeout, next);
}

/*
 * One pass over the served databases; returns how long the launcher may
 * sleep (ms). Background worker slots may be too few for every executor
 * (max_worker_processes): every database gets its first executor before any
 * gets a second (or a saver), at start-up and whenever a slot frees up; while
 * one waits for its first, no other gets more, and an executor of the
 * database that has the most gives its slot up.
 */
static long
ServeDatabases(void)
{
	HASH_SEQ_STATUS seq;
	LauncherDatabase *db;
	ServePass	pass = {.timeout = 10000};
	bool		preempting;

	ScanDatabases();
	hash_seq_init(&seq, launcher_databases);
	while ((db = hash_seq_search(&seq)) != NULL)
		if (db->seen)
			PassDeadline(&pass, ServeDatabase(db, &pass));
	/*
	 * A served database waiting for its first executor holds the others
	 * back; a probe of one not known to be served only while an executor
	 * gives it a slot: with every slot held by first executors it would wait
	 * for good, and no database would ever get (or warn about) a second; it
	 * finds its slot by preemption once seconds run.
	 */
	preempting = pass.may_preempt && PreemptOneExecutor();
	if (pass.waiting == pass.waiting_probes && !preempting)
	{
		TimestampTz now = GetCurrentTimestamp();

		PassDeadline(&pass, StartMoreExecutors(now));
		hash_seq_init(&seq, launcher_databases);
		while ((db = hash_seq_search(&seq)) != NULL)
			if (db->pass_slot != NULL)
				PassDeadline(&pass, SaveRunningJobs(db->pass_slot, db, now));
	}
	ForgetDatabases();
	return pass.timeout;
}

/*
 * Tell the executors whether the server's own default_transaction_read_only
 * is on: theirs is pinned off (their database's or role's default must not
 * stop them), and the launcher, connected to no database, has the server's.
 * Turned on, they are woken to exit at once.
 */
static void
PublishReadOnly(void)
{
	uint32		read_only = DefaultXactReadOnly ? 1 : 0;

	if (pg_atomic_exchange_u32(&VqShared->server_read_only, read_only) != read_only && read_only)
		VqWakeAllExecutors();
}

/* The launcher's main loop. */
void
vq_launcher_main(Datum arg)
{
	HASHCTL		ctl;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname("vq_job launcher");

	LWLockAcquire(VqShared->lock, LW_EXCLUSIVE);
	VqShared->launcher_pid = MyProcPid;
	VqShared->launcher_latch = MyLatch;
	LWLockRelease(VqShared->lock);
	before_shmem_exit(LauncherShmemExit, (Datum) 0);

	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(LauncherDatabase);
	ctl.hcxt = TopMemoryContext;
	launcher_databases = hash_create("vq_job launcher databases", 16, &ctl,
									 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);

	while (!ShutdownRequestPending)
	{
		/*
		 * A hot standby runs no jobs; nor does a server whose transactions
		 * are read-only by default (a promoted node an HA tool keeps fenced
		 * until the old primary is known down): look again every second.
		 */
		long		timeout;

		PublishReadOnly();
		timeout = RecoveryInProgress() || DefaultXactReadOnly ? 1000 : ServeDatabases();

		pgstat_report_stat(false);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Max(timeout, 10), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			config_reloads++;
		}
	}
	ShutDownExecutors();
	proc_exit(0);
}

/* Register the launcher (from _PG_init). */
void
VqLauncherInit(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_ConsistentState;
	worker.bgw_restart_time = 5;
	strlcpy(worker.bgw_library_name, "vq_job", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "vq_launcher_main", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "vq_job launcher", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "vq_job launcher", BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
}
