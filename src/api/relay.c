/*
 * relay.c: the outbox relay, run by the executors between claims.
 *
 * It claims (FOR UPDATE SKIP LOCKED; rows due at publication in publication
 * order, from the relay position) only rows it can serve: DELAYED_JOB rows
 * whose target is one of vq_supported_target_ids(), NOTIFY rows, and rows of
 * registered destination types. Per row, these rules:
 *  - target not registered (any more)      -> UNRESOLVABLE: retried with backoff
 *    (checked first: a row wrong in both ways is unresolvable);
 *  - delivery snapshot missing / malformed -> PERMANENT: FAILED, kept to inspect;
 *  - the job is built from the snapshot (never re-resolved) with run_at =
 *    scheduled_at and metadata = metadata.context verbatim; headers never
 *    reach it; it is enqueued as the role that published the row;
 *  - the enqueue rejects the job (validation) -> PERMANENT;
 *  - any other error                        -> RETRYABLE with backoff.
 * Each row is handled in its own subtransaction, so one row's failure never
 * stops the others, and the job insert and the row's PUBLISHED mark commit
 * together: an outbox row yields at most one job, across crashes too.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "postmaster/interrupt.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/typcache.h"
#include "utils/guc.h"
#include "utils/regproc.h"

#include "main/checks.h"
#include "main/compat.h"
#include "main/errcodes.h"
#include "main/guc.h"
#include "main/limits.h"
#include "main/shmem.h"
#include "util/spi_util.h"
#include "claim/claimpos.h"
#include "state/wakeup.h"
#include "run/roles.h"
#include "run/session.h"
#include "run/subxact.h"
#include "run/watch.h"
#include "api/enqueue.h"
#include "api/relay.h"

/* Backoff of retryable / unresolvable rows: 1 s doubling per attempt, at most 5 minutes. */
#define RELAY_BACKOFF_BASE_MS 1000
#define RELAY_BACKOFF_MAX_MS 300000

/*
 * The row whose destination function runs now (id 0: none): a copy of what
 * recording it needs, as its row in memory goes with an aborted transaction.
 */
static int64 delivering_id = 0;
static int32 delivering_attempts = 0;

typedef enum RelayResult
{
	RELAY_SUCCESS,
	RELAY_RETRYABLE,
	RELAY_PERMANENT,
	RELAY_UNRESOLVABLE
} RelayResult;

/* One claimed outbox row. */
typedef struct OutboxRow
{
	int64		id;
	char	   *type;
	char	   *destination;
	Datum		payload;		/* jsonb, or 0 when NULL */
	char	   *payload_text;	/* "null" when NULL */
	Jsonb	   *headers;
	Jsonb	   *metadata;
	bool		has_scheduled_at;
	TimestampTz scheduled_at;
	bool		retried;		/* has a retry time (not due at publication) */
	int32		attempts;
	Oid			published_by;
	/* the DELAYED_JOB snapshot, as text (NULL when absent) */
	char	   *snap_queue;
	char	   *snap_priority;
	char	   *snap_max_attempts;
	Jsonb	   *context;		/* metadata.context, or NULL */
} OutboxRow;

static SPIPlanPtr claim_plan = NULL;
static SPIPlanPtr published_plan = NULL;
static SPIPlanPtr retry_plan = NULL;
static SPIPlanPtr failed_plan = NULL;
static Oid	publish_result_type = InvalidOid;

/* A text[] of the registry's dispatchable targets, or of its destination types. */
static Datum
NameArray(VqRegistry *registry, bool targets)
{
	Datum	   *names = palloc(sizeof(Datum) * Max(registry->nhandlers + registry->ndestinations, 1));
	int			n = 0;

	if (targets)
	{
		for (int i = 0; i < registry->nhandlers; i++)
		{
			VqHandler  *h = registry->handlers[i];

			if (h->is_function && !SearchSysCacheExists1(PROCOID, ObjectIdGetDatum(h->fn)))
				continue;
			names[n++] = h->name_datum;
		}
	}
	else
	{
		HASH_SEQ_STATUS seq;
		VqDestination *d;

		hash_seq_init(&seq, registry->destination_hash);
		while ((d = hash_seq_search(&seq)) != NULL)
			names[n++] = CStringGetTextDatum(d->type);
	}
	return PointerGetDatum(construct_array(names, n, TEXTOID, -1, false, TYPALIGN_INT));
}

