/*
 * executor.c: the executor processes. Each database served by vq_job has
 * vq.executors_per_database of them always, and more started on demand
 * (dynamic background workers started and stopped by the launcher): an
 * executor about to run a job claimed visibly (a slow handler) asks for
 * executors for the slow jobs its claim left waiting and one to keep claiming
 * (pool.c); those started on demand exit after idling. Every executor polls the database's queues,
 * claims due jobs and runs them. Between jobs, every executor also rescues
 * jobs whose executor died (so this goes on while any one of them is busy
 * with a long job); executor 0 also deletes expired finished jobs. The
 * progress and log lines of running jobs are saved by the saver (saver.c),
 * which the launcher starts for that.
 *
 * A poll cycle has named steps: housekeeping (its own short transaction),
 * then in one transaction: the outbox relay when it is due, or a claim
 * (claim.c) and the run of what was claimed; then the run of a job claimed
 * visibly, in a transaction of its own. Two ways to run a claimed job:
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
 *    RUNNING until an executor finds no live executor with that identity and
 *    abandons it.
 *
 * Sleeping. The executor's latch is set when a transaction that enqueued a
 * due job commits (wakeup.c); it never sleeps past the earliest known future
 * scheduled_at (kept in the database's shared slot) or its next queue poll.
 *
 * Stopping. SIGTERM (from the postmaster or the launcher): claim nothing
 * more, let the running handler finish, record its outcome, exit. SIGINT
 * cancels a running handler (the launcher sends it when the stop's grace has
 * passed; outside user code it is ignored); SIGUSR2 makes the process die
 * at once (its job is rescued later).
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/indexing.h"
#include "catalog/pg_db_role_setting.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "main/checks.h"
#include "main/guc.h"
#include "main/requests.h"
#include "main/shmem.h"
#include "main/wake.h"
#include "util/spi_util.h"
#include "claim/claim.h"
#include "claim/claimpos.h"
#include "claim/inflight.h"
#include "claim/poscheck.h"
#include "claim/take.h"
#include "state/outcome.h"
#include "state/wakeup.h"
#include "run/deferred.h"
#include "run/dispatch.h"
#include "run/jobapi.h"
#include "run/livelog.h"
#include "run/notify.h"
#include "run/roles.h"
#include "run/settings.h"
#include "run/watch.h"
#include "api/relay.h"
#include "executors/compact.h"
#include "executors/jobvacuum.h"
#include "executors/pool.h"
#include "executors/restore.h"
#include "executors/retention.h"

PGDLLEXPORT void vq_executor_main(Datum arg);

/* How often an executor looks for jobs of dead executors. */
#define RESCUE_INTERVAL_MS 1000
/*
 * How often executor 0 looks for due jobs behind the claim positions: a
 * safety net, as the relay's periodic full scan is, so that a job whose
 * return behind a position was missed (it should never be) waits seconds,
 * never until a restart. Every POSITIONS_CHECK_MS, or less often when a look
 * takes long (it walks what the claims skip, all the index entries a held
 * snapshot keeps): the executor spends at most 1/POSITIONS_CHECK_SHARE of
 * its time on it. A look claims nothing while it walks (250 ms after ten
 * minutes of a held snapshot at 3,000 jobs/s): at 2% of the time, those
 * looks were in most of the steady bench's windows with a p99 over 50 ms.
 */
#define POSITIONS_CHECK_MS 10000
#define POSITIONS_CHECK_SHARE 400
/* How often executor 0 deletes expired finished jobs. */
#define RETENTION_INTERVAL_MS 1000
/* How often an executor makes sure the extension still exists (DROP EXTENSION also tells it). */
#define EXTENSION_CHECK_INTERVAL_MS 1000
/* The outbox relay's polling schedule: like a queue's, base 1 s, doubling to 4 s while idle. */
#define RELAY_POLL_BASE_MS 1000
/* An inline batch stops taking new jobs after this long, so others are not held up. */
#define BATCH_TIME_LIMIT_MS 200
/*
 * A transaction whose claimed jobs all ran claims again (up to the queue's
 * free capacity, as any claim) until it has run this long: one commit, and
 * its WAL flush, for several claims while jobs wait. Short, because the
 * outcomes of the jobs it ran are visible only at its commit.
 */
#define RECLAIM_TIME_LIMIT_MS 20
/* Stay under the 64 subtransaction XIDs a backend caches (beyond, every snapshot slows down). */
#define BATCH_MAX_WRITING_SUBXACTS 60
/* An executor started on demand (number >= vq.executors_per_database) exits after idling this long. */
#define EXTRA_EXECUTOR_IDLE_MS 10000

static MemoryContext cycle_context = NULL;

