/*
 * shmem.h: vq_job's shared state, and who owns each piece of it.
 *
 * One slot per served database, assigned by the launcher; inside it one entry
 * per executor process. Every field has one writer, or is a request box that
 * others write and one process reads:
 *
 *  - VqShared->launcher_*: the launcher, under VqShared->lock.
 *  - VqShared->server_read_only: the launcher (an atomic): the server's own
 *    default_transaction_read_only (the executors pin theirs off, whatever
 *    their database's or role's defaults say, and look here instead).
 *  - VqShared->extension_changes: an atomic moved by committing CREATE / DROP
 *    EXTENSION (wakeup.c); the launcher reads it to probe again the databases
 *    it found without the extension (they hold no slot, so nothing else tells).
 *  - slot->dboid: the launcher, under VqShared->lock (finding a database's
 *    slot takes it in shared mode).
 *  - slot->state, state_since: the launcher, under the slot's lock.
 *  - slot->request: requests to the launcher (stop the executors until a
 *    time; what an executor found when it looked for the extension), written
 *    by whoever asks, under the slot's lock; the launcher acts on them.
 *  - slot->wake_count, relay_wake_count, callback_wake_count, next_due,
 *    due_queue_hint, extension_generation: atomics moved by committing
 *    backends (wakeup.c), read by the executors.
 *  - slot->cancel_seq[i]: a request box to executor i (vq_cancel writes the
 *    sequence number of the run to flag; executor i reads it).
 *  - slot->executors_wanted: a request box to the launcher (executors raise it
 *    to the number of executors they want started; the launcher takes and
 *    zeroes it).
 *  - slot->handler_timings: hints, written by any executor after a run (the
 *    last writer wins), read by the others.
 *  - slot->positions: where claims got to in each (queue, priority), under
 *    the slot's lock: executors advance them after a claim, and every commit
 *    that makes a job ENQUEUED lowers them (claimpos.c).
 *  - slot->saver_pid: the saver of the database (saver.c), under the slot's
 *    lock; read by those who wait for the database's processes to leave.
 *  - slot->executors[i]: executor i only (see VqExecutorSlot), but the
 *    saver's part of its live log (VqLiveLog).
 *
 * Two segments of their own: the prepared transactions' wake-up notes
 * (prepared.c: written and taken by the sessions that prepare and finish
 * them, under its lock) and the sessions restoring into a database
 * (restore.c: each writes its own entry, under its lock; executors read).
 */
#ifndef VQ_SHMEM_H
#define VQ_SHMEM_H

#include "postgres.h"

#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "main/limits.h"

/* Handler execution times remembered per database (by name hash; a collision only costs a guess). */
#define VQ_HANDLER_TIMINGS 64

/* "Nothing known to be due": the next-due value when no future job is known. */
#define VQ_NO_NEXT_DUE PG_INT64_MAX

typedef enum VqDatabaseState
{
	VQ_DB_FREE = 0,				/* slot unused */
	VQ_DB_STARTING,				/* executor 0 started; the extension not yet found */
	VQ_DB_NO_EXTENSION,			/* the database has no vq_job: recheck later or when woken */
	VQ_DB_ACTIVE				/* the extension is there; executors serve it */
} VqDatabaseState;

/* What an executor found when it looked for the extension. */
typedef enum VqExtensionFound
{
	VQ_EXT_NOT_LOOKED = 0,
	VQ_EXT_PRESENT,
	VQ_EXT_ABSENT				/* not installed, or installed at another version */
} VqExtensionFound;

/*
 * Claim positions. A queue's jobs are claimed in (priority DESC, scheduled_at,
 * execution_id) order; for each priority level of a queue the slot remembers
 * where the claims got to, so that the next claim's index scan starts there
 * instead of walking again over the entries of jobs finished since (which a
 * held snapshot keeps from being cleaned up). The invariant: every ENQUEUED
 * job of the level that no claim holds and whose commit is visible comes
 * after pos, or a commit will lower pos before it. See claimpos.c.
 */