/* Copy a claimed row out of SPI memory. */
static OutboxRow *
CopyRow(HeapTuple tup, TupleDesc desc)
{
	OutboxRow  *row = palloc0(sizeof(OutboxRow));
	bool		isnull;
	Datum		d;

	row->id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
	row->type = SPI_getvalue(tup, desc, 2);
	row->destination = SPI_getvalue(tup, desc, 3);
	d = SPI_getbinval(tup, desc, 4, &isnull);
	row->payload = isnull ? (Datum) 0 : PointerGetDatum(DatumGetJsonbPCopy(d));
	row->payload_text = isnull ? "null" : SPI_getvalue(tup, desc, 4);
	row->headers = DatumGetJsonbPCopy(SPI_getbinval(tup, desc, 5, &isnull));
	row->metadata = DatumGetJsonbPCopy(SPI_getbinval(tup, desc, 6, &isnull));
	d = SPI_getbinval(tup, desc, 7, &isnull);
	row->has_scheduled_at = !isnull;
	row->scheduled_at = isnull ? 0 : DatumGetTimestampTz(d);
	row->attempts = DatumGetInt32(SPI_getbinval(tup, desc, 8, &isnull));
	row->published_by = DatumGetObjectId(SPI_getbinval(tup, desc, 9, &isnull));
	row->snap_queue = SPI_getvalue(tup, desc, 10);
	row->snap_priority = SPI_getvalue(tup, desc, 11);
	row->snap_max_attempts = SPI_getvalue(tup, desc, 12);
	d = SPI_getbinval(tup, desc, 13, &isnull);
	row->context = isnull ? NULL : DatumGetJsonbPCopy(d);
	row->retried = DatumGetBool(SPI_getbinval(tup, desc, 14, &isnull));
	return row;
}

/* Parse a snapshot integer (JSON number text); false when absent or not an int4. */
static bool
SnapshotInt(const char *text, int32 *value)
{
	char	   *end;
	long		v;

	if (text == NULL)
		return false;
	errno = 0;
	v = strtol(text, &end, 10);
	if (errno != 0 || *end != '\0' || end == text || v < PG_INT32_MIN || v > PG_INT32_MAX)
		return false;
	*value = (int32) v;
	return true;
}

/* Is this error the enqueue rejecting the job itself (retrying cannot help)? */
static bool
IsValidationError(int sqlerrcode)
{
	return ERRCODE_TO_CATEGORY(sqlerrcode) == ERRCODE_TO_CATEGORY(ERRCODE_VQ_INVALID_HANDLER_NAME) ||
		sqlerrcode == ERRCODE_INSUFFICIENT_PRIVILEGE ||
		sqlerrcode == ERRCODE_UNDEFINED_FUNCTION;
}

/* Deliver a DELAYED_JOB row: enqueue its job from the snapshot. Runs inside the row's subtransaction. */
static RelayResult
DeliverDelayedJob(VqRegistry *registry, OutboxRow *row, char **message)
{
	int32		priority;
	int32		max_attempts;

	/* the target first, then the snapshot: a row wrong in both ways is unresolvable */
	if (VqLookupHandler(registry, row->destination) == NULL)
	{
		*message = psprintf("target \"%s\" is not registered", row->destination);
		return RELAY_UNRESOLVABLE;
	}
	if (row->snap_queue == NULL || !SnapshotInt(row->snap_priority, &priority) ||
		!SnapshotInt(row->snap_max_attempts, &max_attempts))
	{
		*message = pstrdup("metadata.delivery.delayedJob snapshot (queue, priority, maxAttempts) is missing or malformed");
		return RELAY_PERMANENT;
	}
	(void) VqEnqueueResolved(row->destination, row->snap_queue, priority, max_attempts,
							 row->has_scheduled_at ? row->scheduled_at : GetCurrentTransactionStartTimestamp(),
							 row->payload, row->payload == (Datum) 0,
							 row->context ? row->context : DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum("{}"))),
							 row->published_by);
	return RELAY_SUCCESS;
}

