/*
 * compat.h: the few APIs that differ between the PostgreSQL versions vq_job builds on.
 * vq_job needs PostgreSQL 15 or later (shmem_request_hook, MarkGUCPrefixReserved);
 * it is tested on 15.
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

#endif							/* VQ_COMPAT_H */
