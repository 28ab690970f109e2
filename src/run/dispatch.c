/*
 * dispatch.c: running one job's handler.
 *
 * A function handler is the function whose OID the job recorded at enqueue
 * (the one whose EXECUTE was checked; dropped since, the job is
 * dead-lettered, never run by a same-named successor), called through the
 * function manager with a cached FmgrInfo (funccache.c), inside its own subtransaction so its writes commit with the job's
 * outcome or roll back with its error. It runs:
 *  - as the role that enqueued the job, in a session that is that role's
 *    (roles.c: session_user too; it cannot change role), after re-checking
 *    that the role still exists and still has EXECUTE; its deferred
 *    constraints and triggers are checked when it returns, and what it left
 *    in the session is removed after it (session.c);
 *  - named in pg_stat_activity (query and application_name) while it runs;
 *  - with search_path = vq.handler_search_path (plus pg_temp last), at a GUC
 *    nest level that ends with the job, where vq.context holds the job's
 *    metadata so jobs it enqueues inherit it;
 *  - under one timeout, armed for vq.execution_timeout_ms, that cancels it
 *    (the job is then ABANDONED, with its logs); if it is still running
 *    VQ_HARD_TIMEOUT_AFTER_MS later (it caught the cancel), the process
 *    terminates itself and the job is recorded ABANDONED as it exits. When the executor is being
 *    stopped, the launcher cancels the handler once vq.shutdown_grace_ms has
 *    passed (SIGINT); the job is then INTERRUPTED (back in line, its attempt
 *    not consumed), and the executor exits after committing. Outside user code, a cancel is ignored: it is meant
 *    for the handler, never for vq_job's own bookkeeping.
 *
 * A NOTIFY handler's job is committed as RUNNING (with no executor: only its
 * reply or the timeout ends it) and announced with pg_notify on the channel.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_proc.h"
#include "commands/async.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/interrupt.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/regproc.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timeout.h"
#include "utils/typcache.h"

#include "main/checks.h"
#include "main/compat.h"
#include "main/guc.h"
#include "main/shmem.h"
#include "util/spi_util.h"
#include "cache/funccache.h"
#include "claim/claim.h"
#include "claim/inflight.h"
#include "claim/pullpos.h"
#include "state/outcome.h"
#include "run/callbacks.h"
#include "run/context.h"
#include "run/dispatch.h"
#include "run/jobapi.h"
#include "run/roles.h"
#include "run/session.h"

static TimeoutId watch_timeout;
static TimeoutId hard_timeout;
static TimeoutId cancel_poll;

/* How often a running handler's executor looks for a vq_cancel request (rarely: a sleeping handler is not woken more). */
#define CANCEL_POLL_MS 1000
static Oid	job_context_type = InvalidOid;

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
 * the cancel poll: one enable_timeouts() call, so one timer system call at
 * most (none while an earlier signal is still due first). The poll runs only
 * while a handler does, so an idle executor is never woken by it.
 */
static void
WatchBegin(bool handler)
{
	EnableTimeoutParams timeouts[3];
	int			n = 0;

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

/* Arm the execution timeout around user code that is not a handler (a destination function). */
void
VqWatchBegin(void)
{
	WatchBegin(false);
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
VqDispatchInit(void)
{
	watch_timeout = RegisterTimeout(USER_TIMEOUT, ExecutionTimeoutReached);
	hard_timeout = RegisterTimeout(USER_TIMEOUT, HardTimeoutReached);
	cancel_poll = RegisterTimeout(USER_TIMEOUT, CancelPollReached);
	pqsignal(SIGINT, CancelUserCode);
}

/* The OID of type vq.job_context (looked up once). */
static Oid
JobContextType(void)
{
	if (!OidIsValid(job_context_type))
		job_context_type = DatumGetObjectId(DirectFunctionCall1(regtypein,
																CStringGetDatum("vq.job_context")));
	return job_context_type;
}

/*
 * The function a job recorded at enqueue, ready to call (funccache.c: looked
 * up again after any change to pg_proc). Never another one under the same
 * name: if it was dropped, *dropped is set and an error raised (the job is
 * dead-lettered, see VqRunFunctionHandler).
 */
static VqFunction *
ResolveFunction(VqJob *job, volatile bool *dropped)
{
	VqFunction *hf = VqFunctionLookup(job->handler_fn);

	if (hf == NULL)
	{
		*dropped = true;
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("handler function %s (OID %u) was dropped after the job was enqueued; a function created since under the same name is not run in its place",
						job->address, job->handler_fn)));
	}
	return hf;
}

