/*
 * enqueue.c: vq_enqueue(), vq_enqueue_in() and vq_enqueue_many().
 *
 * An enqueue joins the caller's transaction: it validates its arguments
 * against the cached registry before touching any table, resolves the
 * effective settings (call argument > contract override > handler default >
 * framework default), merges the bound durable context into the metadata and
 * inserts the job row through a kept SPI plan, as the extension owner (nobody
 * else may write vq.job). A job_id is an idempotency key among the enqueuing
 * role's unfinished jobs (each role has its own: no role can take or probe
 * another's ids): ON CONFLICT on the unique index (enqueued_by, job_id) makes a
 * concurrent duplicate wait for the first inserter and then return its
 * execution_id.
 *
 * A job is due at run_at, or from the call when run_at is NULL; a role
 * without a grant on the job's queue cannot make it due before the call
 * (VqDueAt), and no time may be infinite.
 *
 * When the transaction commits, the database's workers are woken (due jobs)
 * or told the earliest future due time (wakeup.c): nothing happens on
 * rollback and nothing before the commit is visible.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "common/pg_prng.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/resowner.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "main/checks.h"
#include "main/compat.h"
#include "main/errcodes.h"
#include "main/guc.h"
#include "main/limits.h"
#include "main/shmem.h"
#include "util/spi_util.h"
#include "cache/registry.h"
#include "state/wakeup.h"
#include "run/context.h"
#include "run/roles.h"
#include "api/enqueue.h"

PG_FUNCTION_INFO_V1(vq_enqueue);
PG_FUNCTION_INFO_V1(vq_enqueue_in);
PG_FUNCTION_INFO_V1(vq_enqueue_many);

/* Argument positions, shared by all three functions. */
#define ARG_HANDLER		0
#define ARG_PAYLOAD		1
#define ARG_WHEN		2		/* run_at, or delay for vq_enqueue_in */
#define ARG_QUEUE		3
#define ARG_PRIORITY	4
#define ARG_MAX_ATTEMPTS 5
#define ARG_JOB_ID		6		/* job_id, or job_ids for vq_enqueue_many */
#define ARG_METADATA	7
#define ARG_UNIQUE_FOR	8		/* vq_enqueue and vq_enqueue_in only */

/* Everything but the per-job columns, resolved and validated. */
typedef struct JobSpec
{
	VqRegistry *registry;
	VqHandler  *handler;
	VqQueue    *queue;
	int32		priority;
	int32		max_attempts;
	TimestampTz scheduled_at;
	TimestampTz now;			/* the transaction's start: created_at */
	TimestampTz called_at;		/* the call: the earliest a job is due without a queue grant */
	Jsonb	   *metadata;
	Oid			enqueued_by;
} JobSpec;

static void CheckQueueGrant(const JobSpec *spec);

/* The name of the spec's handler if it is an external one (its jobs are taken by workers), else NULL. */
static inline const char *
ExternalHandlerName(const JobSpec *spec)
{
	return spec->handler->is_function ? NULL : spec->handler->name;
}
static void RunWrite(SPIPlanPtr plan, Datum *values, const char *nulls, int expected);

/* Columns every insert plan binds, in this order, as $1..$NCOMMON. */
#define JOB_COLUMNS \
	"(execution_id, state, priority, attempt_number, max_attempts, scheduled_at," \
	" created_at, updated_at, enqueued_by, queue, job_id, handler, handler_address, handler_function," \
	" payload, metadata)"
/* vq.job_active holds the unfinished jobs; its unique index on (enqueued_by, job_id) is the idempotency key */
#define ON_ACTIVE_CONFLICT " ON CONFLICT (enqueued_by, job_id) DO NOTHING"

/* $1 execution_id, $2 job_id, $3 payload (scalars, or arrays for the batch plans), then the rest. */
#define NPARAMS 13
static const Oid one_types[NPARAMS] = {
	UUIDOID, TEXTOID, JSONBOID, INT4OID, INT4OID, TIMESTAMPTZOID,
	TIMESTAMPTZOID, REGROLEOID, TEXTOID, TEXTOID, TEXTOID, JSONBOID, REGPROCEDUREOID
};
static const Oid many_types[NPARAMS] = {
	UUIDARRAYOID, TEXTARRAYOID, JSONBARRAYOID, INT4OID, INT4OID, TIMESTAMPTZOID,
	TIMESTAMPTZOID, REGROLEOID, TEXTOID, TEXTOID, TEXTOID, JSONBOID, REGPROCEDUREOID
};

#define ONE_VALUES \
	" VALUES ($1, 'ENQUEUED', $4, 0, $5, $6, $7, $7, $8, $9, $2, $10, $11, $13, $3, $12)"
#define MANY_SELECT \
	" SELECT u.e, 'ENQUEUED', $4, 0, $5, $6, $7, $7, $8, $9," \
	" coalesce(u.j, 'delayed-' OPERATOR(pg_catalog.||) u.e::pg_catalog.text), $10, $11, $13, u.p, $12" \
	" FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($3)) AS u(e, j, p)"

static SPIPlanPtr insert_one_plan = NULL;
static SPIPlanPtr insert_one_idempotent_plan = NULL;
static SPIPlanPtr insert_many_plan = NULL;
static SPIPlanPtr insert_many_idempotent_plan = NULL;
static SPIPlanPtr holder_one_plan = NULL;
static SPIPlanPtr holder_many_plan = NULL;

