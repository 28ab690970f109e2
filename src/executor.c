/*
 * executor.c: the executor processes. Each database served by vq_job has
 * vq.executors_per_database of them (dynamic background workers started by
 * the launcher). Every executor polls the database's queues, claims due jobs
 * and runs them. Between jobs, every executor also rescues jobs whose
 * executor died and saves the progress of jobs running in the others (so
 * this goes on while any one of them is busy with a long job); executor 0
 * also deletes expired finished jobs.
 *
 * Claiming. A claim takes up to min(vq.batch_size, free capacity of the
 * queue) due jobs, highest priority first then earliest scheduled_at, with
 * FOR UPDATE SKIP LOCKED, so no two executors ever hold the same job. The
 * capacity of a queue is instances x max_concurrent_jobs jobs claimed and
 * unfinished across all executors, counted in shared memory.
 *
 * Two ways to run a claimed job:
 *  - inline: handlers whose recent executions were fast (under
 *    vq.inline_handler_ms) run one after another inside the claiming
 *    transaction, each in its own subtransaction, and the batch's outcomes are
 *    written set-based before one commit. The job goes from ENQUEUED straight
 *    to its outcome; while it runs the row is locked (and shown in
 *    vq.running_jobs). A crash rolls the whole batch back: the jobs are simply
 *    due again, with none of the handlers' writes.
 *  - claimed visibly: any other handler (and every handler the first time)
 *    is first committed as RUNNING, with this executor's pid and start time,
 *    then run in its own transaction. If the executor dies, the row stays
 *    RUNNING until executor 0 finds no live executor with that identity and
 *    abandons it.
 *
 * Polling. Each queue is polled every sleep_delay_ms; while a queue is empty
 * the interval doubles up to 4x, capped at 60 s, and resets when work is
 * found. Besides, the executor's latch is set when a transaction that
 * enqueued a due job commits (enqueue.c), and it never sleeps past the
 * earliest known future scheduled_at (kept in the database's shared slot).
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/indexing.h"
#include "catalog/pg_extension.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "executor.h"
#include "launcher.h"
#include "spi_util.h"
#include "vq_job.h"

PGDLLEXPORT void vq_executor_main(Datum arg);

/* How often executor 0 looks for jobs of dead executors. */
#define RESCUE_INTERVAL_MS 1000
/* How often executor 0 deletes expired finished jobs. */
#define RETENTION_INTERVAL_MS 1000
/* An inline batch stops taking new jobs after this long, so others are not held up. */
#define BATCH_TIME_LIMIT_MS 200
/* Stay under the 64 subtransaction XIDs a backend caches (beyond, every snapshot slows down). */
#define BATCH_MAX_WRITING_SUBXACTS 60

Oid			VqMyDatabase = InvalidOid;
VqDatabaseSlot *VqMyDatabaseSlot = NULL;
VqExecutorSlot *VqMyExecutorSlot = NULL;
static int	my_index = 0;

/* Local polling schedule of one queue. */
typedef struct QueuePoll
{
	char		name[VQ_NAME_MAX + 1];	/* hash key */
	int			delay_ms;		/* current interval: base, doubled while empty */
	TimestampTz next_poll;
	bool		seen;
} QueuePoll;

/* Recent execution time of a handler: decides inline or visible claims. */
typedef struct HandlerTiming
{
	char		name[VQ_NAME_MAX + 1];	/* hash key */
	double		avg_us;
} HandlerTiming;

static HTAB *queue_polls = NULL;
static HTAB *handler_timings = NULL;
static MemoryContext cycle_context = NULL;
static TimestampTz last_rescue = 0;
static TimestampTz last_retention = 0;
static TimestampTz last_progress_flush = 0;
static bool startup_due_checked = false;
static TimestampTz last_extension_check = 0;

/* How often an executor makes sure the extension still exists (DROP EXTENSION also tells it). */
#define EXTENSION_CHECK_INTERVAL_MS 1000

static void SetDatabaseState(VqDatabaseState state);