/* Deliver a NOTIFY row: {"outbox_id", "payload", "headers"} on the channel, at commit. */
static RelayResult
DeliverNotify(OutboxRow *row, char **message)
{
	StringInfoData msg;

	initStringInfo(&msg);
	appendStringInfo(&msg, "{\"outbox_id\": " INT64_FORMAT ", \"payload\": %s, \"headers\": ",
					 row->id, row->payload_text);
	(void) JsonbToCString(&msg, &row->headers->root, VARSIZE(row->headers));
	appendStringInfoChar(&msg, '}');
	if (msg.len >= 8000)
	{
		*message = psprintf("notification of %d bytes exceeds the 8000-byte NOTIFY limit", msg.len);
		return RELAY_PERMANENT;
	}
	Async_Notify(row->destination, msg.data);
	return RELAY_SUCCESS;
}

/* Deliver a row of a registered destination type by calling its function as the publisher. */
static RelayResult
DeliverCustom(VqRegistry *registry, OutboxRow *row, char **message)
{
	VqDestination *dest = VqLookupDestination(registry, row->type);
	VqSavedUser as_user;
	Datum		result;
	HeapTupleHeader rec;
	HeapTupleData tuple;
	TupleDesc	desc;
	bool		isnull;
	char	   *status;
	Datum		msg;

	if (dest == NULL)
	{
		*message = psprintf("destination type \"%s\" is not registered", row->type);
		return RELAY_UNRESOLVABLE;
	}
	if (vq_proc_aclcheck(dest->fn, row->published_by, ACL_EXECUTE) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("the publishing role has no EXECUTE on destination function %s",
						format_procedure(dest->fn))));
	if (!OidIsValid(publish_result_type))
		publish_result_type = DatumGetObjectId(DirectFunctionCall1(regtypein, CStringGetDatum("vq.publish_result")));

	/* like a handler: as the publisher, under the execution timeout and the shutdown grace */
	VqEnterUserCode(row->published_by, &as_user);
	delivering_id = row->id;
	delivering_attempts = row->attempts;
	VqWatchBegin(false);
	{
		LOCAL_FCINFO(fcinfo, 4);
		FmgrInfo	flinfo;

		fmgr_info(dest->fn, &flinfo);
		InitFunctionCallInfoData(*fcinfo, &flinfo, 4, InvalidOid, NULL, NULL);
		fcinfo->args[0].value = CStringGetTextDatum(row->destination);
		fcinfo->args[0].isnull = false;
		fcinfo->args[1].value = row->payload ? row->payload : DirectFunctionCall1(jsonb_in, CStringGetDatum("null"));
		fcinfo->args[1].isnull = false;
		fcinfo->args[2].value = JsonbPGetDatum(row->headers);
		fcinfo->args[2].isnull = false;
		fcinfo->args[3].value = JsonbPGetDatum(row->metadata);
		fcinfo->args[3].isnull = false;
		result = FunctionCallInvoke(fcinfo);
		if (fcinfo->isnull)
			ereport(ERROR,
					(errmsg("destination function %s returned NULL instead of a vq.publish_result",
							format_procedure(dest->fn))));
	}
	VqLeaveUserCode(&as_user);	/* fires its deferred triggers: still under the timeout */
	VqWatchEnd(true);
	delivering_id = 0;

	rec = DatumGetHeapTupleHeader(result);
	desc = lookup_rowtype_tupdesc(publish_result_type, -1);
	tuple.t_len = HeapTupleHeaderGetDatumLength(rec);
	tuple.t_data = rec;
	status = DatumGetCString(DirectFunctionCall1(enum_out, heap_getattr(&tuple, 1, desc, &isnull)));
	msg = heap_getattr(&tuple, 2, desc, &isnull);
	ReleaseTupleDesc(desc);
	*message = isnull ? NULL : TextDatumGetCString(msg);
	if (strcmp(status, "SUCCESS") == 0)
		return RELAY_SUCCESS;
	if (strcmp(status, "PERMANENT") == 0)
		return RELAY_PERMANENT;
	if (strcmp(status, "UNRESOLVABLE") == 0)
		return RELAY_UNRESOLVABLE;
	return RELAY_RETRYABLE;
}

