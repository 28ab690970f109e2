/*
 * notify.c: the notifications workers outside the server wait for. A worker
 * that runs an external handler's jobs LISTENs on the handler's channel and
 * takes jobs with vq_take_jobs; it is told, with NOTIFY on that channel:
 *  - "due <handler>": jobs of the handler became due. Only a transaction can
 *    send a notification, and an enqueue must not pay for one (NOTIFY takes a
 *    cluster-wide lock through the commit), so the committing backend only
 *    marks the handler in shared memory (wake.c) and an executor sends it, at
 *    most once per take that found less than it asked for;
 *  - "cancel <execution_id>": vq_cancel asked a job a worker holds to stop;
 *    sent by vq_cancel itself, in its transaction.
 * The payloads name handlers and jobs, nothing else: any role may LISTEN on
 * any channel, and the jobs are read with vq_take_jobs, which checks who is
 * asking.
 */
#include "postgres.h"

#include "commands/async.h"
#include "utils/builtins.h"
#include "utils/uuid.h"

#include "main/shmem.h"
#include "main/wake.h"
#include "util/spi_util.h"
#include "cache/registry.h"
#include "run/notify.h"

/* Send "due <handler>" on the channel of every external handler marked in bits (at commit). */
static void
NotifyHandlers(VqRegistry *registry, uint64 bits)
{
	for (int i = 0; i < registry->nhandlers; i++)
	{
		VqHandler  *h = registry->handlers[i];

		if (!h->is_function && (bits & VqTakeWakeBit(VqNameHash(h->name))) != 0)
			Async_Notify(h->channel, psprintf("due %s", h->name));
	}
}

/* Executors: tell the workers that wait for handlers given due jobs (see notify.h). */
bool
VqRelayTakeWakeups(void)
{
	uint64		bits = VqTakeTakersToWake(VqMyDatabaseSlot);
	VqRegistry *registry;

	if (bits == 0)
		return false;
	VqBeginTransaction();
	registry = VqRegistryGetIfInstalled();
	if (registry != NULL)
		NotifyHandlers(registry, bits);
	VqCommitTransaction();
	return true;
}

/* vq_cancel asked a job a worker holds to stop (see notify.h). */
void
VqNotifyCancel(const char *channel, pg_uuid_t *execution_id)
{
	Async_Notify(channel, psprintf("cancel %s",
								   DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(execution_id)))));
}