/* The version of vq_job installed in this database, or NULL when it is not installed. */
static char *
InstalledVersion(void)
{
	Relation	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	char	   *version = NULL;

	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber, F_NAMEEQ,
				CStringGetDatum("vq_job"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, Anum_pg_extension_extversion, RelationGetDescr(rel), &isnull);

		version = isnull ? pstrdup("") : TextDatumGetCString(d);
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return version;
}

/*
 * Exit when the installed extension is not the version this library
 * implements (a new library loaded before ALTER EXTENSION vq_job UPDATE, or
 * the other way round): its statements would fail on every cycle. The
 * launcher starts the executors again every few seconds, so an update is
 * picked up without a restart.
 */
static void
ExitOnVersionMismatch(const char *installed)
{
	SetDatabaseState(VQ_DB_NO_EXTENSION);
	ereport(WARNING,
			(errmsg("vq_job executor %d: extension vq_job is installed at version %s in this database, but the loaded library is version %s; no jobs run here until they match",
					my_index, installed, VQ_EXTVERSION),
			 errhint("Run ALTER EXTENSION vq_job UPDATE, or install the library of version %s and restart the server.",
					 installed)));
	proc_exit(0);
}

/* Is the extension still installed? (Clears the DROP EXTENSION flag.) Exits on a version mismatch. */
static bool
ExtensionStillThere(TimestampTz now)
{
	char	   *installed = InstalledVersion();

	VqMyExecutorSlot->check_extension = false;
	last_extension_check = now;
	if (installed != NULL && strcmp(installed, VQ_EXTVERSION) != 0)
		ExitOnVersionMismatch(installed);
	return installed != NULL;
}

/* The outbox relay's polling schedule: like a queue's, base 1 s, doubling to 4 s while idle. */
#define RELAY_POLL_BASE_MS 1000
static TimestampTz relay_next_poll = 0;
static int	relay_delay_ms = RELAY_POLL_BASE_MS;
static uint64 last_relay_wake_count = 0;
static uint64 last_wake_count = 0;
static int	queue_rotation = 0;
static bool just_woke = false;	/* the next cycle is the first after a sleep */

static SPIPlanPtr claim_plan = NULL;

/* Is this handler fast enough to run inline in the claiming transaction? */
static bool
RunsInline(const char *handler)
{
	HandlerTiming *t;

	if (vq_inline_handler_ms <= 0)
		return false;
	t = hash_search(handler_timings, handler, HASH_FIND, NULL);
	return t != NULL && t->avg_us < vq_inline_handler_ms * 1000.0;
}

/* Remember how long a handler took (moving average over about ten runs). */
static void
NoteDuration(const char *handler, int64 duration_us)
{
	bool		found;
	HandlerTiming *t = hash_search(handler_timings, handler, HASH_ENTER, &found);

	t->avg_us = found ? 0.9 * t->avg_us + 0.1 * duration_us : duration_us;
}

/* Publish this executor in the database's slot; false if the launcher gave us none. */
static bool
AttachSlot(void)
{
	LWLockAcquire(VqShared->lock, LW_EXCLUSIVE);
	VqMyDatabaseSlot = VqFindDatabaseSlot(VqMyDatabase);
	if (VqMyDatabaseSlot != NULL)
	{
		VqMyExecutorSlot = &VqMyDatabaseSlot->executors[my_index];
		memset(VqMyExecutorSlot, 0, sizeof(VqExecutorSlot));
		VqMyExecutorSlot->pid = MyProcPid;
		VqMyExecutorSlot->started_at = GetCurrentTimestamp();
		VqMyExecutorSlot->latch = MyLatch;
	}
	LWLockRelease(VqShared->lock);
	return VqMyDatabaseSlot != NULL;
}

/* Leave the slot when the process exits (whatever the reason). */
static void
DetachSlot(int code, Datum arg)
{
	if (VqMyExecutorSlot == NULL)
		return;
	LWLockAcquire(VqShared->lock, LW_EXCLUSIVE);
	if (VqMyExecutorSlot->pid == MyProcPid)
		memset(VqMyExecutorSlot, 0, sizeof(VqExecutorSlot));
	LWLockRelease(VqShared->lock);
}