/* Is this error worth retrying the whole transaction for? */
static bool
IsTransientError(int sqlerrcode)
{
	return sqlerrcode == ERRCODE_T_R_SERIALIZATION_FAILURE ||
		sqlerrcode == ERRCODE_T_R_DEADLOCK_DETECTED ||
		sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE ||
		sqlerrcode == ERRCODE_QUERY_CANCELED ||
		ERRCODE_TO_CATEGORY(sqlerrcode) == ERRCODE_CONNECTION_EXCEPTION;
}

/* Error context while persisting: say which handler, and whether a retry makes sense. */
static void
PersistErrorContext(void *arg)
{
	const char *handler = (const char *) arg;

	if (IsTransientError(geterrcode()))
		errcontext("vq_enqueue: persisting a job for handler \"%s\" failed transiently; retrying the transaction may succeed",
				   handler);
	else
		errcontext("vq_enqueue: persisting a job for handler \"%s\"", handler);
}

/*
 * A new execution id: a time-ordered (version 7) UUID, the Unix time in
 * milliseconds followed by 74 random bits. New jobs' keys then land at the
 * right edge of vq.job_active's primary key instead of anywhere in it: with
 * random keys and a million jobs waiting, every insert dirtied a different
 * leaf page, and after each checkpoint wrote it whole to the WAL (69% of the
 * WAL of an enqueue, pg_waldump).
 */
static void
NewUuid(pg_uuid_t *uuid)
{
	uint64		ms = (uint64) (GetCurrentTimestamp() / 1000) +
		(uint64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * 1000;

	if (!pg_strong_random(uuid->data, UUID_LEN))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate random values")));
	for (int i = 0; i < 6; i++)
		uuid->data[i] = (uint8) (ms >> (8 * (5 - i)));
	uuid->data[6] = (uuid->data[6] & 0x0f) | 0x70;
	uuid->data[8] = (uuid->data[8] & 0x3f) | 0x80;
}

/* Validate a caller-supplied job_id. */
static void
CheckJobId(text *job_id)
{
	int			len = VARSIZE_ANY_EXHDR(job_id);

	if (len < 1 || len > VQ_JOB_ID_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_JOB_ID),
				 errmsg("job_id must be 1 to %d bytes long, got %d", VQ_JOB_ID_MAX, len)));
}

/* The unique_for argument: NULL, or a positive interval that comes with a job_id. */
static Interval *
UniqueFor(FunctionCallInfo fcinfo, text *job_id)
{
	Interval   *window;
	Interval	zero;

	if (PG_ARGISNULL(ARG_UNIQUE_FOR))
		return NULL;
	window = PG_GETARG_INTERVAL_P(ARG_UNIQUE_FOR);
	memset(&zero, 0, sizeof(zero));
	if (job_id == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_JOB_ID),
				 errmsg("unique_for needs a job_id")));
	if (DatumGetInt32(DirectFunctionCall2(interval_cmp, IntervalPGetDatum(window), IntervalPGetDatum(&zero))) <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_ARGUMENT),
				 errmsg("unique_for must be a positive interval")));
	return window;
}

/*
 * Take the role's job_id for the window, unless a job enqueued earlier holds
 * it: then return that job's execution_id. The primary key of
 * vq.job_id_window settles races between sessions: a second session waits
 * for the first one's commit, then finds the window held (or free again if
 * the first rolled back). In the caller's SPI connection, as the owner.
 */
static Datum
HolderOfWindow(Oid role, text *job_id, pg_uuid_t *execution_id, Interval *window)
{
	static SPIPlanPtr take_plan = NULL;
	static SPIPlanPtr holder_plan = NULL;
	Datum		values[4] = {ObjectIdGetDatum(role), PointerGetDatum(job_id), UUIDPGetDatum(execution_id),
	IntervalPGetDatum(window)};
	bool		isnull;

	RunWrite(VqKeepPlan(&take_plan,
					  "INSERT INTO vq.job_id_window AS w (enqueued_by, job_id, execution_id, until)"
					  " VALUES ($1, $2, $3, pg_catalog.now() OPERATOR(pg_catalog.+) $4)"
					  " ON CONFLICT ON CONSTRAINT job_id_window_pkey DO UPDATE"
					  " SET execution_id = excluded.execution_id, until = excluded.until"
					  " WHERE w.until OPERATOR(pg_catalog.<=) pg_catalog.now() RETURNING 1",
					  4, (Oid[]) {OIDOID, TEXTOID, UUIDOID, INTERVALOID}),
			 values, NULL, SPI_OK_INSERT_RETURNING);
	if (SPI_processed == 1)
		return (Datum) 0;
	if (SPI_execute_plan(VqKeepPlan(&holder_plan,
								  "SELECT execution_id FROM vq.job_id_window"
								  " WHERE enqueued_by OPERATOR(pg_catalog.=) $1 AND job_id OPERATOR(pg_catalog.=) $2",
								  2, (Oid[]) {OIDOID, TEXTOID}),
						 values, NULL, false, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "vq_job: job_id window lookup failed");
	return SPI_datumTransfer(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull),
							 false, UUID_LEN);
}

/* The window we took belongs to the unfinished job that held the id already. */
static void
WindowHeldBy(Oid role, text *job_id, Datum execution_id)
{
	static SPIPlanPtr plan = NULL;
	Datum		values[3] = {ObjectIdGetDatum(role), PointerGetDatum(job_id), execution_id};

	RunWrite(VqKeepPlan(&plan,
					  "UPDATE vq.job_id_window SET execution_id = $3"
					  " WHERE enqueued_by OPERATOR(pg_catalog.=) $1 AND job_id OPERATOR(pg_catalog.=) $2",
					  3, (Oid[]) {OIDOID, TEXTOID, UUIDOID}),
			 values, NULL, SPI_OK_UPDATE);
}

