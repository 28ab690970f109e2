/*
 * wake.c: waking vq_job's processes now, through a database slot's wake-up
 * fields and the latches of those who sleep. Only this file writes the wake
 * counters (wake_count, relay_wake_count, callback_wake_count), next_due,
 * due_queue_hint and extension_generation of a slot, and
 * VqShared->extension_changes; the executors read them (executor.c). What a
 * transaction makes due is noted and acted on at its commit by wakeup.c,
 * which calls these.
 *
 * Workers outside the server that wait for jobs of external handlers are
 * woken by NOTIFY, which only a transaction can send: a committing backend
 * sets the handlers' bits in the slot's take_due, and when a take of one of
 * them is waiting (take_waiting, set by every take before its scan), wakes an
 * executor, which takes the bits of both and sends the notifications
 * (notify.c). At most one notification per take, never one per job.
 *
 * Waking one executor is enough: the counters it reads tell it what changed,
 * an executor that claims a full batch wakes the next one, and a busy
 * executor reads the counters before it sleeps again. An executor announces
 * that it sleeps, issues a barrier, then rereads the counters; a waker moves
 * a counter (an atomic with a full barrier), then looks for sleepers: one of
 * the two sees the other, so no wake-up is lost.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/latch.h"

#include "main/limits.h"
#include "main/shmem.h"
#include "main/wake.h"

/* Set the latch of one sleeping executor of the slot (caller holds the slot's lock). */
static void
WakeOneExecutor(VqDatabaseSlot *slot)
{
	for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
	{
		VqExecutorSlot *e = &slot->executors[i];

		if (e->pid != 0 && e->latch != NULL && pg_atomic_read_u32(&e->sleeping))
		{
			SetLatch(e->latch);
			return;
		}
	}
}

/* Set the latch of every executor of the slot (caller holds the slot's lock). */
static void
WakeEveryExecutor(VqDatabaseSlot *slot)
{
	for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
		if (slot->executors[i].pid != 0 && slot->executors[i].latch != NULL)
			SetLatch(slot->executors[i].latch);
}

/* What a wake-up tells a database's executors. */
typedef struct WakeUp
{
	bool		due_now;		/* work is due now (else at next_due) */
	TimestampTz next_due;
	uint32		queue_hint;		/* VqNameHash of the queue with the work (0: unknown) */
	bool		relay;			/* outbox rows are due now */
	bool		callbacks;		/* callbacks were queued for an executor (deferred.c) */
} WakeUp;

/*
 * Set the slot's next-due time to t when it is later than t or has passed
 * already (by now): a value another process set meanwhile is replaced only
 * if t comes first.
 */
static void
SetNextDue(VqDatabaseSlot *slot, TimestampTz t, TimestampTz now)
{
	uint64		cur = pg_atomic_read_u64(&slot->next_due);

	while (((int64) cur > t || (int64) cur <= now) &&
		   !pg_atomic_compare_exchange_u64(&slot->next_due, &cur, (uint64) t))
		;
}

/* Move the slot's counters as the wake-up says, then set the latch of one sleeping executor. */
static void
WakeSlot(VqDatabaseSlot *slot, void *arg)
{
	WakeUp	   *w = arg;

	if (w->relay)
		pg_atomic_fetch_add_u64(&slot->relay_wake_count, 1);
	else if (w->callbacks)
		pg_atomic_fetch_add_u64(&slot->callback_wake_count, 1);
	else if (w->due_now)
	{
		if (w->queue_hint != 0)
			pg_atomic_write_u32(&slot->due_queue_hint, w->queue_hint);
		pg_atomic_fetch_add_u64(&slot->wake_count, 1);
	}
	else
		SetNextDue(slot, w->next_due, GetCurrentTimestamp());
	WakeOneExecutor(slot);
}

/*
 * Tell the executors of a database that work is due now (the wake counter)
 * or at next_due (the slot's next-due time), and set the latch of one that
 * sleeps. A database without running executors has nothing to wake: they
 * poll everything when they start.
 */
void
VqWakeExecutors(Oid dboid, bool due_now, TimestampTz next_due, uint32 queue_hint)
{
	WakeUp		w = {.due_now = due_now, .next_due = next_due, .queue_hint = queue_hint};

	(void) VqWithDatabaseSlot(dboid, LW_SHARED, WakeSlot, &w);
}

/* Tell the executors of a database that outbox rows are due now (the relay's wake counter). */
void
VqWakeRelay(Oid dboid)
{
	(void) VqWithDatabaseSlot(dboid, LW_SHARED, WakeSlot, &(WakeUp) {.relay = true});
}

/* Tell the executors of a database that callbacks were queued for them (deferred.c). */
void
VqWakeForCallbacks(Oid dboid)
{
	(void) VqWithDatabaseSlot(dboid, LW_SHARED, WakeSlot, &(WakeUp) {.callbacks = true});
}

/* vq_job was created or dropped in the slot's database: every executor must look (see wake.h). */
void
VqWakeOnExtensionChangeLocked(VqDatabaseSlot *slot)
{
	pg_atomic_fetch_add_u64(&slot->extension_generation, 1);
	WakeEveryExecutor(slot);
}

/* vq_job was created or dropped somewhere: the launcher probes the databases it found without it. */
void
VqWakeLauncherOnExtensionChange(void)
{
	pg_atomic_fetch_add_u64(&VqShared->extension_changes, 1);
	VqWakeLauncher();
}

/* Every due time, the relay and every queue are worth a look: wake every executor (see wake.h). */
void
VqWakeForEverythingLocked(VqDatabaseSlot *slot)
{
	TimestampTz now = GetCurrentTimestamp();

	SetNextDue(slot, now, now);
	pg_atomic_fetch_add_u64(&slot->relay_wake_count, 1);
	pg_atomic_fetch_add_u64(&slot->wake_count, 1);
	pg_atomic_fetch_or_u64(&slot->take_due, ~UINT64CONST(0));
	WakeEveryExecutor(slot);
}