/* Record the database's state for the launcher. */
static void
SetDatabaseState(VqDatabaseState state)
{
	LWLockAcquire(VqShared->lock, LW_EXCLUSIVE);
	if (VqMyDatabaseSlot->dboid == VqMyDatabase && VqMyDatabaseSlot->state != state)
	{
		VqMyDatabaseSlot->state = state;
		VqMyDatabaseSlot->state_since = GetCurrentTimestamp();
	}
	LWLockRelease(VqShared->lock);
}

/*
 * Reserve room for up to want jobs of a queue whose capacity is cap; returns
 * how many may be claimed. The reservation is this executor's "claimed"
 * count until it is lowered again.
 */
static int
ReserveCapacity(const char *queue, int cap, int want, int *claimed_by_others)
{
	int			others = 0;
	int			n;

	LWLockAcquire(VqShared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
	{
		VqExecutorSlot *e = &VqMyDatabaseSlot->executors[i];

		if (e != VqMyExecutorSlot && e->pid != 0 && e->claimed > 0 && strcmp(e->queue, queue) == 0)
			others += e->claimed;
	}
	n = Max(0, Min(want, cap - others));
	strlcpy(VqMyExecutorSlot->queue, queue, sizeof(VqMyExecutorSlot->queue));
	VqMyExecutorSlot->claimed = n;
	if (n == 0)
		strlcpy(VqMyDatabaseSlot->capacity_wait, queue, sizeof(VqMyDatabaseSlot->capacity_wait));
	LWLockRelease(VqShared->lock);
	*claimed_by_others = others;
	return n;
}

/*
 * Set this executor's count of claimed, unfinished jobs. When jobs finished
 * (not merely a reservation left unused) in a queue another executor found at
 * capacity, wake the executors to claim again.
 */
static void
SetClaimed(int n, bool jobs_finished)
{
	bool		wake = false;

	LWLockAcquire(VqShared->lock, LW_EXCLUSIVE);
	if (jobs_finished && n < VqMyExecutorSlot->claimed &&
		strcmp(VqMyDatabaseSlot->capacity_wait, VqMyExecutorSlot->queue) == 0)
	{
		VqMyDatabaseSlot->capacity_wait[0] = '\0';
		wake = true;
	}
	VqMyExecutorSlot->claimed = n;
	LWLockRelease(VqShared->lock);
	if (wake)
		VqWakeDatabase(VqMyDatabase, true, 0, 0);
}

/* Bring the local polling schedule in line with the configured queues. */
static void
SyncQueuePolls(VqRegistry *registry, TimestampTz now)
{
	HASH_SEQ_STATUS seq;
	QueuePoll  *p;
	VqQueue    *q;

	hash_seq_init(&seq, queue_polls);
	while ((p = hash_seq_search(&seq)) != NULL)
		p->seen = false;
	hash_seq_init(&seq, registry->queue_hash);
	while ((q = hash_seq_search(&seq)) != NULL)
	{
		bool		found;

		p = hash_search(queue_polls, q->name, HASH_ENTER, &found);
		if (!found)
		{
			p->delay_ms = q->sleep_delay_ms;
			p->next_poll = now;
		}
		p->seen = true;
	}
	hash_seq_init(&seq, queue_polls);
	while ((p = hash_seq_search(&seq)) != NULL)
		if (!p->seen)
			hash_search(queue_polls, p->name, HASH_REMOVE, NULL);
}

/* Poll every queue at once (a due job was committed, or a known due time passed). */
static void
PollAllNow(TimestampTz now)
{
	HASH_SEQ_STATUS seq;
	QueuePoll  *p;

	if (queue_polls == NULL)
		return;
	hash_seq_init(&seq, queue_polls);
	while ((p = hash_seq_search(&seq)) != NULL)
		p->next_poll = now;
}

/* After a poll: reset the interval when work was found, else double it (up to 4x base, 60 s). */
static void
Reschedule(QueuePoll *p, VqQueue *q, bool found_work, TimestampTz now)
{
	if (found_work)
	{
		p->delay_ms = q->sleep_delay_ms;
		p->next_poll = now;
		return;
	}
	p->next_poll = TimestampTzPlusMilliseconds(now, p->delay_ms);
	p->delay_ms = Min(Min((int64) p->delay_ms * 2, (int64) q->sleep_delay_ms * 4), 60000);
}

/* Lower the shared next-due time to t, replacing a value that has already passed. */
static void
PublishNextDue(TimestampTz t, TimestampTz now)
{
	uint64		cur = pg_atomic_read_u64(&VqMyDatabaseSlot->next_due);

	while (((int64) cur <= now || (int64) cur > t) &&
		   !pg_atomic_compare_exchange_u64(&VqMyDatabaseSlot->next_due, &cur, (uint64) t))
		;
}

/* Copy one claimed row out of SPI memory. */
static VqJob *
CopyJob(HeapTuple tup, TupleDesc desc)
{
	VqJob	   *job = palloc0(sizeof(VqJob));
	bool		isnull;
	Datum		d;

	memcpy(&job->execution_id, DatumGetUUIDP(SPI_getbinval(tup, desc, 1, &isnull)), sizeof(pg_uuid_t));
	job->job_id = SPI_getvalue(tup, desc, 2);
	job->handler = SPI_getvalue(tup, desc, 3);
	job->address = SPI_getvalue(tup, desc, 4);
	job->queue = SPI_getvalue(tup, desc, 5);
	job->priority = DatumGetInt32(SPI_getbinval(tup, desc, 6, &isnull));
	job->attempt_number = DatumGetInt32(SPI_getbinval(tup, desc, 7, &isnull));
	job->max_attempts = DatumGetInt32(SPI_getbinval(tup, desc, 8, &isnull));
	job->scheduled_at = DatumGetTimestampTz(SPI_getbinval(tup, desc, 9, &isnull));
	d = SPI_getbinval(tup, desc, 10, &isnull);
	job->payload = isnull ? NULL : DatumGetJsonbPCopy(d);
	job->metadata = DatumGetJsonbPCopy(SPI_getbinval(tup, desc, 11, &isnull));
	job->enqueued_by = DatumGetObjectId(SPI_getbinval(tup, desc, 12, &isnull));
	job->running = false;
	return job;
}

/* Claim up to n due jobs of a queue (row locks only); returns them in claim order. */
static List *
ClaimJobs(VqQueue *queue, int n, TimestampTz now)
{
	Datum		values[3];
	List	   *jobs = NIL;
	MemoryContext old;

	if (claim_plan == NULL)
	{
		Oid			types[3] = {TEXTOID, TIMESTAMPTZOID, INT4OID};

		claim_plan = SPI_prepare("SELECT execution_id, job_id, handler, handler_address, queue, priority,"
								 " attempt_number, max_attempts, scheduled_at, payload, metadata, enqueued_by"
								 " FROM vq.job"
								 " WHERE queue OPERATOR(pg_catalog.=) $1"
								 " AND state OPERATOR(pg_catalog.=) 'ENQUEUED'::vq.job_state"
								 " AND scheduled_at OPERATOR(pg_catalog.<=) $2"
								 " ORDER BY priority DESC, scheduled_at"
								 " LIMIT $3 FOR UPDATE SKIP LOCKED", 3, types);
		if (claim_plan == NULL)
			elog(ERROR, "vq_job: could not prepare the claim: %s", SPI_result_code_string(SPI_result));
		SPI_keepplan(claim_plan);
	}
	values[0] = queue->name_datum;
	values[1] = TimestampTzGetDatum(now);
	values[2] = Int32GetDatum(n);
	if (SPI_execute_plan(claim_plan, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "vq_job: claim failed");

	old = MemoryContextSwitchTo(cycle_context);
	for (uint64 i = 0; i < SPI_processed; i++)
		jobs = lappend(jobs, CopyJob(SPI_tuptable->vals[i], SPI_tuptable->tupdesc));
	MemoryContextSwitchTo(old);
	return jobs;
}

/* Run a job claimed visibly (RUNNING committed) in its own transaction and record the outcome. */
static void
RunClaimedJob(VqJob *job, VqQueue *queue)
{
	VqOutcome	outcome;
	TimestampTz now;

	VqBeginTransaction();
	VqRunFunctionHandler(job, &outcome);
	NoteDuration(job->handler, outcome.duration_us);
	now = GetCurrentTimestamp();
	if (outcome.kind == VQ_OUTCOME_COMPLETED)
		VqPersistCompleted(list_make1(job), list_make1(&outcome), now);
	else
		VqPersistFailure(job, &outcome, queue, now);
	VqFlushJobLogs(job);
	VqCommitTransaction();
}

/*
 * Run a claimed batch in the open transaction: inline jobs one by one, until
 * a job must be claimed visibly (it is marked RUNNING and returned, to run
 * after the commit), time or subtransaction limits are reached, or shutdown is
 * requested. Jobs not reached stay ENQUEUED: their row locks go with the commit.
 */
static VqJob *
RunBatch(List *jobs, VqQueue *queue, bool *ran_jobs)
{
	List	   *done = NIL;
	List	   *done_outcomes = NIL;
	int			writers = 0;
	TimestampTz started = GetCurrentTimestamp();
	VqJob	   *visible = NULL;
	ListCell   *lc;

	foreach(lc, jobs)
	{
		VqJob	   *job = lfirst(lc);
		VqOutcome  *outcome;

		if (ShutdownRequestPending || writers >= BATCH_MAX_WRITING_SUBXACTS ||
			TimestampDifferenceExceeds(started, GetCurrentTimestamp(), BATCH_TIME_LIMIT_MS))
			break;

		if (strncmp(job->address, "notify:", 7) == 0)
		{
			VqDispatchNotify(job, job->address + 7);
			continue;
		}
		*ran_jobs = true;
		if (!RunsInline(job->handler))
		{
			VqPersistRunning(job, false, GetCurrentTimestamp());
			visible = job;
			break;
		}

		outcome = MemoryContextAllocZero(cycle_context, sizeof(VqOutcome));
		VqRunFunctionHandler(job, outcome);
		NoteDuration(job->handler, outcome->duration_us);
		if (outcome->wrote)
			writers++;
		if (outcome->kind == VQ_OUTCOME_COMPLETED)
		{
			MemoryContext old = MemoryContextSwitchTo(cycle_context);

			done = lappend(done, job);
			done_outcomes = lappend(done_outcomes, outcome);
			MemoryContextSwitchTo(old);
		}
		else
			VqPersistFailure(job, outcome, queue, GetCurrentTimestamp());
		VqFlushJobLogs(job);
	}
	if (done != NIL)
		VqPersistCompleted(done, done_outcomes, GetCurrentTimestamp());
	return visible;
}

/*
 * The extension was dropped (or never installed): record it for the launcher
 * and exit, unless a CREATE EXTENSION committed meanwhile (then return).
 * Called in a transaction, which it ends.
 */
static void
ExitUnlessReinstalled(void)
{
	VqCommitTransaction();
	SetDatabaseState(VQ_DB_NO_EXTENSION);

	/*
	 * Look once more: a CREATE EXTENSION committed between the check and the
	 * state change woke the launcher too early to be noticed.
	 */
	StartTransactionCommand();
	if (OidIsValid(get_extension_oid("vq_job", true)))
	{
		CommitTransactionCommand();
		SetDatabaseState(VQ_DB_STARTING);
		return;
	}
	CommitTransactionCommand();
	ereport(LOG, (errmsg("vq_job executor %d: extension vq_job is not installed in this database; exiting",
						 my_index)));
	proc_exit(0);
}

/*
 * Between claims, in a short transaction of its own when any is due: make
 * sure the extension is still there (DROP EXTENSION also flags it), abandon
 * jobs of dead executors, save the live progress of running jobs. Its own
 * transaction, so that the rows it touches are not held through a batch.
 * Returns false when the cycle should claim nothing (the extension was gone).
 */
static bool
Housekeeping(TimestampTz now)
{
	bool		check = VqMyExecutorSlot->check_extension ||
		TimestampDifferenceExceeds(last_extension_check, now, EXTENSION_CHECK_INTERVAL_MS);
	bool		rescue = TimestampDifferenceExceeds(last_rescue, now, RESCUE_INTERVAL_MS);
	bool		flush = vq_progress_flush_interval_ms > 0 &&
		TimestampDifferenceExceeds(last_progress_flush, now, vq_progress_flush_interval_ms);

	if (!check && !rescue && !flush)
		return true;
	VqBeginTransaction();
	if (check && !ExtensionStillThere(now))
	{
		ExitUnlessReinstalled();
		return false;
	}
	if (my_index == 0 && VqMyDatabaseSlot->state != VQ_DB_ACTIVE)
	{
		SetDatabaseState(VQ_DB_ACTIVE);
		VqWakeLauncher();		/* start the other executors */
	}
	if (rescue)
	{
		VqRegistry *registry = VqRegistryPin();

		if (VqRescueOrphans(registry, now) > 0)
			PollAllNow(now);
		VqRegistryRelease(registry);
		last_rescue = now;
	}
	if (flush)
	{
		VqFlushProgress();
		last_progress_flush = now;
	}
	VqCommitTransaction();
	return true;
}

/*
 * One poll cycle: check the extension, rescue orphans (executor 0), then
 * claim from the first queue (in rotating order) that is due for a poll and
 * has work, and run what was claimed. Returns true if any job was claimed.
 */
static bool
PollCycle(void)
{
	TimestampTz now = GetCurrentTimestamp();
	VqRegistry *registry;
	VqJob	   *visible = NULL;
	VqQueue    *visible_queue = NULL;
	bool		claimed = false;
	bool		ran_jobs = false;
	TimestampTz next_due;
	int			nqueues;
	QueuePoll **order;
	HASH_SEQ_STATUS seq;
	QueuePoll  *p;
	int			i = 0;

	MemoryContextReset(cycle_context);
	if (!Housekeeping(now))
		return false;
	VqBeginTransaction();

	/* A known due time has passed: everything is worth a look, and the next one must be found. */
	next_due = (TimestampTz) pg_atomic_read_u64(&VqMyDatabaseSlot->next_due);
	if (next_due <= now || !startup_due_checked)
	{
		/* (at start too: jobs may have been enqueued before any executor could be told) */
		PollAllNow(now);
		relay_next_poll = now;	/* an outbox row's scheduled_at or retry time may be the one */
		PublishNextDue(VqEarliestFutureDue(now), now);
		startup_due_checked = true;
	}

	/* pinned: handlers may enqueue, and an enqueue may rebuild the registry */
	registry = VqRegistryPin();
	SyncQueuePolls(registry, now);

	/* The outbox relay: when it delivered rows, commit them before claiming jobs. */
	if (relay_next_poll <= now)
	{
		if (VqRelayBatch(registry, vq_batch_size, now) > 0)
		{
			relay_delay_ms = RELAY_POLL_BASE_MS;
			relay_next_poll = now;
			VqCommitTransaction();
			VqRegistryRelease(registry);
			return true;
		}
		relay_next_poll = TimestampTzPlusMilliseconds(now, relay_delay_ms);
		relay_delay_ms = Min(relay_delay_ms * 2, 4 * RELAY_POLL_BASE_MS);
	}

	/*
	 * Visit the queues in a rotating order so that one busy queue cannot
	 * starve the others. An executor just woken from sleep looks first at the
	 * queue the wake-up named (the common case of one job enqueued into an
	 * idle system), rather than polling empty queues before it; busy
	 * executors do not sleep, so they keep the plain rotation.
	 */
	nqueues = hash_get_num_entries(queue_polls);
	order = MemoryContextAlloc(cycle_context, sizeof(QueuePoll *) * Max(nqueues, 1));
	hash_seq_init(&seq, queue_polls);
	while ((p = hash_seq_search(&seq)) != NULL)
		order[i++] = p;
	queue_rotation++;
	if (just_woke)
	{
		uint32		hint = pg_atomic_exchange_u32(&VqMyDatabaseSlot->due_queue_hint, 0);

		for (int k = 0; hint != 0 && k < nqueues; k++)
		{
			if (VqQueueHash(order[k]->name) == hint)
			{
				/* swap it into the slot the rotation visits first */
				int			first = queue_rotation % nqueues;
				QueuePoll  *tmp = order[first];

				order[first] = order[k];
				order[k] = tmp;
				break;
			}
		}
		just_woke = false;
	}
	for (int k = 0; k < nqueues && !claimed; k++)
	{
		QueuePoll  *poll = order[(k + queue_rotation) % nqueues];
		VqQueue    *queue = VqLookupQueue(registry, poll->name);
		List	   *jobs;
		int			room;
		int			cap;
		int			others;

		if (queue == NULL || poll->next_poll > now)
			continue;
		if (queue->paused)
		{
			/* a paused queue costs a look per sleep_delay_ms, like an idle one */
			poll->next_poll = TimestampTzPlusMilliseconds(now, queue->sleep_delay_ms);
			continue;
		}
		cap = queue->instances * queue->max_concurrent_jobs;
		room = ReserveCapacity(queue->name, cap, vq_batch_size, &others);
		if (room > 0 && registry->has_notify_handlers)
		{
			/*
			 * Announced NOTIFY jobs hold capacity too. Counted after the
			 * reservation: another executor's announcements are then either
			 * in its reservation or already committed, never missed.
			 */
			room = Min(room, Max(0, cap - others - VqExternalInFlight(queue)));
			if (room == 0)
				SetClaimed(0, false);
		}
		if (room == 0)
		{
			/* at capacity: whoever frees room wakes us; until then, poll as usual */
			poll->next_poll = TimestampTzPlusMilliseconds(now, queue->sleep_delay_ms);
			continue;
		}
		jobs = ClaimJobs(queue, room, now);
		Reschedule(poll, queue, jobs != NIL, now);
		if (jobs == NIL)
		{
			SetClaimed(0, false);
			continue;
		}
		SetClaimed(list_length(jobs), false);
		claimed = true;
		/* a full batch: more may be due; let another executor help */
		if (list_length(jobs) == room)
			VqWakeDatabase(VqMyDatabase, true, 0, 0);
		visible = RunBatch(jobs, queue, &ran_jobs);
		visible_queue = queue;
	}

	/*
	 * A transaction that only announced NOTIFY jobs (and did bookkeeping)
	 * commits without waiting for its WAL flush: the notifications go out
	 * at once instead of after the flush. If a crash loses that commit, the
	 * jobs are ENQUEUED again and re-announced (at-least-once, as always),
	 * and a consumer's reply cannot outlive it: the reply's own synchronous
	 * commit flushes the WAL that precedes it. Transactions that ran jobs
	 * keep the configured vq.worker_synchronous_commit.
	 */
	if (claimed && !ran_jobs && vq_worker_synchronous_commit)
	{
		SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);
		VqCommitTransaction();
		SetConfigOption("synchronous_commit", "on", PGC_SUSET, PGC_S_OVERRIDE);
	}
	else
		VqCommitTransaction();

	if (visible != NULL)
	{
		SetClaimed(1, true);
		visible->running = true;
		RunClaimedJob(visible, visible_queue);
	}
	SetClaimed(0, true);
	VqRegistryRelease(registry);
	return claimed;
}

/* How long to sleep: until the next queue poll or the next known due time, whichever is first. */
static long
SleepMs(void)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz wake = TimestampTzPlusMilliseconds(now, 60000);
	TimestampTz next_due = (TimestampTz) pg_atomic_read_u64(&VqMyDatabaseSlot->next_due);
	HASH_SEQ_STATUS seq;
	QueuePoll  *p;

	hash_seq_init(&seq, queue_polls);
	while ((p = hash_seq_search(&seq)) != NULL)
		wake = Min(wake, p->next_poll);
	wake = Min(wake, next_due);
	wake = Min(wake, relay_next_poll);
	wake = Min(wake, TimestampTzPlusMilliseconds(last_rescue, RESCUE_INTERVAL_MS));
	if (vq_progress_flush_interval_ms > 0)
		wake = Min(wake, TimestampTzPlusMilliseconds(last_progress_flush, vq_progress_flush_interval_ms));
	if (my_index == 0)
		wake = Min(wake, TimestampTzPlusMilliseconds(last_retention, RETENTION_INTERVAL_MS));
	if (wake <= now)
		return 0;
	/* round up: waking a little late is fine, waking before scheduled_at only wastes a poll */
	return (long) ((wake - now + 999) / 1000);
}