/* One row's delivery, as the subtransaction that runs it sees it. */
typedef struct Delivery
{
	VqRegistry *registry;
	OutboxRow  *row;
	char	  **message;
	RelayResult result;
} Delivery;

/* Deliver the row (inside its subtransaction); only a success is kept. */
static bool
Deliver(void *arg)
{
	Delivery   *d = (Delivery *) arg;

	if (strcmp(d->row->type, "DELAYED_JOB") == 0)
		d->result = DeliverDelayedJob(d->registry, d->row, d->message);
	else if (strcmp(d->row->type, "NOTIFY") == 0)
		d->result = DeliverNotify(d->row, d->message);
	else
		d->result = DeliverCustom(d->registry, d->row, d->message);
	return d->result == RELAY_SUCCESS;
}

/*
 * Deliver one row in a subtransaction (around user code: a destination
 * function may run, and its cancels are its own); errors become RETRYABLE or
 * PERMANENT. *end_transaction: a destination function changed the
 * transaction's constraint modes (see session.c).
 */
static RelayResult
DeliverRow(VqRegistry *registry, OutboxRow *row, char **message, bool *end_transaction)
{
	Delivery	delivery = {registry, row, message, RELAY_RETRYABLE};
	ErrorData  *edata;

	*message = NULL;

	/* the row is delivered as its publisher: a dropped role can never be acted for */
	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(row->published_by)))
	{
		*message = psprintf("role %u that published the row no longer exists", row->published_by);
		return RELAY_PERMANENT;
	}

	edata = VqTryUserCode(Deliver, &delivery);
	if (edata != NULL)
	{
		delivering_id = 0;		/* (a destination function was cut short: the watch is disarmed) */
		*message = pstrdup(edata->message ? edata->message : "delivery failed");
		delivery.result = ((strcmp(row->type, "DELAYED_JOB") == 0 && IsValidationError(edata->sqlerrcode)) ||
						   edata->sqlerrcode == ERRCODE_INSUFFICIENT_PRIVILEGE)
			? RELAY_PERMANENT : RELAY_RETRYABLE;
		FreeErrorData(edata);
	}
	*end_transaction = VqSessionCleanUp();
	return delivery.result;
}