/* Lower the slot's lease_check_at to t; true when it moved. */
static bool
LowerLeaseCheck(VqDatabaseSlot *slot, TimestampTz t)
{
	uint64		cur = pg_atomic_read_u64(&slot->lease_check_at);

	while ((int64) cur > t)
		if (pg_atomic_compare_exchange_u64(&slot->lease_check_at, &cur, (uint64) t))
			return true;
	return false;
}

static void
LeaseEndsAtLocked(VqDatabaseSlot *slot, void *arg)
{
	if (LowerLeaseCheck(slot, *(TimestampTz *) arg))
		WakeOneExecutor(slot);	/* (a sleeping executor's timeout may be later: it must look again) */
}

/* A lease a take gave ends at t (see wake.h). */
void
VqLeaseEndsAt(Oid dboid, TimestampTz t)
{
	(void) VqWithDatabaseSlot(dboid, LW_SHARED, LeaseEndsAtLocked, &t);
}

/* An executor's turn to look for expired leases (see wake.h). */
bool
VqTakeLeaseCheckTurn(VqDatabaseSlot *slot, TimestampTz now)
{
	uint64		cur = pg_atomic_read_u64(&slot->lease_check_at);

	return (int64) cur <= now &&
		pg_atomic_compare_exchange_u64(&slot->lease_check_at, &cur, (uint64) VQ_NO_NEXT_DUE);
}

/* The look found the held leases: the earliest ends at t (see wake.h). */
void
VqLeasesLookedAt(VqDatabaseSlot *slot, TimestampTz t)
{
	(void) LowerLeaseCheck(slot, t);
}

/* When a lease may end next (see wake.h). */
TimestampTz
VqLeaseCheckAt(VqDatabaseSlot *slot)
{
	return (TimestampTz) pg_atomic_read_u64(&slot->lease_check_at);
}

/* An executor found the next due time: put it in the slot (see wake.h). */
void
VqReplaceNextDue(VqDatabaseSlot *slot, TimestampTz next, TimestampTz now)
{
	SetNextDue(slot, next, now);
}

/* The queue the last due wake-up named, taken (0: none). */
uint32
VqTakeDueQueueHint(VqDatabaseSlot *slot)
{
	return pg_atomic_exchange_u32(&slot->due_queue_hint, 0);
}

/* Wake the launcher. */
void
VqWakeLauncher(void)
{
	if (VqShared == NULL)
		return;
	LWLockAcquire(VqShared->lock, LW_SHARED);
	if (VqShared->launcher_latch != NULL)
		SetLatch(VqShared->launcher_latch);
	LWLockRelease(VqShared->lock);
}

/* Set the latch of every executor of every database (the launcher, when the server turns read-only). */
void
VqWakeAllExecutors(void)
{
	LWLockAcquire(VqShared->lock, LW_SHARED);
	for (int s = 0; s < VqShared->nslots; s++)
	{
		VqDatabaseSlot *slot = &VqShared->slots[s];

		LWLockAcquire(slot->lock, LW_SHARED);
		WakeEveryExecutor(slot);
		LWLockRelease(slot->lock);
	}
	LWLockRelease(VqShared->lock);
}

/* The bit of a handler's name hash in take_waiting and take_due (see wake.h). */
uint64
VqTakeWakeBit(uint32 handler_hash)
{
	return UINT64CONST(1) << (handler_hash % 64);
}

typedef struct TakeWake
{
	uint64		bits;
} TakeWake;

static void
TakersWaitingLocked(VqDatabaseSlot *slot, void *arg)
{
	pg_atomic_fetch_or_u64(&slot->take_waiting, ((TakeWake *) arg)->bits);
}

/* A take of these handlers begins: a commit of their jobs from now on wakes the workers (see wake.h). */
void
VqTakersWaiting(Oid dboid, uint64 bits)
{
	TakeWake	w = {bits};

	(void) VqWithDatabaseSlot(dboid, LW_SHARED, TakersWaitingLocked, &w);
}

static void
WakeTakersLocked(VqDatabaseSlot *slot, void *arg)
{
	uint64		bits = ((TakeWake *) arg)->bits;

	pg_atomic_fetch_or_u64(&slot->take_due, bits);
	if (pg_atomic_read_u64(&slot->take_waiting) & bits)
		WakeOneExecutor(slot);
}

/* Jobs of these handlers became due: an executor tells the workers waiting for them (see wake.h). */
void
VqWakeTakers(Oid dboid, uint64 bits)
{
	TakeWake	w = {bits};

	(void) VqWithDatabaseSlot(dboid, LW_SHARED, WakeTakersLocked, &w);
}

/* The bits of the handlers to notify now, taken from both masks (see wake.h). */
uint64
VqTakeTakersToWake(VqDatabaseSlot *slot)
{
	uint64		bits = pg_atomic_read_u64(&slot->take_due) & pg_atomic_read_u64(&slot->take_waiting);

	if (bits == 0)
		return 0;
	/* (a take that sets its bit again from now on is told of what comes after this relay) */
	pg_atomic_fetch_and_u64(&slot->take_waiting, ~bits);
	pg_atomic_fetch_and_u64(&slot->take_due, ~bits);
	return bits;
}

/* Every handler may have due jobs (a due time passed, positions forgotten): see wake.h. */
void
VqTakersAllDue(VqDatabaseSlot *slot)
{
	pg_atomic_fetch_or_u64(&slot->take_due, ~UINT64CONST(0));
	if (pg_atomic_read_u64(&slot->take_waiting) != 0)
		WakeOneExecutor(slot);
}