/* housekeeping schedule */
static TimestampTz last_rescue = 0;
static TimestampTz next_positions_check = 0;
static TimestampTz last_retention = 0;
static TimestampTz last_extension_check = 0;
static uint64 extension_generation_seen = 0;

/* what woke us, and what is due */
static uint64 last_wake_count = 0;
static uint64 last_relay_wake_count = 0;
static uint64 last_callback_wake_count = 0;
static bool callbacks_due = true;	/* look for queued callbacks (at start: a crash may have left some) */
static TimestampTz last_callbacks_look = 0;
static bool just_woke = false;	/* the next cycle is the first after a sleep */
static bool startup_due_checked = false;
static TimestampTz relay_next_poll = 0;
static int	relay_delay_ms = RELAY_POLL_BASE_MS;
static TimestampTz last_work = 0;	/* when a poll cycle last found work */
static bool last_cycle_found_work = false;

/*
 * Housekeeping with nothing to watch: the last rescue found no RUNNING job
 * (no executor's job to rescue should it die, no NOTIFY reply awaited), no
 * executor left the slot since (an exit wakes the others), retention is
 * caught up. Then the executor sleeps until its next queue or relay poll or
 * known due time only, not its once-a-second housekeeping ticks: the
 * executors of an idle database wake no more often than their polls say.
 * Work found, or a latch set, ends it.
 */
static bool quiet = false;
static uint64 exits_when_quiet = 0;
static bool retention_behind = false;
static bool started_always_running = false; /* started as one of vq.executors_per_database (or told to go) */

/* ---- identity and the extension ------------------------------------------------------- */

