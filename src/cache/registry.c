/*
 * registry.c: per-backend cache of queues and handlers.
 *
 * Enqueue and resolution look handlers and queues up on every call, so they
 * read a backend-local copy instead of querying the configuration tables each
 * time. The copy is rebuilt lazily after an invalidation: statement triggers on
 * vq.queue, vq.handler and vq.contract_override call vq_registry_changed(),
 * which queues a relcache invalidation of the changed table; PostgreSQL delivers
 * it to every backend when the change commits (and to our own backend at the
 * next command), and our relcache callback marks the copy stale.
 *
 * The copy is read with the latest snapshot, not the transaction's: a
 * repeatable-read transaction must not cache configuration older than the
 * invalidations it has already consumed.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_extension.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/fmgroids.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "main/errcodes.h"
#include "main/limits.h"
#include "main/shmem.h"
#include "cache/registry.h"

PG_FUNCTION_INFO_V1(vq_registry_changed);

/*
 * The current copy, and whether it is still valid. Each copy lives in a
 * memory context of its own. A stale copy is freed when the next lookup
 * replaces it, unless someone pinned it: then the last VqRegistryRelease
 * frees it.
 */
static VqRegistry *registry = NULL;
static bool registry_valid = false;
/* The context of the copy being built (the Load* functions allocate there). */
static MemoryContext registry_context = NULL;

/* Relations whose invalidation makes the copy stale (known once it was read). */
#define NWATCHED 8
static Oid	watched_relids[NWATCHED];


/* Relcache callback: a change to a watched table (or to everything) makes the copy stale. */
static void
VqRegistryInvalidate(Datum arg, Oid relid)
{
	if (relid == InvalidOid)
		registry_valid = false;
	for (int i = 0; i < NWATCHED; i++)
		if (relid == watched_relids[i])
			registry_valid = false;
}

/* Register the invalidation callback (from _PG_init). */
void
VqRegistryInit(void)
{
	CacheRegisterRelcacheCallback(VqRegistryInvalidate, (Datum) 0);
}

/* Statement trigger on the configuration tables: invalidate every backend's copy at commit. */
Datum
vq_registry_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("vq.registry_changed() must be called as a trigger")));
	CacheInvalidateRelcache(trigdata->tg_relation);
	return PointerGetDatum(NULL);
}

/* One row of a configuration table, as read by a scan. */
typedef struct ConfigRow
{
	HeapTuple	tuple;
	TupleDesc	desc;
} ConfigRow;

/* A column of the row by name (tables are small and few: a linear search is fine). */
static Datum
Column(ConfigRow *row, const char *name, bool *isnull)
{
	for (int i = 0; i < row->desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(row->desc, i);

		if (!att->attisdropped && strcmp(NameStr(att->attname), name) == 0)
			return heap_getattr(row->tuple, i + 1, row->desc, isnull);
	}
	elog(ERROR, "vq_job: configuration column \"%s\" is missing", name);
	return (Datum) 0;			/* keep the compiler quiet */
}

/* A text column copied into the registry context (NULL stays NULL). */
static char *
ColumnText(ConfigRow *row, const char *name)
{
	bool		isnull;
	Datum		d = Column(row, name, &isnull);

	return isnull ? NULL : MemoryContextStrdup(registry_context, TextDatumGetCString(d));
}

/* An integer column (0 when NULL; *isnull says which, when asked). */
static int32
ColumnInt32(ConfigRow *row, const char *name, bool *isnull)
{
	bool		n;
	Datum		d = Column(row, name, &n);

	if (isnull)
		*isnull = n;
	return n ? 0 : DatumGetInt32(d);
}

/* An interval column copied into the registry context (NULL stays NULL). */
static Interval *
ColumnInterval(ConfigRow *row, const char *name)
{
	bool		isnull;
	Datum		d = Column(row, name, &isnull);
	Interval   *copy;

	if (isnull)
		return NULL;
	copy = MemoryContextAlloc(registry_context, sizeof(Interval));
	memcpy(copy, DatumGetIntervalP(d), sizeof(Interval));
	return copy;
}

