/*
 * livelog.h: log lines of a running handler, saved by the saver while it
 * runs (see livelog.c).
 */
#ifndef VQ_LIVELOG_H
#define VQ_LIVELOG_H

#include "postgres.h"

#include "nodes/pg_list.h"

#include "main/shmem.h"

/* The running executor: a run starts (its lines belong to seq). */
extern void VqLiveLogBegin(uint64 seq);

/* The running executor: offer the run's lines (VqLogEntry *) not offered yet, in order, as far as they fit. */
extern void VqLiveLogPublish(List *entries);

/* The running executor: the run ends; returns how many of its first lines were saved already. */
extern int	VqLiveLogClose(void);

/* The saver: save the lines offered by this database's running handlers (in a transaction, connected to SPI). */
extern void VqSaveLiveLogs(void);

/* ...and, after that transaction committed, mark them saved in the live logs. */
extern void VqLiveLogsSaved(void);

/* Empty a live log (caller holds the database slot's lock). */
extern void VqLiveLogReset(VqLiveLog *log);

#endif							/* VQ_LIVELOG_H */