/*
 * Validate the arguments shared by every enqueue form and resolve the
 * effective settings. Argument checks come first, then the registry; nothing
 * here writes.
 */
static void
ResolveSpec(FunctionCallInfo fcinfo, JobSpec *spec)
{
	text	   *handler_arg;
	char	   *handler_name;
	char	   *queue_name;
	Jsonb	   *metadata = NULL;

	if (PG_ARGISNULL(ARG_HANDLER))
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_HANDLER_NAME),
				 errmsg("handler name must not be null")));
	handler_arg = PG_GETARG_TEXT_PP(ARG_HANDLER);
	if (!vq_valid_name(VARDATA_ANY(handler_arg), VARSIZE_ANY_EXHDR(handler_arg)))
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_HANDLER_NAME),
				 errmsg("invalid handler name \"%s\"", text_to_cstring(handler_arg)),
				 errdetail("Handler names must match ^[a-zA-Z0-9._-]{1,128}$.")));
	handler_name = text_to_cstring(handler_arg);

	if (!PG_ARGISNULL(ARG_MAX_ATTEMPTS))
	{
		int32		max_attempts = PG_GETARG_INT32(ARG_MAX_ATTEMPTS);

		if (max_attempts < 1 || max_attempts > VQ_MAX_ATTEMPTS_LIMIT)
			ereport(ERROR,
					(errcode(ERRCODE_VQ_INVALID_MAX_ATTEMPTS),
					 errmsg("max_attempts must be between 1 and %d, got %d",
							VQ_MAX_ATTEMPTS_LIMIT, max_attempts)));
	}
	if (!PG_ARGISNULL(ARG_METADATA))
	{
		metadata = PG_GETARG_JSONB_P(ARG_METADATA);
		VqCheckJsonObject(metadata, "metadata");
	}

	spec->registry = VqRegistryGet();
	spec->handler = VqLookupHandler(spec->registry, handler_name);
	if (spec->handler == NULL)
		VqReportUnregisteredHandler(spec->registry, handler_name);

	queue_name = PG_ARGISNULL(ARG_QUEUE) ? spec->handler->queue_name
		: text_to_cstring(PG_GETARG_TEXT_PP(ARG_QUEUE));
	spec->queue = VqLookupQueue(spec->registry, queue_name);
	if (spec->queue == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_VQ_UNKNOWN_QUEUE),
				 errmsg("queue \"%s\" does not exist", queue_name),
				 errhint("Create it with vq_create_queue() or vq_configure().")));

	spec->priority = PG_ARGISNULL(ARG_PRIORITY) ? spec->handler->priority
		: PG_GETARG_INT32(ARG_PRIORITY);
	spec->max_attempts = PG_ARGISNULL(ARG_MAX_ATTEMPTS) ? spec->handler->max_attempts
		: PG_GETARG_INT32(ARG_MAX_ATTEMPTS);

	spec->enqueued_by = GetUserId();
	VqCheckEnqueuePrivilege(spec->handler, spec->enqueued_by);
	if (spec->queue != spec->handler->queue || spec->priority > spec->handler->priority ||
		spec->max_attempts > spec->handler->max_attempts)
		CheckQueueGrant(spec);

	spec->metadata = VqMergeBoundContext(metadata);
	VqCheckSize(JsonbPGetDatum(spec->metadata), vq_max_metadata_bytes, "metadata", "vq.max_metadata_bytes");
	spec->now = GetCurrentTransactionStartTimestamp();
	/* due from the call, not from the transaction's start (see VqDueAt) */
	spec->called_at = GetCurrentTimestamp();
	spec->scheduled_at = spec->called_at;
}

/* Is role a superuser, or a member of one of the granted roles? */
static bool
Granted(const List *grantees, Oid role)
{
	ListCell   *lc;

	if (superuser_arg(role))
		return true;
	foreach(lc, grantees)
		if (has_privs_of_role(role, lfirst_oid(lc)))
			return true;
	return false;
}

/* May role enqueue jobs of this NOTIFY handler (a superuser, or a member of a producer grantee)? */
bool
VqMayProduce(VqHandler *handler, Oid role)
{
	return Granted(handler->producers, role);
}

/*
 * When a job asked to run at run_at is due: then, except that for a role
 * without a grant on its queue (vq_grant_queue) a time before called_at (the
 * enqueue's or the publish's clock) counts as called_at. A past run_at would
 * place the job ahead of the jobs already due at its priority, as a higher
 * priority would; at called_at it comes after every one of them (each is due
 * at or before the moment it is looked at). Only a past run_at costs the
 * grant lookup.
 */
TimestampTz
VqDueAt(VqQueue *queue, Oid role, TimestampTz run_at, TimestampTz called_at)
{
	if (run_at >= called_at || Granted(queue->granted, role))
		return run_at;
	return called_at;
}

/*
 * A job sent to another queue than its handler's, or with a priority or
 * max_attempts above the handler's, could jump another team's line or hold
 * its capacity: that needs a grant on the queue it goes to (vq_grant_queue).
 */
