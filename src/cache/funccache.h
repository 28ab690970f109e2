/*
 * funccache.h: the functions vq_job calls by OID (handlers, interceptors,
 * transition listeners), looked up once and again after any change to
 * pg_proc.
 */
#ifndef VQ_FUNCCACHE_H
#define VQ_FUNCCACHE_H

#include "postgres.h"

#include "fmgr.h"

/* A function ready to call, as pg_proc described it when it was looked up. */
typedef struct VqFunction
{
	Oid			fn;				/* hash key */
	uint64		resolved_at;	/* the cache's generation when looked up (0: never) */
	int			pins;			/* calls in progress (VqFunctionPin): it is not looked up again meanwhile */
	int			nargs;
	Oid			owner;
	FmgrInfo	flinfo;			/* strictness, SECURITY DEFINER, SET: what fmgr_info read */
	MemoryContext mcxt;			/* what fmgr_info allocated for flinfo */
} VqFunction;

/*
 * The function fn, ready to call, or NULL when it does not exist (dropped).
 * An ALTER FUNCTION, CREATE OR REPLACE, a new owner or a DROP (a pg_proc
 * invalidation) makes every entry stale: the next lookup reads pg_proc
 * again, unless a call of that function is in progress (it is pinned: the
 * lookup then returns what that call uses). The pointer stays valid until the
 * next lookup of the same function by an unpinned caller.
 */
extern VqFunction *VqFunctionLookup(Oid fn);

/*
 * The same, pinned until VqFunctionUnpin: for a caller that may run code in
 * between which looks the same function up (a callback whose work fires the
 * same callback again). Unpin also on error (PG_FINALLY).
 */
extern VqFunction *VqFunctionPin(Oid fn);
extern void VqFunctionUnpin(VqFunction *function);

#endif							/* VQ_FUNCCACHE_H */
