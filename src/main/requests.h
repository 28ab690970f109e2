/*
 * requests.h: what other processes ask the launcher (requests.c), through a
 * database slot: stop the database's executors for a while, what an executor
 * found when it looked for the extension, more executors on demand. Only
 * requests.c writes a slot's request and executors_wanted; the launcher acts
 * on them (launcher/launcher.c).
 */
#ifndef VQ_REQUESTS_H
#define VQ_REQUESTS_H

#include "postgres.h"

#include "main/shmem.h"

/*
 * Ask the launcher to stop a database's executors and keep them stopped for
 * a while (a statement needs the database alone); waits, bounded, until they
 * have exited.
 */
extern void VqRequestStop(Oid dboid);

/* Lift a stop request (InvalidOid: none), and have the launcher look around. */
extern void VqRequestResume(Oid dboid);

/*
 * An executor tells the launcher whether it found the extension; seen_at is
 * the slot's extension_generation read before it looked (a CREATE or DROP
 * EXTENSION committed since makes the report stale).
 */
extern void VqReportExtension(VqDatabaseSlot *slot, VqExtensionFound found, uint64 seen_at);

/*
 * An executor wants this many more executors started for its database: the
 * largest want since the launcher last took them counts (executors asking
 * at once see the same jobs). Lock-free, so a timeout handler may ask.
 */
extern void VqAskForExecutors(VqDatabaseSlot *slot, int want);

/* The launcher: the executors asked for since it last looked, taken. */
extern int	VqTakeExecutorsWanted(VqDatabaseSlot *slot);

/* The launcher: a report is stale, the database is probed again (caller holds the slot's lock exclusively). */
extern void VqForgetExtensionReport(VqDatabaseSlot *slot);

/* The launcher: a database takes the slot; no request carries over (caller holds the slot's lock exclusively). */
extern void VqRequestsReset(VqDatabaseSlot *slot);

#endif							/* VQ_REQUESTS_H */
