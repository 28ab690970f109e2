/*
 * listeners.c: transition listeners. Every state change of a job has a
 * transition (a vq.job_transition_data row, or for a job that completed
 * without a visible claim, the COMPLETED one its finished row implies); row
 * triggers on those two tables find the listeners subscribed to it, in the
 * same transaction, on every path: handler outcomes, rescue after a crash,
 * timeouts, orderly stops, cancellation, dead letters, redrive, consumer
 * replies. While no listener is registered the triggers' WHEN clause (a flag
 * of the cached registry) keeps them from firing at all.
 *
 * A listener is fn(vq.job_transition, vq.job), called as the owner of its
 * function through VqCallCallback (callbacks.c): its error rolls back its own
 * writes only, is logged, and the transition stands. In an executor's own
 * code it is called here, so its writes commit exactly when the transition
 * does; anywhere else (a client's session, user code) the call is queued for
 * an executor with the transition and the job row as they are now
 * (deferred.c), and made after the commit. A listener with a channel instead
 * sends NOTIFY channel, '{"execution_id", "attempt", "kind"}' (ids only:
 * anyone may LISTEN on any channel) from here, wherever the transition
 * happens: no code runs for it.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "commands/async.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "utils/builtins.h"

#include "util/spi_util.h"
#include "cache/registry.h"
#include "run/callbacks.h"
#include "run/deferred.h"
#include "run/roles.h"

PG_FUNCTION_INFO_V1(vq_transition_listeners_exist);
PG_FUNCTION_INFO_V1(vq_transition_recorded);
PG_FUNCTION_INFO_V1(vq_job_finished_recorded);

/* One transition, as the listeners receive it. */
typedef struct Transition
{
	Datum		id;				/* (Datum) 0: an implied transition, or the id is NULL */
	bool		id_null;
	pg_uuid_t  *execution_id;
	int32		attempt;
	const char *kind;
	const char *from_state;
	const char *to_state;
	Datum		error;			/* text, or (Datum) 0 */
	Datum		at;
	bool		implied;		/* only if no COMPLETED transition row exists for the job */
} Transition;

/* The WHEN clause of the triggers: is any listener registered? */
Datum
vq_transition_listeners_exist(PG_FUNCTION_ARGS)
{
	VqRegistry *registry = VqRegistryGetIfInstalled();

	PG_RETURN_BOOL(registry != NULL && registry->has_listeners);
}

/* Call one function listener (a row of the query in FireListeners). */
static void
CallListener(Transition *t, HeapTuple row, TupleDesc desc)
{
	bool		isnull;
	Datum		args[2];
	char	   *error;

	args[0] = SPI_getbinval(row, desc, 1, &isnull);
	args[1] = SPI_getbinval(row, desc, 2, &isnull);
	error = VqCallCallback(DatumGetObjectId(SPI_getbinval(row, desc, 4, &isnull)), 2, args);
	if (error)
		VqReportCallbackFailure(psprintf("transition listener \"%s\" (%s)", SPI_getvalue(row, desc, 3), t->kind),
								t->execution_id, t->attempt, error);
}

/*
 * The listeners subscribed to the transition, by name (in SPI_tuptable):
 * the transition as vq.job_transition, the job row, the listener's name,
 * function and channel, and the channel's message.
 */
static void
MatchListeners(Transition *t)
{
	static SPIPlanPtr plan = NULL;
	Datum		values[9];
	char		nulls[9] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};

	values[0] = t->id;
	nulls[0] = t->id_null ? 'n' : ' ';
	values[1] = UUIDPGetDatum(t->execution_id);
	values[2] = Int32GetDatum(t->attempt);
	values[3] = CStringGetTextDatum(t->kind);
	values[4] = CStringGetTextDatum(t->from_state);
	values[5] = CStringGetTextDatum(t->to_state);
	values[6] = t->error;
	nulls[6] = t->error == (Datum) 0 ? 'n' : ' ';
	values[7] = t->at;
	values[8] = BoolGetDatum(t->implied);
	if (SPI_execute_plan(VqKeepPlan(&plan,
							  "SELECT ROW($1, $2, $3, $4, $5::vq.job_state, $6::vq.job_state, $7, $8)::vq.job_transition,"
							  " j, l.name, l.fn, l.channel,"
							  " pg_catalog.json_build_object('execution_id', $2, 'attempt', $3, 'kind', $4)::pg_catalog.text"
							  " FROM vq.job j JOIN vq.transition_listener l"
							  "  ON (l.kinds IS NULL OR $4 OPERATOR(pg_catalog.=) ANY (l.kinds)"
							  "      OR ($6 OPERATOR(pg_catalog.=) 'DEAD_LETTER' AND 'DEAD_LETTER' OPERATOR(pg_catalog.=) ANY (l.kinds)))"
							  "  AND (l.queues IS NULL OR j.queue OPERATOR(pg_catalog.=) ANY (l.queues))"
							  "  AND (l.handlers IS NULL OR j.handler OPERATOR(pg_catalog.=) ANY (l.handlers))"
							  " WHERE j.execution_id OPERATOR(pg_catalog.=) $2"
							  " AND NOT ($9 AND EXISTS (SELECT FROM vq.job_transition_data c"
							  "  WHERE c.execution_id OPERATOR(pg_catalog.=) $2 AND c.kind OPERATOR(pg_catalog.=) 'COMPLETED'))"
							  " ORDER BY l.name",
							  9, (Oid[]) {INT8OID, UUIDOID, INT4OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID,
							  TIMESTAMPTZOID, BOOLOID}),
						 values, nulls, false, 0) != SPI_OK_SELECT)	/* (not read-only: see the whole statement's rows) */
		elog(ERROR, "vq_job: looking up transition listeners failed");
}

