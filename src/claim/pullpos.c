/*
 * pullpos.c: pull positions.
 *
 * vq_pull takes a NOTIFY handler's announced jobs that no consumer took, in
 * (priority DESC, scheduled_at, execution_id) order, from the partial index
 * job_pull_idx. Every job a consumer took and answered leaves an entry there
 * that later pulls step over until vacuum removes it, and a held snapshot
 * keeps vacuum from removing any: a pull that scans from the start then walks
 * every job answered since the snapshot was taken. So the database's slot
 * remembers, per handler, the key where pulls got to, and each pull scans
 * from there. vq_take, which takes the one job a notification named, is a
 * pull of that job: it moves the position the same way. The re-announcement
 * of jobs no consumer took looks for them after the position too (notify.c).
 *
 * The invariant, per handler: every announced job that no consumer took,
 * whose commit is visible and that no pull in flight holds has a key after the
 * position, or a commit will lower the position to its key. It is kept by
 *  - announcements: the executor that announced jobs lowers their handler's
 *    position after its commit, and the floor of every pull in flight;
 *  - pulls: a pull reads the position before its scan takes its snapshot;
 *    after taking, it looks again (a fresh snapshot, no SKIP LOCKED) for a job
 *    it left between its start and its last take: one that its role may not
 *    take, or that a transaction holds, unless that transaction is another
 *    pull in flight (which lowers the position if it aborts). It moves the
 *    position only when its transaction commits (its own takes cannot be
 *    undone then), and only up to its last take before such a job and below
 *    its floor. A pull in a subtransaction that aborts, in a prepared
 *    transaction, or with a transaction snapshot (REPEATABLE READ) moves
 *    nothing;
 *  - aborts: a pull whose takes are undone (its transaction or a
 *    subtransaction aborts) lowers the position to the first of them;
 *  - resets: positions are forgotten with the claim positions (claimpos.c);
 *    then pulls scan from the start until one moves the position again.
 * Executor 0's positions check looks behind each position for an announced
 * job no consumer took and lowers the position to it (poscheck.c).
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/resowner.h"

#include "main/limits.h"
#include "main/shmem.h"
#include "claim/pullpos.h"

/* Pulls begun in this transaction that may move a position at its commit. */
#define PULLS_PER_TRANSACTION 4
typedef struct PendingPull
{
	uint64		ticket;
	int			puller;			/* index in the slot's pullers */
	char		handler[VQ_NAME_MAX + 1];
	bool		holds;			/* it took jobs (undone if the transaction aborts) ... */
	VqPullKey	low;			/* ... the first of them */
	bool		may_move;		/* the position may move ... */
	VqPullKey	upto;			/* ... to this key at commit */
} PendingPull;

static PendingPull pending[PULLS_PER_TRANSACTION];
static int	n_pending = 0;
static bool last_registered = false;	/* the last pull begun is pending[n_pending - 1] */
static bool callbacks_registered = false;

/* Handlers whose jobs this executor's transaction announced, with their lowest key. */
#define ANNOUNCED_HANDLERS 8
static struct
{
	char		handler[VQ_NAME_MAX + 1];
	VqPullKey	low;
}			announced[ANNOUNCED_HANDLERS];
static int	n_announced = 0;
static bool announced_overflow = false;

/* (no job has it: a priority is an int4) */
static const VqPullKey PullKeyMin = {PG_INT64_MIN, DT_NOBEGIN, {{0}}};

/* The key of a job in pull order (see pullpos.h). */
VqPullKey
VqMakePullKey(int32 priority, TimestampTz scheduled_at, const pg_uuid_t *execution_id)
{
	VqPullKey	key;

	key.neg_priority = -(int64) priority;
	key.scheduled_at = scheduled_at;
	memcpy(&key.execution_id, execution_id, sizeof(pg_uuid_t));
	return key;
}

/* The key of an SPI row whose priority, scheduled_at and execution_id are at these columns. */
VqPullKey
VqRowPullKey(HeapTuple tup, TupleDesc desc, int priority_col, int scheduled_col, int id_col)
{
	bool		isnull;

	return VqMakePullKey(DatumGetInt32(SPI_getbinval(tup, desc, priority_col, &isnull)),
						 DatumGetTimestampTz(SPI_getbinval(tup, desc, scheduled_col, &isnull)),
						 DatumGetUUIDP(SPI_getbinval(tup, desc, id_col, &isnull)));
}

/* A key as SPI parameters (see pullpos.h). */
void
VqPullKeyDatums(const VqPullKey *key, Datum *values)
{
	values[0] = Int64GetDatum(key->neg_priority);
	values[1] = TimestampTzGetDatum(key->scheduled_at);
	values[2] = UUIDPGetDatum(unconstify(pg_uuid_t *, &key->execution_id));
}

