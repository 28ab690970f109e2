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

#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "registry.h"
#include "roles.h"
#include "shmem.h"
#include "spi_util.h"

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
#define NWATCHED 4
static Oid	watched_relids[NWATCHED] = {InvalidOid, InvalidOid, InvalidOid, InvalidOid};

static SPIPlanPtr queue_plan = NULL;
static SPIPlanPtr handler_plan = NULL;
static SPIPlanPtr owner_plan = NULL;
static SPIPlanPtr destination_plan = NULL;

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

/* Run a kept read-only plan with the latest snapshot. */
static void
RunLatest(SPIPlanPtr plan)
{
	int			rc = SPI_execute_snapshot(plan, NULL, NULL, GetLatestSnapshot(),
										  InvalidSnapshot, true, false, 0);

	if (rc != SPI_OK_SELECT)
		elog(ERROR, "vq_job: reading configuration failed: %s", SPI_result_code_string(rc));
}

/* Copy a text column of the current SPI row into the registry context (NULL stays NULL). */
static char *
CopyText(HeapTuple tuple, TupleDesc desc, int col)
{
	char	   *value = SPI_getvalue(tuple, desc, col);

	return value ? MemoryContextStrdup(registry_context, value) : NULL;
}

static int32
GetInt32(HeapTuple tuple, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tuple, desc, col, &isnull);

	return isnull ? 0 : DatumGetInt32(d);
}

static bool
GetBool(HeapTuple tuple, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tuple, desc, col, &isnull);

	return isnull ? false : DatumGetBool(d);
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

/* Create a name-keyed hash table in the registry context. */
static HTAB *
NameHash(const char *what, Size entrysize)
{
	HASHCTL		ctl;

	ctl.keysize = VQ_NAME_MAX + 1;
	ctl.entrysize = entrysize;
	ctl.hcxt = registry_context;
	return hash_create(what, 64, &ctl, HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
}

/* Read the queues into the registry. */
static void
LoadQueues(VqRegistry *reg)
{
	RunLatest(VqKeepPlan(&queue_plan,
					   "SELECT name, sleep_delay_ms, max_concurrent_jobs, backoff_strategy,"
					   " backoff_base_delay_ms, backoff_max_delay_ms, instances, paused"
					   " FROM vq.queue", 0, NULL));
	reg->queue_hash = NameHash("vq_job queues", sizeof(VqQueue));
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		char	   *name = SPI_getvalue(tup, desc, 1);
		char	   *strategy = SPI_getvalue(tup, desc, 4);
		VqQueue    *q;
		bool		found;

		q = hash_search(reg->queue_hash, name, HASH_ENTER, &found);
		q->sleep_delay_ms = GetInt32(tup, desc, 2);
		q->max_concurrent_jobs = GetInt32(tup, desc, 3);
		if (!VqParseBackoffStrategy(strategy, &q->backoff_strategy))
			q->backoff_strategy = VQ_BACKOFF_LINEAR;
		q->backoff_base_delay_ms = GetInt32(tup, desc, 5);
		q->backoff_max_delay_ms = GetInt32(tup, desc, 6);
		q->instances = GetInt32(tup, desc, 7);
		q->paused = GetBool(tup, desc, 8);
		q->name_datum = RegistryText(name);
		q->wake_hint = VqQueueHash(name);
	}
}

