/*
 * compat.h: the few APIs that differ between the PostgreSQL versions vq_job builds on.
 * vq_job needs PostgreSQL 15 or later (shmem_request_hook, MarkGUCPrefixReserved).
 * It is built (warning-free) and tested on 15 only: postgresql-server-dev-15 is the only
 * server-headers package Debian 12 offers. The branches for 16 and later follow those
 * versions' headers but have not been compiled.
 */
#ifndef VQ_COMPAT_H
#define VQ_COMPAT_H

#include "postgres.h"
#include "utils/acl.h"

#if PG_VERSION_NUM >= 160000
#define vq_proc_aclcheck(fn, role, mode) object_aclcheck(ProcedureRelationId, (fn), (role), (mode))
#define vq_database_ownercheck(db, role) object_ownercheck(DatabaseRelationId, (db), (role))
#else
#define vq_proc_aclcheck(fn, role, mode) pg_proc_aclcheck((fn), (role), (mode))
#define vq_database_ownercheck(db, role) pg_database_ownercheck((db), (role))
#endif

/* PgStat_StatTabEntry's counters of a table: 16 renamed n_dead_tuples and autovac_vacuum_count. */
#if PG_VERSION_NUM >= 160000
#define vq_stat_dead_tuples(e) ((e)->dead_tuples)
#define vq_stat_vacuums(e) ((e)->vacuum_count + (e)->autovacuum_count)
#else
#define vq_stat_dead_tuples(e) ((e)->n_dead_tuples)
#define vq_stat_vacuums(e) ((e)->vacuum_count + (e)->autovac_vacuum_count)
#endif

#endif							/* VQ_COMPAT_H */