static void
CheckQueueGrant(const JobSpec *spec)
{
	if (Granted(spec->queue->granted, spec->enqueued_by))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied to enqueue a job for handler \"%s\" %s",
					spec->handler->name,
					spec->queue != spec->handler->queue ? psprintf("to queue \"%s\"", spec->queue->name)
					: spec->priority > spec->handler->priority ? psprintf("with priority %d", spec->priority)
					: psprintf("with max_attempts %d", spec->max_attempts)),
			 errdetail("Without a grant on queue \"%s\", a job goes to its handler's queue \"%s\" with at most its priority %d and max_attempts %d.",
					   spec->queue->name, spec->handler->queue_name, spec->handler->priority, spec->handler->max_attempts),
			 errhint("An administrator can allow it with vq_grant_queue('%s', role).", spec->queue->name)));
}

/*
 * The enqueuing role must be allowed to run the handler function: it will run
 * as that role. A NOTIFY handler has no function: enqueuing for it needs a
 * producer grant (vq_grant_producer), since its consumer runs whatever the
 * payload says.
 */
void
VqCheckEnqueuePrivilege(VqHandler *handler, Oid role)
{
	if (!handler->is_function)
	{
		if (!VqMayProduce(handler, role))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied to enqueue a job for NOTIFY handler \"%s\"", handler->name),
					 errhint("An administrator can allow it with vq_grant_producer('%s', role).", handler->name)));
		return;
	}
	if (!SearchSysCacheExists1(PROCOID, ObjectIdGetDatum(handler->fn)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("handler \"%s\" refers to function %s, which no longer exists",
						handler->name, handler->address),
				 errhint("Register the handler again with vq_unregister_handler() and vq_register_handler().")));
	if (vq_proc_aclcheck(handler->fn, role, ACL_EXECUTE) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to enqueue a job for handler \"%s\"", handler->name),
				 errdetail("Enqueuing requires EXECUTE on the handler function %s, which runs as the enqueuing role.",
						   handler->address)));
}

/*
 * Bind the parameters shared by every insert plan ($4..$13; the function
 * whose EXECUTE was checked is the one the job will run).
 */
static void
BindCommon(const JobSpec *spec, Datum *values, char *nulls)
{
	values[3] = Int32GetDatum(spec->priority);
	values[4] = Int32GetDatum(spec->max_attempts);
	values[5] = TimestampTzGetDatum(spec->scheduled_at);
	values[6] = TimestampTzGetDatum(spec->now);
	values[7] = ObjectIdGetDatum(spec->enqueued_by);
	values[8] = spec->queue->name_datum;
	values[9] = spec->handler->name_datum;
	values[10] = spec->handler->address_datum;
	values[11] = JsonbPGetDatum(spec->metadata);
	values[12] = ObjectIdGetDatum(spec->handler->fn);
	nulls[12] = spec->handler->is_function ? ' ' : 'n';
}

/* Run a kept plan that writes; error on anything but the expected result. */
static void
RunWrite(SPIPlanPtr plan, Datum *values, const char *nulls, int expected)
{
	int			rc = SPI_execute_plan(plan, values, nulls, false, 0);

	if (rc != expected)
		elog(ERROR, "vq_job: job insert failed: %s", SPI_result_code_string(rc));
}

/* From here until PopPersistContext, an error says which handler's job failed to persist (and whether to retry). */
static void
PushPersistContext(ErrorContextCallback *errcb, const char *handler)
{
	errcb->callback = PersistErrorContext;
	errcb->arg = unconstify(char *, handler);
	errcb->previous = error_context_stack;
	error_context_stack = errcb;
}

static void
PopPersistContext(ErrorContextCallback *errcb)
{
	error_context_stack = errcb->previous;
}

/*
 * Insert one job that has a job_id (values[1], bound): our insert wins, or
 * another unfinished job of the role holds the id and its execution_id is
 * returned; if that holder finishes between the two statements, try again.
 * With a window, the job holding the window is returned instead (and an
 * unfinished holder of the id takes the window over). As the owner,
 * connected to SPI.
 */
static Datum
InsertWithJobId(const JobSpec *spec, Datum *values, const char *nulls, text *job_id,
				pg_uuid_t *execution_id, Interval *window)
{
	Datum		result = window ? HolderOfWindow(spec->enqueued_by, job_id, execution_id, window) : (Datum) 0;

	for (int tries = 0; result == (Datum) 0; tries++)
	{
		bool		isnull;

		CHECK_FOR_INTERRUPTS();
		if (tries >= 100)
			elog(ERROR, "vq_job: could not settle job_id \"%s\" after %d tries",
				 text_to_cstring(job_id), tries);
		RunWrite(VqKeepPlan(&insert_one_idempotent_plan,
							"INSERT INTO vq.job_active " JOB_COLUMNS ONE_VALUES ON_ACTIVE_CONFLICT
							" RETURNING execution_id", NPARAMS, one_types),
				 values, nulls, SPI_OK_INSERT_RETURNING);
		if (SPI_processed == 1)
			return values[0];
		if (SPI_execute_plan(VqKeepPlan(&holder_one_plan,
										"SELECT execution_id FROM vq.job_active"
										" WHERE job_id OPERATOR(pg_catalog.=) $1 AND enqueued_by OPERATOR(pg_catalog.=) $2",
										2, (Oid[]) {TEXTOID, REGROLEOID}),
							 (Datum[]) {values[1], ObjectIdGetDatum(spec->enqueued_by)}, NULL, false, 1) != SPI_OK_SELECT)
			elog(ERROR, "vq_job: job_id lookup failed");
		if (SPI_processed == 1)
		{
			result = SPI_datumTransfer(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
													 1, &isnull), false, UUID_LEN);
			if (window != NULL)
				WindowHeldBy(spec->enqueued_by, job_id, result);
		}
	}
	return result;
}

