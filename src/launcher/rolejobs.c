/*
 * rolejobs.c: a role and its unfinished work stay consistent.
 *
 * A job runs as the role that enqueued it, and an outbox row is delivered as
 * the role that published it, both recorded by OID. Dropping such a role
 * would leave them to a role created later under the same OID, or to
 * dead-letter for no reason of theirs. So DROP ROLE of a role that still has
 * unfinished jobs or undelivered outbox rows in this database is refused,
 * with the counts and what to do: cancel them (vq_cancel), or hand them to
 * another role with vq_reassign_jobs(from, to) (not granted to PUBLIC).
 *
 * The check sees the database DROP ROLE runs in: PostgreSQL gives a session
 * no look into other databases. A role dropped from another database leaves
 * the jobs here to dead-letter when they come due ("role ... no longer
 * exists"), never to run as anyone else.
 *
 * It runs before PostgreSQL's own checks, so it first makes sure the caller
 * may drop the role at all (CREATEROLE; a superuser for a superuser role):
 * anyone else gets PostgreSQL's error and learns nothing about the jobs.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "utils/acl.h"

#include "util/spi_util.h"
#include "cache/registry.h"
#include "run/roles.h"
#include "launcher/rolejobs.h"

/* How many unfinished jobs and undelivered outbox rows a role has in this database. */
static void
CountUnfinished(Oid role, int64 *jobs, int64 *rows)
{
	static SPIPlanPtr count_plan = NULL;
	VqRegistry *registry = VqRegistryGet();
	Datum		values[1] = {ObjectIdGetDatum(role)};
	VqSavedUser saved;
	bool		isnull;

	VqConnectAsOwner(registry->owner, &saved);
	if (SPI_execute_plan(VqKeepPlan(&count_plan,
							  "SELECT (SELECT pg_catalog.count(*) FROM vq.job_active"
							  "         WHERE enqueued_by OPERATOR(pg_catalog.=) $1),"
							  "       (SELECT pg_catalog.count(*) FROM vq.outbox"
							  "         WHERE published_by OPERATOR(pg_catalog.=) $1"
							  "         AND status OPERATOR(pg_catalog.=) 'PENDING')",
							  1, (Oid[]) {REGROLEOID}),
						 values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "vq_job: counting a role's unfinished jobs failed");
	*jobs = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	*rows = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	VqFinishAsOwner(&saved);
}

void
VqCheckDropRole(Node *stmt)
{
	ListCell   *lc;

	if (!IsA(stmt, DropRoleStmt) || !has_createrole_privilege(GetUserId()) ||
		!OidIsValid(get_extension_oid("vq_job", true)))
		return;
	foreach(lc, ((DropRoleStmt *) stmt)->roles)
	{
		RoleSpec   *spec = lfirst(lc);
		Oid			role;
		int64		jobs;
		int64		rows;

		if (spec->roletype != ROLESPEC_CSTRING)
			continue;			/* (CURRENT_USER and the like: PostgreSQL refuses to drop those) */
		role = get_role_oid(spec->rolename, true);
		if (!OidIsValid(role) || (superuser_arg(role) && !superuser()))
			continue;
		CountUnfinished(role, &jobs, &rows);
		if (jobs + rows > 0)
			ereport(ERROR,
					(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
					 errmsg("role \"%s\" cannot be dropped because it has %lld unfinished vq_job job(s) and %lld undelivered outbox row(s) in database \"%s\"",
							spec->rolename, (long long) jobs, (long long) rows, get_database_name(MyDatabaseId)),
					 errhint("Cancel them with vq_cancel(), or hand them to another role with SELECT vq_reassign_jobs('%s', 'new_role'); then drop the role.",
							 spec->rolename)));
	}
}
