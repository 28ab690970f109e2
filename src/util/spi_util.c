/*
 * spi_util.c: small helpers every SPI user in vq_job shares: kept plans,
 * ordered index scans, worker transactions, and materialized set-returning
 * results.
 */
#include "postgres.h"

#include "access/xact.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "util/spi_util.h"

/* Prepare a plan with the given cursor options the first time (into *plan) and keep it. */
static SPIPlanPtr
KeepPlan(SPIPlanPtr *plan, const char *sql, int nargs, const Oid *types, int options)
{
	if (*plan == NULL)
	{
		SPIPlanPtr	p = SPI_prepare_cursor(sql, nargs, (Oid *) types, options);

		if (p == NULL)
			elog(ERROR, "vq_job: SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
		SPI_keepplan(p);
		*plan = p;
	}
	return *plan;
}

/* Prepare a plan the first time (into *plan) and keep it for the life of the backend. */
SPIPlanPtr
VqKeepPlan(SPIPlanPtr *plan, const char *sql, int nargs, const Oid *types)
{
	return KeepPlan(plan, sql, nargs, types, 0);
}

/* The same, planned afresh at every execution (see spi_util.h). */
SPIPlanPtr
VqKeepCustomPlan(SPIPlanPtr *plan, const char *sql, int nargs, const Oid *types)
{
	return KeepPlan(plan, sql, nargs, types, CURSOR_OPT_CUSTOM_PLAN);
}

/* The same, planned once for every parameter value (see spi_util.h). */
SPIPlanPtr
VqKeepGenericPlan(SPIPlanPtr *plan, const char *sql, int nargs, const Oid *types)
{
	return KeepPlan(plan, sql, nargs, types, CURSOR_OPT_GENERIC_PLAN);
}

/* Worker side: start a transaction with a snapshot and an SPI connection. */
void
VqBeginTransaction(void)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "vq_job: SPI_connect failed");
}

/* Plan ordered index scans until VqIndexScansEnd (see spi_util.h); returns the level to end. */
int
VqIndexScansBegin(void)
{
	int			level = NewGUCNestLevel();

	(void) set_config_option("enable_seqscan", "off", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("enable_bitmapscan", "off", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("enable_sort", "off", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	/* (what is disabled costs the plan a huge constant, which would otherwise set JIT compilation off) */
	(void) set_config_option("jit", "off", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	return level;
}

/* Back to the settings VqIndexScansBegin found. */
void
VqIndexScansEnd(int level)
{
	AtEOXact_GUC(true, level);
}

/* Worker side: finish the transaction VqBeginTransaction started. */
void
VqCommitTransaction(void)
{
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
}

/* Set-returning function in materialize mode: the tuplestore to fill and its descriptor. */
Tuplestorestate *
VqMaterializeResult(FunctionCallInfo fcinfo, TupleDesc *desc)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	MemoryContext old;
	Tuplestorestate *store;

	if (rsinfo == NULL || !IsA(rsinfo, ReturnSetInfo) || !(rsinfo->allowedModes & SFRM_Materialize))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("set-valued function called in context that cannot accept a set")));
	if (get_call_result_type(fcinfo, NULL, desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	old = MemoryContextSwitchTo(rsinfo->econtext->ecxt_per_query_memory);
	*desc = CreateTupleDescCopy(*desc);
	store = tuplestore_begin_heap(true, false, work_mem);
	rsinfo->returnMode = SFRM_Materialize;
	rsinfo->setResult = store;
	rsinfo->setDesc = *desc;
	MemoryContextSwitchTo(old);
	return store;
}