/*
 * The vq.job_context value a two-argument handler (and an interceptor)
 * receives: built once per job, in the job's own memory context.
 */
Datum
VqJobContextDatum(VqJob *job)
{
	TupleDesc	desc;
	Datum		values[9];
	bool		nulls[9] = {false, false, false, false, false, false, false, false, false};
	HeapTuple	tup;
	MemoryContext old;

	if (job->context != (Datum) 0)
		return job->context;
	old = MemoryContextSwitchTo(GetMemoryChunkContext(job));
	desc = lookup_rowtype_tupdesc(JobContextType(), -1);

	values[0] = UUIDPGetDatum(&job->execution_id);
	values[1] = CStringGetTextDatum(job->job_id);
	values[2] = CStringGetTextDatum(job->handler);
	values[3] = CStringGetTextDatum(job->queue);
	values[4] = Int32GetDatum(job->priority);
	values[5] = Int32GetDatum(job->attempt_number);
	values[6] = Int32GetDatum(job->max_attempts);
	values[7] = TimestampTzGetDatum(job->scheduled_at);
	values[8] = JsonbPGetDatum(job->metadata);
	tup = heap_form_tuple(desc, values, nulls);
	ReleaseTupleDesc(desc);
	job->context = HeapTupleGetDatum(tup);
	MemoryContextSwitchTo(old);
	return job->context;
}

/* Check, as of now, that the enqueuing role may still run the handler. */
static void
CheckRunPrivileges(VqJob *job, VqFunction *hf)
{
	if (vq_proc_aclcheck(hf->fn, job->enqueued_by, ACL_EXECUTE) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("role \"%s\" no longer has EXECUTE on handler function %s",
						GetUserNameFromId(job->enqueued_by, false), job->address)));
}

/*
 * Name the job where operators look: pg_stat_activity's query, and
 * application_name (log_line_prefix %a; the executor's own name, then the
 * execution id, attempt and handler, cut at 63 bytes; set inside the user
 * code's GUC nest level, so it ends with the job).
 */
static void
ShowJobIdentity(VqJob *job)
{
	char	   *uuid = DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(&job->execution_id)));
	char	   *name = psprintf("vq_job executor %d: %s/%d %s", VqMyExecutorIndex, uuid,
								job->attempt_number, job->handler);

	pgstat_report_activity(STATE_RUNNING,
						   psprintf("vq_job: handler %s, execution %s, attempt %d",
									job->handler, uuid, job->attempt_number));
	/* cut here: a longer value makes PostgreSQL log a NOTICE for every job */
	name[pg_mbcliplen(name, strlen(name), NAMEDATALEN - 1)] = '\0';
	(void) set_config_option("application_name", name,
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
}