/* Publish this executor in the database's slot; false if the launcher gave us none. */
static bool
AttachSlot(void)
{
	LWLockAcquire(VqShared->lock, LW_SHARED);
	VqMyDatabaseSlot = VqFindDatabaseSlot(VqMyDatabase);
	if (VqMyDatabaseSlot != NULL)
	{
		VqExecutorSlot *e = &VqMyDatabaseSlot->executors[VqMyExecutorIndex];

		LWLockAcquire(VqMyDatabaseSlot->lock, LW_EXCLUSIVE);
		e->pid = MyProcPid;
		e->started_at = GetCurrentTimestamp();
		e->latch = MyLatch;
		pg_atomic_write_u32(&e->sleeping, 0);
		/* what a predecessor in the entry left (it may have died mid-run) goes: each part by its owner */
		VqClaimAccountingReset(e);
		VqRunningVisibleReset(e);
		VqRunningJobReset(e);
		VqLiveLogReset(&e->log);
		LWLockRelease(VqMyDatabaseSlot->lock);
		VqMyExecutorSlot = e;
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
	LWLockAcquire(VqMyDatabaseSlot->lock, LW_EXCLUSIVE);
	/* an error may have released claimed jobs without lowering the claim positions */
	if (code != 0)
		VqClaimPositionsForget(VqMyDatabaseSlot);
	if (VqMyExecutorSlot->pid == MyProcPid)
	{
		VqMyExecutorSlot->pid = 0;
		VqMyExecutorSlot->latch = NULL;
		VqClaimAccountingReset(VqMyExecutorSlot);
		VqRunningVisibleReset(VqMyExecutorSlot);
	}
	LWLockRelease(VqMyDatabaseSlot->lock);
	/* the others' rescue looks for jobs it may have left RUNNING (outcome.c): wake one that sleeps */
	pg_atomic_fetch_add_u64(&VqMyDatabaseSlot->executor_exits, 1);
	VqWakeExecutors(VqMyDatabase, true, 0, 0);
	VqWakeLauncher();
}

/*
 * What the process was running when it exits, and what that must cost:
 *  - an orderly stop (SIGTERM came first; the handler ignored the cancel, so
 *    the launcher terminated the process): a job claimed visibly goes back in
 *    line with its attempt unchanged (INTERRUPTED);
 *  - a hard timeout (the code caught the timeout's cancel, watch.c): the
 *    job is ABANDONED (its attempt counts), or the outbox row retried, as if
 *    the cancel had worked;
 *  - a handler that caught the interruption a vq_cancel request led to: the
 *    job is CANCELLED, as it would have been;
 *  - anything else (a crash-like exit): nothing here; the orphan rescue
 *    abandons a job claimed visibly.
 * An inline job's claim rolls back with the transaction.
 */
static void
RecordCutWorkAtExit(int code, Datum arg)
{
	VqJob	   *job = VqCurrentJob();
	VqOutcome	outcome;

	if (!VqInUserCode())
		return;
	memset(&outcome, 0, sizeof(outcome));
	if (VqHandlerCancelForced() && job != NULL)
	{
		outcome.kind = VQ_OUTCOME_CANCELLED;
		outcome.error = "cancelled while running: the handler ignored the interruption after vq.cancel_grace_ms, so its executor was terminated";
	}
	else if (ShutdownRequestPending && job != NULL && job->running && !VqUserCodeTimedOut())
	{
		outcome.kind = VQ_OUTCOME_INTERRUPTED;
		outcome.error = "interrupted by a stop: the handler ignored the cancel and its executor was terminated; the attempt does not count";
	}
	else if (VqUserCodeTimedOut())
		outcome.kind = VQ_OUTCOME_ABANDONED;
	else
		return;

	/* (an error here, during exit, ends the process at once: the orphan rescue is the fallback) */
	AbortOutOfAnyTransaction();
	VqBeginTransaction();
	/* (allocated in the new transaction: the aborted one's memory is gone) */
	if (outcome.kind == VQ_OUTCOME_ABANDONED)
		outcome.error = psprintf("execution timed out after %d ms; the handler ignored the cancel, so its executor was terminated %d ms later",
								 vq_execution_timeout_ms, VQ_HARD_TIMEOUT_AFTER_MS);
	if (job != NULL)
	{
		ereport(LOG, (errmsg("vq_job executor %d: %s (handler %s)", VqMyExecutorIndex, outcome.error, job->handler)));
		if (outcome.kind == VQ_OUTCOME_CANCELLED)
			VqPersistCancelled(job, &outcome, GetCurrentTimestamp());
		else
			(void) VqPersistFailure(job, &outcome, NULL, GetCurrentTimestamp());
		VqFlushJobLogs(job);
	}
	else
		(void) VqRelayRecordCutDelivery();
	VqCommitTransaction();
}


/*
 * Was vq.serve_database turned off for this database (ALTER DATABASE ... SET)?
 * Read from the catalog, not from our own setting: that was fixed when we
 * connected.
 */
static bool
ServingTurnedOff(void)
{
	Relation	rel = table_open(DbRoleSettingRelationId, AccessShareLock);
	ScanKeyData keys[2];
	SysScanDesc scan;
	HeapTuple	tup;
	bool		off = false;

	ScanKeyInit(&keys[0], Anum_pg_db_role_setting_setdatabase, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(MyDatabaseId));
	ScanKeyInit(&keys[1], Anum_pg_db_role_setting_setrole, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(InvalidOid));
	scan = systable_beginscan(rel, DbRoleSettingDatidRolidIndexId, true, NULL, 2, keys);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, Anum_pg_db_role_setting_setconfig, RelationGetDescr(rel), &isnull);
		Datum	   *items;
		int			n;

		if (!isnull)
		{
			deconstruct_array(DatumGetArrayTypeP(d), TEXTOID, -1, false, TYPALIGN_INT, &items, NULL, &n);
			for (int i = 0; i < n; i++)
			{
				char	   *item = TextDatumGetCString(items[i]);
				bool		value;

				if (strncmp(item, "vq.serve_database=", 18) == 0 && parse_bool(item + 18, &value))
					off = !value;
			}
		}
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return off;
}

/*
 * Look for the extension and tell the launcher what we found. When it is
 * gone, or installed at another version than this library implements (a new
 * library loaded before ALTER EXTENSION vq_job UPDATE, or the other way
 * round: every statement would fail), or the database is not to be served
 * (vq.serve_database off), end the transaction and exit; the launcher looks
 * again later, or at once when CREATE EXTENSION commits.
 */
static void
CheckExtension(TimestampTz now)
{
	uint64		generation = pg_atomic_read_u64(&VqMyDatabaseSlot->extension_generation);
	char	   *installed = VqInstalledVersion();
	bool		turned_off = ServingTurnedOff();
	bool		present = installed != NULL && strcmp(installed, VQ_EXTVERSION) == 0 && !turned_off;
	bool		was_served;

	extension_generation_seen = generation;
	last_extension_check = now;
	LWLockAcquire(VqMyDatabaseSlot->lock, LW_SHARED);
	was_served = VqMyDatabaseSlot->state == VQ_DB_ACTIVE;
	LWLockRelease(VqMyDatabaseSlot->lock);
	VqReportExtension(VqMyDatabaseSlot, present ? VQ_EXT_PRESENT : VQ_EXT_ABSENT, generation);
	if (present)
		return;
	/*
	 * (installed lives in the transaction's memory: report before committing.)
	 * A database that was served says why it no longer is; the launcher's
	 * periodic look at one that never was says it only at DEBUG1.
	 */
	if (turned_off)
		ereport(was_served ? LOG : DEBUG1,
				(errmsg("vq_job executor %d: vq.serve_database is off for this database; exiting",
						VqMyExecutorIndex)));
	else if (installed == NULL)
		ereport(was_served ? LOG : DEBUG1,
				(errmsg("vq_job executor %d: extension vq_job is not installed in this database; exiting",
						VqMyExecutorIndex)));
	else
		ereport(WARNING,
				(errmsg("vq_job executor %d: extension vq_job is installed at version %s in this database, but the loaded library is version %s; no jobs run here until they match",
						VqMyExecutorIndex, installed, VQ_EXTVERSION),
				 errhint("Run ALTER EXTENSION vq_job UPDATE, or install the library of version %s and restart the server.",
						 installed)));
	VqCommitTransaction();
	proc_exit(0);
}

