/*
 * resolve.c: target resolution, for relays and integrations that keep a
 * stable target id (the handler name) and need its current dispatch address
 * and effective settings.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/syscache.h"

#include "registry.h"

PG_FUNCTION_INFO_V1(vq_resolve_target);
PG_FUNCTION_INFO_V1(vq_supported_target_ids);

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
