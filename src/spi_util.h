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

/* Worker side: start a transaction with a snapshot and an SPI connection; and finish it. */
extern void VqBeginTransaction(void);
extern void VqCommitTransaction(void);

/* Set-returning function in materialize mode: the tuplestore to fill and its descriptor. */
extern Tuplestorestate *VqMaterializeResult(FunctionCallInfo fcinfo, TupleDesc *desc);

#endif							/* VQ_SPI_UTIL_H */
