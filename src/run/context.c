/*
 * context.c: durable context. A session binds namespaces of context
 * (vq_context_set); every job it enqueues carries them in its metadata, merged
 * over what the caller passed. While a handler runs, the job's own metadata is
 * the bound context, so jobs it enqueues inherit it.
 *
 * Bindings live in two settings, so that they behave like any other setting
 * (a rollback undoes them, RESET ALL and DISCARD ALL clear them):
 *  - vq.context holds the session's bindings (vq_context_set(..., is_local =>
 *    false), the default);
 *  - vq.context_local, set only with SET LOCAL semantics (is_local => true),
 *    holds the whole context for the rest of the transaction once a
 *    transaction-local binding was made in it, and '' otherwise. It ends with
 *    the transaction, and a rollback to a savepoint undoes what came after it,
 *    as for set_config(name, value, true). A session binding made meanwhile
 *    goes into both, so that it stays once the transaction ends while the
 *    transaction's own bindings do not.
 * What is bound (vq_context(), what an enqueue merges) is vq.context_local
 * when it is set, else vq.context. The executor binds a job's context in
 * vq.context at a GUC nest level that ends with the job; whatever the handler
 * set in either setting ends there too (the nest level is rolled back).
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

#include "main/checks.h"
#include "main/errcodes.h"
#include "run/context.h"

PG_FUNCTION_INFO_V1(vq_context_set);
PG_FUNCTION_INFO_V1(vq_context_clear);
PG_FUNCTION_INFO_V1(vq_context);

/* vq.context, the session's bindings: '' when nothing is bound. */
static char *context_setting = NULL;

/* vq.context_local, the context for the rest of this transaction: '' when not set. */
static char *local_setting = NULL;

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

/* Define vq.context and vq.context_local (from _PG_init, before the prefix is reserved). */
void
VqContextInit(void)
{
	DefineCustomStringVariable("vq.context",
							   "Durable context bound to this session, merged into the metadata of every job it enqueues.",
							   "Set it with vq_context_set() and vq_context_clear().",
							   &context_setting, "",
							   PGC_USERSET, GUC_NOT_IN_SAMPLE | GUC_DISALLOW_IN_FILE,
							   CheckContextSetting, NULL, NULL);
	DefineCustomStringVariable("vq.context_local",
							   "Durable context of this transaction, once a binding was made with is_local => true.",
							   "Set by vq_context_set(..., is_local => true) with SET LOCAL semantics; empty: vq.context applies.",
							   &local_setting, "",
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

/* Whether this transaction has its own context (vq.context_local is set). */
static bool
HasLocalContext(void)
{
	return local_setting != NULL && local_setting[0] != '\0';
}

/* The text of what is bound now: the transaction's context if it has one, else the session's. */
static const char *
EffectiveText(void)
{
	if (HasLocalContext())
		return local_setting;
	return context_setting != NULL ? context_setting : "";
}

/* A setting's text as a jsonb object (the empty object for ''). */
static Jsonb *
ParseContext(const char *text)
{
	if (text == NULL || text[0] == '\0')
		return EmptyObject();
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(text)));
}

/*
 * The bound context, or NULL when nothing is bound. Points into a cache: do
 * not modify. The cache is kept while the text stays the same, so an enqueue
 * pays one string comparison for it.
 */
static Jsonb *
BoundContext(void)
{
	const char *text = EffectiveText();

	if (text[0] == '\0')
		return NULL;
	if (parsed_text == NULL || strcmp(parsed_text, text) != 0)
	{
		Jsonb	   *parsed = ParseContext(text);
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
		Jsonb	   *copy = palloc(VARSIZE(parsed));

		memcpy(copy, parsed, VARSIZE(parsed));
		MemoryContextSwitchTo(old);
		if (parsed_context)
			pfree(parsed_context);
		if (parsed_text)
			pfree(parsed_text);
		parsed_context = copy;
		parsed_text = MemoryContextStrdup(TopMemoryContext, text);
	}
	return JB_ROOT_COUNT(parsed_context) > 0 ? parsed_context : NULL;
}

/*
 * Store a context in vq.context (NULL or {} unbinds); action SET, or SAVE for
 * a nest level.
 */