/* A boolean column (false when NULL). */
static bool
ColumnBool(ConfigRow *row, const char *name)
{
	bool		isnull;
	Datum		d = Column(row, name, &isnull);

	return isnull ? false : DatumGetBool(d);
}

/* An OID-valued column (regprocedure; InvalidOid when NULL). */
static Oid
ColumnOid(ConfigRow *row, const char *name)
{
	bool		isnull;
	Datum		d = Column(row, name, &isnull);

	return isnull ? InvalidOid : DatumGetObjectId(d);
}

/*
 * Call fn for every row of a configuration table, read with the latest
 * snapshot (see the file comment). A heap scan, not a query: these tables
 * hold a few rows, and a new connection's first enqueue should not pay for
 * parsing and planning.
 */
static void
ScanConfig(Oid relid, void (*fn) (ConfigRow *row, VqRegistry *reg), VqRegistry *reg)
{
	Relation	rel = table_open(relid, AccessShareLock);
	Snapshot	snapshot = RegisterSnapshot(GetLatestSnapshot());
	TableScanDesc scan = table_beginscan(rel, snapshot, 0, NULL);
	ConfigRow	row;

	row.desc = RelationGetDescr(rel);
	while ((row.tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
		fn(&row, reg);
	table_endscan(scan);
	UnregisterSnapshot(snapshot);
	table_close(rel, AccessShareLock);
}

/* A text Datum allocated in the registry context. */
static Datum
RegistryText(const char *s)
{
	MemoryContext old = MemoryContextSwitchTo(registry_context);
	Datum		d = PointerGetDatum(cstring_to_text(s));

	MemoryContextSwitchTo(old);
	return d;
}

/* A backend-local hash table keyed by a handler's or a queue's name, in cxt (see registry.h). */
HTAB *
VqNameTable(const char *what, long nelem, Size entrysize, MemoryContext cxt)
{
	HASHCTL		ctl;

	ctl.keysize = VQ_NAME_MAX + 1;
	ctl.entrysize = entrysize;
	ctl.hcxt = cxt;
	return hash_create(what, nelem, &ctl, HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
}

/* One vq.queue row into the registry. */
static void
LoadQueue(ConfigRow *row, VqRegistry *reg)
{
	char	   *name = ColumnText(row, "name");
	char	   *strategy = ColumnText(row, "backoff_strategy");
	VqQueue    *q = hash_search(reg->queue_hash, name, HASH_ENTER, NULL);

	q->sleep_delay_ms = ColumnInt32(row, "sleep_delay_ms", NULL);
	q->max_concurrent_jobs = ColumnInt32(row, "max_concurrent_jobs", NULL);
	if (strategy == NULL || !VqParseBackoffStrategy(strategy, &q->backoff_strategy))
		q->backoff_strategy = VQ_BACKOFF_LINEAR;
	q->backoff_base_delay_ms = ColumnInt32(row, "backoff_base_delay_ms", NULL);
	q->backoff_max_delay_ms = ColumnInt32(row, "backoff_max_delay_ms", NULL);
	q->instances = ColumnInt32(row, "instances", NULL);
	q->paused = ColumnBool(row, "paused");
	q->name_datum = RegistryText(name);
	q->wake_hint = VqNameHash(name);
	q->granted = NIL;
}

/* A contract override, before it is applied to its handler. */
typedef struct Override
{
	char		handler[VQ_NAME_MAX + 1];	/* hash key */
	char	   *queue;
	int32		priority;
	bool		priority_null;
	int32		max_attempts;
	bool		max_attempts_null;
} Override;

/* One vq.contract_override row into the overrides hash (reg->handler_hash until handlers load). */
static void
LoadOverride(ConfigRow *row, VqRegistry *reg)
{
	char	   *handler = ColumnText(row, "handler");
	Override   *o = hash_search(reg->handler_hash, handler, HASH_ENTER, NULL);

	o->queue = ColumnText(row, "queue");
	o->priority = ColumnInt32(row, "priority", &o->priority_null);
	o->max_attempts = ColumnInt32(row, "max_attempts", &o->max_attempts_null);
}

/* Overrides by handler name, while handlers are loaded. */
static HTAB *overrides = NULL;

/*
 * One vq.handler row into the registry, with its effective settings: the
 * contract override, else the handler's default, else the framework default.
 */
static void
LoadHandler(ConfigRow *row, VqRegistry *reg)
{
	char	   *name = ColumnText(row, "name");
	Override   *o = hash_search(overrides, name, HASH_FIND, NULL);
	VqHandler  *h = hash_search(reg->handler_hash, name, HASH_ENTER, NULL);
	char	   *kind = ColumnText(row, "kind");
	bool		priority_null;
	bool		max_attempts_null;
	bool		max_running_null;
	char	   *queue = ColumnText(row, "queue");
	int32		priority = ColumnInt32(row, "priority", &priority_null);
	int32		max_attempts = ColumnInt32(row, "max_attempts", &max_attempts_null);

	h->is_function = kind != NULL && strcmp(kind, "function") == 0;
	h->fn = ColumnOid(row, "fn");
	h->takes_context = ColumnBool(row, "takes_context");
	h->channel = ColumnText(row, "channel");
	h->address = ColumnText(row, "address");
	h->queue_name = (o && o->queue) ? o->queue : queue ? queue : MemoryContextStrdup(registry_context, VQ_DEFAULT_QUEUE);
	h->priority = (o && !o->priority_null) ? o->priority : !priority_null ? priority : VQ_DEFAULT_PRIORITY;
	h->max_attempts = (o && !o->max_attempts_null) ? o->max_attempts
		: !max_attempts_null ? max_attempts : VQ_DEFAULT_MAX_ATTEMPTS;
	h->producers = NIL;
	h->max_running = ColumnInt32(row, "max_running", &max_running_null);
	if (max_running_null)
		h->max_running = 0;
	h->unique_for = ColumnInterval(row, "unique_for");
	h->name_datum = RegistryText(name);
	h->address_datum = RegistryText(h->address);
	if (!h->is_function)
		reg->has_notify_handlers = true;
	if (h->max_running > 0)
		reg->has_limited_handlers = true;
}

/* Order handler pointers by name, as strcmp does (the "C" collation). */
static int
ByHandlerName(const void *a, const void *b)
{
	return strcmp((*(VqHandler *const *) a)->name, (*(VqHandler *const *) b)->name);
}

/* Read the handlers, with their effective settings, into the registry. */
static void
LoadHandlers(VqRegistry *reg, Oid handler_relid, Oid override_relid)
{
	HASH_SEQ_STATUS seq;
	VqHandler  *h;
	int			i = 0;

	/* the overrides first, in a hash of their own (borrowing handler_hash to fill it) */
	reg->handler_hash = VqNameTable("vq_job contract overrides", 64, sizeof(Override), registry_context);
	ScanConfig(override_relid, LoadOverride, reg);
	overrides = reg->handler_hash;
	reg->handler_hash = VqNameTable("vq_job handlers", 64, sizeof(VqHandler), registry_context);
	ScanConfig(handler_relid, LoadHandler, reg);
	overrides = NULL;

	reg->nhandlers = (int) hash_get_num_entries(reg->handler_hash);
	reg->handlers = MemoryContextAlloc(registry_context, sizeof(VqHandler *) * Max(reg->nhandlers, 1));
	hash_seq_init(&seq, reg->handler_hash);
	while ((h = hash_seq_search(&seq)) != NULL)
	{
		h->queue = hash_search(reg->queue_hash, h->queue_name, HASH_FIND, NULL);
		reg->handlers[i++] = h;
	}
	qsort(reg->handlers, reg->nhandlers, sizeof(VqHandler *), ByHandlerName);
}

/* Append a grant row's grantee to a list of the registry's. */
static void
AddGrantee(List **grantees, ConfigRow *row)
{
	MemoryContext old = MemoryContextSwitchTo(registry_context);

	*grantees = lappend_oid(*grantees, ColumnOid(row, "grantee"));
	MemoryContextSwitchTo(old);
}

/* One vq.producer_grant row into the registry (a grant for an unknown handler is ignored). */
static void
LoadProducerGrant(ConfigRow *row, VqRegistry *reg)
{
	VqHandler  *h = hash_search(reg->handler_hash, ColumnText(row, "handler"), HASH_FIND, NULL);

	if (h != NULL)
		AddGrantee(&h->producers, row);
}

/* One vq.queue_grant row into the registry. */
static void
LoadQueueGrant(ConfigRow *row, VqRegistry *reg)
{
	VqQueue    *q = hash_search(reg->queue_hash, ColumnText(row, "queue"), HASH_FIND, NULL);

	if (q != NULL)
		AddGrantee(&q->granted, row);
}

/* One vq.destination row into the registry. */
static void
LoadDestination(ConfigRow *row, VqRegistry *reg)
{
	VqDestination *d = hash_search(reg->destination_hash, ColumnText(row, "type"), HASH_ENTER, NULL);

	d->fn = ColumnOid(row, "fn");
	reg->ndestinations++;
}

/* One vq.interceptor row into the registry. */
static void
LoadInterceptor(ConfigRow *row, VqRegistry *reg)
{
	VqInterceptor *i = MemoryContextAllocZero(registry_context, sizeof(VqInterceptor));
	MemoryContext old;

	i->name = ColumnText(row, "name");
	i->position = ColumnInt32(row, "position", NULL);
	i->on_dispatch = ColumnOid(row, "on_dispatch");
	i->on_complete = ColumnOid(row, "on_complete");
	old = MemoryContextSwitchTo(registry_context);
	reg->interceptors = lappend(reg->interceptors, i);
	MemoryContextSwitchTo(old);
}

/* Interceptors run by position, then name. */
static int
ByPosition(const ListCell *a, const ListCell *b)
{
	VqInterceptor *x = lfirst(a);
	VqInterceptor *y = lfirst(b);

	if (x->position != y->position)
		return x->position < y->position ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* A vq.transition_listener row: only whether there are any is kept. */
static void
LoadListener(ConfigRow *row, VqRegistry *reg)
{
	reg->has_listeners = true;
}

/* The extension's owner, and its configuration tables (watched for changes). */
static void
LoadOwner(VqRegistry *reg, Oid *relids)
{
	Oid			ext = get_extension_oid("vq_job", true);
	Oid			nsp = get_namespace_oid("vq", true);
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	const char *tables[NWATCHED] = {"handler", "contract_override", "queue", "destination", "producer_grant",
	"queue_grant", "interceptor", "transition_listener"};

	if (!OidIsValid(ext) || !OidIsValid(nsp))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"vq_job\" is not installed in this database")));
	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_oid, BTEqualStrategyNumber, F_OIDEQ, ObjectIdGetDatum(ext));
	scan = systable_beginscan(rel, ExtensionOidIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "vq_job: extension %u vanished", ext);
	reg->owner = ((Form_pg_extension) GETSTRUCT(tup))->extowner;
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	/* watch the tables even while they are empty */
	for (int i = 0; i < NWATCHED; i++)
	{
		relids[i] = get_relname_relid(tables[i], nsp);
		if (!OidIsValid(relids[i]))
			elog(ERROR, "vq_job: table vq.%s is missing", tables[i]);
		watched_relids[i] = relids[i];
	}
}

