/*
 * resolve.c: target resolution, for relays and integrations that keep a
 * stable target id (the handler name) and need its current dispatch address
 * and effective settings; and the resolution of the function names given to
 * vq_register_handlers, as the caller names them.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "nodes/makefuncs.h"
#include "parser/parse_func.h"
#include "utils/builtins.h"
#include "utils/syscache.h"

#include "main/checks.h"
#include "main/errcodes.h"
#include "util/spi_util.h"
#include "cache/registry.h"
#include "run/roles.h"

PG_FUNCTION_INFO_V1(vq_resolve_target);
PG_FUNCTION_INFO_V1(vq_supported_target_ids);
PG_FUNCTION_INFO_V1(vq_register_handlers);

/*
 * vq_resolve_target(target_id) returns (target_id, handler_name, handler_address,
 * queue, priority, max_attempts) with effective values; error when not registered.
 */
Datum
vq_resolve_target(PG_FUNCTION_ARGS)
{
	char	   *target = text_to_cstring(PG_GETARG_TEXT_PP(0));
	VqRegistry *registry;
	VqHandler  *handler;
	TupleDesc	desc;
	Datum		values[6];
	bool		nulls[6] = {false, false, false, false, false, false};

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "vq_resolve_target must return a composite type");
	if (!vq_valid_name(target, strlen(target)))
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_HANDLER_NAME),
				 errmsg("invalid target id \"%s\"", target),
				 errdetail("Target ids are handler names and must match ^[a-zA-Z0-9._-]{1,128}$.")));

	registry = VqRegistryGet();
	handler = VqLookupHandler(registry, target);
	if (handler == NULL)
		VqReportUnregisteredHandler(registry, target);

	values[0] = CStringGetTextDatum(target);
	values[1] = CStringGetTextDatum(handler->name);
	values[2] = CStringGetTextDatum(handler->address);
	values[3] = CStringGetTextDatum(handler->queue_name);
	values[4] = Int32GetDatum(handler->priority);
	values[5] = Int32GetDatum(handler->max_attempts);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls)));
}

/*
 * vq_supported_target_ids(): every target this database's workers can
 * dispatch: each registered handler, except a function handler whose function
 * has been dropped.
 */
Datum
vq_supported_target_ids(PG_FUNCTION_ARGS)
{
	FuncCallContext *funcctx;
	List	   *ids;

	if (SRF_IS_FIRSTCALL())
	{
		VqRegistry *registry = VqRegistryGet();
		MemoryContext old;

		funcctx = SRF_FIRSTCALL_INIT();
		old = MemoryContextSwitchTo(funcctx->multi_call_memory_ctx);
		ids = NIL;
		for (int i = 0; i < registry->nhandlers; i++)
		{
			VqHandler  *h = registry->handlers[i];

			if (h->is_function && !SearchSysCacheExists1(PROCOID, ObjectIdGetDatum(h->fn)))
				continue;
			ids = lappend(ids, cstring_to_text(h->name));
		}
		funcctx->user_fctx = ids;
		funcctx->max_calls = list_length(ids);
		MemoryContextSwitchTo(old);
	}
	funcctx = SRF_PERCALL_SETUP();
	ids = (List *) funcctx->user_fctx;
	if (funcctx->call_cntr < funcctx->max_calls)
	{
		/* SRF_RETURN_NEXT advances call_cntr before evaluating its result argument */
		Datum		id = PointerGetDatum(list_nth(ids, (int) funcctx->call_cntr));

		SRF_RETURN_NEXT(funcctx, id);
	}
	SRF_RETURN_DONE(funcctx);
}

/*
 * vq_register_handlers(handlers jsonb): register a set of handlers, or none.
 * The "function" of each element is resolved first, as the caller and with
 * the caller's search_path, the way regprocedure input resolves
 * vq_register_handler's fn in the caller's session (vq.handler_functions,
 * called directly: PUBLIC may not execute it); then vq.register_handlers
 * validates and registers the set as the extension owner, with its own
 * pinned search_path. EXECUTE on this function is what an administrator
 * grants, as for the SECURITY DEFINER configuration functions.
 */
Datum
vq_register_handlers(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[2] = {JSONBOID, JSONBOID};
	Oid			resolver_args[2] = {JSONBOID, TEXTOID};
	Datum		args[2] = {(Datum) 0, (Datum) 0};
	char		nulls[2] = {'n', 'n'};
	VqSavedUser saved;
	bool		isnull;
	int32		n;

	if (!PG_ARGISNULL(0))
	{
		Oid			resolver = LookupFuncName(list_make2(makeString("vq"), makeString("handler_functions")),
											  2, resolver_args, false);

		args[0] = PG_GETARG_DATUM(0);
		args[1] = OidFunctionCall2(resolver, args[0], CStringGetTextDatum(namespace_search_path));
		nulls[0] = nulls[1] = ' ';
	}
	VqConnectAsOwner(VqRegistryGet()->owner, &saved);
	if (SPI_execute_plan(VqKeepPlan(&plan, "SELECT vq.register_handlers($1, $2)", 2, types),
						 args, nulls, false, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "vq_job: vq.register_handlers failed");
	n = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	VqFinishAsOwner(&saved);
	PG_RETURN_INT32(n);
}
