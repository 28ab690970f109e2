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

/* A lease's length in milliseconds: argument argno (absent or NULL: the default), checked. */
extern int64 VqLeaseMs(FunctionCallInfo fcinfo, int argno, const char *function);

/*
 * Take up to max_jobs jobs of the named external handlers for the caller into
 * store (VQ_TAKE_COLUMNS, take.h), checking every argument; returns how many.
 */
extern int	VqTakeInto(FunctionCallInfo fcinfo, const char *function, ArrayType *handler_names, int32 max_jobs,
					   int64 lease_ms, Tuplestorestate *store, TupleDesc desc);

#endif							/* VQ_WORKER_H */
