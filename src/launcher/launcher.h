/*
 * launcher.h: the launcher background worker, which owns every database's
 * lifecycle, and the requests other processes send it.
 */
#ifndef VQ_LAUNCHER_H
#define VQ_LAUNCHER_H

#include "postgres.h"

#include "main/shmem.h"

/* Register the launcher (from _PG_init). */
extern void VqLauncherInit(void);

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

#endif							/* VQ_LAUNCHER_H */