/* ---- housekeeping -------------------------------------------------------------------- */

/*
 * Between claims, in a short transaction of its own when any is due: make
 * sure the extension is still there (a CREATE or DROP EXTENSION also moves
 * the slot's generation), abandon jobs of dead executors and jobs whose
 * lease expired. Its own transaction, so that the rows it touches are not
 * held through a batch.
 */
static void
Housekeeping(TimestampTz now)
{
	bool		check = extension_generation_seen != pg_atomic_read_u64(&VqMyDatabaseSlot->extension_generation) ||
		TimestampDifferenceExceeds(last_extension_check, now, EXTENSION_CHECK_INTERVAL_MS);
	bool		rescue = TimestampDifferenceExceeds(last_rescue, now, RESCUE_INTERVAL_MS) ||
		VqLeaseCheckAt(VqMyDatabaseSlot) <= now;
	bool		positions = VqMyExecutorIndex == 0 &&
		now >= next_positions_check;

	if (!check && !rescue && !positions)
		return;
	VqBeginTransaction();
	if (check)
		CheckExtension(now);	/* exits if it is gone */
	if (positions)
	{
		VqRegistry *registry = VqRegistryPin();

		VqCheckClaimPositions(registry, now);
		VqRegistryRelease(registry);
		next_positions_check = now + Max((TimestampTz) POSITIONS_CHECK_MS * 1000,
										 (GetCurrentTimestamp() - now) * POSITIONS_CHECK_SHARE);
	}
	if (rescue)
	{
		VqRegistry *registry = VqRegistryPin();
		/* (leases: when the first may have ended, by one executor; wake.h) */
		bool		lease_turn = VqTakeLeaseCheckTurn(VqMyDatabaseSlot, now);
		uint64		exits = pg_atomic_read_u64(&VqMyDatabaseSlot->executor_exits);
		TimestampTz next_lease = VQ_NO_NEXT_DUE;

		if (VqRescueOrphans(registry, now, lease_turn, &next_lease) > 0)
			VqPollAllNow(now);
		if (lease_turn)
			VqLeasesLookedAt(VqMyDatabaseSlot, next_lease);
		VqRegistryRelease(registry);
		last_rescue = now;
		/* (looked at only between idle cycles: a busy executor is never quiet) */
		quiet = !last_cycle_found_work && !VqAnyJobRunning();
		exits_when_quiet = exits;
	}
	VqCommitTransaction();
}

/*
 * A known due time has passed (or we just started: jobs may have been
 * enqueued before any executor could be told): everything is worth a look,
 * and the next due time must be found.
 */
static void
LookAtDueTimes(VqRegistry *registry, TimestampTz now)
{
	TimestampTz next_due = (TimestampTz) pg_atomic_read_u64(&VqMyDatabaseSlot->next_due);
	TimestampTz next;

	if (next_due > now && startup_due_checked)
		return;
	VqPollAllNow(now);
	relay_next_poll = now;		/* an outbox row's scheduled_at or retry time may be the one */
	VqTakersAllDue(VqMyDatabaseSlot);	/* (a job of an external handler may be the one) */
	next = Min(VqEarliestFutureDue(registry, now), VqRelayNextDue(now));
	if (registry->has_notify_handlers)
		next = Min(next, VqTakeEarliestFutureDue(registry, now));
	/* replace the passed value (or lower a later one a committing enqueue set meanwhile) */
	VqReplaceNextDue(VqMyDatabaseSlot, next, now);
	startup_due_checked = true;
}

/* ---- callbacks queued for executors --------------------------------------------------- */

/*
 * Run the administrators' callbacks queued for executors (deferred.c), a
 * batch per transaction, until none is left, when a commit queued some since
 * we last looked, at start, or every VQ_CALLBACKS_LOOK_MS (while awake: a
 * prepared transaction's commit wakes nobody). Here, between jobs, the
 * session holds nothing of any job's role. Returns whether any ran.
 */
