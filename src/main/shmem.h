/*
 * shmem.h: vq_job's shared state, and the one module that writes each piece
 * of it (the others ask that module, through its functions; who reads what
 * is in docs/internals.md).
 *
 * One slot per served database, assigned by the launcher; inside it one entry
 * per executor process. shmem.c creates all of it at startup (every lock,
 * every initial value) and writes nothing after that but this process's
 * VqMy* pointers. Then:
 *
 *  - VqShared->launcher_pid, launcher_latch, slot->dboid (under
 *    VqShared->lock), slot->state, state_since (under the slot's lock),
 *    VqShared->server_read_only (an atomic: the server's own
 *    default_transaction_read_only; the executors pin theirs off, whatever
 *    their database's or role's defaults say, and look here instead):
 *    launcher/launcher.c.
 *  - slot->request and executors_wanted: main/requests.c, for whoever asks
 *    the launcher something (a stop until a time; an executor's report of
 *    the extension; executors on demand); the launcher reads and takes them
 *    there.
 *  - VqShared->extension_changes, slot->wake_count, relay_wake_count,
 *    callback_wake_count, next_due, due_queue_hint, extension_generation
 *    (atomics): main/wake.c, for committing backends (state/wakeup.c) and
 *    executors (the next due time they looked up, the hint they take).
 *  - slot->positions: claim/claimpos.c; slot->takers: claim/take.c;
 *    slot->notify_bounds: claim/inflight.c. All under the slot's lock
 *    (overflow is also read without it, as a hint).
 *  - slot->take_waiting, take_due, lease_check_at (atomics): main/wake.c,
 *    for takes (the handlers a worker waits for; when their leases end),
 *    commits (handlers given due jobs) and executors (which relay the
 *    wake-ups as NOTIFY, and look for expired leases).
 *  - slot->cancel_seq[i] (atomics): run/jobapi.c, for vq_cancel (the run of
 *    executor i to flag).
 *  - slot->handler_timings (atomics, last writer wins): executors/pool.c.
 *  - slot->executor_exits (atomic): executors/executor.c.
 *  - slot->saver_pid: executors/saver.c, under the slot's lock.
 *  - slot->executors[i]: written by executor i only, field by field by one
 *    module (see VqExecutorSlot), but the saver's part of its live log.
 *
 * Two segments of their own: the prepared transactions' wake-up notes
 * (state/prepared.c: written and taken by the sessions that prepare and
 * finish them, under its lock) and the sessions restoring into a database
 * (executors/restore.c: each writes its own entry, under its lock; executors
 * read).
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
 * Claim positions. A lane's jobs (a queue's function jobs for the executors,
 * one external handler's jobs in a queue for workers; VQ_LANE_MAX) are
 * claimed in (priority DESC, scheduled_at, execution_id) order; for each
 * priority level of a lane the slot remembers where the claims got to, so
 * that the next claim's index scan starts there instead of walking again
 * over the entries of jobs finished since (which a held snapshot keeps from
 * being cleaned up). The invariant: every ENQUEUED job of the level that no
 * claim holds and whose commit is visible comes after pos, or a commit will
 * lower pos before it. See claimpos.c.
 */
#define VQ_MAX_CLAIM_LEVELS 64		/* (lane, priority) pairs remembered per database */
#define VQ_MAX_CLAIM_QUEUES 64		/* queues (their external-job bounds), per database */
#define VQ_MAX_CLAIM_LANES 128		/* lanes whose levels are all known, per database */

typedef struct VqClaimKey
{
	TimestampTz scheduled_at;
	pg_uuid_t	execution_id;
} VqClaimKey;