#define VQ_MAX_CLAIM_LEVELS 64		/* (queue, priority) pairs remembered per database */
#define VQ_MAX_CLAIM_QUEUES 64		/* queues whose levels are all known, per database */

typedef struct VqClaimKey
{
	TimestampTz scheduled_at;
	pg_uuid_t	execution_id;
} VqClaimKey;

typedef struct VqClaimLevel
{
	bool		used;
	char		queue[VQ_NAME_MAX + 1];
	int32		priority;
	VqClaimKey	pos;			/* claims resume after this key */
	uint64		claimers;		/* bit i: executor i is claiming from this level now */
	VqClaimKey	floor[VQ_MAX_EXECUTORS];	/* lowest key committed during executor i's claim */
} VqClaimLevel;

/*
 * The outbox relay's position, the same idea for the rows due when they were
 * published (no scheduled_at, no retry time), which the relay takes in id
 * order: every such PENDING row the relay can serve, that no relay holds and
 * whose commit is visible has an id >= pos, or a commit will lower pos to it.
 */
typedef struct VqRelayPosition
{
	int64		pos;			/* relays scan from this id (0: from the start) */
	uint64		claimers;		/* bit i: executor i is relaying now */
	int64		floor[VQ_MAX_EXECUTORS];	/* lowest id committed during executor i's relay */
} VqRelayPosition;

/*
 * vq_pull takes a NOTIFY handler's announced jobs in (priority DESC,
 * scheduled_at, execution_id) order: the key, with the priority negated so
 * that one ascending comparison orders it (the index job_pull_idx).
 */
typedef struct VqPullKey
{
	int64		neg_priority;
	TimestampTz scheduled_at;
	pg_uuid_t	execution_id;
} VqPullKey;

#define VQ_MAX_PULL_HANDLERS 64		/* NOTIFY handlers whose pull position is kept, per database */
#define VQ_MAX_PULLERS 32			/* vq_pull calls in flight that may move a position, per database */

/*
 * Where vq_pull got to for a handler: every announced job of the handler that
 * no consumer took, whose commit is visible and that no pull in flight holds
 * comes after pos, or a commit will lower pos to it. See pullpos.c.
 */
typedef struct VqPullPosition
{
	char		handler[VQ_NAME_MAX + 1];	/* '' = free */
	VqPullKey	pos;
} VqPullPosition;

/* A vq_pull whose transaction has not ended: it moves its handler's position when it commits. */
typedef struct VqPuller
{
	uint64		ticket;			/* 0 = free; otherwise names the pull (VqDatabaseSlot.pull_tickets) */
	char		handler[VQ_NAME_MAX + 1];
	VqPullKey	floor;			/* lowest key a commit lowered the handler to since the pull began */
	TransactionId xid;			/* the (sub)transaction its takes are in, once it took (else invalid) */
} VqPuller;

typedef struct VqClaimPositions
{
	bool		overflow;		/* a level did not fit: every claim falls back to the plain scan */
	char		known[VQ_MAX_CLAIM_QUEUES][VQ_NAME_MAX + 1];	/* queues whose levels are all here ('' = free) */
	VqClaimLevel levels[VQ_MAX_CLAIM_LEVELS];
	VqRelayPosition relay;
	VqPullPosition pulls[VQ_MAX_PULL_HANDLERS];
	VqPuller	pullers[VQ_MAX_PULLERS];
} VqClaimPositions;

/*
 * An upper bound of a queue's NOTIFY jobs in flight (announced and not
 * answered), so that a claim need not count them in the table while the
 * bound leaves room: the count walks every row version of the queue's NOTIFY
 * jobs, which a held snapshot keeps. The bound is the last count plus every
 * announcement committed since that count began; it never goes down but by
 * a new count. See claim.c (RoomInQueue).
 */