static bool
RunQueuedCallbacks(TimestampTz now)
{
	int			n;
	bool		ran = false;

	if (!callbacks_due && !TimestampDifferenceExceeds(last_callbacks_look, now, VQ_CALLBACKS_LOOK_MS))
		return false;
	callbacks_due = false;		/* (a commit that queues more meanwhile sets it again) */
	last_callbacks_look = now;
	do
	{
		CHECK_FOR_INTERRUPTS();
		VqBeginTransaction();
		/* DROP EXTENSION may have committed since Housekeeping looked: then exit as it would */
		if (VqRegistryGetIfInstalled() == NULL)
			CheckExtension(now);
		n = VqRunDeferredCallbacks();
		VqCommitTransaction();
		ran |= n > 0;
	} while (n == VQ_DEFERRED_PER_TRANSACTION && !ShutdownRequestPending);
	return ran;
}

/* ---- the relay, the run, the record ----------------------------------------------------- */

/* The outbox relay, when its poll is due; returns whether it delivered rows (commit them first). */
static bool
RunRelay(VqRegistry *registry, TimestampTz now)
{
	if (relay_next_poll > now)
		return false;
	if (VqRelayBatch(registry, vq_batch_size, now) > 0)
	{
		relay_delay_ms = RELAY_POLL_BASE_MS;
		relay_next_poll = now;
		return true;
	}
	relay_next_poll = TimestampTzPlusMilliseconds(now, relay_delay_ms);
	relay_delay_ms = Min(relay_delay_ms * 2, 4 * RELAY_POLL_BASE_MS);
	return false;
}

/* Run a job claimed visibly (RUNNING committed) in its own transaction and record the outcome. */
static void
RunClaimedJob(VqJob *job, VqQueue *queue)
{
	VqOutcome	outcome;
	TimestampTz now;

	VqBeginTransaction();
	VqRunFunctionHandler(job, &outcome);
	VqNoteDuration(job->handler, outcome.duration_us);
	now = GetCurrentTimestamp();
	if (outcome.kind == VQ_OUTCOME_COMPLETED)
		VqPersistCompleted(list_make1(job), list_make1(&outcome), now);
	else if (outcome.kind == VQ_OUTCOME_CANCELLED)
		VqPersistCancelled(job, &outcome, now);
	else
		VqPersistFailure(job, &outcome, queue, now);
	VqFlushJobLogs(job);
	VqCommitTransaction();
}

/* What the jobs a cycle's transaction ran so far tell about running more in it. */
typedef struct InlineBatch
{
	TimestampTz started;
	int			writers;		/* jobs that wrote (each in a subtransaction with an XID) */
	Oid			role;			/* whose jobs it runs (InvalidOid before the first) */
	bool		ran_jobs;
	bool		claimed_any;
	bool		stopped;		/* released, announced or failed a job, or ended the transaction: claim no more */
} InlineBatch;

/* Should an inline batch stop before its next job? */
static bool
BatchFull(InlineBatch *batch)
{
	return ShutdownRequestPending || batch->writers >= BATCH_MAX_WRITING_SUBXACTS ||
		TimestampDifferenceExceeds(batch->started, GetCurrentTimestamp(), BATCH_TIME_LIMIT_MS);
}

/*
 * Claim again in the same transaction? Only when every job claimed so far
 * ran inline and ended: a job released or announced still holds its row (or
 * capacity) until the commit, and a new claim's reservation replaces the old.
 */
static bool
ClaimAgain(InlineBatch *batch)
{
	return batch->ran_jobs && !batch->stopped && !BatchFull(batch) &&
		!TimestampDifferenceExceeds(batch->started, GetCurrentTimestamp(), RECLAIM_TIME_LIMIT_MS);
}

/*
 * Claimed jobs this cycle does not reach stay ENQUEUED: their row locks go
 * with the commit, and after it the claim positions must come back to them.
 */
static void
ReleaseUnreached(List *jobs, int first)
{
	for (int i = first; i < list_length(jobs); i++)
	{
		VqJob	   *job = list_nth(jobs, i);

		VqJobsEnqueuedAtCommit(job->queue, NULL, job->priority, job->scheduled_at, true);
	}
}

/*
 * Run a claimed batch in the open transaction: inline jobs one by one, until
 * a job must be claimed visibly (it is marked RUNNING and returned, to run
 * after the commit), time or subtransaction limits are reached, shutdown is
 * requested, or a handler changed the transaction's constraint modes.
 * Failures are recorded at once, successes together at the end. Jobs of
 * another role than the first one run are not run here (jobs of different
 * roles never share a transaction), nor jobs of a handler whose max_running
 * turns are all taken. They, and jobs not reached, are released
 * (ReleaseUnreached); *slow_left: how many of those released after a job
 * claimed visibly are of handlers not known to be fast.
 */
