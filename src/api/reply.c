/*
 * reply.c: what becomes of jobs that workers outside the server took, when
 * they answer: completed, failed (retried after the backoff, or at a time the
 * worker chose, or dead-lettered), or given back untouched. Each reply goes
 * through the same state machine as a function handler's outcome
 * (outcome.c); a job that vq_cancel asked to stop while it was held ends
 * CANCELLED whatever the reply says.
 *
 * Completions, the bulk of the replies, are written for a whole call in one
 * statement that moves the rows to vq.job_finished (no transition row: the
 * finished row implies the take and the completion); replies that an
 * interceptor must see, failures and anything the statement did not match
 * (a reply that must be ignored, a cancelled job) go one job at a time, with
 * the job's row locked.
 *
 * Who may reply: members of the role that enqueued the job, and members of a
 * role granted with vq_grant_consumer() for its handler. Anyone else gets the
 * same answer as for a job that does not exist, so ids cannot be probed.
 * Everything here runs as the extension owner after that check.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "util/spi_util.h"
#include "claim/inflight.h"
#include "state/outcome.h"
#include "state/wakeup.h"
#include "run/interceptors.h"
#include "api/reply.h"

/* May caller consume every job of this handler (see reply.h)? */
bool
VqGrantedConsumer(Oid caller, const char *handler)
{
	static SPIPlanPtr grant_plan = NULL;
	Datum		arg = CStringGetTextDatum(handler);

	if (superuser_arg(caller))
		return true;
	if (SPI_execute_plan(VqKeepPlan(&grant_plan,
									"SELECT grantee FROM vq.consumer_grant WHERE handler OPERATOR(pg_catalog.=) $1",
									1, (Oid[]) {TEXTOID}),
						 &arg, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "vq_job: reading consumer grants failed");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Oid			grantee = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));

		if (has_privs_of_role(caller, grantee))
			return true;
	}
	return false;
}

/* Copy the job a LoadJob statement found out of SPI memory. */
static VqJob *
CopyLoadedJob(HeapTuple tup, TupleDesc desc, char **state, bool *cancel_requested)
{
	VqJob	   *job = palloc0(sizeof(VqJob));
	bool		isnull;
	Datum		taken;

	memcpy(&job->execution_id, DatumGetUUIDP(SPI_getbinval(tup, desc, 1, &isnull)), sizeof(pg_uuid_t));
	job->job_id = SPI_getvalue(tup, desc, 2);
	job->handler = SPI_getvalue(tup, desc, 3);
	job->address = SPI_getvalue(tup, desc, 4);
	job->queue = SPI_getvalue(tup, desc, 5);
	job->attempt_number = DatumGetInt32(SPI_getbinval(tup, desc, 6, &isnull));
	job->max_attempts = DatumGetInt32(SPI_getbinval(tup, desc, 7, &isnull));
	job->enqueued_by = DatumGetObjectId(SPI_getbinval(tup, desc, 8, &isnull));
	*state = SPI_getvalue(tup, desc, 9);
	job->priority = DatumGetInt32(SPI_getbinval(tup, desc, 10, &isnull));
	job->scheduled_at = DatumGetTimestampTz(SPI_getbinval(tup, desc, 11, &isnull));
	*cancel_requested = DatumGetBool(SPI_getbinval(tup, desc, 12, &isnull));
	job->metadata = DatumGetJsonbPCopy(SPI_getbinval(tup, desc, 13, &isnull));
	job->external = DatumGetBool(SPI_getbinval(tup, desc, 14, &isnull));
	taken = SPI_getbinval(tup, desc, 15, &isnull);
	job->taken_at = isnull ? 0 : DatumGetTimestampTz(taken);
	job->running = true;
	return job;
}

/*
 * Load a job the caller may act on, locking its row; NULL when there is no
 * such job or the caller may not see it (the two are not told apart).
 */
static VqJob *
LoadJob(pg_uuid_t *id, Oid caller, char **state, bool *cancel_requested)
{
	static SPIPlanPtr job_plan = NULL;
	Datum		args[2] = {UUIDPGetDatum(id), ObjectIdGetDatum(caller)};
	VqJob	   *job;

	/*
	 * Only a row the caller may act on is locked: anyone else can neither
	 * wait on nor hold the lock of another role's job. A job that ended while
	 * we waited for its row lock has moved from vq.job_active to
	 * vq.job_finished, which this statement's snapshot did not show yet: one
	 * more statement (a new snapshot) finds it there.
	 */
	for (int tries = 0; tries < 2; tries++)
	{
		if (SPI_execute_plan(VqKeepPlan(&job_plan,
										"SELECT execution_id, job_id, handler, handler_address, queue, attempt_number,"
										" max_attempts, enqueued_by, state::pg_catalog.text, priority, scheduled_at,"
										" cancel_requested, metadata, handler_function IS NULL, consumer_claimed_at"
										" FROM vq.job j WHERE j.execution_id OPERATOR(pg_catalog.=) $1"
										" AND" VQ_MAY_CONSUME("$2")
										" FOR UPDATE OF j",
										2, (Oid[]) {UUIDOID, OIDOID}),
							 args, NULL, false, 1) != SPI_OK_SELECT)
			elog(ERROR, "vq_job: reading the job failed");
		if (SPI_processed == 1)
			break;
	}
	if (SPI_processed != 1)
		return NULL;
	job = CopyLoadedJob(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, state, cancel_requested);
	if (!has_privs_of_role(caller, job->enqueued_by) && !(job->external && VqGrantedConsumer(caller, job->handler)))
		return NULL;
	return job;
}

