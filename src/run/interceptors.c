/*
 * interceptors.c: the interceptors (vq.interceptor): on_dispatch(vq.job_context)
 * before a function handler is called or when a worker takes an external
 * handler's job; on_complete(vq.job_context, outcome, error) when the handler
 * ended, before the outcome is written (or, for a worker's reply, queued:
 * after the reply committed). They run in (position, name) order, outside
 * the job's execution timeout: keep them short. Called as their functions'
 * owners where callbacks run inline (callbacks.c), queued for an executor
 * anywhere else (deferred.c).
 */
#include "postgres.h"

#include "utils/builtins.h"

#include "cache/registry.h"
#include "run/callbacks.h"
#include "run/deferred.h"
#include "run/interceptors.h"
#include "run/jobapi.h"

/*
 * Every interceptor's on_dispatch (outcome NULL) or on_complete for the job,
 * whose vq.job_context is ctx: inline in an executor's own code, queued for
 * an executor anywhere else. The registry is pinned: an interceptor may
 * enqueue, which rebuilds it.
 */
static void
Intercept(VqJob *job, Datum ctx, VqOutcome *outcome)
{
	VqRegistry *registry;
	Datum		kind = (Datum) 0;
	Datum		error = (Datum) 0;
	ListCell   *lc;

	if (!VqCallbacksRunInline())
	{
		VqDeferInterceptors(job, ctx, outcome);
		return;
	}
	if (outcome)
	{
		kind = CStringGetTextDatum(VqOutcomeName(outcome->kind));
		error = outcome->error ? CStringGetTextDatum(outcome->error) : (Datum) 0;
	}
	registry = VqRegistryPin();
	foreach(lc, registry->interceptors)
		VqCallInterceptor(lfirst(lc), outcome != NULL, &job->execution_id, job->attempt_number, ctx, kind, error);
	VqRegistryRelease(registry);
}

/* Before a job is dispatched: every interceptor's on_dispatch. */
void
VqInterceptDispatch(VqJob *job)
{
	VqRegistry *registry = VqRegistryGetIfInstalled();

	if (registry != NULL && registry->interceptors != NIL)
		Intercept(job, VqJobContextDatum(job), NULL);
}

/* When a job's handler ended or its reply came, before the outcome is written: every on_complete. */
void
VqInterceptComplete(VqJob *job, VqOutcome *outcome)
{
	VqRegistry *registry = VqRegistryGetIfInstalled();

	if (registry != NULL && registry->interceptors != NIL)
		Intercept(job, VqJobContextDatum(job), outcome);
}
