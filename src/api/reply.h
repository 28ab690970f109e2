/*
 * reply.h: what becomes of jobs that workers outside the server took, when
 * they answer (see reply.c).
 */
#ifndef VQ_REPLY_H
#define VQ_REPLY_H

#include "postgres.h"

#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "main/job.h"
#include "cache/registry.h"

typedef enum VqReplyKind
{
	VQ_REPLY_COMPLETE,			/* done: COMPLETED */
	VQ_REPLY_FAIL,				/* failed: retried after the backoff, or dead-lettered */
	VQ_REPLY_RETRY,				/* failed: retried at retry_at, or dead-lettered */
	VQ_REPLY_RELEASE			/* never started: ENQUEUED again, attempt and place kept */
} VqReplyKind;

/* One reply. */
typedef struct VqReply
{
	pg_uuid_t	execution_id;
	bool		has_attempt;	/* else: whatever attempt the job is at */
	int32		attempt;
	VqReplyKind kind;
	const char *error;			/* FAIL / RETRY (already cut to the stored length) */
	TimestampTz retry_at;		/* RETRY: when (0: now) */
	char	   *ignored;		/* out: why the reply was not applied (NULL: applied); in SPI memory */
} VqReply;

/*
 * Apply the replies of caller (connected to SPI as the extension owner):
 * completions in one set-based statement when nothing must see them one by
 * one, everything else one job at a time. Each reply's ignored says whether
 * it was applied.
 */
extern void VqApplyReplies(VqRegistry *registry, Oid caller, VqReply *replies, int n);

/* May caller consume every job of this external handler (a consumer grant, or a superuser)? */
extern bool VqGrantedConsumer(Oid caller, const char *handler);

/*
 * The SQL condition that the role in parameter n may act on the job j: a
 * member of its enqueuing role, or, for an external handler's job only, of a
 * role granted for its handler (a function handler's job is nobody's to
 * consume, whatever the grants of an external handler once registered under
 * its name).
 */
/*
 * A job a worker holds now (j the table's alias): a lease is set exactly
 * while a worker holds the job (RUNNING, no executor). Written without
 * state = 'RUNNING' on purpose: that would let the planner walk the partial
 * index job_running_idx (every job held, and every version a held snapshot
 * keeps) instead of probing the primary key once per job named.
 */
#define VQ_HELD(j) " " j ".lease_until IS NOT NULL"

#define VQ_MAY_CONSUME(n) \
	" (pg_catalog.pg_has_role(" n ", j.enqueued_by, 'USAGE')" \
	"  OR (j.handler_function IS NULL AND EXISTS (SELECT FROM vq.consumer_grant g" \
	"      WHERE g.handler OPERATOR(pg_catalog.=) j.handler" \
	"      AND pg_catalog.pg_has_role(" n ", g.grantee, 'USAGE'))))"

#endif							/* VQ_REPLY_H */
