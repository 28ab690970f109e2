/*
 * take.h: the takes of workers outside the server (vq_take_jobs): due jobs
 * of external handlers made RUNNING under a lease, in claim order, within
 * the queues' capacity (see take.c).
 */
#ifndef VQ_TAKE_H
#define VQ_TAKE_H

#include "postgres.h"

#include "access/tupdesc.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "main/shmem.h"
#include "cache/registry.h"

/* What a take asks for. */
typedef struct VqTakeRequest
{
	VqHandler **handlers;		/* external handlers, in the caller's order */
	int			nhandlers;
	int			max_jobs;
	int64		lease_ms;		/* each job's lease: until the take's start + this */
	Oid			caller;			/* the role taking: a member of each job's role, or granted */
} VqTakeRequest;

/*
 * The columns of a taken job as VqTakeJobs returns them (vq_take_jobs' result):
 * execution_id, attempt, handler, job_id, payload, metadata, queue, priority,
 * max_attempts, scheduled_at, lease_until.
 */
#define VQ_TAKE_COLUMNS 11

/*
 * Take up to max_jobs due jobs (connected to SPI as the extension owner);
 * each taken job is put into store (VQ_TAKE_COLUMNS columns, in claim
 * order). Returns how many.
 */
extern int	VqTakeJobs(VqRegistry *registry, const VqTakeRequest *req, Tuplestorestate *store, TupleDesc desc);

/*
 * The earliest scheduled_at of an external handler's ENQUEUED job still in
 * the future, or VQ_NO_NEXT_DUE (executors, to know when to wake workers):
 * one index probe per priority level of each (queue, handler) lane that
 * may hold jobs (the known lanes, or those a query finds).
 */
extern TimestampTz VqTakeEarliestFutureDue(VqRegistry *registry, TimestampTz now);

/* The launcher gives the slot to a database: no take is in flight (caller holds the slot's lock). */
extern void VqTakersForget(VqDatabaseSlot *slot);

#endif							/* VQ_TAKE_H */