/* Call the handler (inside the subtransaction, as the enqueuing role). */
static void
CallHandler(VqJob *job, VqFunction *hf)
{
	LOCAL_FCINFO(fcinfo, 2);

	if (hf->nargs != 1 && hf->nargs != 2)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_FUNCTION_DEFINITION),
				 errmsg("handler function %s must take (jsonb) or (jsonb, vq.job_context)", job->address)));

	VqBindContext(job->metadata);

	InitFunctionCallInfoData(*fcinfo, &hf->flinfo, hf->nargs, InvalidOid, NULL, NULL);
	fcinfo->args[0].value = job->payload ? JsonbPGetDatum(job->payload) : (Datum) 0;
	fcinfo->args[0].isnull = (job->payload == NULL);
	if (hf->nargs == 2)
	{
		fcinfo->args[1].value = VqJobContextDatum(job);
		fcinfo->args[1].isnull = false;
	}
	/* a STRICT handler is not called for a NULL payload: nothing to do counts as done */
	if (hf->flinfo.fn_strict && job->payload == NULL)
		return;

	PushActiveSnapshot(GetTransactionSnapshot());
	(void) FunctionCallInvoke(fcinfo);
	PopActiveSnapshot();
}

/*
 * What an error the handler (or its checks) raised makes of the job: a
 * cancel is ABANDONED when the execution timeout sent it, INTERRUPTED when a
 * stop did, and part of a cancellation when the vq_cancel grace did; anything
 * else is FAILED (for good when the authorised function was dropped).
 */
static void
ClassifyError(ErrorData *edata, bool dropped, VqOutcome *outcome)
{
	bool		cancelled = edata->sqlerrcode == ERRCODE_QUERY_CANCELED;

	if (cancelled && cancel_forced)
	{
		outcome->kind = VQ_OUTCOME_FAILED;	/* made CANCELLED by MakeCancelled */
		outcome->error = psprintf("the handler did not stop within vq.cancel_grace_ms (%d ms) of the request, and was interrupted",
								  vq_cancel_grace_ms);
	}
	else if (cancelled && job_timed_out)
	{
		outcome->kind = VQ_OUTCOME_ABANDONED;
		outcome->error = psprintf("execution timed out after %d ms", vq_execution_timeout_ms);
	}
	else if (cancelled && ShutdownRequestPending)
	{
		outcome->kind = VQ_OUTCOME_INTERRUPTED;
		outcome->error = psprintf("interrupted by a stop: handler still running after vq.shutdown_grace_ms (%d ms); the attempt does not count",
								  vq_shutdown_grace_ms);
	}
	else
	{
		outcome->kind = VQ_OUTCOME_FAILED;
		outcome->permanent = dropped;	/* no retry can bring the authorised function back */
		/* (cut as it will be stored: interceptors and logs see what the job records) */
		outcome->error = pstrdup(VqCapText(edata->message ? edata->message : "handler failed"));
	}
}

/*
 * A job asked to stop ends CANCELLED however its handler ended: returned
 * early (its writes are kept), raised, or was cut; it is never retried.
 */
static void
MakeCancelled(VqOutcome *outcome)
{
	outcome->error = outcome->kind == VQ_OUTCOME_COMPLETED ? pstrdup("cancelled while running")
		: psprintf("cancelled while running: %s", outcome->error);
	outcome->kind = VQ_OUTCOME_CANCELLED;
}

/*
 * Run a function handler in a subtransaction and fill in the outcome. Errors
 * raised by the handler (or by the privilege re-check) become a FAILED
 * outcome; a cancellation by the watch timer becomes ABANDONED.
 */
