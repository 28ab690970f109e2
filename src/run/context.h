/*
 * context.h: durable context bound to a session or a transaction and merged into enqueued jobs.
 */
#ifndef VQ_CONTEXT_H
#define VQ_CONTEXT_H

#include "postgres.h"

#include "utils/jsonb.h"

/*
 * Merge the bound context over the caller's metadata (NULL = none). A caller
 * namespace that is also bound raises an error instead of being overwritten.
 * Returns a jsonb object (never NULL).
 */
extern Jsonb *VqMergeBoundContext(Jsonb *metadata);

/* Define the vq.context setting that holds the bound context (from _PG_init). */
extern void VqContextInit(void);

/* Bind a job's context for the current GUC nest level (the executor ends it with the job). */
extern void VqBindContext(Jsonb *context);

#endif							/* VQ_CONTEXT_H */
