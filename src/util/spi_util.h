/*
 * spi_util.h: small helpers every SPI user in vq_job shares.
 */
#ifndef VQ_SPI_UTIL_H
#define VQ_SPI_UTIL_H

#include "postgres.h"

#include "executor/spi.h"
#include "fmgr.h"
#include "utils/tuplestore.h"

/* Prepare a plan the first time (into *plan) and keep it for the life of the backend. */
extern SPIPlanPtr VqKeepPlan(SPIPlanPtr *plan, const char *sql, int nargs, const Oid *types);

/*
 * The same for a statement planned afresh at every execution: one whose best
 * plan depends on how big the table is now (a join with an array of keys), so
 * that a plan made while the table was empty (a sequential scan) is never
 * kept for it.
 */
extern SPIPlanPtr VqKeepCustomPlan(SPIPlanPtr *plan, const char *sql, int nargs, const Oid *types);

/*
 * The same for a statement run only between VqIndexScansBegin and
 * VqIndexScansEnd, planned once for all parameter values: its plan is the
 * index scans those settings make, whatever the values, and planning it at
 * every execution (a custom plan, which PostgreSQL's plan cache keeps
 * choosing when the costs of what is disabled make the generic plan look
 * dear) would cost more than running it.
 */
extern SPIPlanPtr VqKeepGenericPlan(SPIPlanPtr *plan, const char *sql, int nargs, const Oid *types);

/*
 * Until VqIndexScansEnd(level): statements are planned as ordered index scans
 * (enable_seqscan, enable_bitmapscan and enable_sort off; jit off, which the
 * costs of what is disabled would set off). For the searches for work, which read a few entries from a remembered position:
 * the planner prices an index scan by the size of the index, which the dead
 * entries a long-held snapshot leaves behind inflate, and would pick a
 * sequential scan and a sort of the whole table instead.
 */
extern int	VqIndexScansBegin(void);
extern void VqIndexScansEnd(int level);

/* Worker side: start a transaction with a snapshot and an SPI connection; and finish it. */
extern void VqBeginTransaction(void);
extern void VqCommitTransaction(void);

/* Set-returning function in materialize mode: the tuplestore to fill and its descriptor. */
extern Tuplestorestate *VqMaterializeResult(FunctionCallInfo fcinfo, TupleDesc *desc);

#endif							/* VQ_SPI_UTIL_H */