void
VqRunFunctionHandler(VqJob *job, VqOutcome *outcome)
{
	MemoryContext caller_context = CurrentMemoryContext;
	ResourceOwner caller_owner = CurrentResourceOwner;
	TimestampTz start = GetCurrentTimestamp();
	volatile bool dropped = false;

	memset(outcome, 0, sizeof(VqOutcome));

	/* A job whose role was dropped can never run as anyone: dead-letter it at once. */
	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(job->enqueued_by)))
	{
		outcome->kind = VQ_OUTCOME_FAILED;
		outcome->permanent = true;
		outcome->error = psprintf("role %u that enqueued the job no longer exists", job->enqueued_by);
		return;
	}

	VqInterceptDispatch(job);
	VqJobApiBegin(job);
	outcome->started_at = start;
	cancel_forced = false;
	cancel_seen_at = 0;
	WatchBegin(true);

	CommandCounterIncrement();
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(caller_context);
	PG_TRY();
	{
		VqFunction *hf;
		VqSavedUser as_user;

		/*
		 * The claim may have taken no new lock, so catalog changes committed
		 * since this transaction began (a REVOKE, a replaced function) may not
		 * have been read yet: read them before checking and calling.
		 */
		AcceptInvalidationMessages();
		hf = ResolveFunction(job, &dropped);

		CheckRunPrivileges(job, hf);
		VqEnterUserCode(job->enqueued_by, &as_user);
		ShowJobIdentity(job);
		CallHandler(job, hf);
		VqLeaveUserCode(&as_user);

		outcome->wrote = TransactionIdIsValid(GetCurrentTransactionIdIfAny());
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(caller_context);
		CurrentResourceOwner = caller_owner;
		outcome->kind = VQ_OUTCOME_COMPLETED;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(caller_context);
		edata = CopyErrorData();
		FlushErrorState();
		/* restores the user, the GUC nest level and the snapshot stack too */
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(caller_context);
		CurrentResourceOwner = caller_owner;

		ClassifyError(edata, dropped, outcome);
		FreeErrorData(edata);
	}
	PG_END_TRY();

	VqWatchEnd(outcome->kind == VQ_OUTCOME_COMPLETED);
	outcome->ends_transaction = VqSessionCleanUp();
	pgstat_report_activity(STATE_IDLE, "");

	if (VqJobCancelRequested())
		MakeCancelled(outcome);
	outcome->duration_us = GetCurrentTimestamp() - start;
	VqJobApiEnd(outcome);
	VqInterceptComplete(job, outcome);
}

/* Send a job's announcement on its channel (at commit). */
static void
Announce(const char *channel, pg_uuid_t *execution_id, int32 attempt)
{
	char	   *uuid = DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(execution_id)));

	Async_Notify(channel, psprintf("{\"execution_id\": \"%s\", \"attempt\": %d}", uuid, attempt));
}

/*
 * Announce a NOTIFY handler's job on its channel; it is RUNNING until its
 * reply or the timeout. The announcement names the job and nothing else: any
 * role may LISTEN on any channel, so the payload and metadata are read with
 * vq_take / vq_pull, which check who is asking.
 */
void
VqDispatchNotify(VqJob *job, const char *channel)
{
	VqInterceptDispatch(job);
	VqPersistRunning(job, true, GetCurrentTimestamp());
	Announce(channel, &job->execution_id, job->attempt_number);
	VqNoteAnnounced(job->queue);
	VqNotePullAnnounced(job->handler, job->priority, job->scheduled_at, &job->execution_id);
}

/* Jobs of the handler waiting after from (its pull position: none waits before it) and announced by $1. */
#define WAITING_SINCE \
	" handler OPERATOR(pg_catalog.=) $2 AND" VQ_WAITING_FOR_CONSUMER \
	" AND " VQ_PULL_KEY " OPERATOR(pg_catalog.>) ROW($3, $4, $5) AND started_at OPERATOR(pg_catalog.<=) $1"

/*
 * Announce again up to room jobs of a handler in a queue that waited since
 * $1 (values: $1 .. $5 as WAITING_SINCE wants them), in pull order.
 */