static VqJob *
RunBatch(VqRegistry *registry, List *jobs, VqQueue *queue, InlineBatch *batch, int *slow_left)
{
	List	   *done = NIL;
	List	   *done_outcomes = NIL;
	ListCell   *lc;

	foreach(lc, jobs)
	{
		VqJob	   *job = lfirst(lc);
		VqOutcome  *outcome;

		if (BatchFull(batch))
		{
			ReleaseUnreached(jobs, foreach_current_index(lc));
			batch->stopped = true;
			break;
		}
		if ((OidIsValid(batch->role) && job->enqueued_by != batch->role) ||
			!VqTakeHandlerTurn(VqLookupHandler(registry, job->handler)))
		{
			VqJobsEnqueuedAtCommit(job->queue, NULL, job->priority, job->scheduled_at, true);
			batch->stopped = true;
			continue;
		}
		batch->ran_jobs = true;
		if (!VqRunsInline(job->handler))
		{
			VqPersistRunning(job, GetCurrentTimestamp());
			if (done != NIL)
				VqPersistCompleted(done, done_outcomes, GetCurrentTimestamp());
			ReleaseUnreached(jobs, foreach_current_index(lc) + 1);
			*slow_left = VqCountSlow(jobs, foreach_current_index(lc) + 1);
			return job;
		}
		batch->role = job->enqueued_by;
		outcome = MemoryContextAllocZero(cycle_context, sizeof(VqOutcome));
		VqRunFunctionHandler(job, outcome);
		VqNoteDuration(job->handler, outcome->duration_us);
		batch->writers += outcome->wrote ? 1 : 0;
		if (outcome->kind == VQ_OUTCOME_COMPLETED)
		{
			MemoryContext old = MemoryContextSwitchTo(cycle_context);

			done = lappend(done, job);
			done_outcomes = lappend(done_outcomes, outcome);
			MemoryContextSwitchTo(old);
		}
		else
		{
			/* (a retry due at once would be claimed again in this transaction) */
			batch->stopped = true;
			if (outcome->kind == VQ_OUTCOME_CANCELLED)
				VqPersistCancelled(job, outcome, GetCurrentTimestamp());
			else
				VqPersistFailure(job, outcome, queue, GetCurrentTimestamp());
		}
		VqFlushJobLogs(job);
		VqEndHandlerTurn();
		if (outcome->ends_transaction)
		{
			ReleaseUnreached(jobs, foreach_current_index(lc) + 1);
			batch->stopped = true;
			break;
		}
	}
	if (done != NIL)
		VqPersistCompleted(done, done_outcomes, GetCurrentTimestamp());
	return NULL;
}

/*
 * One poll cycle: housekeeping; then the relay if it is due, or a claim from
 * the next queue with work and the run of what was claimed; then the job
 * claimed visibly, if any. Returns true if it found work.
 */
static bool
PollCycle(void)
{
	TimestampTz now = GetCurrentTimestamp();
	VqRegistry *registry;
	VqClaim		claim;
	VqJob	   *visible = NULL;
	InlineBatch batch = {0};
	int			slow_left = 0;
	bool		ran_callbacks;

	MemoryContextReset(cycle_context);
	if (pg_atomic_read_u32(&VqShared->server_read_only))
	{
		/* every write should fail; the launcher starts executors again when it is turned off */
		ereport(LOG,
				(errmsg("vq_job executor %d: the server's default_transaction_read_only is on; exiting", VqMyExecutorIndex)));
		proc_exit(0);
	}
	Housekeeping(now);
	ran_callbacks = RunQueuedCallbacks(now);

	VqBeginTransaction();
	/* DROP EXTENSION may have committed since Housekeeping looked: then exit as it would */
	if (VqRegistryGetIfInstalled() == NULL)
		CheckExtension(now);
	/* pinned: handlers may enqueue, and an enqueue may rebuild the registry */
	registry = VqRegistryPin();
	LookAtDueTimes(registry, now);
	VqSyncQueuePolls(registry, now);
	if (RunRelay(registry, now))
	{
		VqCommitTransaction();
		VqRegistryRelease(registry);
		return true;
	}
	batch.started = GetCurrentTimestamp();
	if (VqClaimNext(registry, now, just_woke, cycle_context, &claim))
	{
		batch.claimed_any = true;
		visible = RunBatch(registry, claim.jobs, claim.queue, &batch, &slow_left);
		while (visible == NULL && ClaimAgain(&batch) &&
			   VqClaimNext(registry, GetCurrentTimestamp(), false, cycle_context, &claim))
			visible = RunBatch(registry, claim.jobs, claim.queue, &batch, &slow_left);
	}
	just_woke = false;
	VqCommitTransaction();

	if (visible != NULL)
	{
		VqSetClaimed(1, true);
		VqSetRunningVisible(true, visible, slow_left);
		visible->running = true;
		RunClaimedJob(visible, claim.queue);
		VqSetRunningVisible(false, NULL, 0);
		VqEndHandlerTurn();		/* (taken by RunBatch) */
	}
	VqSetClaimed(0, true);
	VqRegistryRelease(registry);
	return batch.claimed_any || ran_callbacks;
}

