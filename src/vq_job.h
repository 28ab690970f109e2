/*
 * vq_job.h: declarations shared by the vq_job sources (GUCs, error codes, limits).
 */
#ifndef VQ_JOB_H
#define VQ_JOB_H

#include "postgres.h"

#include "datatype/timestamp.h"

/* Handler and queue names: ^[a-zA-Z0-9._-]{1,128}$ */
#define VQ_NAME_MAX 128
/* A caller-supplied job_id is 1 to this many bytes. */
#define VQ_JOB_ID_MAX 255
#define VQ_MAX_ATTEMPTS_LIMIT 1000

#define VQ_DEFAULT_QUEUE "default"
#define VQ_DEFAULT_PRIORITY 0
#define VQ_DEFAULT_MAX_ATTEMPTS 3

/*
 * SQLSTATEs. Class VQ0xx: enqueue validation; VQ1xx: configuration (queues,
 * handlers, contract overrides); VQ2xx: an operation refused because of the
 * jobs it would touch (raised by the install script). Persistence errors keep PostgreSQL's own codes
 * (40001, 40P01, 55P03, 08xxx), which clients already treat as retryable.
 */
#define ERRCODE_VQ_INVALID_HANDLER_NAME     MAKE_SQLSTATE('V','Q','0','0','1')
#define ERRCODE_VQ_HANDLER_NOT_REGISTERED   MAKE_SQLSTATE('V','Q','0','0','2')
#define ERRCODE_VQ_INVALID_MAX_ATTEMPTS     MAKE_SQLSTATE('V','Q','0','0','3')
#define ERRCODE_VQ_UNKNOWN_QUEUE            MAKE_SQLSTATE('V','Q','0','0','4')
#define ERRCODE_VQ_CONTEXT_COLLISION        MAKE_SQLSTATE('V','Q','0','0','5')
#define ERRCODE_VQ_INVALID_METADATA         MAKE_SQLSTATE('V','Q','0','0','6')
#define ERRCODE_VQ_INVALID_JOB_ID           MAKE_SQLSTATE('V','Q','0','0','7')
#define ERRCODE_VQ_INVALID_ARGUMENT         MAKE_SQLSTATE('V','Q','0','0','8')
#define ERRCODE_VQ_NOT_IN_JOB               MAKE_SQLSTATE('V','Q','0','0','9')
#define ERRCODE_VQ_NO_SUCH_JOB              MAKE_SQLSTATE('V','Q','0','1','0')
#define ERRCODE_VQ_REPLY_IGNORED            MAKE_SQLSTATE('V','Q','0','1','1')
#define ERRCODE_VQ_TOO_LARGE                MAKE_SQLSTATE('V','Q','0','1','2')
#define ERRCODE_VQ_INVALID_DESTINATION      MAKE_SQLSTATE('V','Q','1','0','5')
#define ERRCODE_VQ_JOB_ID_CONFLICT          MAKE_SQLSTATE('V','Q','2','0','1')

/* GUCs (vq_job.c). */
extern int	vq_execution_timeout_ms;
extern int	vq_notify_take_timeout_ms;
extern int	vq_cancel_grace_ms;
extern int	vq_progress_flush_interval_ms;
extern int	vq_log_max_lines;
extern int	vq_max_payload_bytes;
extern int	vq_max_metadata_bytes;
extern int	vq_log_max_line_bytes;
extern char *vq_databases;
extern int	vq_max_databases;
extern int	vq_executors_per_database;
extern int	vq_max_executors;
extern int	vq_batch_size;
extern int	vq_inline_handler_ms;
extern int	vq_shutdown_grace_ms;
extern char *vq_handler_search_path;
extern int	vq_retention_finished_s;
extern int	vq_retention_dead_letter_s;
extern int	vq_retention_outbox_failed_s;
extern bool vq_worker_synchronous_commit;
extern bool vq_serve_database;
extern bool vq_log_failures;

/* True when name matches ^[a-zA-Z0-9._-]{1,128}$. */
extern bool vq_valid_name(const char *name, int len);

/* Error (VQ012) when a jsonb argument is larger than limit bytes (what names it). */
extern void VqCheckSize(Datum jsonb, int limit, const char *what, const char *setting);

/* Error (VQ008) unless t is a finite timestamp (what names the argument). */
extern void VqCheckFiniteTime(TimestampTz t, const char *what);

/* t + span; error (VQ008, naming what) when that may leave the timestamp range. */
extern TimestampTz VqAddInterval(TimestampTz t, const Interval *span, const char *what);

/* An error text as stored (last_error, transitions, logs): within vq.log_max_line_bytes. */
extern char *VqCapText(const char *text);

/* text within limit bytes: cut at a character boundary and marked when it is longer. */
extern char *VqCapTextTo(const char *text, int limit);

/* Error (25006, in vq's words) when the current transaction cannot write (what: the function). */
extern void VqRequireWritable(const char *what);

#endif							/* VQ_JOB_H */