/*
 * Insert one job; with a job_id, return the unfinished holder of that id
 * instead, and with a window (unique_for, or else the handler's) also the
 * job that holds the window, whatever its state.
 */
static Datum
InsertOne(const JobSpec *spec, Datum payload, bool payload_null, text *job_id, Interval *window)
{
	Datum		values[NPARAMS];
	char		nulls[NPARAMS];
	pg_uuid_t  *execution_id = palloc(sizeof(pg_uuid_t));
	Datum		result;
	VqSavedUser saved;
	ErrorContextCallback errcb;

	if (!payload_null)
		VqCheckSize(payload, vq_max_payload_bytes, "payload", "vq.max_payload_bytes");
	if (window == NULL && job_id != NULL)
		window = spec->handler->unique_for; /* the handler's window, when the call gives none */
	if (window != NULL)
		(void) VqAddInterval(spec->now, window, "unique_for");	/* (its end: now() + window) */
	NewUuid(execution_id);
	memset(nulls, ' ', sizeof(nulls));
	BindCommon(spec, values, nulls);
	values[0] = UUIDPGetDatum(execution_id);
	values[2] = payload;
	nulls[2] = payload_null ? 'n' : ' ';

	PushPersistContext(&errcb, spec->handler->name);
	VqConnectAsOwner(spec->registry->owner, &saved);
	if (job_id == NULL)
	{
		char	   *uuid_text = DatumGetCString(DirectFunctionCall1(uuid_out, values[0]));

		values[1] = PointerGetDatum(cstring_to_text(psprintf("delayed-%s", uuid_text)));
		RunWrite(VqKeepPlan(&insert_one_plan, "INSERT INTO vq.job_active " JOB_COLUMNS ONE_VALUES,
							NPARAMS, one_types),
				 values, nulls, SPI_OK_INSERT);
		result = values[0];
	}
	else
	{
		values[1] = PointerGetDatum(job_id);
		result = InsertWithJobId(spec, values, nulls, job_id, execution_id, window);
	}
	VqFinishAsOwner(&saved);
	PopPersistContext(&errcb);
	/* (nobody claims from a paused queue: waking it would be wasted) */
	VqJobsEnqueuedAtCommit(spec->queue->name, ExternalHandlerName(spec), spec->priority, spec->scheduled_at,
						   !spec->queue->paused);
	return result;
}

/* Every payload of a batch within vq.max_payload_bytes. */
static void
CheckPayloadSizes(ArrayType *payloads)
{
	ArrayIterator it = array_create_iterator(payloads, 0, NULL);
	Datum		d;
	bool		isnull;

	while (array_iterate(it, &d, &isnull))
		if (!isnull)
			VqCheckSize(d, vq_max_payload_bytes, "payload", "vq.max_payload_bytes");
	array_free_iterator(it);
}

/* The job_id argument of vq_enqueue / vq_enqueue_in (NULL: none), checked, in a call that may write (what). */
static text *
JobIdArg(FunctionCallInfo fcinfo, const char *what)
{
	text	   *job_id = PG_ARGISNULL(ARG_JOB_ID) ? NULL : PG_GETARG_TEXT_PP(ARG_JOB_ID);

	VqRequireWritable(what);
	if (job_id)
		CheckJobId(job_id);
	return job_id;
}

/* Insert the job the call describes (its payload, its unique_for) with the settings resolved. */
static Datum
InsertCallersJob(FunctionCallInfo fcinfo, const JobSpec *spec, text *job_id)
{
	return InsertOne(spec, PG_GETARG_DATUM(ARG_PAYLOAD), PG_ARGISNULL(ARG_PAYLOAD), job_id,
					 UniqueFor(fcinfo, job_id));
}

/* vq_enqueue(handler, payload, run_at, queue, priority, max_attempts, job_id, metadata) */
Datum
vq_enqueue(PG_FUNCTION_ARGS)
{
	text	   *job_id = JobIdArg(fcinfo, "vq_enqueue");
	JobSpec		spec;

	if (!PG_ARGISNULL(ARG_WHEN))
		VqCheckFiniteTime(PG_GETARG_TIMESTAMPTZ(ARG_WHEN), "run_at");
	ResolveSpec(fcinfo, &spec);
	if (!PG_ARGISNULL(ARG_WHEN))
		spec.scheduled_at = VqDueAt(spec.queue, spec.enqueued_by, PG_GETARG_TIMESTAMPTZ(ARG_WHEN), spec.called_at);
	return InsertCallersJob(fcinfo, &spec, job_id);
}

/* vq_enqueue_in(handler, payload, delay, ...): due clock_timestamp() + delay, resolved now. */
Datum
vq_enqueue_in(PG_FUNCTION_ARGS)
{
	text	   *job_id = JobIdArg(fcinfo, "vq_enqueue_in");
	JobSpec		spec;

	ResolveSpec(fcinfo, &spec);
	if (!PG_ARGISNULL(ARG_WHEN))
		spec.scheduled_at = VqDueAt(spec.queue, spec.enqueued_by,
									VqAddInterval(spec.called_at, PG_GETARG_INTERVAL_P(ARG_WHEN), "delay"),
									spec.called_at);
	return InsertCallersJob(fcinfo, &spec, job_id);
}

