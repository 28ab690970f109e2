/*
 * watch.c: the watch over user code in an executor (a handler, a destination
 * function): the execution timeout, the cancels it and a stop send, and
 * vq_cancel's grace.
 *
 * One timeout, armed for vq.execution_timeout_ms around user code, cancels it
 * when it passes (the job is then ABANDONED, dispatch.c); if it is still
 * running VQ_HARD_TIMEOUT_AFTER_MS later (it caught the cancel), the process
 * terminates itself and the exit records the job (executor.c). When the
 * executor is being stopped, the launcher cancels the running handler once
 * vq.shutdown_grace_ms has passed (SIGINT; the job is then INTERRUPTED).
 * While a function handler runs, a periodic poll looks for a vq_cancel
 * request: vq.cancel_grace_ms after it first saw one, it cancels the handler
 * (the job ends CANCELLED), and VQ_HARD_TIMEOUT_AFTER_MS after that the
 * process ends. Outside user code a cancel is ignored: it is meant for the
 * handler, never for vq_job's own bookkeeping.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "postmaster/interrupt.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "main/guc.h"
#include "run/jobapi.h"
#include "run/watch.h"

static TimeoutId watch_timeout;
static TimeoutId hard_timeout;
static TimeoutId cancel_poll;

/* How often a running handler's executor looks for a vq_cancel request (rarely: a sleeping handler is not woken more). */
#define CANCEL_POLL_MS 1000

/* Set while user code runs; read by the signal handler and the timeout. */
static volatile sig_atomic_t in_user_code = false;
/* The execution timeout fired for the user code running now. */
static volatile sig_atomic_t job_timed_out = false;
/* The handler running now was interrupted because vq_cancel asked it to stop (and when). */
static volatile sig_atomic_t cancel_forced = false;
static volatile sig_atomic_t in_handler = false;	/* a function handler (not a destination function) runs */
static TimestampTz cancel_seen_at = 0;
static TimestampTz cancel_forced_at = 0;

/* The execution timeout: cancel the user code that overran it. */
static void
ExecutionTimeoutReached(void)
{
	if (in_user_code)
	{
		job_timed_out = true;
		InterruptPending = true;
		QueryCancelPending = true;
	}
	SetLatch(MyLatch);
}

/*
 * VQ_HARD_TIMEOUT_AFTER_MS after the execution timeout, the user code is
 * still running: it caught the cancel (EXCEPTION WHEN query_canceled), which
 * nothing in PL/pgSQL can do with a termination. Terminate the process at its
 * next interrupt check (as SIGTERM does to a backend); the launcher replaces
 * it, and the exit records the job (executor.c).
 */
static void
HardTimeoutReached(void)
{
	if (in_user_code && job_timed_out)
	{
		ProcDiePending = true;
		InterruptPending = true;
	}
	SetLatch(MyLatch);
}

/*
 * Every CANCEL_POLL_MS while a function handler runs: once vq_cancel has
 * asked its job to stop and vq.cancel_grace_ms has passed, cancel it (the job
 * ends CANCELLED, dispatch below); if it catches that too,
 * VQ_HARD_TIMEOUT_AFTER_MS later the process ends, as for the timeout, and
 * the exit records the job CANCELLED (executor.c).
 */
static void
CancelPollReached(void)
{
	TimestampTz now;

	if (!in_user_code || !in_handler || !VqJobCancelRequested())
		return;
	now = GetCurrentTimestamp();
	if (cancel_seen_at == 0)
		cancel_seen_at = now;
	/* (half a poll early rather than a whole poll late) */
	if (!cancel_forced && TimestampDifferenceExceeds(cancel_seen_at, now, vq_cancel_grace_ms - CANCEL_POLL_MS / 2))
	{
		cancel_forced = true;
		cancel_forced_at = now;
		InterruptPending = true;
		QueryCancelPending = true;
		SetLatch(MyLatch);
	}
	else if (cancel_forced &&
			 TimestampDifferenceExceeds(cancel_forced_at, now, VQ_HARD_TIMEOUT_AFTER_MS - CANCEL_POLL_MS / 2))
	{
		ProcDiePending = true;
		InterruptPending = true;
		SetLatch(MyLatch);
	}
}

/* SIGINT: cancel the user code running now (a cancel outside user code is ignored). */
static void
CancelUserCode(SIGNAL_ARGS)
{
	if (in_user_code)
		StatementCancelHandler(postgres_signal_arg);
	else
		SetLatch(MyLatch);
}

/*
 * Arm the execution timeout around user code and, around a function handler,
 * the cancel poll (a handler starts with no vq_cancel request seen): one
 * enable_timeouts() call, so one timer system call at most (none while an
 * earlier signal is still due first). The poll runs only while a handler
 * does, so an idle executor is never woken by it.
 */
void
VqWatchBegin(bool handler)
{
	EnableTimeoutParams timeouts[3];
	int			n = 0;

	if (handler)
	{
		cancel_forced = false;
		cancel_seen_at = 0;
	}
	job_timed_out = false;
	in_user_code = true;
	in_handler = handler;
	if (vq_execution_timeout_ms > 0)
	{
		timeouts[n++] = (EnableTimeoutParams) {.id = watch_timeout, .type = TMPARAM_AFTER,
		.delay_ms = vq_execution_timeout_ms};
		timeouts[n++] = (EnableTimeoutParams) {.id = hard_timeout, .type = TMPARAM_AFTER,
		.delay_ms = vq_execution_timeout_ms + VQ_HARD_TIMEOUT_AFTER_MS};
	}
	if (handler)
		timeouts[n++] = (EnableTimeoutParams) {.id = cancel_poll, .type = TMPARAM_EVERY,
		.delay_ms = CANCEL_POLL_MS};
	if (n > 0)
		enable_timeouts(timeouts, n);
}

/* Disarm it (and the cancel poll); when the user code returned normally, a cancel that came too late is dropped. */
void
VqWatchEnd(bool returned_normally)
{
	DisableTimeoutParams ids[3] = {{.id = watch_timeout}, {.id = hard_timeout}, {.id = cancel_poll}};

	in_user_code = false;
	in_handler = false;
	disable_timeouts(ids, 3);
	if (returned_normally)
		QueryCancelPending = false;
}

/* Is user code running now (a handler, a destination function)? */
bool
VqInUserCode(void)
{
	return in_user_code;
}

/* Did the execution timeout fire for the user code that ran last (or runs now)? */
bool
VqUserCodeTimedOut(void)
{
	return job_timed_out;
}

/* Was the handler that ran last (or runs now) interrupted after a vq_cancel request? */
bool
VqHandlerCancelForced(void)
{
	return cancel_forced;
}

/* Set up the execution timeout and the cancel signal (once per executor). */
void
VqWatchInit(void)
{
	watch_timeout = RegisterTimeout(USER_TIMEOUT, ExecutionTimeoutReached);
	hard_timeout = RegisterTimeout(USER_TIMEOUT, HardTimeoutReached);
	cancel_poll = RegisterTimeout(USER_TIMEOUT, CancelPollReached);
	pqsignal(SIGINT, CancelUserCode);
}