/*
 * Give a job back untouched: ENQUEUED again, same attempt, same place in line,
 * as if it had never been taken (when the take recorded a CLAIMED transition,
 * for the transition listeners, an INTERRUPTED one says it came back).
 */
static void
ReleaseJob(VqJob *job, TimestampTz now)
{
	static SPIPlanPtr release_plan = NULL;
	Datum		values[3] = {UUIDPGetDatum(&job->execution_id), TimestampTzGetDatum(now),
	Int32GetDatum(job->attempt_number)};

	if (SPI_execute_plan(VqKeepPlan(&release_plan,
									"WITH j AS ("
									" UPDATE vq.job_active SET state = 'ENQUEUED', started_at = NULL,"
									"  consumer_claimed_at = NULL, lease_until = NULL, updated_at = $2,"
									"  progress_total = NULL, progress_succeeded = NULL, progress_failed = NULL"
									" WHERE execution_id OPERATOR(pg_catalog.=) $1"
									" AND state OPERATOR(pg_catalog.=) 'RUNNING'::vq.job_state"
									" AND attempt_number OPERATOR(pg_catalog.=) $3 RETURNING execution_id)"
									" INSERT INTO vq.job_transition_data (execution_id, attempt_number, kind, from_state,"
									"  to_state, error, at)"
									" SELECT execution_id, $3, 'INTERRUPTED', 'RUNNING', 'ENQUEUED', 'given back by the worker', $2"
									" FROM j WHERE EXISTS (SELECT FROM vq.job_transition_data c"
									"  WHERE c.execution_id OPERATOR(pg_catalog.=) $1 AND c.attempt_number OPERATOR(pg_catalog.=) $3"
									"  AND c.kind OPERATOR(pg_catalog.=) 'CLAIMED')",
									3, (Oid[]) {UUIDOID, TIMESTAMPTZOID, INT4OID}),
						 values, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "vq_job: giving a job back failed");
	VqJobsEnqueuedAtCommit(job->queue, job->handler, job->priority, job->scheduled_at, true);
}

/* What the reply makes of a job (see VqReplyKind); cancel_requested: vq_cancel came first. */
static void
ApplyToJob(VqRegistry *registry, VqJob *job, VqReply *r, bool cancel_requested, TimestampTz now)
{
	VqOutcome	outcome;

	if (r->kind == VQ_REPLY_RELEASE && !cancel_requested)
	{
		ReleaseJob(job, now);
		return;
	}
	memset(&outcome, 0, sizeof(outcome));
	outcome.kind = cancel_requested ? VQ_OUTCOME_CANCELLED :
		r->kind == VQ_REPLY_COMPLETE ? VQ_OUTCOME_COMPLETED : VQ_OUTCOME_FAILED;
	if (r->kind == VQ_REPLY_RETRY)
		outcome.retry_at = r->retry_at != 0 ? r->retry_at : now;
	outcome.error = (char *) r->error;
	if (cancel_requested)
		outcome.error = r->kind == VQ_REPLY_RELEASE ? "cancelled before the worker started it"
			: r->error == NULL ? "cancelled while running" : psprintf("cancelled while running: %s", r->error);
	if (r->kind != VQ_REPLY_RELEASE)
		VqInterceptComplete(job, &outcome);
	if (outcome.kind == VQ_OUTCOME_CANCELLED)
		VqPersistCancelled(job, &outcome, now);
	else if (outcome.kind == VQ_OUTCOME_COMPLETED)
		VqPersistCompleted(list_make1(job), list_make1(&outcome), now);
	else						/* (the registry again: an interceptor may have changed it) */
		VqPersistFailure(job, &outcome, VqLookupQueue(VqRegistryGet(), job->queue), now);
}

/* Apply one reply with the job's row locked (or say why not, in r->ignored). */
static void
ApplyOne(VqRegistry *registry, Oid caller, VqReply *r, TimestampTz now)
{
	char	   *state = NULL;
	bool		cancel_requested = false;
	VqJob	   *job = LoadJob(&r->execution_id, caller, &state, &cancel_requested);

	if (job == NULL)
		r->ignored = "no such job that you may reply to";
	else if (strcmp(state, "RUNNING") != 0)
		r->ignored = psprintf("the job is %s", state);
	else if (!job->external)
		r->ignored = "the job is run by a background worker, not by a worker outside the server";
	else if (r->has_attempt && r->attempt != job->attempt_number)
		r->ignored = psprintf("it answers attempt %d, but the job is at attempt %d (the lease of attempt %d expired)",
							  r->attempt, job->attempt_number, r->attempt);
	else
	{
		ApplyToJob(registry, job, r, cancel_requested, now);
		VqNotifyJobEnding(job->queue);
		VqWakeTakersAtCommit(job->handler);
		r->ignored = NULL;
	}
}

/*
 * Complete the jobs of these replies that are held at their attempt, not
 * cancelled, and the caller's, in one statement; mark the replies applied
 * (ignored NULL) and the others not yet (ignored "" : left for ApplyOne).
 */
static void
CompleteMany(Oid caller, VqReply *replies, int n, TimestampTz now)
{
	static SPIPlanPtr complete_plan = NULL;
	Datum	   *ids = palloc(sizeof(Datum) * n);
	Datum	   *attempts = palloc(sizeof(Datum) * n);
	HASHCTL		ctl = {.keysize = UUID_LEN, .entrysize = UUID_LEN, .hcxt = CurrentMemoryContext};
	HTAB	   *done = hash_create("vq_job completed replies", n, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	Datum		values[5];
	int			index_scans;

	for (int i = 0; i < n; i++)
	{
		ids[i] = UUIDPGetDatum(&replies[i].execution_id);
		attempts[i] = Int32GetDatum(replies[i].attempt);
	}
	values[0] = PointerGetDatum(construct_array(ids, n, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR));
	values[1] = PointerGetDatum(construct_array(attempts, n, INT4OID, 4, true, TYPALIGN_INT));
	values[2] = BoolGetDatum(superuser_arg(caller));
	values[3] = ObjectIdGetDatum(caller);
	values[4] = TimestampTzGetDatum(now);
	/*
	 * The rows by a join of the arrays with the primary key, planned once for
	 * index scans (spi_util.h): each pair costs one probe of job_active_pkey.
	 */
	index_scans = VqIndexScansBegin();
	if (SPI_execute_plan(VqKeepGenericPlan(&complete_plan,
										   "WITH moved AS ("
										   " DELETE FROM vq.job_active j"
										   " USING ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2)) AS r(e, a)"
										   " WHERE j.execution_id OPERATOR(pg_catalog.=) r.e"
										   " AND j.attempt_number OPERATOR(pg_catalog.=) r.a AND" VQ_HELD("j")
										   " AND NOT j.cancel_requested"
										   " AND ($3 OR" VQ_MAY_CONSUME("$4") ")"
										   " RETURNING" VQ_ENDING_COLUMNS("j") "),"
										   " finished AS (INSERT INTO vq.job_finished SELECT"
										   VQ_FINISHED_ROW("'COMPLETED'::vq.job_state", "$5", "started_at", "$5", "NULL",
														   "progress_total", "progress_succeeded", "progress_failed")
										   "  FROM moved)"
										   " SELECT execution_id, queue, handler FROM moved",
										   5, (Oid[]) {UUIDARRAYOID, INT4ARRAYOID, BOOLOID, OIDOID, TIMESTAMPTZOID}),
						 values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "vq_job: completing jobs failed");
	VqIndexScansEnd(index_scans);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		hash_search(done, DatumGetUUIDP(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull)),
					HASH_ENTER, NULL);
		VqNotifyJobEnding(SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2));
		if (i == 0 || strcmp(SPI_getvalue(SPI_tuptable->vals[i - 1], SPI_tuptable->tupdesc, 3),
							 SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 3)) != 0)
			VqWakeTakersAtCommit(SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 3));
	}
	for (int i = 0; i < n; i++)
		replies[i].ignored = hash_search(done, &replies[i].execution_id, HASH_FIND, NULL) != NULL ? NULL : "";
}