/*
 * Rebuild the registry from the tables (reading them needs no privileges:
 * they are scanned directly, not queried). On error the transaction abort
 * frees the half-built copy, and registry stays NULL, so it is never used.
 */
static VqRegistry *
BuildRegistry(void)
{
	static uint64 builds = 0;
	VqRegistry *reg;
	Oid			relids[NWATCHED];

	/* built under the transaction's context: an error frees a half-built copy with it */
	registry_context = AllocSetContextCreate(CurTransactionContext, "vq_job registry",
											 ALLOCSET_SMALL_SIZES);
	reg = MemoryContextAllocZero(registry_context, sizeof(VqRegistry));
	reg->mcxt = registry_context;
	reg->generation = ++builds;

	LoadOwner(reg, relids);
	reg->queue_hash = VqNameTable("vq_job queues", 64, sizeof(VqQueue), registry_context);
	ScanConfig(relids[2], LoadQueue, reg);
	LoadHandlers(reg, relids[0], relids[1]);
	reg->destination_hash = VqNameTable("vq_job destinations", 64, sizeof(VqDestination), registry_context);
	ScanConfig(relids[3], LoadDestination, reg);
	ScanConfig(relids[4], LoadProducerGrant, reg);
	ScanConfig(relids[5], LoadQueueGrant, reg);
	ScanConfig(relids[6], LoadInterceptor, reg);
	list_sort(reg->interceptors, ByPosition);
	ScanConfig(relids[7], LoadListener, reg);
	MemoryContextSetParent(reg->mcxt, CacheMemoryContext);
	registry_context = NULL;
	return reg;
}

