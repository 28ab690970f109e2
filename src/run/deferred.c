/*
 * deferred.c: administrators' callbacks queued for an executor.
 *
 * A transition or a consumer's reply recorded where no administrator code
 * may run (callbacks.c: a client's session, user code inside an executor)
 * calls no callback there. It queues one row in vq.callback_event per
 * transition (or interceptor call): the names of the callbacks subscribed to
 * it, in their order, and what they receive, as it is now (the transition
 * and the job row after it; the job's vq.job_context, outcome and error).
 * The row is written as the extension owner in the recording transaction, so
 * it exists exactly when that transaction commits; at the commit an executor
 * is woken (wakeup.c: callback_wake_count). The executor calls the callbacks
 * in its own code, where nothing of a tenant's session can reach them, and
 * deletes the row in the same transaction: a queued event's callbacks run
 * once, their writes committing with the delete; a crash or an error before
 * that commit rolls both back, and they run again.
 *
 * Which callbacks: those subscribed when the event was queued that are still
 * registered when it runs, with the function registered then. Channel
 * listeners are never queued: their NOTIFY runs no code, and is sent at the
 * commit of the transition wherever it happens (listeners.c).
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/regproc.h"

#include "util/spi_util.h"
#include "cache/registry.h"
#include "state/wakeup.h"
#include "run/callbacks.h"
#include "run/deferred.h"
#include "run/roles.h"

/* The OID of a type of schema vq (looked up once per backend). */
static Oid
VqType(Oid *cache, const char *name)
{
	if (!OidIsValid(*cache))
		*cache = DatumGetObjectId(DirectFunctionCall1(regtypein, CStringGetDatum(name)));
	return *cache;
}

/* A text[] of names (char *). */
static Datum
NamesArray(List *names)
{
	Datum	   *items = palloc(sizeof(Datum) * list_length(names));
	int			n = 0;
	ListCell   *lc;

	foreach(lc, names)
		items[n++] = CStringGetTextDatum(lfirst(lc));
	return PointerGetDatum(construct_array(items, n, TEXTOID, -1, false, TYPALIGN_INT));
}

/*
 * Insert one event (values as the INSERT's parameters; nulls as SPI takes
 * them), as the extension owner; wake an executor at commit.
 */