/* Check that an array argument is one-dimensional (or empty) and return its length. */
static int
ArrayLength(ArrayType *array, const char *what)
{
	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_ARGUMENT),
				 errmsg("%s must be a one-dimensional array", what)));
	return ArrayGetNItems(ARR_NDIM(array), ARR_DIMS(array));
}

/*
 * Map each position with a caller job_id to the execution_id of the role's
 * unfinished job holding that id. Returns false if some id has no holder any more (it
 * finished since the insert): the caller inserts again.
 */
static bool
FillHolders(ArrayType *job_ids, Datum *ids, int n, Oid role)
{
	HASHCTL		ctl;
	HTAB	   *holders;
	Datum	   *keys;
	bool	   *key_nulls;
	int			nkeys;
	Datum		args[2] = {PointerGetDatum(job_ids), ObjectIdGetDatum(role)};

	if (SPI_execute_plan(VqKeepCustomPlan(&holder_many_plan,
								  "SELECT job_id, execution_id FROM vq.job_active"
								  " WHERE job_id OPERATOR(pg_catalog.=) ANY ($1) AND enqueued_by OPERATOR(pg_catalog.=) $2",
								  2, (Oid[]) {TEXTARRAYOID, REGROLEOID}),
						 args, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "vq_job: job_id lookup failed");

	ctl.keysize = VQ_JOB_ID_MAX + 1;
	ctl.entrysize = VQ_JOB_ID_MAX + 1 + sizeof(pg_uuid_t);
	ctl.hcxt = CurrentMemoryContext;
	holders = hash_create("vq_job job_id holders", Max(SPI_processed, 16), &ctl,
						  HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		char	   *key = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		char	   *entry = hash_search(holders, key, HASH_ENTER, NULL);

		memcpy(entry + VQ_JOB_ID_MAX + 1,
			   DatumGetUUIDP(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull)),
			   sizeof(pg_uuid_t));
	}

	deconstruct_array(job_ids, TEXTOID, -1, false, TYPALIGN_INT, &keys, &key_nulls, &nkeys);
	for (int i = 0; i < n; i++)
	{
		char	   *entry;

		if (i >= nkeys || key_nulls[i])
			continue;			/* generated id: our own insert holds it */
		entry = hash_search(holders, TextDatumGetCString(keys[i]), HASH_FIND, NULL);
		if (entry == NULL)
			return false;
		memcpy(DatumGetUUIDP(ids[i]), entry + VQ_JOB_ID_MAX + 1, sizeof(pg_uuid_t));
	}
	return true;
}

/*
 * A batch with job_ids for a handler with an idempotency window: each job
 * through InsertOne, which checks its window (an id repeated in the batch
 * then maps to one job, as in the set-based insert). Returns the ids.
 */
static Datum *
InsertEachInWindow(const JobSpec *spec, ArrayType *payloads, ArrayType *job_ids, int n)
{
	Datum	   *ids = palloc(sizeof(Datum) * n);
	Datum	   *items;
	bool	   *item_nulls;
	Datum	   *keys;
	bool	   *key_nulls;
	int			nitems;
	int			nkeys;

	deconstruct_array(payloads, JSONBOID, -1, false, TYPALIGN_INT, &items, &item_nulls, &nitems);
	deconstruct_array(job_ids, TEXTOID, -1, false, TYPALIGN_INT, &keys, &key_nulls, &nkeys);
	for (int i = 0; i < n; i++)
		ids[i] = InsertOne(spec, items[i], item_nulls[i], key_nulls[i] ? NULL : DatumGetTextPP(keys[i]), NULL);
	return ids;
}

/* vq_enqueue_many's payloads argument: not null, one-dimensional; *n: how many. */
static ArrayType *
PayloadsArg(FunctionCallInfo fcinfo, int *n)
{
	ArrayType  *payloads;

	if (PG_ARGISNULL(ARG_PAYLOAD))
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_ARGUMENT),
				 errmsg("payloads must not be null"),
				 errhint("Pass an array with one element per job; an element may be null.")));
	payloads = PG_GETARG_ARRAYTYPE_P(ARG_PAYLOAD);
	*n = ArrayLength(payloads, "payloads");
	return payloads;
}

/* vq_enqueue_many's job_ids argument (NULL: none): as many as the payloads, each a valid job_id or null. */
static ArrayType *
JobIdsArg(FunctionCallInfo fcinfo, int n)
{
	ArrayType  *job_ids;
	Datum	   *keys;
	bool	   *key_nulls;
	int			nkeys;

	if (PG_ARGISNULL(ARG_JOB_ID))
		return NULL;
	job_ids = PG_GETARG_ARRAYTYPE_P(ARG_JOB_ID);
	if (ArrayLength(job_ids, "job_ids") != n)
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_JOB_ID),
				 errmsg("job_ids and payloads must have the same length, got %d and %d",
						ArrayLength(job_ids, "job_ids"), n)));
	deconstruct_array(job_ids, TEXTOID, -1, false, TYPALIGN_INT, &keys, &key_nulls, &nkeys);
	for (int i = 0; i < nkeys; i++)
		if (!key_nulls[i])
			CheckJobId(DatumGetTextPP(keys[i]));
	return job_ids;
}

/*
 * Insert a batch with one set-based statement, as the owner: ids[] are the
 * new jobs' execution_ids, replaced (with job_ids) by those of the role's
 * unfinished jobs that hold an id already.
 */
