/*
 * wakeup.c: what a transaction makes due, acted on at its commit.
 *
 * A transaction notes what it made due (a job now or at a future time,
 * outbox rows, the extension created or dropped); when it commits, one
 * callback lowers the claim positions it must and wakes the executors
 * (main/wake.c moves the slot's counters and sets latches). Nothing
 * happens on abort; PREPARE TRANSACTION hands the notes to prepared.c, which
 * keeps them until COMMIT PREPARED succeeds and they are acted on here. The
 * enqueuing transaction takes no NOTIFY lock, so enqueue keeps INSERT speed.
 *
 * The callback runs in the last resource-release phase of the top-level
 * commit, not at XACT_EVENT_COMMIT: PostgreSQL sends the transaction's catalog
 * invalidations (a REVOKE, a replaced handler) between the two, and a worker
 * woken earlier could claim the job and still see the old catalog. Locks are
 * released by then too, so a woken worker never waits on ours.
 */
#include "postgres.h"

#include "access/xact.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/resowner.h"

#include "main/limits.h"
#include "main/requests.h"
#include "main/shmem.h"
#include "main/wake.h"
#include "claim/claimpos.h"
#include "state/prepared.h"
#include "state/wakeup.h"

PG_FUNCTION_INFO_V1(vq_wake_executors);
PG_FUNCTION_INFO_V1(vq_launcher_wakeup);

/* A priority level of a lane (claimpos.h) that this transaction gave ENQUEUED jobs. */
typedef struct NotedLevel
{
	char		lane[VQ_LANE_MAX + 1];
	int32		priority;
	TimestampTz scheduled_at;	/* the earliest of them */
} NotedLevel;

/* More levels than this in one transaction: forget every claim position instead. */
#define MAX_NOTED_LEVELS 16

/* What this transaction noted, for its end. */
static bool callbacks_registered = false;
static NotedLevel noted_levels[MAX_NOTED_LEVELS];
static int	n_noted_levels = 0;
static bool forget_positions_at_commit = false;
static bool due_at_commit = false;
static uint32 queue_hint_at_commit = 0;	/* VqNameHash of the last queue given due jobs */
static TimestampTz next_due_at_commit = VQ_NO_NEXT_DUE;
static uint64 takers_at_commit = 0;	/* VqTakeWakeBit of the external handlers given due jobs */
static bool relay_at_commit = false;
static bool callbacks_at_commit = false;
static int64 relay_low_id_at_commit = PG_INT64_MAX;	/* lowest id of the rows due at publication */
static bool extension_changed_at_commit = false;
static bool resume_at_end = false;
static Oid	resume_database = InvalidOid;

/* Forget what this transaction noted. */
static void
ForgetNotes(void)
{
	n_noted_levels = 0;
	forget_positions_at_commit = false;
	due_at_commit = false;
	queue_hint_at_commit = 0;
	next_due_at_commit = VQ_NO_NEXT_DUE;
	takers_at_commit = 0;
	relay_at_commit = false;
	callbacks_at_commit = false;
	relay_low_id_at_commit = PG_INT64_MAX;
	extension_changed_at_commit = false;
	resume_at_end = false;
	resume_database = InvalidOid;
}

/* Lower (or forget) the claim positions as this transaction's notes say (slot lock held). */
static void
LowerPositions(VqDatabaseSlot *slot, void *arg)
{
	if (forget_positions_at_commit)
		VqClaimPositionsForget(slot);
	else
		for (int i = 0; i < n_noted_levels; i++)
			VqClaimPositionLower(slot, noted_levels[i].lane, noted_levels[i].priority,
								 noted_levels[i].scheduled_at);
	if (relay_low_id_at_commit != PG_INT64_MAX)
		VqRelayPositionLower(slot, relay_low_id_at_commit);
}

/* vq_job was created or dropped here: the positions go, every executor looks (slot lock held exclusively). */
static void
ExtensionChanged(VqDatabaseSlot *slot, void *arg)
{
	VqClaimPositionsForget(slot);
	VqWakeOnExtensionChangeLocked(slot);
}