typedef struct VqClaimLevel
{
	bool		used;
	char		lane[VQ_LANE_MAX + 1];
	int32		priority;
	VqClaimKey	pos;			/* claims resume after this key */
	bool		claiming[VQ_MAX_CLAIMERS];	/* claimer i (executor, then taker) claims from it now */
	VqClaimKey	floor[VQ_MAX_CLAIMERS]; /* lowest key committed during claimer i's claim */
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
 * A take in flight (a vq_take_jobs call of a worker): it claims from the
 * positions as claimer VQ_MAX_EXECUTORS + its index. Written by claim/take.c.
 */
typedef struct VqTaker
{
	int			pid;			/* 0 = free */
} VqTaker;

/*
 * The known lanes are also the directory of the external handlers' lanes
 * that hold jobs: while external_complete, an external lane that is not
 * known holds no ENQUEUED job (but a commit's, which will make it known), so
 * that takes and the executors' look at due times visit only the known ones,
 * whatever the number of handlers and queues.
 */
typedef struct VqClaimPositions
{
	bool		overflow;		/* a level did not fit lately: claims do not try to learn lanes (a hint) */
	bool		external_complete;	/* every external lane that holds jobs is known */
	uint64		misses;			/* levels commits could not remember (survives forgetting) */
	char		known[VQ_MAX_CLAIM_LANES][VQ_LANE_MAX + 1];	/* lanes whose levels are all here ('' = free) */
	VqClaimLevel levels[VQ_MAX_CLAIM_LEVELS];
	VqRelayPosition relay;
} VqClaimPositions;

/*
 * An upper bound of a queue's external jobs in flight (taken by workers and
 * not answered), so that a claim or a take need not count them in the table
 * while the bound leaves room: the count walks every row version of the
 * queue's taken jobs, which a held snapshot keeps. The bound is the last count
 * plus every take since that count began, minus the replies since; see
 * inflight.c (and RoomInQueue in claim.c).
 */
typedef struct VqNotifyBound
{
	char		queue[VQ_NAME_MAX + 1];	/* '' = free */
	bool		valid;			/* counted is the result of the count begun at generation */
	uint64		generation;		/* bumped when a count begins */
	int			counted;		/* RUNNING external jobs of the queue at that count */
	int			since;			/* jobs taken (or reserved for a take) since it began */
	int			takes_open;		/* jobs taken by takes whose transaction has not ended */
} VqNotifyBound;

/* Requests to the launcher about one database (under the slot's lock; written by requests.c). */
typedef struct VqLauncherRequest
{
	TimestampTz stop_until;		/* keep the executors stopped until then (0: no request) */
	VqExtensionFound extension;	/* what the last executor to look found */
	uint64		extension_seen_at;	/* extension_generation when it looked */
} VqLauncherRequest;

/*
 * The job an executor runs now. Written by that executor only (run/jobapi.c),
 * with the changecount protocol; read by others without a lock through
 * VqReadRunningJob.
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
 * The live log of an executor's running job, written by run/livelog.c only:
 * a ring of VQ_LIVE_LOG_BYTES. The running executor appends lines without a lock
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

/*
 * One executor process. Every field is written by that executor only (but
 * the saver's part of the live log), each by one module: when an executor
 * takes or leaves its entry, executor.c has each module reset its part.
 */
typedef struct VqExecutorSlot
{
	/* identity, set at start and cleared at exit, under the slot's lock: executors/executor.c */
	int			pid;			/* 0 when the entry is free */
	TimestampTz started_at;		/* with pid, identifies this incarnation in vq.job.worker_* */
	Latch	   *latch;
	/* waiting on its latch: the one to wake for new work (read without a lock by main/wake.c): executor.c */
	pg_atomic_uint32 sleeping;
	/* claim accounting, under the slot's lock (a claim reads every executor's count at once): claim/claim.c */
	char		queue[VQ_NAME_MAX + 1];	/* the queue of its claimed jobs */
	int			claimed;		/* jobs claimed (or reserved) and not finished */
	char		capacity_wait[VQ_NAME_MAX + 1];	/* a queue it found at capacity ('' = none) */
	char		limited_handler[VQ_NAME_MAX + 1];	/* runs a job of this handler, which has max_running ('' = none) */
	/* runs a job claimed visibly: claims nothing until it ends (slot lock): executors/pool.c */
	bool		running_visible;
	/* the job running now, changecount protocol: run/jobapi.c */
	uint32		changecount;
	VqRunningJob job;
	/* its log lines while it runs: run/livelog.c */
	VqLiveLog	log;
} VqExecutorSlot;

/* One served database. Each field's one writer is named after it (see the notes above). */
typedef struct VqDatabaseSlot
{
	LWLock	   *lock;			/* this database's lock (shmem.c, at startup) */
	Oid			dboid;			/* InvalidOid when free (launcher.c) */
	VqDatabaseState state;		/* launcher.c */
	TimestampTz state_since;	/* launcher.c */
	VqLauncherRequest request;	/* requests.c */
	pg_atomic_uint64 wake_count;	/* commits that enqueued due work (wake.c) */
	pg_atomic_uint64 relay_wake_count;	/* commits that published outbox rows due now (wake.c) */
	pg_atomic_uint64 callback_wake_count;	/* commits that queued callbacks for an executor (wake.c) */
	pg_atomic_uint64 next_due;	/* earliest future scheduled_at enqueued, TimestampTz (wake.c) */
	pg_atomic_uint32 due_queue_hint;	/* VqNameHash of a queue that just got due jobs, 0: none (wake.c) */
	pg_atomic_uint64 extension_generation;	/* CREATE / DROP EXTENSION vq_job commits (wake.c) */
	pg_atomic_uint64 cancel_seq[VQ_MAX_EXECUTORS];	/* run to flag cancelled, per executor (jobapi.c) */
	pg_atomic_uint32 executors_wanted;	/* most executors asked for since the launcher took it (requests.c) */
	pg_atomic_uint64 executor_exits;	/* executors of this database that left their slot (executor.c) */
	pg_atomic_uint64 lease_check_at;	/* when a lease a worker holds may have ended, TimestampTz; VQ_NO_NEXT_DUE: none (wake.c) */
	pg_atomic_uint64 take_waiting;	/* bit h % 64: a take of a handler with name hash h found less than it asked (wake.c) */
	pg_atomic_uint64 take_due;	/* bit h % 64: a handler with name hash h got due jobs since the last relay (wake.c) */
	/* handlers' recent execution times, shared so a new executor knows which run inline (pool.c) */
	pg_atomic_uint64 handler_timings[VQ_HANDLER_TIMINGS];
	VqClaimPositions positions; /* slot lock; advanced by claims and takes, lowered by commits (claimpos.c) */
	VqTaker		takers[VQ_MAX_TAKERS];	/* slot lock; the takes in flight that move positions (take.c) */
	VqNotifyBound notify_bounds[VQ_MAX_CLAIM_QUEUES];	/* slot lock (inflight.c) */
	int			saver_pid;		/* the saver connected to the database, 0: none; slot lock (saver.c) */
	VqExecutorSlot executors[VQ_MAX_EXECUTORS];
} VqDatabaseSlot;

typedef struct VqSharedState
{
	LWLock	   *lock;			/* slot assignment and the launcher's identity (shmem.c, at startup) */
	int			launcher_pid;	/* launcher.c */
	Latch	   *launcher_latch; /* launcher.c */
	pg_atomic_uint64 extension_changes; /* CREATE / DROP EXTENSION vq_job commits in any database (wake.c) */
	pg_atomic_uint32 server_read_only;	/* the server's default_transaction_read_only is on (launcher.c) */
	int			nslots;			/* vq.max_databases (shmem.c, at startup) */
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

/* A name's hash (never 0): due_queue_hint, handler_timings, take_waiting and take_due bits. */
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

/*
 * The slot a database has now, or NULL; without holding VqShared->lock, so
 * the launcher may give it to another database later: whoever uses it checks
 * slot->dboid under the slot's lock.
 */
extern VqDatabaseSlot *VqDatabaseSlotOf(Oid dboid);

/* A consistent copy of another executor's running job (false: none running). */
extern bool VqReadRunningJob(VqExecutorSlot *e, VqRunningJob *copy);

#endif							/* VQ_SHMEM_H */