/* Order two keys (see pullpos.h). */
int
VqComparePullKeys(const VqPullKey *a, const VqPullKey *b)
{
	if (a->neg_priority != b->neg_priority)
		return a->neg_priority < b->neg_priority ? -1 : 1;
	if (a->scheduled_at != b->scheduled_at)
		return a->scheduled_at < b->scheduled_at ? -1 : 1;
	return memcmp(a->execution_id.data, b->execution_id.data, UUID_LEN);
}

/*
 * The key just before key (no job can sit between them): a position there
 * makes the next scan start at key. The execution_id is taken as a 128-bit
 * number, as uuid_cmp orders it.
 */
static VqPullKey
KeyBefore(const VqPullKey *key)
{
	VqPullKey	before = *key;

	for (int i = UUID_LEN - 1; i >= 0; i--)
		if (before.execution_id.data[i]-- != 0)
			return before;		/* (no borrow left) */
	/* the id was all zeros: the last id of the previous instant (a lower key is always safe) */
	if (before.scheduled_at == DT_NOBEGIN)
		return PullKeyMin;
	before.scheduled_at--;
	return before;
}

/* The position of a handler (caller holds the slot's lock), created if asked and there is room. */
static VqPullPosition *
FindPosition(VqDatabaseSlot *slot, const char *handler, bool create)
{
	VqPullPosition *free_entry = NULL;

	for (int i = 0; i < VQ_MAX_PULL_HANDLERS; i++)
	{
		VqPullPosition *p = &slot->pulls.pulls[i];

		if (strcmp(p->handler, handler) == 0)
			return p;
		if (p->handler[0] == '\0' && free_entry == NULL)
			free_entry = p;
	}
	if (!create || free_entry == NULL)
		return NULL;
	strlcpy(free_entry->handler, handler, sizeof(free_entry->handler));
	free_entry->pos = PullKeyMin;
	return free_entry;
}

/* Lower a handler's position and the floors of its pulls in flight to key (caller holds the slot's lock). */
static void
LowerLocked(VqDatabaseSlot *slot, const char *handler, const VqPullKey *key)
{
	VqPullPosition *p = FindPosition(slot, handler, false);

	if (p != NULL && VqComparePullKeys(key, &p->pos) <= 0)
		p->pos = KeyBefore(key);
	for (int i = 0; i < VQ_MAX_PULLERS; i++)
	{
		VqPuller   *q = &slot->pulls.pullers[i];

		if (q->ticket != 0 && strcmp(q->handler, handler) == 0 && VqComparePullKeys(key, &q->floor) < 0)
			q->floor = *key;
	}
}

/*
 * End this transaction's pulls (caller holds the slot's lock): at commit,
 * move the positions; at abort, the jobs they took are waiting again: lower
 * the positions to them.
 */
static void
EndPullsLocked(VqDatabaseSlot *slot, void *arg)
{
	bool		commit = *(bool *) arg;

	for (int k = 0; k < n_pending; k++)
	{
		VqPuller   *q = &slot->pulls.pullers[pending[k].puller];
		VqPullPosition *p;
		VqPullKey	to;
		bool		mine = q->ticket == pending[k].ticket;	/* (else forgotten meanwhile) */

		if (!commit && pending[k].holds)
			LowerLocked(slot, pending[k].handler, &pending[k].low);
		if (!mine)
			continue;
		q->ticket = 0;
		if (!commit || !pending[k].may_move)
			continue;
		/* a job lowered to meanwhile waits at the floor: up to just before it */
		to = VqComparePullKeys(&pending[k].upto, &q->floor) < 0 ? pending[k].upto : KeyBefore(&q->floor);
		p = FindPosition(slot, q->handler, true);
		if (p != NULL && VqComparePullKeys(&to, &p->pos) > 0)
			p->pos = to;
	}
}

static void
EndPulls(bool commit)
{
	if (n_pending > 0)
		(void) VqWithDatabaseSlot(MyDatabaseId, LW_EXCLUSIVE, EndPullsLocked, &commit);
	n_pending = 0;
	last_registered = false;
}

/* End of the top-level transaction (its takes are committed, or undone). */
static void
PullReleaseCallback(ResourceReleasePhase phase, bool isCommit, bool isTopLevel, void *arg)
{
	if (phase == RESOURCE_RELEASE_AFTER_LOCKS && isTopLevel)
		EndPulls(isCommit);
}

/* PREPARE: the takes may still be undone; a subtransaction's abort undid some. */
static void
PullXactCallback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_PREPARE)
		EndPulls(false);
}

/* A subtransaction aborted: the pulls' takes in it are undone (all are treated so). */
static void
LowerHeldLocked(VqDatabaseSlot *slot, void *arg)
{
	for (int k = 0; k < n_pending; k++)
		if (pending[k].holds)
			LowerLocked(slot, pending[k].handler, &pending[k].low);
}