/* The current registry, rebuilt if a change was committed since it was read. */
VqRegistry *
VqRegistryGet(void)
{
	if (!registry_valid || registry == NULL)
	{
		VqRegistry *stale = registry;

		registry = NULL;
		if (stale != NULL && stale->pins == 0)
			MemoryContextDelete(stale->mcxt);
		/* Marked valid first: an invalidation arriving while we read marks it stale again. */
		registry_valid = true;
		registry = BuildRegistry();
	}
	return registry;
}

/*
 * The current registry, or NULL when the extension is not (or no longer)
 * installed: for code that runs inside vq_job's own statements (a trigger's
 * WHEN clause, an interceptor call) while DROP EXTENSION may have committed.
 */
VqRegistry *
VqRegistryGetIfInstalled(void)
{
	if ((!registry_valid || registry == NULL) && !OidIsValid(get_extension_oid("vq_job", true)))
		return NULL;
	return VqRegistryGet();
}

/* The current registry, kept alive (not freed by a rebuild) until VqRegistryRelease. */
VqRegistry *
VqRegistryPin(void)
{
	VqRegistry *reg = VqRegistryGet();

	reg->pins++;
	return reg;
}

/* Give up a pin; a registry that was replaced meanwhile is freed with its last pin. */
void
VqRegistryRelease(VqRegistry *reg)
{
	Assert(reg->pins > 0);
	reg->pins--;
	if (reg->pins == 0 && reg != registry)
		MemoryContextDelete(reg->mcxt);
}