/* Record a row that was not delivered: FAILED for good, or retried after a backoff. */
static void
RecordUndelivered(OutboxRow *row, RelayResult result, const char *message, TimestampTz now)
{
	Datum		values[4];
	const char *kind = result == RELAY_UNRESOLVABLE ? "unresolvable: " : result == RELAY_PERMANENT ? "permanent: " : "retryable: ";

	values[0] = Int64GetDatum(row->id);
	values[1] = CStringGetTextDatum(VqCapText(psprintf("%s%s", kind, message ? message : "(no message)")));
	values[2] = TimestampTzGetDatum(now);
	if (result == RELAY_PERMANENT)
	{
		if (SPI_execute_plan(VqKeepPlan(&failed_plan,
								  "UPDATE vq.outbox SET status = 'FAILED', attempts = attempts OPERATOR(pg_catalog.+) 1,"
								  " last_error = $2, updated_at = $3, next_attempt_at = NULL"
								  " WHERE id OPERATOR(pg_catalog.=) $1",
								  3, (Oid[]) {INT8OID, TEXTOID, TIMESTAMPTZOID}),
							 values, NULL, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "vq_job: recording an outbox failure failed");
		return;
	}
	{
		int			shift = Min(row->attempts, 20);
		int64		delay = Min((int64) RELAY_BACKOFF_BASE_MS << shift, RELAY_BACKOFF_MAX_MS);

		values[3] = TimestampTzGetDatum(TimestampTzPlusMilliseconds(now, delay));
		if (SPI_execute_plan(VqKeepPlan(&retry_plan,
								  "UPDATE vq.outbox SET attempts = attempts OPERATOR(pg_catalog.+) 1,"
								  " last_error = $2, updated_at = $3, next_attempt_at = $4"
								  " WHERE id OPERATOR(pg_catalog.=) $1",
								  4, (Oid[]) {INT8OID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID}),
							 values, NULL, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "vq_job: recording an outbox retry failed");
		VqWakeAtCommit(DatumGetTimestampTz(values[3]));
	}
}

/*
 * The process ends while a destination function runs, because it caught the
 * execution timeout's cancel (watch.c): in a new transaction, record its
 * row as a retryable failure, as an error would have been. Returns whether
 * there was such a row.
 */
bool
VqRelayRecordCutDelivery(void)
{
	OutboxRow	row;

	if (delivering_id == 0)
		return false;
	memset(&row, 0, sizeof(row));
	row.id = delivering_id;
	row.attempts = delivering_attempts;
	RecordUndelivered(&row, RELAY_RETRYABLE,
					  psprintf("destination function still running %d ms after the execution timeout (%d ms) cancelled it; its executor was terminated",
							   VQ_HARD_TIMEOUT_AFTER_MS, vq_execution_timeout_ms),
					  GetCurrentTimestamp());
	delivering_id = 0;
	return true;
}

/*
 * Check a DELAYED_JOB row as the enqueue would, writing nothing. On success
 * fills in the job's handler and settings; otherwise says why, and whether
 * that is permanent or unresolvable.
 */
static RelayResult
CheckDelayedJob(VqRegistry *registry, OutboxRow *row, VqHandler **handler, VqQueue **queue,
				int32 *priority, int32 *max_attempts, char **message)
{
	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(row->published_by)))
	{
		*message = psprintf("role %u that published the row no longer exists", row->published_by);
		return RELAY_PERMANENT;
	}
	/* the target first, then the snapshot: a row wrong in both ways is unresolvable */
	*handler = VqLookupHandler(registry, row->destination);
	if (*handler == NULL)
	{
		*message = psprintf("target \"%s\" is not registered", row->destination);
		return RELAY_UNRESOLVABLE;
	}
	if (row->snap_queue == NULL || !SnapshotInt(row->snap_priority, priority) ||
		!SnapshotInt(row->snap_max_attempts, max_attempts))
	{
		*message = pstrdup("metadata.delivery.delayedJob snapshot (queue, priority, maxAttempts) is missing or malformed");
		return RELAY_PERMANENT;
	}
	*queue = VqLookupQueue(registry, row->snap_queue);
	if (*queue == NULL)
	{
		*message = psprintf("queue \"%s\" does not exist", row->snap_queue);
		return RELAY_PERMANENT;
	}
	if (*max_attempts < 1 || *max_attempts > VQ_MAX_ATTEMPTS_LIMIT)
	{
		*message = psprintf("max_attempts must be between 1 and %d, got %d", VQ_MAX_ATTEMPTS_LIMIT, *max_attempts);
		return RELAY_PERMANENT;
	}
	if (row->context != NULL && !JB_ROOT_IS_OBJECT(row->context))
	{
		*message = pstrdup("metadata must be a JSON object");
		return RELAY_PERMANENT;
	}
	if ((*handler)->is_function &&
		(!SearchSysCacheExists1(PROCOID, ObjectIdGetDatum((*handler)->fn)) ||
		 vq_proc_aclcheck((*handler)->fn, row->published_by, ACL_EXECUTE) != ACLCHECK_OK))
	{
		*message = psprintf("permission denied to enqueue a job for handler \"%s\" (or its function is gone)",
							(*handler)->name);
		return RELAY_PERMANENT;
	}
	if (!(*handler)->is_function && !VqMayProduce(*handler, row->published_by))
	{
		*message = psprintf("permission denied to enqueue a job for NOTIFY handler \"%s\" (no vq_grant_producer)",
							(*handler)->name);
		return RELAY_PERMANENT;
	}
	return RELAY_SUCCESS;
}

/* The rows of a batch enqueued together: the arguments of VqEnqueueManyResolved. */
typedef struct DelayedJobs
{
	VqRegistry *registry;
	int			n;
	VqHandler **handlers;
	Datum	   *queues;
	Datum	   *priorities;
	Datum	   *attempts;
	Datum	   *scheduled;
	Datum	   *payloads;
	bool	   *payload_nulls;
	Datum	   *metadatas;
	Datum	   *roles;
} DelayedJobs;

