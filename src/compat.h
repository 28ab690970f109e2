/*
 * compat.h: the few APIs that differ between the PostgreSQL versions we build on (13-17).
 */
#ifndef VQ_COMPAT_H
#define VQ_COMPAT_H

#include "postgres.h"
#include "utils/acl.h"

#if PG_VERSION_NUM >= 160000
#define vq_proc_aclcheck(fn, role, mode) object_aclcheck(ProcedureRelationId, (fn), (role), (mode))
#else
#define vq_proc_aclcheck(fn, role, mode) pg_proc_aclcheck((fn), (role), (mode))
#endif

#if PG_VERSION_NUM < 150000
#define MarkGUCPrefixReserved(prefix) EmitWarningsOnPlaceholders(prefix)
#endif

#endif							/* VQ_COMPAT_H */
