/*
 * context.c: durable context. A session binds namespaces of context
 * (vq_context_set); every job it enqueues carries them in its metadata, merged
 * over what the caller passed. While a handler runs, the job's own metadata is
 * the bound context, so jobs it enqueues inherit it.
 *
 * The bound context is session state, like a plain SET: kept in
 * TopMemoryContext and not undone by a rollback.
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/json.h"
#include "utils/memutils.h"

#include "context.h"
#include "vq_job.h"

PG_FUNCTION_INFO_V1(vq_context_set);
PG_FUNCTION_INFO_V1(vq_context_clear);
PG_FUNCTION_INFO_V1(vq_context);

/* The bound context: a jsonb object in TopMemoryContext, or NULL when nothing is bound. */
static Jsonb *bound_context = NULL;
static Jsonb *empty_object = NULL;

/* An empty jsonb object, built once. */
static Jsonb *
EmptyObject(void)
{
	if (empty_object == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		empty_object = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum("{}")));
		MemoryContextSwitchTo(old);
	}
	return empty_object;
}

/* Replace the bound context with a copy of value in TopMemoryContext (NULL or {} unbinds). */
static void
SetBound(Jsonb *value)
{
	Jsonb	   *old = bound_context;

	if (value == NULL || JB_ROOT_COUNT(value) == 0)
		bound_context = NULL;
	else
	{
		bound_context = MemoryContextAlloc(TopMemoryContext, VARSIZE(value));
		memcpy(bound_context, value, VARSIZE(value));
	}
	if (old != NULL)
		pfree(old);
}

/* Bind a job's context for the duration of its execution; returns what was bound before. */
Jsonb *
VqBindContext(Jsonb *context)
{
	Jsonb	   *previous = NULL;

	if (bound_context != NULL)
	{
		previous = palloc(VARSIZE(bound_context));
		memcpy(previous, bound_context, VARSIZE(bound_context));
	}
	SetBound(context);
	return previous;
}

/* Merge the bound context over the caller's metadata; collisions are errors. */
Jsonb *
VqMergeBoundContext(Jsonb *metadata)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;

	if (metadata != NULL && !JB_ROOT_IS_OBJECT(metadata))
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_METADATA),
				 errmsg("metadata must be a JSON object")));
	if (bound_context == NULL)
		return metadata ? metadata : EmptyObject();
	if (metadata == NULL || JB_ROOT_COUNT(metadata) == 0)
		return bound_context;

	/* Every top-level key of the bound context must be absent from the caller's metadata. */
	it = JsonbIteratorInit(&bound_context->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
		{
			Datum		key = PointerGetDatum(cstring_to_text_with_len(v.val.string.val,
																	   v.val.string.len));

			if (DatumGetBool(DirectFunctionCall2(jsonb_exists, JsonbPGetDatum(metadata), key)))
				ereport(ERROR,
						(errcode(ERRCODE_VQ_CONTEXT_COLLISION),
						 errmsg("metadata namespace \"%.*s\" collides with the durable context bound to this session",
								v.val.string.len, v.val.string.val),
						 errhint("Leave that namespace out of metadata, or unbind it with vq_context_clear().")));
		}
	}
	return DatumGetJsonbP(DirectFunctionCall2(jsonb_concat, JsonbPGetDatum(metadata),
											  JsonbPGetDatum(bound_context)));
}

/* vq_context_set(namespace, value): bind value under namespace (NULL value unbinds it). */
Datum
vq_context_set(PG_FUNCTION_ARGS)
{
	text	   *ns;
	Jsonb	   *value;
	StringInfoData buf;
	Jsonb	   *entry;
	Datum		current;

	if (PG_ARGISNULL(0) || VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(0)) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_ARGUMENT),
				 errmsg("context namespace must be a non-empty string")));
	ns = PG_GETARG_TEXT_PP(0);
	current = JsonbPGetDatum(bound_context ? bound_context : EmptyObject());

	if (PG_ARGISNULL(1))
	{
		SetBound(DatumGetJsonbP(DirectFunctionCall2(jsonb_delete, current, PointerGetDatum(ns))));
		PG_RETURN_VOID();
	}

	/* {"<namespace>": value} */
	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	escape_json(&buf, text_to_cstring(ns));
	appendStringInfoChar(&buf, ':');
	value = PG_GETARG_JSONB_P(1);
	(void) JsonbToCString(&buf, &value->root, VARSIZE(value));
	appendStringInfoChar(&buf, '}');
	entry = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data)));

	SetBound(DatumGetJsonbP(DirectFunctionCall2(jsonb_concat, current, JsonbPGetDatum(entry))));
	PG_RETURN_VOID();
}

/* vq_context_clear(namespace DEFAULT NULL): unbind one namespace, or everything. */
Datum
vq_context_clear(PG_FUNCTION_ARGS)
{
	if (PG_ARGISNULL(0))
		SetBound(NULL);
	else if (bound_context != NULL)
		SetBound(DatumGetJsonbP(DirectFunctionCall2(jsonb_delete, JsonbPGetDatum(bound_context),
													PG_GETARG_DATUM(0))));
	PG_RETURN_VOID();
}

/* vq_context(): the context bound to this session, {} when none. */
Datum
vq_context(PG_FUNCTION_ARGS)
{
	Jsonb	   *src = bound_context ? bound_context : EmptyObject();
	Jsonb	   *copy = palloc(VARSIZE(src));

	memcpy(copy, src, VARSIZE(src));
	PG_RETURN_JSONB_P(copy);
}