VqHandler *
VqLookupHandler(VqRegistry *reg, const char *name)
{
	return hash_search(reg->handler_hash, name, HASH_FIND, NULL);
}

VqQueue *
VqLookupQueue(VqRegistry *reg, const char *name)
{
	return hash_search(reg->queue_hash, name, HASH_FIND, NULL);
}

VqDestination *
VqLookupDestination(VqRegistry *reg, const char *type)
{
	return hash_search(reg->destination_hash, type, HASH_FIND, NULL);
}

/* Raise the "handler is not registered" error, listing (up to 20) registered names. */
void
VqReportUnregisteredHandler(VqRegistry *reg, const char *name)
{
	const int	max_listed = 20;
	StringInfoData names;

	initStringInfo(&names);
	for (int i = 0; i < reg->nhandlers && i < max_listed; i++)
		appendStringInfo(&names, "%s%s", i > 0 ? ", " : "", reg->handlers[i]->name);
	if (reg->nhandlers > max_listed)
		appendStringInfo(&names, " and %d more", reg->nhandlers - max_listed);

	if (reg->nhandlers == 0)
		ereport(ERROR,
				(errcode(ERRCODE_VQ_HANDLER_NOT_REGISTERED),
				 errmsg("handler \"%s\" is not registered; no handlers are registered", name),
				 errhint("Register it with vq_register_handler() or vq_register_notify_handler().")));
	ereport(ERROR,
			(errcode(ERRCODE_VQ_HANDLER_NOT_REGISTERED),
			 errmsg("handler \"%s\" is not registered; registered handlers: %s", name, names.data)));
}