static void
InsertMany(const JobSpec *spec, ArrayType *payloads, ArrayType *job_ids, Datum *ids, int n)
{
	Datum		values[NPARAMS];
	char		nulls[NPARAMS];
	VqSavedUser saved;
	ErrorContextCallback errcb;

	memset(nulls, ' ', sizeof(nulls));
	BindCommon(spec, values, nulls);
	values[0] = PointerGetDatum(construct_array(ids, n, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR));
	values[1] = job_ids ? PointerGetDatum(job_ids) : (Datum) 0;
	nulls[1] = job_ids ? ' ' : 'n';
	values[2] = PointerGetDatum(payloads);

	PushPersistContext(&errcb, spec->handler->name);
	VqConnectAsOwner(spec->registry->owner, &saved);
	if (job_ids == NULL)
		RunWrite(VqKeepPlan(&insert_many_plan, "INSERT INTO vq.job_active " JOB_COLUMNS MANY_SELECT,
							NPARAMS, many_types),
				 values, nulls, SPI_OK_INSERT);
	else
	{
		for (int tries = 0;; tries++)
		{
			CHECK_FOR_INTERRUPTS();
			if (tries >= 100)
				elog(ERROR, "vq_job: could not settle the batch's job_ids after %d tries", tries);
			RunWrite(VqKeepPlan(&insert_many_idempotent_plan,
								"INSERT INTO vq.job_active " JOB_COLUMNS MANY_SELECT
								/* a fixed order: two batches sharing new ids cannot deadlock */
								" ORDER BY u.j COLLATE pg_catalog.\"C\"" ON_ACTIVE_CONFLICT,
								NPARAMS, many_types),
					 values, nulls, SPI_OK_INSERT);
			if (FillHolders(job_ids, ids, n, spec->enqueued_by))
				break;
		}
	}
	VqFinishAsOwner(&saved);
	PopPersistContext(&errcb);
	VqJobsEnqueuedAtCommit(spec->queue->name, ExternalHandlerName(spec), spec->priority, spec->scheduled_at,
						   !spec->queue->paused);
}

/*
 * vq_enqueue_many(handler, payloads jsonb[], run_at, queue, priority, max_attempts,
 * job_ids text[], metadata): one job per payload, inserted by one statement.
 * Returns the execution_ids in payload order.
 */
Datum
vq_enqueue_many(PG_FUNCTION_ARGS)
{
	JobSpec		spec;
	ArrayType  *payloads;
	ArrayType  *job_ids;
	int			n;
	Datum	   *ids;
	pg_uuid_t  *uuids;

	VqRequireWritable("vq_enqueue_many");
	payloads = PayloadsArg(fcinfo, &n);
	job_ids = JobIdsArg(fcinfo, n);
	if (!PG_ARGISNULL(ARG_WHEN))
		VqCheckFiniteTime(PG_GETARG_TIMESTAMPTZ(ARG_WHEN), "run_at");
	ResolveSpec(fcinfo, &spec);
	if (!PG_ARGISNULL(ARG_WHEN))
		spec.scheduled_at = VqDueAt(spec.queue, spec.enqueued_by, PG_GETARG_TIMESTAMPTZ(ARG_WHEN), spec.called_at);
	CheckPayloadSizes(payloads);

	ids = palloc(sizeof(Datum) * Max(n, 1));
	uuids = palloc(sizeof(pg_uuid_t) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		NewUuid(&uuids[i]);
		ids[i] = UUIDPGetDatum(&uuids[i]);
	}
	if (n == 0)
		PG_RETURN_ARRAYTYPE_P(construct_empty_array(UUIDOID));
	if (job_ids != NULL && spec.handler->unique_for != NULL)
		PG_RETURN_ARRAYTYPE_P(construct_array(InsertEachInWindow(&spec, payloads, job_ids, n), n, UUIDOID,
											  UUID_LEN, false, TYPALIGN_CHAR));
	InsertMany(&spec, payloads, job_ids, ids, n);
	PG_RETURN_ARRAYTYPE_P(construct_array(ids, n, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR));
}

/*
 * Enqueue one job whose settings are already resolved (the outbox relay: its
 * snapshot is never re-resolved), as enqueued_by, with metadata stored as
 * given, due at scheduled_at (the publish applied VqDueAt to a row's time).
 * Validates like vq_enqueue: an invalid job raises a VQ0xx / 42501 / 42883
 * error. Returns the execution_id.
 */
Datum
VqEnqueueResolved(const char *handler_name, const char *queue_name, int32 priority, int32 max_attempts,
				  TimestampTz scheduled_at, Datum payload, bool payload_null, Jsonb *metadata, Oid enqueued_by)
{
	JobSpec		spec = {0};

	if (!vq_valid_name(handler_name, strlen(handler_name)))
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_HANDLER_NAME),
				 errmsg("invalid handler name \"%s\"", handler_name)));
	if (max_attempts < 1 || max_attempts > VQ_MAX_ATTEMPTS_LIMIT)
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_MAX_ATTEMPTS),
				 errmsg("max_attempts must be between 1 and %d, got %d", VQ_MAX_ATTEMPTS_LIMIT, max_attempts)));
	VqCheckJsonObject(metadata, "metadata");
	spec.registry = VqRegistryGet();
	spec.handler = VqLookupHandler(spec.registry, handler_name);
	if (spec.handler == NULL)
		VqReportUnregisteredHandler(spec.registry, handler_name);
	spec.queue = VqLookupQueue(spec.registry, queue_name);
	if (spec.queue == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_VQ_UNKNOWN_QUEUE),
				 errmsg("queue \"%s\" does not exist", queue_name)));
	spec.priority = priority;
	spec.max_attempts = max_attempts;
	spec.enqueued_by = enqueued_by;
	VqCheckEnqueuePrivilege(spec.handler, enqueued_by);
	spec.metadata = metadata ? metadata : VqMergeBoundContext(NULL);
	spec.now = GetCurrentTransactionStartTimestamp();
	VqCheckFiniteTime(scheduled_at, "scheduled_at");	/* (a row written directly may hold anything) */
	spec.scheduled_at = scheduled_at;
	return InsertOne(&spec, payload, payload_null, NULL, NULL);
}

