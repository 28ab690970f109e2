/*
 * pool.c: how many executors a database needs, and which jobs run inline.
 *
 * Handler timings. A handler whose recent executions were fast (under
 * vq.inline_handler_ms) runs inline, in the claiming transaction; any other is
 * claimed visibly and runs in a transaction of its own. Each executor keeps a
 * moving average per handler, and publishes it in the database's slot (by
 * name hash, last writer wins), so that an executor started a moment ago
 * knows which handlers are fast.
 *
 * Executors on demand. A job claimed visibly keeps its executor from claiming
 * until it ends. So the executor asks the launcher for executors: one per
 * slow job its claim left waiting, and one to keep claiming, minus the idle
 * executors of the database (for a handler not known to be slow, only once
 * its code has run ASK_AFTER_MS: a fast handler met for the first time is
 * done by then). The launcher starts them (launcher.c); the queues'
 * capacities bound what they can claim, and those started for nothing exit
 * after idling (executor.c).
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timeout.h"

#include "main/guc.h"
#include "main/limits.h"
#include "main/requests.h"
#include "main/shmem.h"
#include "cache/registry.h"
#include "run/watch.h"
#include "executors/pool.h"

/* A visible job of a handler not known to be slow asks for executors once it has run this long. */
#define ASK_AFTER_MS 100

/* Recent execution time of a handler: decides inline or visible claims. */
typedef struct HandlerTiming
{
	char		name[VQ_NAME_MAX + 1];	/* hash key */
	double		avg_us;
} HandlerTiming;

static HTAB *handler_timings = NULL;
static TimeoutId ask_timeout;

/*
 * A handler's recent execution time (µs), as another executor of the database
 * saw it (-1: unknown). Shared so that an executor started on demand does not
 * take every handler for a slow one (a job claimed visibly, and a request for
 * more executors) the first time it meets it.
 */
static double
SharedAverage(const char *handler)
{
	uint32		hash = VqNameHash(handler);
	uint64		v = pg_atomic_read_u64(&VqMyDatabaseSlot->handler_timings[hash % VQ_HANDLER_TIMINGS]);

	return (uint32) (v >> 32) == hash ? (double) (uint32) v : -1;
}

/* A handler's recent execution time (µs) as this or another executor saw it (-1: unknown). */
static double
HandlerAverage(const char *handler)
{
	HandlerTiming *t = hash_search(handler_timings, handler, HASH_FIND, NULL);

	return t != NULL ? t->avg_us : SharedAverage(handler);
}

/* Is this handler fast enough to run inline in the claiming transaction? */
bool
VqRunsInline(const char *handler)
{
	double		avg_us;

	if (vq_inline_handler_ms <= 0)
		return false;
	avg_us = HandlerAverage(handler);
	return avg_us >= 0 && avg_us < vq_inline_handler_ms * 1000.0;
}

/* Remember how long a handler took (moving average over about ten runs), here and for the others. */
void
VqNoteDuration(const char *handler, int64 duration_us)
{
	bool		found;
	HandlerTiming *t = hash_search(handler_timings, handler, HASH_ENTER, &found);
	uint32		hash = VqNameHash(handler);

	if (!found)
	{
		double		shared = SharedAverage(handler);

		t->avg_us = shared >= 0 ? shared : duration_us;
	}
	t->avg_us = 0.9 * t->avg_us + 0.1 * duration_us;
	pg_atomic_write_u64(&VqMyDatabaseSlot->handler_timings[hash % VQ_HANDLER_TIMINGS],
						((uint64) hash << 32) | (uint32) Min(t->avg_us, (double) PG_UINT32_MAX));
}

/* A database takes the slot: what the one before learnt of its handlers does not carry over (slot lock held). */
void
VqHandlerTimingsForget(VqDatabaseSlot *slot)
{
	for (int i = 0; i < VQ_HANDLER_TIMINGS; i++)
		pg_atomic_write_u64(&slot->handler_timings[i], 0);
}

/* Function jobs from index first on whose handlers are not known to be fast. */
int
VqCountSlow(List *jobs, int first)
{
	int			n = 0;

	for (int i = first; i < list_length(jobs); i++)
	{
		VqJob	   *job = list_nth(jobs, i);

		if (strncmp(job->address, "notify:", 7) != 0 && !VqRunsInline(job->handler))
			n++;
	}
	return n;
}

/* Jobs of slow handlers a claim left waiting while this executor runs one claimed visibly. */
static volatile sig_atomic_t slow_waiting = 0;

/*
 * A job claimed visibly keeps this executor from claiming until it ends, and
 * slow_waiting jobs of slow handlers its claim left: ask the launcher for
 * executors for them, and for one to keep claiming, as far as the idle
 * executors of the database cannot serve them. The queues' capacities bound
 * what can be claimed; an executor started for nothing exits after idling.
 * Lock-free (called from a timeout handler too): the counts are hints.
 */
static void
AskForExecutors(void)
{
	int			idle = 0;
	int			want;

	for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
	{
		VqExecutorSlot *e = &VqMyDatabaseSlot->executors[i];

		if (e != VqMyExecutorSlot && e->pid != 0 && !e->running_visible)
			idle++;
	}
	want = slow_waiting + 1 - idle;
	if (want <= 0)
		return;
	VqAskForExecutors(VqMyDatabaseSlot, want);
}

/* ASK_AFTER_MS into the visible job of a handler not known to be slow: is its code still running? */
static void
AskTimeoutReached(void)
{
	if (VqInUserCode())
		AskForExecutors();
}

/*
 * This executor runs a job claimed visibly (or no longer does). A handler
 * known to be slow gets executors asked for at once; any other only once its
 * job has run ASK_AFTER_MS (a fast handler met for the first time is done by
 * then, and asks for nothing).
 */
void
VqSetRunningVisible(bool running, VqJob *job, int waiting)
{
	LWLockAcquire(VqMyDatabaseSlot->lock, LW_EXCLUSIVE);
	VqMyExecutorSlot->running_visible = running;
	LWLockRelease(VqMyDatabaseSlot->lock);
	if (!running)
	{
		disable_timeout(ask_timeout, false);
		return;
	}
	slow_waiting = waiting;
	if (HandlerAverage(job->handler) >= vq_inline_handler_ms * 1000.0)
		AskForExecutors();
	else
		enable_timeout_after(ask_timeout, ASK_AFTER_MS);
}

/* An executor takes or leaves its entry: it runs no job claimed visibly (caller holds the slot's lock). */
void
VqRunningVisibleReset(VqExecutorSlot *e)
{
	e->running_visible = false;
}

/* Set up the handler timings and the timeout that asks for executors (once per executor). */
void
VqPoolInit(void)
{
	handler_timings = VqNameTable("vq_job handler timings", 64, sizeof(HandlerTiming), TopMemoryContext);
	ask_timeout = RegisterTimeout(USER_TIMEOUT, AskTimeoutReached);
}