/* ---- the process ---------------------------------------------------------------------- */

/* Was this executor started on demand (it exits after idling)? */
static bool
IsExtraExecutor(void)
{
	return VqMyExecutorIndex >= Min(vq_executors_per_database, VQ_MAX_EXECUTORS);
}

/* Has housekeeping nothing to watch (see quiet)? */
static bool
HousekeepingQuiet(void)
{
	return quiet && !retention_behind &&
		pg_atomic_read_u64(&VqMyDatabaseSlot->executor_exits) == exits_when_quiet;
}

/* How long to sleep: until the next queue poll, known due time or housekeeping tick. */
static long
SleepMs(void)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz wake = VqNextQueuePoll(now);

	wake = Min(wake, (TimestampTz) pg_atomic_read_u64(&VqMyDatabaseSlot->next_due));
	if (!HousekeepingQuiet())
	{
		/* (quiet, the relay's poll, a safety net, rides on the queues' polls: due rows wake us) */
		wake = Min(wake, relay_next_poll);
		wake = Min(wake, TimestampTzPlusMilliseconds(last_rescue, RESCUE_INTERVAL_MS));
		if (VqMyExecutorIndex == 0)
			wake = Min(wake, TimestampTzPlusMilliseconds(last_retention, RETENTION_INTERVAL_MS));
	}
	wake = Min(wake, VqLeaseCheckAt(VqMyDatabaseSlot));	/* (quiet or not: leases workers hold) */
	if (IsExtraExecutor())
		wake = Min(wake, TimestampTzPlusMilliseconds(last_work, EXTRA_EXECUTOR_IDLE_MS));
	if (wake <= now)
		return 0;
	/* round up: waking a little late is fine, waking before scheduled_at only wastes a poll */
	return (long) ((wake - now + 999) / 1000);
}

/* Announce the sleep, look once more at what a waker would have changed, then wait. */
static void
SleepUntilWork(void)
{
	pg_atomic_write_u32(&VqMyExecutorSlot->sleeping, 1);
	pg_memory_barrier();
	if (pg_atomic_read_u64(&VqMyDatabaseSlot->wake_count) == last_wake_count &&
		pg_atomic_read_u64(&VqMyDatabaseSlot->relay_wake_count) == last_relay_wake_count &&
		pg_atomic_read_u64(&VqMyDatabaseSlot->callback_wake_count) == last_callback_wake_count &&
		(pg_atomic_read_u64(&VqMyDatabaseSlot->take_due) &
		 pg_atomic_read_u64(&VqMyDatabaseSlot->take_waiting)) == 0)
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 SleepMs(), PG_WAIT_EXTENSION);
	pg_atomic_write_u32(&VqMyExecutorSlot->sleeping, 0);
	just_woke = true;
	ResetLatch(MyLatch);
}

