/*
 * worker.h: what the protocol of workers outside the server shares with the
 * single-job calls of consumer.c (see worker.c).
 */
#ifndef VQ_WORKER_H
#define VQ_WORKER_H

#include "postgres.h"

#include "access/tupdesc.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

/* The end of a lease that starts now: argument argno (NULL: the default), checked. */
extern TimestampTz VqLeaseUntil(FunctionCallInfo fcinfo, int argno, const char *function);

/*
 * Take up to max_jobs jobs of the named external handlers for the caller into
 * store (VQ_TAKE_COLUMNS, take.h), checking every argument; returns how many.
 */
extern int	VqTakeInto(FunctionCallInfo fcinfo, const char *function, ArrayType *handler_names, int32 max_jobs,
					   TimestampTz lease_until, Tuplestorestate *store, TupleDesc desc);

#endif							/* VQ_WORKER_H */
