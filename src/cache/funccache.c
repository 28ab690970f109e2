/*
 * funccache.c: one cache of the functions vq_job calls by OID, shared by the
 * handlers (dispatch.c) and the administrators' callbacks (callbacks.c).
 *
 * What fmgr_info reads from pg_proc (strictness, SECURITY DEFINER and the
 * owner it switches to, SET clauses, the language handler) is only valid
 * until the function changes. A syscache callback on PROCOID moves the
 * cache's generation on at every pg_proc invalidation (ALTER FUNCTION, CREATE
 * OR REPLACE, OWNER TO, DROP, in this backend or committed by another): which
 * function changed is not worth finding out, every entry becomes stale and is
 * looked up again at its next use. Backends process invalidations when a
 * transaction starts and when they take a new lock, so a change committed
 * before the transaction that calls the function began is always seen.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_proc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

#include "cache/funccache.h"

static HTAB *functions = NULL;
static uint64 generation = 1;

/* Syscache callback: a function changed; no catalog access is allowed here. */
static void
FunctionsChanged(Datum arg, int cacheid, uint32 hashvalue)
{
	generation++;
}

/* Create the cache and register its invalidation callback (once per backend). */
static void
InitCache(void)
{
	HASHCTL		ctl;

	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(VqFunction);
	functions = hash_create("vq_job functions", 64, &ctl, HASH_ELEM | HASH_BLOBS);
	CacheRegisterSyscacheCallback(PROCOID, FunctionsChanged, (Datum) 0);
}

/* Read pg_proc's row of the entry's function into it; false when there is none. */
static bool
Resolve(VqFunction *f)
{
	HeapTuple	proctup = SearchSysCache1(PROCOID, ObjectIdGetDatum(f->fn));
	uint64		seen = generation;
	Form_pg_proc proc;

	if (!HeapTupleIsValid(proctup))
		return false;
	MemoryContextReset(f->mcxt);
	f->resolved_at = 0;
	proc = (Form_pg_proc) GETSTRUCT(proctup);
	f->nargs = proc->pronargs;
	f->owner = proc->proowner;
	ReleaseSysCache(proctup);
	fmgr_info_cxt(f->fn, &f->flinfo, f->mcxt);
	/* (an invalidation read meanwhile leaves it stale: it is looked up again next time) */
	f->resolved_at = seen;
	return true;
}

/* The function fn ready to call, or NULL when it was dropped (see funccache.h). */
VqFunction *
VqFunctionLookup(Oid fn)
{
	VqFunction *f;
	bool		found;

	if (!OidIsValid(fn))
		return NULL;
	if (functions == NULL)
		InitCache();
	f = hash_search(functions, &fn, HASH_ENTER, &found);
	if (!found)
	{
		f->resolved_at = 0;
		f->pins = 0;
		f->mcxt = AllocSetContextCreate(TopMemoryContext, "vq_job function", ALLOCSET_SMALL_SIZES);
	}
	if (f->resolved_at == generation || (f->pins > 0 && f->resolved_at != 0))
		return f;
	if (Resolve(f))
		return f;
	/* dropped: forget it (an entry no call uses) */
	if (f->pins == 0)
	{
		MemoryContextDelete(f->mcxt);
		hash_search(functions, &fn, HASH_REMOVE, NULL);
	}
	return NULL;
}

/* The same, pinned until VqFunctionUnpin. */
VqFunction *
VqFunctionPin(Oid fn)
{
	VqFunction *f = VqFunctionLookup(fn);

	if (f != NULL)
		f->pins++;
	return f;
}

/* A call that pinned the function ended. */
void
VqFunctionUnpin(VqFunction *function)
{
	Assert(function->pins > 0);
	function->pins--;
}