/* Poll everything that a committed transaction made due since we last looked. */
static void
ReadWakeCounters(void)
{
	uint64		count = pg_atomic_read_u64(&VqMyDatabaseSlot->wake_count);

	if (count != last_wake_count)
	{
		last_wake_count = count;
		VqPollAllNow(GetCurrentTimestamp());
	}
	count = pg_atomic_read_u64(&VqMyDatabaseSlot->relay_wake_count);
	if (count != last_relay_wake_count)
	{
		last_relay_wake_count = count;
		relay_next_poll = GetCurrentTimestamp();
	}
	count = pg_atomic_read_u64(&VqMyDatabaseSlot->callback_wake_count);
	if (count != last_callback_wake_count)
	{
		last_callback_wake_count = count;
		callbacks_due = true;
	}
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

/* SIGHUP was received: reload; false when this executor should no longer run. */
static bool
ReloadConfiguration(void)
{
	ConfigReloadPending = false;
	ProcessConfigFile(PGC_SIGHUP);
	if (!VqDatabaseSelected(MyDatabaseName()))
		return false;			/* vq.databases no longer names this database */
	VqPinSynchronousCommit();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	VqRefreshSettingsBase();
	PopActiveSnapshot();
	CommitTransactionCommand();
	/* the pool was made smaller than this executor's number: it goes as soon as it is idle */
	if (IsExtraExecutor())
		started_always_running = true;
	return true;
}

/* Connect, publish ourselves and set up the process-local state; false if there is nothing to serve. */
static bool
SetUpExecutor(Datum arg)
{
	int64		packed = DatumGetInt64(arg);
	char		appname[64];

	VqMyDatabase = (Oid) (packed >> 16);
	VqMyExecutorIndex = (int) (packed & 0xffff);

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	pqsignal(SIGUSR2, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(VqMyDatabase, InvalidOid, 0);
	snprintf(appname, sizeof(appname), "vq_job executor %d", VqMyExecutorIndex);
	SetConfigOption("application_name", appname, PGC_SUSET, PGC_S_OVERRIDE);
	/* the database's and role's defaults reached us: pin what we need before any transaction (settings.c) */
	VqPinWorkerSettings();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	VqRecordSessionUser();
	VqNoteConnectionSettings();
	PopActiveSnapshot();
	CommitTransactionCommand();

	/*
	 * Started after a reload that took the database out of vq.databases (the
	 * launcher decided to start us before it read the new value): no SIGHUP
	 * will come to tell us, so look now.
	 */
	if (!VqDatabaseSelected(MyDatabaseName()))
		return false;
	if (!AttachSlot())
		return false;
	before_shmem_exit(DetachSlot, (Datum) 0);
	before_shmem_exit(RecordCutWorkAtExit, (Datum) 0);	/* runs first */

	cycle_context = AllocSetContextCreate(TopMemoryContext, "vq_job executor cycle", ALLOCSET_DEFAULT_SIZES);
	VqClaimInit();
	VqWatchInit();
	VqPoolInit();

	extension_generation_seen = pg_atomic_read_u64(&VqMyDatabaseSlot->extension_generation);
	last_work = GetCurrentTimestamp();
	/* leases workers took before this executor started (before a restart, say): look at them once */
	VqLeasesLookedAt(VqMyDatabaseSlot, last_work);
	started_always_running = !IsExtraExecutor();
	last_wake_count = pg_atomic_read_u64(&VqMyDatabaseSlot->wake_count);
	last_relay_wake_count = pg_atomic_read_u64(&VqMyDatabaseSlot->relay_wake_count);
	last_callback_wake_count = pg_atomic_read_u64(&VqMyDatabaseSlot->callback_wake_count);
	return true;
}

/*
 * A session restores into this database (restore.c): claim, relay, rescue
 * and delete nothing, look after the extension only, and wait (the end of the
 * restore sets our latch).
 */
static void
WaitForRestore(void)
{
	TimestampTz now = GetCurrentTimestamp();

	if (extension_generation_seen != pg_atomic_read_u64(&VqMyDatabaseSlot->extension_generation) ||
		TimestampDifferenceExceeds(last_extension_check, now, EXTENSION_CHECK_INTERVAL_MS))
	{
		VqBeginTransaction();
		CheckExtension(now);	/* exits if it is gone */
		VqCommitTransaction();
	}
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 EXTENSION_CHECK_INTERVAL_MS, PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
}

/* Entry point of an executor process; arg packs the database OID and the executor number. */
void
vq_executor_main(Datum arg)
{
	if (!SetUpExecutor(arg))
		proc_exit(0);
	while (!ShutdownRequestPending)
	{
		bool		found_work;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending && !ReloadConfiguration())
			break;
		if (IsExtraExecutor() &&
			(started_always_running ||
			 TimestampDifferenceExceeds(last_work, GetCurrentTimestamp(), EXTRA_EXECUTOR_IDLE_MS)))
			break;				/* the pool was made smaller; or started on demand, and idle */
		if (!VqRestoreCycleBegins())
		{
			WaitForRestore();
			continue;
		}
		ReadWakeCounters();
		(void) VqRelayTakeWakeups();
		found_work = PollCycle();	/* exits the process if the extension is gone */
		last_cycle_found_work = found_work;
		if (found_work)
		{
			last_work = GetCurrentTimestamp();
			quiet = false;
		}
		/* a background worker reports its table statistics itself (autovacuum depends on them) */
		pgstat_report_stat(false);
		if (VqMyExecutorIndex == 0 &&
			TimestampDifferenceExceeds(last_retention, GetCurrentTimestamp(), RETENTION_INTERVAL_MS))
		{
			retention_behind = VqRunRetention();
			last_retention = GetCurrentTimestamp();
			VqVacuumJobTable(last_retention);
			VqCompactJobTable(last_retention);
		}
		VqRestoreCycleEnds();
		if (!found_work)
			SleepUntilWork();
	}
	proc_exit(0);
}