/* End of a top-level transaction (after its locks are released): act on what it noted. */
static void
WakeupReleaseCallback(ResourceReleasePhase phase, bool isCommit, bool isTopLevel, void *arg)
{
	if (phase != RESOURCE_RELEASE_AFTER_LOCKS || !isTopLevel)
		return;
	if (isCommit)
	{
		/* first the positions: a woken executor must find the jobs */
		if (n_noted_levels > 0 || forget_positions_at_commit || relay_low_id_at_commit != PG_INT64_MAX)
			(void) VqWithDatabaseSlot(MyDatabaseId, LW_EXCLUSIVE, LowerPositions, NULL);
		if (due_at_commit)
			VqWakeExecutors(MyDatabaseId, true, 0, queue_hint_at_commit);
		if (next_due_at_commit != VQ_NO_NEXT_DUE)
			VqWakeExecutors(MyDatabaseId, false, next_due_at_commit, 0);
		if (takers_at_commit != 0)
			VqWakeTakers(MyDatabaseId, takers_at_commit);
		if (relay_at_commit)
			VqWakeRelay(MyDatabaseId);
		if (callbacks_at_commit)
			VqWakeForCallbacks(MyDatabaseId);
		if (extension_changed_at_commit)
		{
			(void) VqWithDatabaseSlot(MyDatabaseId, LW_EXCLUSIVE, ExtensionChanged, NULL);
			/* (a database without the extension has no slot: this tells the launcher to look) */
			VqWakeLauncherOnExtensionChange();
		}
	}
	if (resume_at_end)
		VqRequestResume(resume_database);
	ForgetNotes();
}

/* This transaction's notes, as a prepared transaction keeps them (more levels than fit: forget the positions). */
static void
CopyNotes(VqWakeNotes *notes)
{
	memset(notes, 0, sizeof(VqWakeNotes));
	notes->forget_positions = forget_positions_at_commit || n_noted_levels > VQ_PREPARED_LEVELS;
	for (int i = 0; i < n_noted_levels && !notes->forget_positions; i++)
	{
		strlcpy(notes->levels[i].lane, noted_levels[i].lane, VQ_LANE_MAX + 1);
		notes->levels[i].priority = noted_levels[i].priority;
		notes->levels[i].scheduled_at = noted_levels[i].scheduled_at;
		notes->nlevels = i + 1;
	}
	notes->due = due_at_commit;
	notes->queue_hint = queue_hint_at_commit;
	notes->next_due = next_due_at_commit;
	notes->takers = takers_at_commit;
	notes->relay = relay_at_commit;
	notes->relay_low_id = relay_low_id_at_commit;
	notes->callbacks = callbacks_at_commit;
	notes->extension_changed = extension_changed_at_commit;
}

/*
 * PREPARE TRANSACTION: the notes go to prepared.c, kept until COMMIT PREPARED
 * succeeds (VqWakeupTransactionDone); nothing happens at this transaction's
 * own end but the lifting of a stop request.
 */
static void
WakeupXactCallback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_PREPARE)
	{
		bool		resume = resume_at_end;
		Oid			database = resume_database;
		VqWakeNotes notes;

		CopyNotes(&notes);
		VqPreparedKeepNotes(&notes);
		ForgetNotes();
		resume_at_end = resume;
		resume_database = database;
	}
}

/* Register this module's end-of-transaction callbacks (once per backend). */
static void
RegisterCallbacks(void)
{
	if (!callbacks_registered)
	{
		RegisterXactCallback(WakeupXactCallback, NULL);
		RegisterResourceReleaseCallback(WakeupReleaseCallback, NULL);
		callbacks_registered = true;
	}
}

/* At commit: something becomes due at due; the executors are woken then. Returns whether it is now. */
static bool
WakeAt(TimestampTz due, uint32 queue_hint)
{
	RegisterCallbacks();
	if (due <= GetCurrentTimestamp())
	{
		due_at_commit = true;
		if (queue_hint != 0)
			queue_hint_at_commit = queue_hint;
		return true;
	}
	if (due < next_due_at_commit)
		next_due_at_commit = due;
	return false;
}

