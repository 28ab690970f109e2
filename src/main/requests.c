/*
 * requests.c: what other processes ask the launcher. The launcher owns
 * every database's lifecycle (launcher/launcher.c); nobody else starts or
 * signals executors. A backend or an executor writes its request into the
 * database's slot (a stop until some time; what an executor found when it
 * looked for the extension; more executors) and sets the launcher's latch;
 * the launcher reads the requests on its next pass.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "main/limits.h"
#include "main/requests.h"
#include "main/shmem.h"
#include "main/wake.h"

/* How long a stop request keeps a database's executors stopped, and how long its sender waits. */
#define STOP_WAIT_MS 10000

/* Set a database's stop request (caller holds the slot's lock exclusively). */
static void
SetStopUntil(VqDatabaseSlot *slot, void *arg)
{
	slot->request.stop_until = *(TimestampTz *) arg;
}

/* Count the processes connected to the slot's database for vq_job: its executors and its saver. */
static void
CountAttached(VqDatabaseSlot *slot, void *arg)
{
	for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
		*(int *) arg += slot->executors[i].pid != 0;
	*(int *) arg += slot->saver_pid != 0;
}

/*
 * Ask the launcher to stop a database's executors and keep them stopped for
 * STOP_WAIT_MS; wait (as long, at most) until they have exited.
 */
void
VqRequestStop(Oid dboid)
{
	TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), STOP_WAIT_MS);

	if (VqShared == NULL || !OidIsValid(dboid))
		return;
	(void) VqWithDatabaseSlot(dboid, LW_EXCLUSIVE, SetStopUntil, &until);
	VqWakeLauncher();
	for (;;)
	{
		int			attached = 0;

		(void) VqWithDatabaseSlot(dboid, LW_SHARED, CountAttached, &attached);
		if (attached == 0 || GetCurrentTimestamp() >= until)
			break;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 20, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/* Lift a stop request (InvalidOid: none), and have the launcher look around. */
void
VqRequestResume(Oid dboid)
{
	TimestampTz none = 0;

	if (VqShared == NULL)
		return;
	if (OidIsValid(dboid))
		(void) VqWithDatabaseSlot(dboid, LW_EXCLUSIVE, SetStopUntil, &none);
	VqWakeLauncher();
}

/* An executor tells the launcher whether it found the extension (see requests.h). */
void
VqReportExtension(VqDatabaseSlot *slot, VqExtensionFound found, uint64 seen_at)
{
	bool		news;

	LWLockAcquire(slot->lock, LW_EXCLUSIVE);
	news = slot->request.extension != found || slot->request.extension_seen_at != seen_at ||
		(found == VQ_EXT_PRESENT && slot->state != VQ_DB_ACTIVE);
	slot->request.extension = found;
	slot->request.extension_seen_at = seen_at;
	LWLockRelease(slot->lock);
	if (news)
		VqWakeLauncher();
}

/* Ask for executors (see requests.h): the largest want since the launcher took them, then its latch. */
void
VqAskForExecutors(VqDatabaseSlot *slot, int want)
{
	uint32		cur = pg_atomic_read_u32(&slot->executors_wanted);

	while (cur < (uint32) want &&
		   !pg_atomic_compare_exchange_u32(&slot->executors_wanted, &cur, (uint32) want))
		;
	if (VqShared->launcher_latch != NULL)
		SetLatch(VqShared->launcher_latch);
}

/* The executors asked for since the launcher last looked, taken. */
int
VqTakeExecutorsWanted(VqDatabaseSlot *slot)
{
	return (int) pg_atomic_exchange_u32(&slot->executors_wanted, 0);
}

/* A stale report: the database's executor 0 is started to look again. */
void
VqForgetExtensionReport(VqDatabaseSlot *slot)
{
	slot->request.extension = VQ_EXT_NOT_LOOKED;
}

/* A database takes the slot: no request of the one before carries over. */
void
VqRequestsReset(VqDatabaseSlot *slot)
{
	memset(&slot->request, 0, sizeof(VqLauncherRequest));
	pg_atomic_write_u32(&slot->executors_wanted, 0);
}
