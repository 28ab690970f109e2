/*
 * limits.h: the limits and defaults every part of vq_job checks against.
 */
#ifndef VQ_LIMITS_H
#define VQ_LIMITS_H

/* Handler and queue names: ^[a-zA-Z0-9._-]{1,128}$ */
#define VQ_NAME_MAX 128
/* A caller-supplied job_id is 1 to this many bytes. */
#define VQ_JOB_ID_MAX 255
#define VQ_MAX_ATTEMPTS_LIMIT 1000

#define VQ_DEFAULT_QUEUE "default"
#define VQ_DEFAULT_PRIORITY 0
#define VQ_DEFAULT_MAX_ATTEMPTS 3

/*
 * Most executor processes one database can have: the vq.executors_per_database
 * that always run, and those started on demand (see VqExecutorSlot.running_visible).
 */
#define VQ_MAX_EXECUTORS 64

/*
 * Takes (vq_take_jobs calls of workers outside the server) in flight at once
 * per database that move claim positions; more take from the positions
 * without moving them.
 */
#define VQ_MAX_TAKERS 16

/* Claimers of a database's claim positions: its executors, then its takers. */
#define VQ_MAX_CLAIMERS (VQ_MAX_EXECUTORS + VQ_MAX_TAKERS)

/*
 * A claim lane: the jobs one claim scans. An executor's lane is a queue (its
 * function handlers' jobs); a worker's is one external handler's jobs in one
 * queue, named "queue/handler" ('/' is in no name).
 */
#define VQ_LANE_MAX (2 * VQ_NAME_MAX + 1)

#endif							/* VQ_LIMITS_H */