/*
 * Insert n jobs, each with its own settings already resolved and validated by
 * the caller (the outbox relay, set-based), each due at its time (an infinite
 * one is an error here: the caller then goes one by one, and the one row
 * fails). Generated ids; errors propagate.
 */
void
VqEnqueueManyResolved(VqRegistry *registry, int n, VqHandler **handler_of, Datum *queues,
					  Datum *priorities, Datum *max_attempts, Datum *scheduled, Datum *payloads,
					  bool *payload_nulls, Datum *metadatas, Datum *enqueued_by)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[12] = {TIMESTAMPTZOID, UUIDARRAYOID, TEXTARRAYOID, TEXTARRAYOID, TEXTARRAYOID,
		INT4ARRAYOID, INT4ARRAYOID, TIMESTAMPTZARRAYOID, JSONBARRAYOID, JSONBARRAYOID, REGROLEARRAYOID,
	REGPROCEDUREARRAYOID};
	Datum		values[12];
	Datum	   *ids = palloc(sizeof(Datum) * n);
	Datum	   *handlers = palloc(sizeof(Datum) * n);
	Datum	   *addresses = palloc(sizeof(Datum) * n);
	Datum	   *functions = palloc(sizeof(Datum) * n);
	bool	   *function_nulls = palloc(sizeof(bool) * n);
	pg_uuid_t  *uuids = palloc(sizeof(pg_uuid_t) * n);
	int			dims[1] = {n};
	int			lbs[1] = {1};
	VqSavedUser saved;

	for (int i = 0; i < n; i++)
	{
		VqCheckFiniteTime(DatumGetTimestampTz(scheduled[i]), "scheduled_at");
		NewUuid(&uuids[i]);
		ids[i] = UUIDPGetDatum(&uuids[i]);
		handlers[i] = handler_of[i]->name_datum;
		addresses[i] = handler_of[i]->address_datum;
		functions[i] = ObjectIdGetDatum(handler_of[i]->fn);
		function_nulls[i] = !handler_of[i]->is_function;
	}
	values[0] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
	values[1] = PointerGetDatum(construct_array(ids, n, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR));
	values[2] = PointerGetDatum(construct_array(handlers, n, TEXTOID, -1, false, TYPALIGN_INT));
	values[3] = PointerGetDatum(construct_array(addresses, n, TEXTOID, -1, false, TYPALIGN_INT));
	values[4] = PointerGetDatum(construct_array(queues, n, TEXTOID, -1, false, TYPALIGN_INT));
	values[5] = PointerGetDatum(construct_array(priorities, n, INT4OID, 4, true, TYPALIGN_INT));
	values[6] = PointerGetDatum(construct_array(max_attempts, n, INT4OID, 4, true, TYPALIGN_INT));
	values[7] = PointerGetDatum(construct_array(scheduled, n, TIMESTAMPTZOID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[8] = PointerGetDatum(construct_md_array(payloads, payload_nulls, 1, dims, lbs, JSONBOID, -1, false, TYPALIGN_INT));
	values[9] = PointerGetDatum(construct_array(metadatas, n, JSONBOID, -1, false, TYPALIGN_INT));
	values[10] = PointerGetDatum(construct_array(enqueued_by, n, REGROLEOID, 4, true, TYPALIGN_INT));
	values[11] = PointerGetDatum(construct_md_array(functions, function_nulls, 1, dims, lbs, REGPROCEDUREOID,
													 4, true, TYPALIGN_INT));

	VqConnectAsOwner(registry->owner, &saved);
	RunWrite(VqKeepPlan(&plan,
						"INSERT INTO vq.job_active " JOB_COLUMNS
						" SELECT u.e, 'ENQUEUED', u.pr, 0, u.ma, u.sa, $1, $1, u.eb, u.q,"
						"  'delayed-' OPERATOR(pg_catalog.||) u.e::pg_catalog.text, u.h, u.a, u.f, u.p, u.m"
						" FROM ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($3), pg_catalog.unnest($4),"
						"  pg_catalog.unnest($5), pg_catalog.unnest($6), pg_catalog.unnest($7), pg_catalog.unnest($8),"
						"  pg_catalog.unnest($9), pg_catalog.unnest($10), pg_catalog.unnest($11), pg_catalog.unnest($12))"
						" AS u(e, h, a, q, pr, ma, sa, p, m, eb, f)",
						12, types),
			 values, NULL, SPI_OK_INSERT);
	VqFinishAsOwner(&saved);
	for (int i = 0; i < n; i++)
		VqJobsEnqueuedAtCommit(TextDatumGetCString(queues[i]),
							   handler_of[i]->is_function ? NULL : handler_of[i]->name,
							   DatumGetInt32(priorities[i]), DatumGetTimestampTz(scheduled[i]), true);
}