/*
 * Every listener subscribed to the transition (as the extension owner,
 * connected to SPI here): channels notified; functions called, or queued for
 * an executor outside an executor's own code.
 */
static void
FireListeners(Transition *t)
{
	VqSavedUser saved;
	SPITupleTable *rows;
	uint64		n;
	bool		inline_calls = VqCallbacksRunInline();
	List	   *deferred = NIL;
	bool		isnull;

	VqConnectAsOwner(VqRegistryGet()->owner, &saved);
	MatchListeners(t);
	/* the listeners run SPI themselves: keep our result */
	rows = SPI_tuptable;
	n = SPI_processed;
	for (uint64 i = 0; i < n; i++)
	{
		char	   *channel = SPI_getvalue(rows->vals[i], rows->tupdesc, 5);

		if (channel != NULL)
			Async_Notify(channel, SPI_getvalue(rows->vals[i], rows->tupdesc, 6));
		else if (inline_calls)
			CallListener(t, rows->vals[i], rows->tupdesc);
		else
			deferred = lappend(deferred, SPI_getvalue(rows->vals[i], rows->tupdesc, 3));
	}
	if (deferred != NIL)
		VqDeferListeners(t->execution_id, t->attempt, deferred,
						 SPI_getbinval(rows->vals[0], rows->tupdesc, 1, &isnull),
						 SPI_getbinval(rows->vals[0], rows->tupdesc, 2, &isnull));
	VqFinishAsOwner(&saved);
}

/* A column of the trigger's new row, by name. */
static Datum
NewColumn(TriggerData *trigdata, const char *name, bool *isnull)
{
	TupleDesc	desc = trigdata->tg_relation->rd_att;

	return SPI_getbinval(trigdata->tg_trigtuple, desc, SPI_fnumber(desc, name), isnull);
}

/* The same, as text (NULL for NULL). */
static char *
NewColumnText(TriggerData *trigdata, const char *name)
{
	return SPI_getvalue(trigdata->tg_trigtuple, trigdata->tg_relation->rd_att,
						SPI_fnumber(trigdata->tg_relation->rd_att, name));
}

/* The trigger data of this call, which must be a trigger's. */
static TriggerData *
CheckTrigger(FunctionCallInfo fcinfo)
{
	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("this function must be called as a trigger")));
	return (TriggerData *) fcinfo->context;
}

/* AFTER INSERT row trigger on vq.job_transition_data: a stored transition. */
Datum
vq_transition_recorded(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = CheckTrigger(fcinfo);
	Transition	t;
	bool		isnull;

	t.id = NewColumn(trigdata, "id", &t.id_null);
	t.execution_id = DatumGetUUIDP(NewColumn(trigdata, "execution_id", &isnull));
	t.attempt = DatumGetInt32(NewColumn(trigdata, "attempt_number", &isnull));
	t.kind = NewColumnText(trigdata, "kind");
	t.from_state = NewColumnText(trigdata, "from_state");
	t.to_state = NewColumnText(trigdata, "to_state");
	t.error = NewColumn(trigdata, "error", &isnull);
	if (isnull)
		t.error = (Datum) 0;
	t.at = NewColumn(trigdata, "at", &isnull);
	t.implied = false;
	FireListeners(&t);
	return PointerGetDatum(NULL);
}

/*
 * AFTER INSERT row trigger on vq.job_finished for COMPLETED rows: the
 * COMPLETED transition the row implies, unless one was stored (a job claimed
 * visibly, whose transition row fires the other trigger).
 */
Datum
vq_job_finished_recorded(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = CheckTrigger(fcinfo);
	Transition	t;
	bool		isnull;

	t.id = (Datum) 0;
	t.id_null = true;
	t.execution_id = DatumGetUUIDP(NewColumn(trigdata, "execution_id", &isnull));
	t.attempt = DatumGetInt32(NewColumn(trigdata, "attempt_number", &isnull));
	t.kind = "COMPLETED";
	(void) NewColumn(trigdata, "consumer_claimed_at", &isnull);
	t.from_state = isnull ? "ENQUEUED" : "RUNNING";	/* (RUNNING: a worker took it) */
	t.to_state = "COMPLETED";
	t.error = (Datum) 0;
	t.at = NewColumn(trigdata, "finished_at", &isnull);
	t.implied = true;
	FireListeners(&t);
	return PointerGetDatum(NULL);
}
