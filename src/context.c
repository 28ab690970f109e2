/*
 * context.c: durable context. A session binds namespaces of context
 * (vq_context_set); every job it enqueues carries them in its metadata, merged
 * over what the caller passed. While a handler runs, the job's own metadata is
 * the bound context, so jobs it enqueues inherit it.
 *
 * The bound context lives in the setting vq.context (JSON object text), so it
 * behaves like any other setting: a rollback undoes vq_context_set, RESET ALL
 * and DISCARD ALL clear it, and the executor binds a job's context at a GUC
 * nest level that ends with the job.
 */
#include "postgres.h"

#include "common/jsonapi.h"
#include "mb/pg_wchar.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/memutils.h"

#include "context.h"
#include "vq_job.h"

PG_FUNCTION_INFO_V1(vq_context_set);
PG_FUNCTION_INFO_V1(vq_context_clear);
PG_FUNCTION_INFO_V1(vq_context);

/* The setting: '' when nothing is bound. */
static char *context_setting = NULL;

/* The parsed form of the setting, kept while the setting's text stays the same. */
static char *parsed_text = NULL;
static Jsonb *parsed_context = NULL;
static Jsonb *empty_object = NULL;

/* vq.context must be empty or a JSON object (checked without throwing). */
static bool
CheckContextSetting(char **newval, void **extra, GucSource source)
{
	const char *p = *newval;
	JsonLexContext *lex;

	if (p == NULL || *p == '\0')
		return true;
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	lex = makeJsonLexContextCstringLen(*newval, strlen(*newval), GetDatabaseEncoding(), false);
	if (*p != '{' || pg_parse_json(lex, &nullSemAction) != JSON_SUCCESS)
	{
		GUC_check_errdetail("vq.context must be a JSON object.");
		return false;
	}
	return true;
}

/* Define vq.context (from _PG_init, before the prefix is reserved). */
void
VqContextInit(void)
{
	DefineCustomStringVariable("vq.context",
							   "Durable context bound to this session, merged into the metadata of every job it enqueues.",
							   "Set it with vq_context_set() and vq_context_clear().",
							   &context_setting, "",
							   PGC_USERSET, GUC_NOT_IN_SAMPLE | GUC_DISALLOW_IN_FILE,
							   CheckContextSetting, NULL, NULL);
}

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

/* The bound context, or NULL when nothing is bound. Points into a cache: do not modify. */
static Jsonb *
BoundContext(void)
{
	if (context_setting == NULL || context_setting[0] == '\0')
		return NULL;
	if (parsed_text == NULL || strcmp(parsed_text, context_setting) != 0)
	{
		Jsonb	   *parsed = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(context_setting)));
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
		Jsonb	   *copy = palloc(VARSIZE(parsed));

		memcpy(copy, parsed, VARSIZE(parsed));
		MemoryContextSwitchTo(old);
		if (parsed_context)
			pfree(parsed_context);
		if (parsed_text)
			pfree(parsed_text);
		parsed_context = copy;
		parsed_text = MemoryContextStrdup(TopMemoryContext, context_setting);
	}
	return JB_ROOT_COUNT(parsed_context) > 0 ? parsed_context : NULL;
}

/* Store a context in the setting (NULL or {} unbinds); action SET, or SAVE for a nest level. */
static void
StoreContext(Jsonb *value, GucAction action)
{
	char	   *text = "";

	if (value != NULL && JB_ROOT_COUNT(value) > 0)
		text = JsonbToCString(NULL, &value->root, VARSIZE(value));
	(void) set_config_option("vq.context", text, PGC_USERSET, PGC_S_SESSION,
							 action, true, 0, false);
}

/* Bind a job's context for the current GUC nest level (the executor ends it with the job). */
void
VqBindContext(Jsonb *context)
{
	StoreContext(context, GUC_ACTION_SAVE);
}

/* Merge the bound context over the caller's metadata; collisions are errors. */
Jsonb *
VqMergeBoundContext(Jsonb *metadata)
{
	Jsonb	   *bound;
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;

	if (metadata != NULL && !JB_ROOT_IS_OBJECT(metadata))
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_METADATA),
				 errmsg("metadata must be a JSON object")));
	bound = BoundContext();
	if (bound == NULL)
		return metadata ? metadata : EmptyObject();
	if (metadata == NULL || JB_ROOT_COUNT(metadata) == 0)
		return bound;

	/* Every top-level key of the bound context must be absent from the caller's metadata. */
	it = JsonbIteratorInit(&bound->root);
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
											  JsonbPGetDatum(bound)));
}

/* Reject a NULL or empty namespace. */
static text *
NamespaceArg(FunctionCallInfo fcinfo)
{
	if (PG_ARGISNULL(0) || VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(0)) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_ARGUMENT),
				 errmsg("context namespace must be a non-empty string")));
	return PG_GETARG_TEXT_PP(0);
}

/* vq_context_set(namespace, value): bind value under namespace (NULL value unbinds it). */
Datum
vq_context_set(PG_FUNCTION_ARGS)
{
	text	   *ns = NamespaceArg(fcinfo);
	Datum		current = JsonbPGetDatum(BoundContext() ? BoundContext() : EmptyObject());
	Jsonb	   *value;
	StringInfoData buf;
	Jsonb	   *entry;

	if (PG_ARGISNULL(1))
	{
		StoreContext(DatumGetJsonbP(DirectFunctionCall2(jsonb_delete, current, PointerGetDatum(ns))),
					 GUC_ACTION_SET);
		PG_RETURN_VOID();
	}

	/* {"<namespace>": value} */
	value = PG_GETARG_JSONB_P(1);
	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	escape_json(&buf, text_to_cstring(ns));
	appendStringInfoChar(&buf, ':');
	(void) JsonbToCString(&buf, &value->root, VARSIZE(value));
	appendStringInfoChar(&buf, '}');
	entry = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data)));

	StoreContext(DatumGetJsonbP(DirectFunctionCall2(jsonb_concat, current, JsonbPGetDatum(entry))),
				 GUC_ACTION_SET);
	PG_RETURN_VOID();
}

/* vq_context_clear(namespace DEFAULT NULL): unbind one namespace, or everything. */
Datum
vq_context_clear(PG_FUNCTION_ARGS)
{
	Jsonb	   *bound;

	if (PG_ARGISNULL(0))
	{
		StoreContext(NULL, GUC_ACTION_SET);
		PG_RETURN_VOID();
	}
	(void) NamespaceArg(fcinfo);
	bound = BoundContext();
	if (bound != NULL)
		StoreContext(DatumGetJsonbP(DirectFunctionCall2(jsonb_delete, JsonbPGetDatum(bound),
														PG_GETARG_DATUM(0))),
					 GUC_ACTION_SET);
	PG_RETURN_VOID();
}

/* vq_context(): the context bound to this session, {} when none. */
Datum
vq_context(PG_FUNCTION_ARGS)
{
	Jsonb	   *src = BoundContext() ? BoundContext() : EmptyObject();
	Jsonb	   *copy = palloc(VARSIZE(src));

	memcpy(copy, src, VARSIZE(src));
	PG_RETURN_JSONB_P(copy);
}