static void
DelayedJobsAlloc(DelayedJobs *jobs, VqRegistry *registry, int max)
{
	jobs->registry = registry;
	jobs->n = 0;
	jobs->handlers = palloc(sizeof(VqHandler *) * max);
	jobs->queues = palloc(sizeof(Datum) * max);
	jobs->priorities = palloc(sizeof(Datum) * max);
	jobs->attempts = palloc(sizeof(Datum) * max);
	jobs->scheduled = palloc(sizeof(Datum) * max);
	jobs->payloads = palloc(sizeof(Datum) * max);
	jobs->payload_nulls = palloc(sizeof(bool) * max);
	jobs->metadatas = palloc(sizeof(Datum) * max);
	jobs->roles = palloc(sizeof(Datum) * max);
}

/* Enqueue them (in the caller's subtransaction, which keeps them). */
static bool
InsertDelayedJobs(void *arg)
{
	DelayedJobs *jobs = (DelayedJobs *) arg;

	VqEnqueueManyResolved(jobs->registry, jobs->n, jobs->handlers, jobs->queues, jobs->priorities,
						  jobs->attempts, jobs->scheduled, jobs->payloads, jobs->payload_nulls,
						  jobs->metadatas, jobs->roles);
	return true;
}

/*
 * Deliver the DELAYED_JOB rows of a batch together: each is checked (failures
 * recorded at once), and the valid ones are enqueued by one set-based insert
 * in a subtransaction, so a batch needs neither a subtransaction per row nor
 * one statement per row. Should that insert fail anyway, its rows are
 * returned with the other rows, to be delivered one by one. Returns the rows
 * still to deliver.
 */
static List *
DeliverDelayedJobsTogether(VqRegistry *registry, List *rows, Datum *published, int *npublished, TimestampTz now)
{
	DelayedJobs jobs;
	List	   *together = NIL;
	List	   *rest = NIL;
	Datum		empty = DirectFunctionCall1(jsonb_in, CStringGetDatum("{}"));
	ErrorData  *edata;
	ListCell   *lc;

	DelayedJobsAlloc(&jobs, registry, list_length(rows));
	foreach(lc, rows)
	{
		OutboxRow  *row = lfirst(lc);
		VqHandler  *handler;
		VqQueue    *queue;
		int32		priority;
		int32		max_attempts;
		char	   *message = NULL;
		RelayResult result;
		int			n = jobs.n;

		if (strcmp(row->type, "DELAYED_JOB") != 0)
		{
			rest = lappend(rest, row);
			continue;
		}
		result = CheckDelayedJob(registry, row, &handler, &queue, &priority, &max_attempts, &message);
		if (result != RELAY_SUCCESS)
		{
			RecordUndelivered(row, result, message, now);
			continue;
		}
		jobs.handlers[n] = handler;
		jobs.queues[n] = queue->name_datum;
		jobs.priorities[n] = Int32GetDatum(priority);
		jobs.attempts[n] = Int32GetDatum(max_attempts);
		jobs.scheduled[n] = TimestampTzGetDatum(row->has_scheduled_at ? row->scheduled_at
												: GetCurrentTransactionStartTimestamp());
		jobs.payloads[n] = row->payload;
		jobs.payload_nulls[n] = (row->payload == (Datum) 0);
		jobs.metadatas[n] = row->context ? JsonbPGetDatum(row->context) : empty;
		jobs.roles[n] = ObjectIdGetDatum(row->published_by);
		together = lappend(together, row);
		jobs.n++;
	}
	if (jobs.n == 0)
		return rest;

	edata = VqTryInSubtransaction(InsertDelayedJobs, &jobs);
	if (edata != NULL)
	{
		/* not expected after the checks: fall back to one row at a time, which records each row's error */
		ereport(LOG, (errmsg("vq_job: relaying %d outbox rows together failed (%s); relaying them one by one",
							 jobs.n, VqCapText(edata->message))));
		FreeErrorData(edata);
		return list_concat(together, rest);
	}
	foreach(lc, together)
		published[(*npublished)++] = Int64GetDatum(((OutboxRow *) lfirst(lc))->id);
	return rest;
}