/* Read the handlers, with their effective settings, into the registry. */
static void
LoadHandlers(VqRegistry *reg)
{
	RunLatest(VqKeepPlan(&handler_plan,
					   "SELECT h.name, h.kind OPERATOR(pg_catalog.=) 'function', h.fn::pg_catalog.oid,"
					   " h.takes_context, h.channel, h.address,"
					   " coalesce(o.queue, h.queue, 'default'),"
					   " coalesce(o.priority, h.priority, 0),"
					   " coalesce(o.max_attempts, h.max_attempts, 3)"
					   " FROM vq.handler h"
					   " LEFT JOIN vq.contract_override o ON o.handler OPERATOR(pg_catalog.=) h.name"
					   " ORDER BY h.name COLLATE pg_catalog.\"C\"", 0, NULL));
	reg->handler_hash = NameHash("vq_job handlers", sizeof(VqHandler));
	reg->nhandlers = (int) SPI_processed;
	reg->handlers = MemoryContextAlloc(registry_context,
											sizeof(VqHandler *) * Max(reg->nhandlers, 1));
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		char	   *name = SPI_getvalue(tup, desc, 1);
		VqHandler  *h;
		bool		found;

		h = hash_search(reg->handler_hash, name, HASH_ENTER, &found);
		h->is_function = GetBool(tup, desc, 2);
		h->fn = (Oid) GetInt32(tup, desc, 3);
		h->takes_context = GetBool(tup, desc, 4);
		h->channel = CopyText(tup, desc, 5);
		h->address = CopyText(tup, desc, 6);
		h->queue_name = CopyText(tup, desc, 7);
		h->queue = hash_search(reg->queue_hash, h->queue_name, HASH_FIND, NULL);
		h->priority = GetInt32(tup, desc, 8);
		h->max_attempts = GetInt32(tup, desc, 9);
		h->name_datum = RegistryText(name);
		h->address_datum = RegistryText(h->address);
		if (!h->is_function)
			reg->has_notify_handlers = true;
		reg->handlers[i] = h;
	}
}

/* Read the registered outbox destination types into the registry. */
static void
LoadDestinations(VqRegistry *reg)
{
	RunLatest(VqKeepPlan(&destination_plan, "SELECT type, fn::pg_catalog.oid FROM vq.destination", 0, NULL));
	reg->destination_hash = NameHash("vq_job destinations", sizeof(VqDestination));
	reg->ndestinations = (int) SPI_processed;
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		VqDestination *d = hash_search(reg->destination_hash,
									   SPI_getvalue(tup, SPI_tuptable->tupdesc, 1), HASH_ENTER, NULL);

		d->fn = (Oid) GetInt32(tup, SPI_tuptable->tupdesc, 2);
	}
}

/* Find the extension owner. */
static void
LoadOwner(VqRegistry *reg)
{
	bool		isnull;

	RunLatest(VqKeepPlan(&owner_plan, 
					   "SELECT e.extowner, 'vq.handler'::pg_catalog.regclass::pg_catalog.oid,"
					   " 'vq.contract_override'::pg_catalog.regclass::pg_catalog.oid,"
					   " 'vq.queue'::pg_catalog.regclass::pg_catalog.oid,"
					   " 'vq.destination'::pg_catalog.regclass::pg_catalog.oid"
					   " FROM pg_catalog.pg_extension e"
					   " WHERE e.extname OPERATOR(pg_catalog.=) 'vq_job'", 0, NULL));
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"vq_job\" is not installed in this database")));
	reg->owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0],
													 SPI_tuptable->tupdesc, 1, &isnull));
	/* Watch the tables even while they are empty. */
	for (int col = 2; col <= 1 + NWATCHED; col++)
		watched_relids[col - 2] = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0],
																 SPI_tuptable->tupdesc, col, &isnull));
}

/*
 * Rebuild the registry from the tables, as the bootstrap superuser (reading
 * needs no grants; every name in the queries is qualified). On error the
 * transaction abort restores the user and SPI, and registry stays NULL, so a
 * half-built copy is never used.
 */
static VqRegistry *
BuildRegistry(void)
{
	VqRegistry *reg;
	VqSavedUser saved;

	/* built under the transaction's context: an error frees a half-built copy with it */
	registry_context = AllocSetContextCreate(CurTransactionContext, "vq_job registry",
											 ALLOCSET_SMALL_SIZES);
	reg = MemoryContextAllocZero(registry_context, sizeof(VqRegistry));
	reg->mcxt = registry_context;

	VqBecomeSuperuser(&saved);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "vq_job: SPI_connect failed");
	LoadOwner(reg);
	LoadQueues(reg);
	LoadHandlers(reg);
	LoadDestinations(reg);
	SPI_finish();
	VqRestoreUser(&saved);
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