typedef struct VqNotifyBound
{
	char		queue[VQ_NAME_MAX + 1];	/* '' = free */
	bool		valid;			/* counted is the result of the count begun at generation */
	uint64		generation;		/* bumped when a count begins */
	int			counted;		/* RUNNING NOTIFY jobs of the queue at that count */
	int			since;			/* announcements committed since it began */
} VqNotifyBound;

/* Requests to the launcher about one database (under the slot's lock). */
typedef struct VqLauncherRequest
{
	TimestampTz stop_until;		/* keep the executors stopped until then (0: no request) */
	VqExtensionFound extension;	/* what the last executor to look found */
	uint64		extension_seen_at;	/* extension_generation when it looked */
} VqLauncherRequest;

/*
 * The job an executor runs now. Written by that executor only, with the
 * changecount protocol (VqBeginJobWrite / VqEndJobWrite); read by others
 * without a lock through VqReadRunningJob.
 */
typedef struct VqRunningJob
{
	bool		running;
	uint64		seq;			/* names this run for cancel requests (unique per executor slot) */
	pg_uuid_t	execution_id;
	char		handler[VQ_NAME_MAX + 1];
	int32		attempt_number;
	Oid			enqueued_by;	/* who may see it (as in vq.job's row security) */
	TimestampTz started_at;
	int64		progress_total; /* -1: not set */
	int64		progress_succeeded;
	int64		progress_failed;
} VqRunningJob;

/* Bytes of log lines a running handler wrote that the saver can save while it runs. */
#define VQ_LIVE_LOG_BYTES 4096

/*
 * The live log of an executor's running job (see livelog.c): a ring of
 * VQ_LIVE_LOG_BYTES. The running executor appends lines without a lock
 * (seq, head and the bytes between tail and head are its own); the saver
 * copies lines out and, once its insert committed, moves tail (tail,
 * saved_lines, saving: the saver's, under the database slot's lock); the
 * running executor resets all of it, under that lock, when the run ends.
 */
typedef struct VqLiveLog
{
	pg_atomic_uint64 seq;		/* the run the lines belong to (VqRunningJob.seq; 0: none) */
	pg_atomic_uint32 head;		/* bytes appended in the run (a ring position: buf[head % size]) */
	pg_atomic_uint32 tail;		/* bytes saved so far */
	int			saved_lines;	/* lines saved so far */
	bool		saving;			/* the saver copied lines and has not committed them yet */
	char		buf[VQ_LIVE_LOG_BYTES];
} VqLiveLog;

/* One executor process; every field is written by that executor only (but the saver's part of the live log). */
typedef struct VqExecutorSlot
{
	/* identity, set at start and cleared at exit, under the slot's lock */
	int			pid;			/* 0 when the entry is free */
	TimestampTz started_at;		/* with pid, identifies this incarnation in vq.job.worker_* */
	Latch	   *latch;
	/* waiting on its latch: the one to wake for new work (read without a lock, see wakeup.c) */
	pg_atomic_uint32 sleeping;
	/* claim accounting, under the slot's lock (a claim reads every executor's count at once) */
	char		queue[VQ_NAME_MAX + 1];	/* the queue of its claimed jobs */
	int			claimed;		/* jobs claimed (or reserved) and not finished */
	char		capacity_wait[VQ_NAME_MAX + 1];	/* a queue it found at capacity ('' = none) */
	bool		running_visible;	/* runs a job claimed visibly: claims nothing until it ends */
	char		limited_handler[VQ_NAME_MAX + 1];	/* runs a job of this handler, which has max_running ('' = none) */
	/* the job running now: changecount protocol */
	uint32		changecount;
	VqRunningJob job;
	VqLiveLog	log;
} VqExecutorSlot;