static void
QueueEvent(Datum *values, const char *nulls)
{
	static SPIPlanPtr plan = NULL;
	static Oid	transition_type = InvalidOid,
				job_type = InvalidOid,
				context_type = InvalidOid;
	Oid			types[9] = {UUIDOID, INT4OID, TEXTOID, TEXTARRAYOID,
		VqType(&transition_type, "vq.job_transition"), VqType(&job_type, "vq.job"),
	VqType(&context_type, "vq.job_context"), TEXTOID, TEXTOID};
	VqSavedUser saved;

	VqConnectAsOwner(VqRegistryGet()->owner, &saved);
	if (SPI_execute_plan(VqKeepPlan(&plan,
							  "INSERT INTO vq.callback_event (execution_id, attempt_number, kind, callbacks,"
							  " transition, job, context, outcome, error) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
							  9, types),
						 values, nulls, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "vq_job: queueing callbacks for an executor failed");
	VqFinishAsOwner(&saved);
	VqCallbacksQueuedAtCommit();
}

/* Queue the function listeners of a transition (see deferred.h). */
void
VqDeferListeners(pg_uuid_t *execution_id, int32 attempt, List *names, Datum transition, Datum job)
{
	Datum		values[9] = {UUIDPGetDatum(execution_id), Int32GetDatum(attempt),
		CStringGetTextDatum("listener"), NamesArray(names), transition, job};

	QueueEvent(values, "      nnn");
}

/* Queue every interceptor's on_dispatch or on_complete of a job (see deferred.h). */
void
VqDeferInterceptors(VqJob *job, Datum ctx, VqOutcome *outcome)
{
	VqRegistry *registry = VqRegistryGet();
	List	   *names = NIL;
	Datum		values[9] = {0};
	char		nulls[10] = "    nn   ";
	ListCell   *lc;

	foreach(lc, registry->interceptors)
	{
		VqInterceptor *i = lfirst(lc);

		if (OidIsValid(outcome ? i->on_complete : i->on_dispatch))
			names = lappend(names, i->name);
	}
	if (names == NIL)
		return;
	values[0] = UUIDPGetDatum(&job->execution_id);
	values[1] = Int32GetDatum(job->attempt_number);
	values[2] = CStringGetTextDatum(outcome ? "on_complete" : "on_dispatch");
	values[3] = NamesArray(names);
	values[6] = ctx;
	if (outcome)
		values[7] = CStringGetTextDatum(VqOutcomeName(outcome->kind));
	else
		nulls[7] = 'n';
	if (outcome && outcome->error)
		values[8] = CStringGetTextDatum(outcome->error);
	else
		nulls[8] = 'n';
	QueueEvent(values, nulls);
}

/* The columns of a claimed event (the claim statement's order). */
enum
{
	EV_ID = 1, EV_EXECUTION_ID, EV_ATTEMPT, EV_KIND, EV_CALLBACKS, EV_TRANSITION, EV_JOB,
	EV_CONTEXT, EV_OUTCOME, EV_ERROR, EV_TRANSITION_KIND
};

/* A claimed event's column (isnull: (Datum) 0). */
static Datum
Column(HeapTuple row, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(row, desc, col, &isnull);

	return isnull ? (Datum) 0 : d;
}

/* Call the listeners an event names that are still registered, by name. */
static void
RunListeners(HeapTuple row, TupleDesc desc)
{
	static SPIPlanPtr plan = NULL;
	Datum		names = Column(row, desc, EV_CALLBACKS);
	Datum		args[2] = {Column(row, desc, EV_TRANSITION), Column(row, desc, EV_JOB)};
	char	   *kind = SPI_getvalue(row, desc, EV_TRANSITION_KIND);
	pg_uuid_t  *execution_id = DatumGetUUIDP(Column(row, desc, EV_EXECUTION_ID));
	int32		attempt = DatumGetInt32(Column(row, desc, EV_ATTEMPT));
	SPITupleTable *listeners;
	uint64		n;

	if (SPI_execute_plan(VqKeepPlan(&plan,
							  "SELECT l.name, l.fn FROM vq.transition_listener l"
							  " WHERE l.name OPERATOR(pg_catalog.=) ANY ($1) AND l.fn IS NOT NULL ORDER BY l.name",
							  1, (Oid[]) {TEXTARRAYOID}),
						 &names, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "vq_job: looking up transition listeners failed");
	/* the listeners run SPI themselves: keep our result */
	listeners = SPI_tuptable;
	n = SPI_processed;
	for (uint64 i = 0; i < n; i++)
	{
		bool		isnull;
		Oid			fn = DatumGetObjectId(SPI_getbinval(listeners->vals[i], listeners->tupdesc, 2, &isnull));
		char	   *error;

		CHECK_FOR_INTERRUPTS();
		error = VqCallCallback(fn, 2, args);

		if (error)
			VqReportCallbackFailure(psprintf("transition listener \"%s\" (%s)",
											 SPI_getvalue(listeners->vals[i], listeners->tupdesc, 1), kind),
									execution_id, attempt, error);
	}
}

/* Call the interceptors an event names that are still registered, in (position, name) order. */
static void
RunInterceptors(VqRegistry *registry, HeapTuple row, TupleDesc desc)
{
	bool		complete = strcmp(SPI_getvalue(row, desc, EV_KIND), "on_complete") == 0;
	ArrayType  *names = DatumGetArrayTypeP(Column(row, desc, EV_CALLBACKS));
	Datum	   *items;
	int			n;
	ListCell   *lc;

	deconstruct_array(names, TEXTOID, -1, false, TYPALIGN_INT, &items, NULL, &n);
	foreach(lc, registry->interceptors)
	{
		VqInterceptor *i = lfirst(lc);

		for (int k = 0; k < n; k++)
			if (strcmp(TextDatumGetCString(items[k]), i->name) == 0)
				VqCallInterceptor(i, complete, DatumGetUUIDP(Column(row, desc, EV_EXECUTION_ID)),
								  DatumGetInt32(Column(row, desc, EV_ATTEMPT)), Column(row, desc, EV_CONTEXT),
								  Column(row, desc, EV_OUTCOME), Column(row, desc, EV_ERROR));
	}
}

/* Run queued events' callbacks and delete the events (see deferred.h). */
int
VqRunDeferredCallbacks(void)
{
	static SPIPlanPtr claim_plan = NULL;
	static SPIPlanPtr delete_plan = NULL;
	VqRegistry *registry = VqRegistryPin();	/* (a callback may enqueue, which rebuilds it) */
	Datum		limit = Int32GetDatum(VQ_DEFERRED_PER_TRANSACTION);
	Datum	   *ids;
	SPITupleTable *events;
	int			n;
	VqSavedUser saved;

	VqBecomeOwner(registry->owner, &saved);
	/* oldest first; an event another executor runs now is left to it */
	if (SPI_execute_plan(VqKeepPlan(&claim_plan,
							  "SELECT id, execution_id, attempt_number, kind, callbacks, transition, job, context,"
							  " outcome, error, (transition).kind FROM vq.callback_event"
							  " ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED",
							  1, (Oid[]) {INT4OID}),
						 &limit, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "vq_job: claiming queued callbacks failed");
	events = SPI_tuptable;
	n = (int) SPI_processed;
	ids = palloc(sizeof(Datum) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		HeapTuple	row = events->vals[i];

		CHECK_FOR_INTERRUPTS();
		ids[i] = Column(row, events->tupdesc, EV_ID);
		if (strcmp(SPI_getvalue(row, events->tupdesc, EV_KIND), "listener") == 0)
			RunListeners(row, events->tupdesc);
		else
			RunInterceptors(registry, row, events->tupdesc);
	}
	if (n > 0)
	{
		Datum		array = PointerGetDatum(construct_array(ids, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));

		if (SPI_execute_plan(VqKeepPlan(&delete_plan,
								  "DELETE FROM vq.callback_event WHERE id OPERATOR(pg_catalog.=) ANY ($1)",
								  1, (Oid[]) {INT8ARRAYOID}),
							 &array, NULL, false, 0) != SPI_OK_DELETE)
			elog(ERROR, "vq_job: deleting run callbacks failed");
	}
	VqRestoreUser(&saved);
	VqRegistryRelease(registry);
	return n;
}