#define RELAY_COLUMNS \
	"SELECT id, destination_type, destination, payload, headers, metadata, scheduled_at," \
	" attempts, published_by," \
	" metadata #>> '{delivery,delayedJob,queue}'," \
	" metadata #>> '{delivery,delayedJob,priority}'," \
	" metadata #>> '{delivery,delayedJob,maxAttempts}'," \
	" metadata -> 'context', next_attempt_at IS NOT NULL" \
	" FROM vq.outbox" \
	" WHERE status OPERATOR(pg_catalog.=) 'PENDING'" \
	" AND ((destination_type OPERATOR(pg_catalog.=) 'DELAYED_JOB'" \
	"       AND destination OPERATOR(pg_catalog.=) ANY ($2))" \
	"      OR destination_type OPERATOR(pg_catalog.=) 'NOTIFY'" \
	"      OR destination_type OPERATOR(pg_catalog.=) ANY ($3))"

/* A full scan of the rows due at publication at least this often, and whenever the registry changed. */
#define RELAY_SWEEP_MS 60000

/* Append the rows the last claim statement returned to rows; *last: the highest id among them. */
static List *
CopyRows(List *rows, int64 *last)
{
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		OutboxRow  *row = CopyRow(SPI_tuptable->vals[i], SPI_tuptable->tupdesc);

		*last = Max(*last, row->id);
		rows = lappend(rows, row);
	}
	return rows;
}

/*
 * Claim up to limit due rows this database can serve: first the timed ones
 * (a scheduled_at, or a retry time) in due order, then the rows due at
 * publication in id order, from the relay position (claimpos.c). Rows that
 * were due at publication are most of them, and every one relayed leaves an
 * entry in outbox_pending_idx that a long-held snapshot keeps vacuum from
 * removing: scanning them from the position walks none of those again.
 */
