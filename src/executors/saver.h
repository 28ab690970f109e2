/*
 * saver.h: the saver, which saves running jobs' progress and log lines
 * (saver.c); started by the launcher.
 */
#ifndef VQ_SAVER_H
#define VQ_SAVER_H

#include "postgres.h"

#include "postmaster/bgworker.h"

/* Start a saver for a database (*handle replaced); false when no background worker slot was free. */
extern bool VqStartSaver(Oid dboid, const char *dbname, BackgroundWorkerHandle **handle);

#endif							/* VQ_SAVER_H */