/* At commit: something other than a job becomes due at due. */
void
VqWakeAtCommit(TimestampTz due)
{
	(void) WakeAt(due, 0);
}

/* Note a level this transaction gives ENQUEUED jobs, for the claim positions. */
static void
NoteLevel(const char *lane, int32 priority, TimestampTz scheduled_at)
{
	for (int i = 0; i < n_noted_levels; i++)
	{
		NotedLevel *l = &noted_levels[i];

		if (l->priority == priority && strcmp(l->lane, lane) == 0)
		{
			l->scheduled_at = Min(l->scheduled_at, scheduled_at);
			return;
		}
	}
	if (n_noted_levels == MAX_NOTED_LEVELS)
	{
		forget_positions_at_commit = true;
		return;
	}
	strlcpy(noted_levels[n_noted_levels].lane, lane, VQ_LANE_MAX + 1);
	noted_levels[n_noted_levels].priority = priority;
	noted_levels[n_noted_levels].scheduled_at = scheduled_at;
	n_noted_levels++;
}

/*
 * At commit: jobs of (queue, priority) become ENQUEUED, due at scheduled_at
 * or later; handler names the external handler whose jobs they are (NULL: a
 * function handler's, for the executors).
 */
void
VqJobsEnqueuedAtCommit(const char *queue, const char *handler, int32 priority, TimestampTz scheduled_at,
					   bool wake)
{
	char		lane[VQ_LANE_MAX + 1];

	RegisterCallbacks();
	VqLaneName(lane, queue, handler);
	NoteLevel(lane, priority, scheduled_at);
	if (!wake)
		return;
	if (handler == NULL)
		(void) WakeAt(scheduled_at, VqNameHash(queue));
	else if (scheduled_at <= GetCurrentTimestamp())
		takers_at_commit |= VqTakeWakeBit(VqNameHash(handler));
	else if (scheduled_at < next_due_at_commit)
		next_due_at_commit = scheduled_at;	/* (the executors wake the workers then) */
}

/* At commit: jobs of an external handler became due by other means (room freed in their queue). */
void
VqWakeTakersAtCommit(const char *handler)
{
	RegisterCallbacks();
	takers_at_commit |= VqTakeWakeBit(VqNameHash(handler));
}

/* At commit: jobs became ENQUEUED by means the claim positions cannot follow. */
void
VqForgetClaimPositionsAtCommit(void)
{
	RegisterCallbacks();
	forget_positions_at_commit = true;
}

/*
 * At commit: outbox row id becomes due, at once (timed false: no
 * scheduled_at; it lowers the relay's position) or at scheduled_at (a future
 * row is a due time like a job's).
 */
void
VqWakeRelayAtCommit(int64 id, bool timed, TimestampTz scheduled_at)
{
	RegisterCallbacks();
	if (!timed)
		relay_low_id_at_commit = Min(relay_low_id_at_commit, id);
	if (!timed || scheduled_at <= GetCurrentTimestamp())
		relay_at_commit = true;
	else
		(void) WakeAt(scheduled_at, 0);
}

/*
 * At commit: callbacks were queued for an executor (deferred.c); one is woken
 * to run them. (Prepared: executors find them within VQ_CALLBACKS_LOOK_MS.)
 */
void
VqCallbacksQueuedAtCommit(void)
{
	RegisterCallbacks();
	callbacks_at_commit = true;
}

/* At commit: vq_job was created or dropped in this database. */
void
VqWakeOnExtensionChangeAtCommit(void)
{
	RegisterCallbacks();
	extension_changed_at_commit = true;
}

/* When this transaction ends: lift the stop requested for a database (InvalidOid: none), wake the launcher. */
void
VqResumeDatabaseAtEnd(Oid dboid)
{
	RegisterCallbacks();
	resume_at_end = true;
	resume_database = dboid;
}

/*
 * vq.wake_executors(forget_positions): the calling transaction made jobs due
 * by other means than an enqueue (a queue resumed, jobs re-driven): wake the
 * executors at commit rather than leaving the jobs to the next poll; and when
 * jobs were made ENQUEUED anywhere in claim order (re-driven), forget the
 * claim positions.
 */