static void
PullSubXactCallback(SubXactEvent event, SubTransactionId mySubid, SubTransactionId parentSubid, void *arg)
{
	if (event != SUBXACT_EVENT_ABORT_SUB || n_pending == 0)
		return;
	(void) VqWithDatabaseSlot(MyDatabaseId, LW_EXCLUSIVE, LowerHeldLocked, NULL);
	for (int k = 0; k < n_pending; k++)
		pending[k].may_move = false;
}

/* Begin a pull (caller holds the slot's lock); arg: the handler, then its position out. */
typedef struct BeginArgs
{
	const char *handler;
	bool		may_move;
	bool		positioned;
	VqPullKey	from;
	bool		registered;
	PendingPull registration;
} BeginArgs;

static void
BeginLocked(VqDatabaseSlot *slot, void *arg)
{
	BeginArgs  *a = arg;
	VqPullPosition *p = FindPosition(slot, a->handler, false);

	a->positioned = p != NULL && VqComparePullKeys(&p->pos, &PullKeyMin) != 0;
	if (a->positioned)
		a->from = p->pos;
	a->registered = false;
	for (int i = 0; i < VQ_MAX_PULLERS && a->may_move && !a->registered; i++)
	{
		VqPuller   *q = &slot->pulls.pullers[i];

		if (q->ticket != 0)
			continue;
		q->ticket = ++slot->pull_tickets;
		strlcpy(q->handler, a->handler, sizeof(q->handler));
		q->floor = (VqPullKey) {PG_INT64_MAX, DT_NOEND, {{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
					0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}};
		q->xid = InvalidTransactionId;
		memset(&a->registration, 0, sizeof(PendingPull));
		a->registration.ticket = q->ticket;
		a->registration.puller = i;
		strlcpy(a->registration.handler, a->handler, sizeof(a->registration.handler));
		a->registered = true;
	}
}

/* Begin a pull (see pullpos.h). */
bool
VqPullBegin(const char *handler, VqPullKey *from)
{
	BeginArgs	a = {.handler = handler};

	/* (a transaction snapshot may not see what the position was moved past) */
	a.may_move = !IsolationUsesXactSnapshot() && n_pending < PULLS_PER_TRANSACTION;

	if (!callbacks_registered)
	{
		RegisterResourceReleaseCallback(PullReleaseCallback, NULL);
		RegisterXactCallback(PullXactCallback, NULL);
		RegisterSubXactCallback(PullSubXactCallback, NULL);
		callbacks_registered = true;
	}
	if (!VqWithDatabaseSlot(MyDatabaseId, LW_EXCLUSIVE, BeginLocked, &a))
		a.positioned = false;	/* no executors here yet: from the start */
	last_registered = a.registered;
	if (a.registered)
		pending[n_pending++] = a.registration;
	*from = a.positioned ? a.from : PullKeyMin;
	return a.positioned;
}

/* Can the last pull begun move the position (see pullpos.h)? */
bool
VqPullMayMove(void)
{
	return last_registered;
}

typedef struct TakenArgs
{
	int			puller;
	uint64		ticket;
	TransactionId xid;
} TakenArgs;

static void
TakenLocked(VqDatabaseSlot *slot, void *arg)
{
	TakenArgs  *a = arg;
	VqPuller   *q = &slot->pulls.pullers[a->puller];

	if (q->ticket == a->ticket)
		q->xid = a->xid;
}

/* The last pull begun took jobs, the first at low (see pullpos.h). */
void
VqPullTaken(const VqPullKey *low)
{
	PendingPull *pull = &pending[n_pending - 1];
	TakenArgs	a;

	if (!last_registered)
		return;
	if (!pull->holds || VqComparePullKeys(low, &pull->low) < 0)
		pull->low = *low;
	pull->holds = true;
	a.puller = pull->puller;
	a.ticket = pull->ticket;
	a.xid = GetCurrentTransactionIdIfAny();
	(void) VqWithDatabaseSlot(MyDatabaseId, LW_EXCLUSIVE, TakenLocked, &a);
}

/* How far the last pull begun may move the position at commit (see pullpos.h). */
void
VqPullMayMoveTo(const VqPullKey *upto, const VqPullKey *left)
{
	if (!last_registered)
		return;
	pending[n_pending - 1].may_move = true;
	pending[n_pending - 1].upto = left != NULL && VqComparePullKeys(left, upto) <= 0 ? KeyBefore(left) : *upto;
}

typedef struct HeldArgs
{
	const char *handler;
	TransactionId xid;
	bool		held;
} HeldArgs;

static void
HeldLocked(VqDatabaseSlot *slot, void *arg)
{
	HeldArgs   *a = arg;

	for (int i = 0; i < VQ_MAX_PULLERS && !a->held; i++)
	{
		VqPuller   *q = &slot->pulls.pullers[i];

		a->held = q->ticket != 0 && q->xid == a->xid && strcmp(q->handler, a->handler) == 0;
	}
}

/* Is xid the transaction of another pull of the handler in flight (see pullpos.h)? */
bool
VqPullHeldByAnother(const char *handler, TransactionId xid)
{
	HeldArgs	a = {handler, xid, false};

	if (!TransactionIdIsValid(xid) || TransactionIdIsCurrentTransactionId(xid))
		return false;
	(void) VqWithDatabaseSlot(MyDatabaseId, LW_SHARED, HeldLocked, &a);
	return a.held;
}

/* Forget every pull position of a database, and the pulls in flight (caller holds the slot's lock). */
void
VqPullPositionsForget(VqDatabaseSlot *slot)
{
	memset(&slot->pulls, 0, sizeof(VqPulls));
}

/* A job announced in this transaction (see pullpos.h). */
void
VqNotePullAnnounced(const char *handler, int32 priority, TimestampTz scheduled_at, const pg_uuid_t *execution_id)
{
	VqPullKey	key = VqMakePullKey(priority, scheduled_at, execution_id);

	for (int i = 0; i < n_announced; i++)
		if (strcmp(announced[i].handler, handler) == 0)
		{
			if (VqComparePullKeys(&key, &announced[i].low) < 0)
				announced[i].low = key;
			return;
		}
	if (n_announced == ANNOUNCED_HANDLERS)
	{
		announced_overflow = true;
		return;
	}
	strlcpy(announced[n_announced].handler, handler, sizeof(announced[0].handler));
	announced[n_announced++].low = key;
}

static void
AnnouncedLocked(VqDatabaseSlot *slot, void *arg)
{
	if (announced_overflow)
	{
		memset(slot->pulls.pulls, 0, sizeof(slot->pulls.pulls));
		for (int i = 0; i < VQ_MAX_PULLERS; i++)
			slot->pulls.pullers[i].floor = PullKeyMin;
	}
	for (int i = 0; i < n_announced; i++)
		LowerLocked(slot, announced[i].handler, &announced[i].low);
}

/*
 * The announcements committed (see pullpos.h). (Notes of a transaction that
 * aborted are applied by the next commit: lowering needlessly only costs a
 * longer scan.)
 */
void
VqPullAnnouncementsCommitted(void)
{
	if (n_announced == 0 && !announced_overflow)
		return;
	(void) VqWithDatabaseSlot(MyDatabaseId, LW_EXCLUSIVE, AnnouncedLocked, NULL);
	n_announced = 0;
	announced_overflow = false;
}

typedef struct LowerArgs
{
	const char *handler;
	const VqPullKey *key;
} LowerArgs;

static void
LowerOne(VqDatabaseSlot *slot, void *arg)
{
	LowerArgs  *a = arg;

	LowerLocked(slot, a->handler, a->key);
}

/* Lower a position to a job found behind it (see pullpos.h). */
void
VqPullPositionLower(const char *handler, const VqPullKey *key)
{
	LowerArgs	a = {handler, key};

	(void) VqWithDatabaseSlot(MyDatabaseId, LW_EXCLUSIVE, LowerOne, &a);
}

typedef struct PositionArgs
{
	const char *handler;
	bool		found;
	VqPullKey	pos;
} PositionArgs;

static void
PositionLocked(VqDatabaseSlot *slot, void *arg)
{
	PositionArgs *a = arg;
	VqPullPosition *p = FindPosition(slot, a->handler, false);

	a->found = p != NULL;
	if (a->found)
		a->pos = p->pos;
}

/* The position of a handler (see pullpos.h). */
VqPullKey
VqPullPositionOf(const char *handler)
{
	PositionArgs a = {handler, false};

	(void) VqWithDatabaseSlot(MyDatabaseId, LW_SHARED, PositionLocked, &a);
	return a.found ? a.pos : PullKeyMin;
}

typedef struct CopyArgs
{
	VqPullPosition *out;
	int			max;
	int			n;
} CopyArgs;

static void
CopyLocked(VqDatabaseSlot *slot, void *arg)
{
	CopyArgs   *a = arg;

	for (int i = 0; i < VQ_MAX_PULL_HANDLERS && a->n < a->max; i++)
		if (slot->pulls.pulls[i].handler[0] != '\0')
			a->out[a->n++] = slot->pulls.pulls[i];
}

/* The positions (see pullpos.h). */
int
VqPullPositions(VqPullPosition *out, int max)
{
	CopyArgs	a = {out, max, 0};

	(void) VqWithDatabaseSlot(MyDatabaseId, LW_SHARED, CopyLocked, &a);
	return a.n;
}
