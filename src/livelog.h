/*
 * livelog.h: log lines of a long-running handler, saved by another executor
 * while it runs (see livelog.c).
 */
#ifndef VQ_LIVELOG_H
#define VQ_LIVELOG_H

#include "postgres.h"

#include "nodes/pg_list.h"

/* A handler running longer than this offers its log lines to be saved while it runs. */
#define VQ_LIVE_LOG_AFTER_MS 100

/* The running executor: a run starts (empty live log). */
extern void VqLiveLogBegin(uint64 seq);

/* The running executor: offer the run's lines (VqLogEntry *) not offered yet, in order, as far as they fit. */
extern void VqLiveLogPublish(List *entries);

/* The running executor: the run ends; returns how many of its first lines were saved already. */
extern int	VqLiveLogClose(void);

/* Another executor: save the lines offered by this database's running handlers (in a transaction, connected to SPI). */
extern void VqSaveLiveLogs(void);

/* ...and, after that transaction committed, drop them from the live logs. */
extern void VqLiveLogsSaved(void);

#endif							/* VQ_LIVELOG_H */