static void
AnnounceAgain(Datum *values, VqQueue *queue, int room, TimestampTz now)
{
	static SPIPlanPtr announce_plan = NULL;

	values[5] = queue->name_datum;
	values[6] = Int32GetDatum(room);
	values[7] = TimestampTzGetDatum(now);
	/* (by id, not a join, and by job_pull_idx: see vq_pull's TakeWaitingJobs) */
	if (SPI_execute_plan(VqKeepPlan(&announce_plan,
							  "UPDATE vq.job_active j SET started_at = $8, updated_at = $8"
							  " WHERE j.execution_id OPERATOR(pg_catalog.=) ANY (ARRAY("
							  "  SELECT execution_id FROM vq.job_active WHERE" WAITING_SINCE
							  "  AND queue OPERATOR(pg_catalog.=) $6"
							  "  ORDER BY OPERATOR(pg_catalog.-) (priority::pg_catalog.int8), scheduled_at, execution_id"
							  "  LIMIT $7 FOR UPDATE SKIP LOCKED))"
							  " RETURNING j.execution_id, j.attempt_number, j.handler_address",
							  8, (Oid[]) {TIMESTAMPTZOID, TEXTOID, INT8OID, TIMESTAMPTZOID, UUIDOID, TEXTOID,
								  INT4OID, TIMESTAMPTZOID}),
						 values, NULL, false, 0) != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "vq_job: announcing NOTIFY jobs again failed");
	for (uint64 k = 0; k < SPI_processed; k++)
	{
		HeapTuple	tup = SPI_tuptable->vals[k];
		bool		isnull;
		char	   *address = SPI_getvalue(tup, SPI_tuptable->tupdesc, 3);

		if (strncmp(address, "notify:", 7) == 0)
			Announce(address + 7, DatumGetUUIDP(SPI_getbinval(tup, SPI_tuptable->tupdesc, 1, &isnull)),
					 DatumGetInt32(SPI_getbinval(tup, SPI_tuptable->tupdesc, 2, &isnull)));
		/* (counted again: it was not, once its take timeout passed) */
		VqNoteAnnounced(queue->name);
	}
}

/*
 * Announce again NOTIFY jobs that no consumer took within
 * vq.notify_take_timeout_ms (they hold no capacity meanwhile, and no attempt
 * is consumed): for one queue that has some, as many as its free capacity
 * allows, and only while none of its jobs is due. Each counts against the
 * capacity again for a take timeout. Each handler's waiting jobs are looked
 * for after its pull position (pullpos.c), not among every answered job's
 * row versions. In the caller's transaction; returns true when room was
 * reserved (release it after the commit).
 */
bool
VqReannounceWaiting(VqRegistry *registry, TimestampTz now)
{
	static SPIPlanPtr queues_plan = NULL;
	HASH_SEQ_STATUS seq;
	VqHandler  *handler;
	Datum		values[8];
	int			index_scans;

	values[0] = TimestampTzGetDatum(TimestampTzPlusMilliseconds(now, -(int64) vq_notify_take_timeout_ms));
	index_scans = VqIndexScansBegin();
	hash_seq_init(&seq, registry->handler_hash);
	while ((handler = hash_seq_search(&seq)) != NULL)
	{
		List	   *queues = NIL;
		VqPullKey	from;
		ListCell   *lc;

		if (handler->is_function)
			continue;
		from = VqPullPositionOf(handler->name);
		values[1] = handler->name_datum;
		VqPullKeyDatums(&from, &values[2]);
		if (SPI_execute_plan(VqKeepPlan(&queues_plan,
								  "SELECT DISTINCT queue FROM vq.job_active WHERE" WAITING_SINCE,
								  5, (Oid[]) {TIMESTAMPTZOID, TEXTOID, INT8OID, TIMESTAMPTZOID, UUIDOID}),
							 values, NULL, true, 0) != SPI_OK_SELECT)
			elog(ERROR, "vq_job: looking for unannounced NOTIFY jobs failed");
		for (uint64 i = 0; i < SPI_processed; i++)
			queues = lappend(queues, SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1));
		foreach(lc, queues)		/* (the statements below replace SPI_tuptable) */
		{
			VqQueue    *queue = VqLookupQueue(registry, lfirst(lc));
			int			room = queue ? VqRoomToReannounce(registry, queue, now) : 0;

			if (room == 0)
				continue;
			AnnounceAgain(values, queue, room, now);
			hash_seq_term(&seq);
			VqIndexScansEnd(index_scans);
			return true;		/* one queue per call: the reservation is per queue */
		}
	}
	VqIndexScansEnd(index_scans);
	return false;
}
#undef WAITING_SINCE