static List *
ClaimRows(VqRegistry *registry, int limit, TimestampTz now)
{
	static SPIPlanPtr timed_plan = NULL;
	static uint64 swept_generation = 0;
	static TimestampTz swept_at = 0;
	Datum		values[5];
	List	   *rows = NIL;
	int64		last = 0;
	bool		sweep;

	values[0] = TimestampTzGetDatum(now);
	values[1] = NameArray(registry, true);
	values[2] = NameArray(registry, false);
	values[3] = Int32GetDatum(limit);
	if (SPI_execute_plan(VqKeepGenericPlan(&timed_plan,
							  RELAY_COLUMNS
							  " AND (scheduled_at IS NOT NULL OR next_attempt_at IS NOT NULL)"
							  " AND coalesce(next_attempt_at, scheduled_at) OPERATOR(pg_catalog.<=) $1"
							  " ORDER BY coalesce(next_attempt_at, scheduled_at), id LIMIT $4 FOR UPDATE SKIP LOCKED",
							  4, (Oid[]) {TIMESTAMPTZOID, TEXTARRAYOID, TEXTARRAYOID, INT4OID}),
						 values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "vq_job: claiming outbox rows failed");
	rows = CopyRows(rows, &last);
	if (list_length(rows) >= limit)
		return rows;

	/* rows of a target registered since, or released by a relay that failed: found by a sweep */
	sweep = registry->generation != swept_generation || TimestampDifferenceExceeds(swept_at, now, RELAY_SWEEP_MS);
	values[3] = Int32GetDatum(limit - list_length(rows));
	values[4] = Int64GetDatum(VqRelayPositionBegin(VqMyDatabaseSlot, VqMyExecutorIndex));
	if (sweep)
	{
		values[4] = Int64GetDatum(0);
		swept_generation = registry->generation;
		swept_at = now;
	}
	last = 0;
	if (SPI_execute_plan(VqKeepGenericPlan(&claim_plan,
							  RELAY_COLUMNS
							  " AND scheduled_at IS NULL AND next_attempt_at IS NULL"
							  " AND id OPERATOR(pg_catalog.>=) $5"
							  " ORDER BY id LIMIT $4 FOR UPDATE SKIP LOCKED",
							  5, (Oid[]) {TIMESTAMPTZOID, TEXTARRAYOID, TEXTARRAYOID, INT4OID, INT8OID}),
						 values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "vq_job: claiming outbox rows failed");
	rows = CopyRows(rows, &last);
	VqRelayPositionEnd(VqMyDatabaseSlot, VqMyExecutorIndex, last);
	return rows;
}

/*
 * The earliest future due time of a PENDING timed outbox row (its
 * scheduled_at, or its retry time): one probe of outbox_timed_idx. The
 * executors sleep no later than that (executor.c), so the relay need not
 * poll for timed rows.
 */
TimestampTz
VqRelayNextDue(TimestampTz now)
{
	static SPIPlanPtr plan = NULL;
	Datum		values[1] = {TimestampTzGetDatum(now)};
	bool		isnull;

	if (SPI_execute_plan(VqKeepPlan(&plan,
							  "SELECT coalesce(next_attempt_at, scheduled_at) FROM vq.outbox"
							  " WHERE status OPERATOR(pg_catalog.=) 'PENDING'"
							  " AND (scheduled_at IS NOT NULL OR next_attempt_at IS NOT NULL)"
							  " AND coalesce(next_attempt_at, scheduled_at) OPERATOR(pg_catalog.>) $1"
							  " ORDER BY coalesce(next_attempt_at, scheduled_at) LIMIT 1",
							  1, (Oid[]) {TIMESTAMPTZOID}),
						 values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "vq_job: looking for the next timed outbox row failed");
	if (SPI_processed == 0)
		return DT_NOEND;
	return DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/*
 * Relay one batch of due outbox rows this database can serve, in the caller's
 * transaction (connected to SPI). Returns the number of rows handled.
 */
int
VqRelayBatch(VqRegistry *registry, int limit, TimestampTz now)
{
	int			level = VqIndexScansBegin();
	List	   *rows = ClaimRows(registry, limit, now);
	Datum	   *published;
	int			npublished = 0;
	int			nclaimed;
	Oid			code_role = InvalidOid;
	bool		end_transaction = false;
	ListCell   *lc;

	VqIndexScansEnd(level);
	if (rows == NIL)
		return 0;

	published = palloc(sizeof(Datum) * list_length(rows));
	nclaimed = list_length(rows);

	/* DELAYED_JOB rows: checked one by one, the valid ones enqueued by one statement */
	rows = DeliverDelayedJobsTogether(registry, rows, published, &npublished, now);

	/*
	 * The rest (and DELAYED_JOB rows if the set-based insert failed): one
	 * subtransaction each, at most 60 per transaction (a backend caches 64
	 * subtransaction XIDs; beyond, every snapshot in the cluster slows down).
	 */
	foreach(lc, rows)
	{
		OutboxRow  *row = lfirst(lc);
		char	   *message;
		RelayResult result;
		bool		user_code = strcmp(row->type, "DELAYED_JOB") != 0 && strcmp(row->type, "NOTIFY") != 0;

		/* destination functions of different roles never share a transaction */
		if (ShutdownRequestPending || foreach_current_index(lc) >= 60 || end_transaction ||
			(user_code && OidIsValid(code_role) && row->published_by != code_role))
		{
			/* rows not reached stay PENDING (their locks go with the commit): the position goes back */
			for_each_cell(lc, rows, lc)
			{
				row = lfirst(lc);
				VqWakeRelayAtCommit(row->id, row->has_scheduled_at || row->retried, row->scheduled_at);
			}
			break;
		}
		if (user_code)
			code_role = row->published_by;
		result = DeliverRow(registry, row, &message, &end_transaction);

		if (result == RELAY_SUCCESS)
			published[npublished++] = Int64GetDatum(row->id);
		else
			RecordUndelivered(row, result, message, now);
	}
	if (npublished > 0)
	{
		Datum		args[2];

		args[0] = PointerGetDatum(construct_array(published, npublished, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
		args[1] = TimestampTzGetDatum(GetCurrentTimestamp());
		if (SPI_execute_plan(VqKeepCustomPlan(&published_plan,
								  "UPDATE vq.outbox SET status = 'PUBLISHED', attempts = attempts OPERATOR(pg_catalog.+) 1,"
								  " published_at = $2, updated_at = $2, last_error = NULL, next_attempt_at = NULL"
								  " WHERE id OPERATOR(pg_catalog.=) ANY ($1)",
								  2, (Oid[]) {INT8ARRAYOID, TIMESTAMPTZOID}),
							 args, NULL, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "vq_job: marking outbox rows published failed");
	}
	return nclaimed;
}