/* Apply the replies (see reply.h). */
void
VqApplyReplies(VqRegistry *registry, Oid caller, VqReply *replies, int n)
{
	TimestampTz now = GetCurrentTimestamp();
	VqReply   **bulk = palloc(sizeof(VqReply *) * Max(n, 1));
	VqReply    *completions = palloc(sizeof(VqReply) * Max(n, 1));
	int			nbulk = 0;

	/* interceptors see each completion: then none goes in bulk */
	for (int i = 0; i < n && registry->interceptors == NIL; i++)
		if (replies[i].kind == VQ_REPLY_COMPLETE && replies[i].has_attempt)
		{
			bulk[nbulk] = &replies[i];
			completions[nbulk++] = replies[i];
		}
	if (nbulk > 0)
		CompleteMany(caller, completions, nbulk, now);
	for (int i = 0; i < nbulk; i++)
		bulk[i]->ignored = completions[i].ignored;
	for (int i = 0, k = 0; i < n; i++)
	{
		if (k < nbulk && bulk[k] == &replies[i])
		{
			k++;
			if (replies[i].ignored == NULL)
				continue;		/* completed in bulk */
		}
		CHECK_FOR_INTERRUPTS();
		ApplyOne(registry, caller, &replies[i], now);
	}
	if (n > 0)
		VqWakeAtCommit(now);	/* (room in their queues: executors waiting for it look again) */
}