Datum
vq_wake_executors(PG_FUNCTION_ARGS)
{
	if (!PG_ARGISNULL(0) && PG_GETARG_BOOL(0))
		VqForgetClaimPositionsAtCommit();
	(void) WakeAt(GetCurrentTimestamp(), 0);
	takers_at_commit = ~UINT64CONST(0);
	PG_RETURN_VOID();
}

/* vq.launcher_wakeup(): called by the install script; the database is served as soon as it commits. */
Datum
vq_launcher_wakeup(PG_FUNCTION_ARGS)
{
	VqWakeOnExtensionChangeAtCommit();
	PG_RETURN_VOID();
}

/* Note that everything must be looked at: jobs and outbox rows anywhere in claim order, any due time. */
static void
NoteEverything(void)
{
	forget_positions_at_commit = true;
	due_at_commit = true;
	takers_at_commit = ~UINT64CONST(0);
	relay_at_commit = true;
	callbacks_at_commit = true;
	next_due_at_commit = Min(next_due_at_commit, GetCurrentTimestamp());	/* passed: look it up again */
}

/* At commit: jobs, outbox rows or due times arrived unnoted (see wakeup.h). */
void
VqLookAtEverythingAtCommit(void)
{
	RegisterCallbacks();
	NoteEverything();
}

/*
 * COMMIT PREPARED succeeded: act now on what the prepared transaction noted
 * (NULL: its notes were lost). It is committed and visible, its
 * invalidations were sent and its locks released by then, as at the point of
 * a commit where the notes are acted on; the transaction that runs COMMIT
 * PREPARED (never in a transaction block) has noted nothing of its own.
 */
static void
WakeForCommitPrepared(const VqWakeNotes *notes)
{
	RegisterCallbacks();
	if (notes == NULL)
		NoteEverything();
	else
	{
		for (int i = 0; i < notes->nlevels; i++)
			NoteLevel(notes->levels[i].lane, notes->levels[i].priority, notes->levels[i].scheduled_at);
		forget_positions_at_commit |= notes->forget_positions;
		due_at_commit |= notes->due;
		if (notes->queue_hint != 0)
			queue_hint_at_commit = notes->queue_hint;
		next_due_at_commit = Min(next_due_at_commit, notes->next_due);
		takers_at_commit |= notes->takers;
		relay_at_commit |= notes->relay;
		relay_low_id_at_commit = Min(relay_low_id_at_commit, notes->relay_low_id);
		callbacks_at_commit |= notes->callbacks;
		extension_changed_at_commit |= notes->extension_changed;
	}
	WakeupReleaseCallback(RESOURCE_RELEASE_AFTER_LOCKS, true, true, NULL);
}

/* A transaction statement is about to run (see wakeup.h). */
void
VqWakeupTransactionBegins(TransactionStmt *stmt)
{
	if (stmt->kind != TRANS_STMT_PREPARE)
		return;
	VqPreparedBegins(stmt->gid);
	RegisterCallbacks();		/* its PREPARE event hands prepared.c the notes, even none */
}

/* A transaction statement ran without an error (see wakeup.h). */
void
VqWakeupTransactionDone(TransactionStmt *stmt)
{
	VqWakeNotes notes;

	if (stmt->kind == TRANS_STMT_COMMIT_PREPARED)
		WakeForCommitPrepared(VqPreparedTakeNotes(stmt->gid, &notes) ? &notes : NULL);
	else if (stmt->kind == TRANS_STMT_ROLLBACK_PREPARED)
		(void) VqPreparedTakeNotes(stmt->gid, &notes);
}

/* Forget the positions, make every due time and the relay worth a look, and wake every executor. */
static void
WakeAllForRestore(VqDatabaseSlot *slot, void *arg)
{
	VqClaimPositionsForget(slot);	/* (the slot's lock is held exclusively) */
	VqWakeForEverythingLocked(slot);
}

/* A restore into this database ended (see wakeup.h). */
void
VqWakeAfterRestore(Oid dboid)
{
	(void) VqWithDatabaseSlot(dboid, LW_EXCLUSIVE, WakeAllForRestore, NULL);
}
