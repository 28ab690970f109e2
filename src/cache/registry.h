/*
 * registry.h: per-backend cache of vq_job's configuration (queues, handlers with
 * their effective settings), rebuilt when a committed change invalidates it.
 */
#ifndef VQ_REGISTRY_H
#define VQ_REGISTRY_H

#include "postgres.h"

#include "datatype/timestamp.h"

#include "fmgr.h"
#include "nodes/pg_list.h"
#include "utils/hsearch.h"

#include "main/limits.h"
#include "util/backoff.h"

typedef struct VqQueue
{
	char		name[VQ_NAME_MAX + 1];	/* hash key */
	int32		sleep_delay_ms;
	int32		max_concurrent_jobs;
	VqBackoffStrategy backoff_strategy;
	int32		backoff_base_delay_ms;
	int32		backoff_max_delay_ms;
	int32		instances;
	bool		paused;
	Datum		name_datum;		/* text, for SPI parameters */
	uint32		wake_hint;		/* VqNameHash(name): names it in a wake-up */
	List	   *granted;		/* vq.queue_grant grantees (Oids): may choose it, or raise priority / attempts */
} VqQueue;

typedef struct VqHandler
{
	char		name[VQ_NAME_MAX + 1];	/* hash key */
	bool		is_function;	/* else a NOTIFY handler */
	Oid			fn;				/* function handler's function */
	bool		takes_context;	/* (jsonb, vq.job_context) signature */
	char	   *channel;		/* NOTIFY handler's channel */
	char	   *address;		/* persisted dispatch address */
	/* effective settings: contract override > handler default > framework default */
	VqQueue    *queue;
	char	   *queue_name;		/* may name a queue dropped since (then queue is NULL) */
	int32		priority;
	int32		max_attempts;
	int32		max_running;	/* most of its jobs running at once (0: no limit but the queue's) */
	Interval   *unique_for;		/* idempotency window of its jobs with a job_id (NULL: none) */
	List	   *producers;		/* NOTIFY handler: vq.producer_grant grantees (Oids) */
	Datum		name_datum;		/* text, for SPI parameters */
	Datum		address_datum;	/* text, for SPI parameters */
} VqHandler;

/* A user-registered outbox destination type. */
typedef struct VqDestination
{
	char		type[VQ_NAME_MAX + 1];	/* hash key */
	Oid			fn;
} VqDestination;

/* An interceptor (vq.interceptor), called around every dispatch; see interceptors.c. */
typedef struct VqInterceptor
{
	char	   *name;
	int32		position;
	Oid			on_dispatch;	/* InvalidOid: none (functions are looked up through funccache.c) */
	Oid			on_complete;
} VqInterceptor;

typedef struct VqRegistry
{
	MemoryContext mcxt;			/* holds this registry and everything it points to */
	int			pins;			/* VqRegistryPin calls not yet released */
	Oid			owner;			/* extension owner: runs vq_job's own writes */
	int			nhandlers;
	VqHandler **handlers;		/* sorted by name */
	struct HTAB *handler_hash;
	struct HTAB *queue_hash;
	struct HTAB *destination_hash;
	int			ndestinations;
	bool		has_notify_handlers;
	bool		has_limited_handlers;	/* a handler has max_running */
	bool		has_listeners;	/* vq.transition_listener has rows */
	List	   *interceptors;	/* VqInterceptor *, in (position, name) order */
	uint64		generation;		/* counts the builds in this backend: tells copies apart */
} VqRegistry;

/* A backend-local hash table keyed by a handler's or a queue's name (char[VQ_NAME_MAX + 1] first in the entry). */
extern HTAB *VqNameTable(const char *what, long nelem, Size entrysize, MemoryContext cxt);

/* Register the invalidation callback (from _PG_init). */
extern void VqRegistryInit(void);

/*
 * The current registry, rebuilt if a change was committed since it was read.
 * Pointers into it stay valid until the next call of VqRegistryGet or
 * VqRegistryPin, in this backend, which may free it. Use it within one
 * function that runs no user code in between.
 */
extern VqRegistry *VqRegistryGet(void);

/* The same, or NULL when the extension is not installed (no error). */
extern VqRegistry *VqRegistryGetIfInstalled(void);

/*
 * The current registry, pinned: a rebuild leaves it alone, and pointers into
 * it stay valid until the matching VqRegistryRelease (which frees it if it
 * was replaced meanwhile). For whoever keeps pointers while user code runs
 * (a handler may enqueue, and so rebuild the registry). Pins are not released
 * by an error: only a process that exits on error (an executor) may hold one
 * across a call that can fail.
 */
extern VqRegistry *VqRegistryPin(void);
extern void VqRegistryRelease(VqRegistry *registry);

extern VqHandler *VqLookupHandler(VqRegistry *registry, const char *name);
extern VqQueue *VqLookupQueue(VqRegistry *registry, const char *name);
extern VqDestination *VqLookupDestination(VqRegistry *registry, const char *type);

/* Raise the "handler is not registered" error, listing registered names. */
extern void VqReportUnregisteredHandler(VqRegistry *registry, const char *name) pg_attribute_noreturn();

#endif							/* VQ_REGISTRY_H */