typedef struct VqDatabaseSlot
{
	LWLock	   *lock;			/* this database's lock (see the ownership notes above) */
	Oid			dboid;			/* InvalidOid when free */
	VqDatabaseState state;
	TimestampTz state_since;
	VqLauncherRequest request;
	pg_atomic_uint64 wake_count;	/* commits that enqueued due work */
	pg_atomic_uint64 relay_wake_count;	/* commits that published outbox rows due now */
	pg_atomic_uint64 callback_wake_count;	/* commits that queued callbacks for an executor (deferred.c) */
	pg_atomic_uint64 next_due;	/* earliest future scheduled_at enqueued (TimestampTz) */
	pg_atomic_uint32 due_queue_hint;	/* VqNameHash of a queue that just got due jobs (0: none) */
	pg_atomic_uint64 extension_generation;	/* CREATE / DROP EXTENSION vq_job commits */
	pg_atomic_uint64 cancel_seq[VQ_MAX_EXECUTORS];	/* run to flag cancelled, per executor */
	pg_atomic_uint32 executors_wanted;	/* most executors any executor asked for since the launcher took it */
	pg_atomic_uint64 executor_exits;	/* executors of this database that left their slot */
	pg_atomic_uint64 notify_sweep_at;	/* when an executor last looked at the NOTIFY jobs in flight */
	/* handlers' recent execution times, shared so a new executor knows which run inline (see executor.c) */
	pg_atomic_uint64 handler_timings[VQ_HANDLER_TIMINGS];
	VqClaimPositions positions; /* under the slot's lock: advanced by claims, lowered by commits */
	VqNotifyBound notify_bounds[VQ_MAX_CLAIM_QUEUES];	/* under the slot's lock */
	uint64		pull_tickets;	/* under the slot's lock: pulls begun (never reset, unlike positions) */
	int			saver_pid;		/* the saver connected to the database (saver.c; 0: none), under the slot's lock */
	VqExecutorSlot executors[VQ_MAX_EXECUTORS];
} VqDatabaseSlot;

typedef struct VqSharedState
{
	LWLock	   *lock;			/* slot assignment and the launcher's identity */
	int			launcher_pid;
	Latch	   *launcher_latch;
	pg_atomic_uint64 extension_changes; /* CREATE / DROP EXTENSION vq_job commits in any database */
	pg_atomic_uint32 server_read_only;	/* the launcher: the server's default_transaction_read_only is on */
	int			nslots;
	VqDatabaseSlot slots[FLEXIBLE_ARRAY_MEMBER];
} VqSharedState;

extern VqSharedState *VqShared;

/*
 * This process's database and its entries in shared memory: set once at
 * start by an executor (all four) and by the saver (the database and its
 * slot); InvalidOid and NULL in every other process.
 */
extern Oid	VqMyDatabase;
extern int	VqMyExecutorIndex;
extern VqDatabaseSlot *VqMyDatabaseSlot;
extern VqExecutorSlot *VqMyExecutorSlot;

/* Register the shared-memory request and startup hooks (from _PG_init). */
extern void VqShmemInit(void);

/* A name's hash (never 0): due_queue_hint, handler_timings. */
extern uint32 VqNameHash(const char *name);

/* The slot of a database, or NULL (caller holds VqShared->lock). */
extern VqDatabaseSlot *VqFindDatabaseSlot(Oid dboid);

/*
 * Run fn(slot, arg) on a database's slot while holding VqShared->lock (shared)
 * and the slot's lock in the given mode; returns false (without calling fn)
 * when the database has no slot.
 */
extern bool VqWithDatabaseSlot(Oid dboid, LWLockMode mode,
							   void (*fn) (VqDatabaseSlot *slot, void *arg), void *arg);

/* The changecount protocol for VqExecutorSlot.job (writer: the executor itself). */
extern void VqBeginJobWrite(VqExecutorSlot *e);
extern void VqEndJobWrite(VqExecutorSlot *e);
/* A consistent copy of another executor's running job (false: none running). */
extern bool VqReadRunningJob(VqExecutorSlot *e, VqRunningJob *copy);

#endif							/* VQ_SHMEM_H */