/* This database's name (looked up once). */
static const char *
MyDatabaseName(void)
{
	static char *name = NULL;

	if (name == NULL)
	{
		StartTransactionCommand();
		name = MemoryContextStrdup(TopMemoryContext, get_database_name(MyDatabaseId));
		CommitTransactionCommand();
	}
	return name;
}

/* Entry point of an executor process; arg packs the database OID and the executor number. */
void
vq_executor_main(Datum arg)
{
	int64		packed = DatumGetInt64(arg);
	HASHCTL		ctl;
	char		appname[64];

	VqMyDatabase = (Oid) (packed >> 16);
	my_index = (int) (packed & 0xffff);

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(VqMyDatabase, InvalidOid, 0);
	snprintf(appname, sizeof(appname), "vq_job executor %d", my_index);
	pgstat_report_appname(appname);

	if (!AttachSlot())
		proc_exit(0);
	before_shmem_exit(DetachSlot, (Datum) 0);

	/* vq_job's own statements are schema-qualified; nothing should come from elsewhere. */
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("synchronous_commit", vq_worker_synchronous_commit ? "on" : "off", PGC_SUSET, PGC_S_OVERRIDE);

	cycle_context = AllocSetContextCreate(TopMemoryContext, "vq_job executor cycle", ALLOCSET_DEFAULT_SIZES);
	ctl.keysize = VQ_NAME_MAX + 1;
	ctl.entrysize = sizeof(QueuePoll);
	queue_polls = hash_create("vq_job queue polls", 16, &ctl, HASH_ELEM | HASH_STRINGS);
	ctl.entrysize = sizeof(HandlerTiming);
	handler_timings = hash_create("vq_job handler timings", 64, &ctl, HASH_ELEM | HASH_STRINGS);
	VqDispatchInit();

	last_wake_count = pg_atomic_read_u64(&VqMyDatabaseSlot->wake_count);
	last_relay_wake_count = pg_atomic_read_u64(&VqMyDatabaseSlot->relay_wake_count);
	while (!ShutdownRequestPending)
	{
		uint64		wake_count;
		bool		claimed;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			if (!VqDatabaseSelected(MyDatabaseName()))
				break;			/* vq.databases no longer names this database */
			SetConfigOption("synchronous_commit", vq_worker_synchronous_commit ? "on" : "off",
							PGC_SUSET, PGC_S_OVERRIDE);
		}
		if (my_index >= Min(vq_executors_per_database, VQ_MAX_EXECUTORS))
			break;				/* the pool was made smaller */

		/* A transaction that enqueued due work (or published outbox rows) committed since we last looked. */
		wake_count = pg_atomic_read_u64(&VqMyDatabaseSlot->wake_count);
		if (wake_count != last_wake_count)
		{
			last_wake_count = wake_count;
			PollAllNow(GetCurrentTimestamp());
		}
		wake_count = pg_atomic_read_u64(&VqMyDatabaseSlot->relay_wake_count);
		if (wake_count != last_relay_wake_count)
		{
			last_relay_wake_count = wake_count;
			relay_next_poll = GetCurrentTimestamp();
		}

		claimed = PollCycle();	/* exits the process if the extension is gone */
		/* a background worker reports its table statistics itself (autovacuum depends on them) */
		pgstat_report_stat(false);

		if (my_index == 0 &&
			TimestampDifferenceExceeds(last_retention, GetCurrentTimestamp(), RETENTION_INTERVAL_MS))
		{
			VqRunRetention();
			last_retention = GetCurrentTimestamp();
		}
		if (claimed)
			continue;

		/* announce the sleep, then look once more at what a waker would have changed */
		VqMyExecutorSlot->sleeping = true;
		pg_memory_barrier();
		if (pg_atomic_read_u64(&VqMyDatabaseSlot->wake_count) == last_wake_count &&
			pg_atomic_read_u64(&VqMyDatabaseSlot->relay_wake_count) == last_relay_wake_count)
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 SleepMs(), PG_WAIT_EXTENSION);
		VqMyExecutorSlot->sleeping = false;
		just_woke = true;
		ResetLatch(MyLatch);
	}
	proc_exit(0);
}
