/*
 * subxact.c: running a piece of work in a subtransaction of its own, as
 * PostgreSQL's PL/Tcl does (pltcl_subtrans_abort): its error is caught in
 * the order CopyErrorData, FlushErrorState,
 * RollbackAndReleaseCurrentSubTransaction, then the caller's memory context
 * and resource owner are restored. One runner for every caller: the
 * administrators' callbacks (callbacks.c), a handler (dispatch.c), an outbox
 * row's delivery (relay.c) and vq_job's own steps that may fail alone.
 */
#include "postgres.h"

#include "access/xact.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "main/shmem.h"
#include "run/subxact.h"
#include "run/watch.h"

/*
 * Run work(arg) in a subtransaction; NULL, or its error in the caller's
 * memory context. around_user_code: the watch is disarmed first on an error
 * (user code may have been cut short: no timer of it may fire during the
 * rollback, nor a cancel reach vq_job's own work after it).
 */
static ErrorData *
RunInSubtransaction(VqSubxactWork work, void *arg, bool around_user_code)
{
	MemoryContext caller_context = CurrentMemoryContext;
	ResourceOwner caller_owner = CurrentResourceOwner;
	ErrorData  *volatile error = NULL;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(caller_context);
	PG_TRY();
	{
		if (work(arg))
			ReleaseCurrentSubTransaction();
		else
			RollbackAndReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		if (around_user_code)
			VqWatchEnd(false);
		MemoryContextSwitchTo(caller_context);
		error = CopyErrorData();
		FlushErrorState();
		/* restores the user, the GUC nest level and the snapshot stack too */
		RollbackAndReleaseCurrentSubTransaction();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(caller_context);
	CurrentResourceOwner = caller_owner;
	return error;
}

/*
 * Must an error caught by VqTryInSubtransaction be raised again rather than
 * returned? A cancel or a termination (SQLSTATE class 57: query_canceled,
 * admin_shutdown, ...) is meant for the whole statement or process, not for
 * the step that happened to run. In an executor outside user code no cancel
 * is ever delivered (watch.c ignores SIGINT there and its timeouts act on
 * user code only; a termination is FATAL and ends the process without coming
 * here): a class-57 error there was raised by the code itself, and is its
 * failure like any other.
 *
 * Today every caller runs there, so this returns false: callbacks run only
 * in an executor's own code (VqCallbacksRunInline; elsewhere they are
 * queued for one, and executor.c runs the queue), and the relay's batch
 * insert and the compaction are steps of the executor's loop. The re-raise
 * is kept for a caller anywhere else, where swallowing a cancel would be the
 * bug this guards against.
 */
static bool
MustPropagate(ErrorData *edata)
{
	if (ERRCODE_TO_CATEGORY(edata->sqlerrcode) != ERRCODE_OPERATOR_INTERVENTION)
		return false;
	return VqMyExecutorSlot == NULL || VqInUserCode();
}

/* work(arg) in a subtransaction; NULL or its error, a cancel raised again (see subxact.h). */
ErrorData *
VqTryInSubtransaction(VqSubxactWork work, void *arg)
{
	ErrorData  *error = RunInSubtransaction(work, arg, false);

	if (error != NULL && MustPropagate(error))
		ReThrowError(error);
	return error;
}

/* User code under the watch in a subtransaction; NULL or its error, a cancel included (see subxact.h). */
ErrorData *
VqTryUserCode(VqSubxactWork work, void *arg)
{
	return RunInSubtransaction(work, arg, true);
}
