/*
 * joblog.h: a job's log lines (vq.job_log), as a handler's vq_log() makes
 * them and as they are written (joblog.c).
 */
#ifndef VQ_JOBLOG_H
#define VQ_JOBLOG_H

#include "postgres.h"

#include "nodes/pg_list.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

/* One log line of the running job, as vq_log() made it. */
typedef struct VqLogEntry
{
	const char *level;
	char	   *message;
	Jsonb	   *fields;			/* NULL: none */
	TimestampTz at;
} VqLogEntry;

/* Insert log lines of one attempt (in the caller's transaction, connected to SPI). */
extern void VqWriteLogEntries(pg_uuid_t *execution_id, int32 attempt, List *entries);

/* A log level as stored (DEBUG, INFO, WARN, ERROR; WARNING and any case accepted); else an error. */
extern const char *VqLogLevel(const char *level);

/*
 * A log line's message within vq.log_max_line_bytes: fields that do not fit
 * are dropped (*fields set NULL), then the message is cut; either is said at
 * its end.
 */
extern char *VqLogMessage(text *message, Jsonb **fields);

#endif							/* VQ_JOBLOG_H */