static void
StoreContext(Jsonb *value, GucAction action)
{
	char	   *text = "";

	if (value != NULL && JB_ROOT_COUNT(value) > 0)
		text = JsonbToCString(NULL, &value->root, VARSIZE(value));
	(void) set_config_option("vq.context", text, PGC_USERSET, PGC_S_SESSION,
							 action, true, 0, false);
}

/* Store the transaction's context in vq.context_local, SET LOCAL ('{}': nothing bound, even in the session). */
static void
StoreLocalContext(Jsonb *value)
{
	char	   *text = JsonbToCString(NULL, &value->root, VARSIZE(value));

	(void) set_config_option("vq.context_local", text, PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
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

	VqCheckJsonObject(metadata, "metadata");
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
						 errmsg("metadata namespace \"%.*s\" collides with the bound durable context",
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

/* The is_local argument at position n (NULL: false, as set_config takes it). */
static bool
IsLocalArg(FunctionCallInfo fcinfo, int n)
{
	return PG_NARGS() > n && !PG_ARGISNULL(n) && PG_GETARG_BOOL(n);
}

/* A context with namespace ns bound to entry's value (entry = {ns: value}), or unbound (entry NULL). */
static Jsonb *
WithBinding(Jsonb *context, text *ns, Jsonb *entry)
{
	if (entry == NULL)
		return DatumGetJsonbP(DirectFunctionCall2(jsonb_delete, JsonbPGetDatum(context),
												  PointerGetDatum(ns)));
	return DatumGetJsonbP(DirectFunctionCall2(jsonb_concat, JsonbPGetDatum(context),
											  JsonbPGetDatum(entry)));
}

/*
 * Bind or unbind ns for the session or for this transaction. A session change
 * made while the transaction has its own context goes into both: it is seen
 * now and stays after the transaction ends.
 */
static void
ChangeBinding(text *ns, Jsonb *entry, bool is_local)
{
	Jsonb	   *current = BoundContext() ? BoundContext() : EmptyObject();

	if (is_local || HasLocalContext())
		StoreLocalContext(WithBinding(current, ns, entry));
	if (!is_local)
		StoreContext(WithBinding(ParseContext(context_setting), ns, entry), GUC_ACTION_SET);
}

/* {"<namespace>": value} */
static Jsonb *
BindingEntry(text *ns, Jsonb *value)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	escape_json(&buf, text_to_cstring(ns));
	appendStringInfoChar(&buf, ':');
	(void) JsonbToCString(&buf, &value->root, VARSIZE(value));
	appendStringInfoChar(&buf, '}');
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data)));
}

/*
 * vq_context_set(namespace, value, is_local DEFAULT false): bind value under
 * namespace (a NULL value unbinds it), for the session or, with is_local, for
 * the rest of this transaction.
 */
Datum
vq_context_set(PG_FUNCTION_ARGS)
{
	text	   *ns = NamespaceArg(fcinfo);

	ChangeBinding(ns, PG_ARGISNULL(1) ? NULL : BindingEntry(ns, PG_GETARG_JSONB_P(1)),
				  IsLocalArg(fcinfo, 2));
	PG_RETURN_VOID();
}

/*
 * vq_context_clear(namespace DEFAULT NULL, is_local DEFAULT false): unbind one
 * namespace, or everything; with is_local only for the rest of this
 * transaction (the session's bindings come back when it ends).
 */
Datum
vq_context_clear(PG_FUNCTION_ARGS)
{
	bool		is_local = IsLocalArg(fcinfo, 1);

	if (!PG_ARGISNULL(0))
	{
		ChangeBinding(NamespaceArg(fcinfo), NULL, is_local);
		PG_RETURN_VOID();
	}
	if (is_local || HasLocalContext())
		StoreLocalContext(EmptyObject());
	if (!is_local)
		StoreContext(NULL, GUC_ACTION_SET);
	PG_RETURN_VOID();
}

/* vq_context(): what is bound now (the transaction's context, else the session's), {} when none. */
Datum
vq_context(PG_FUNCTION_ARGS)
{
	Jsonb	   *src = BoundContext() ? BoundContext() : EmptyObject();
	Jsonb	   *copy = palloc(VARSIZE(src));

	memcpy(copy, src, VARSIZE(src));
	PG_RETURN_JSONB_P(copy);
}
