/*
 * guc.h: the vq.* configuration parameters (guc.c).
 */
#ifndef VQ_GUC_H
#define VQ_GUC_H

#include "postgres.h"

/* The vq.* settings (see VqDefineSettings). */
extern int	vq_execution_timeout_ms;
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

/* Define the vq.* settings (from _PG_init). */
extern void VqDefineSettings(void);

/* Is this database in vq.databases (or is that list empty)? */
extern bool VqDatabaseSelected(const char *name);

#endif							/* VQ_GUC_H */
