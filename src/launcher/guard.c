/*
 * guard.c: keep vq_job's executors out of the way of statements that need a
 * database to themselves, and tell them when their extension goes away.
 *
 * DROP DATABASE, CREATE DATABASE ... TEMPLATE and ALTER DATABASE ... RENAME /
 * SET TABLESPACE fail while other sessions are connected to the database, and
 * the executors are. Before such a statement runs, the ProcessUtility hook
 * asks the launcher to stop that database's executors for a while (and waits
 * for them to exit); when the statement's transaction ends, it lifts the
 * request (except after DROP DATABASE). It asks only when the caller may run
 * the statement: a role that would get "must be owner" from PostgreSQL stops
 * nothing.
 *
 * DROP EXTENSION vq_job: at commit, the executors are woken to look for the
 * extension at once, find it gone and exit.
 *
 * The hook also passes statements on: to session.c and rolejobs.c, a COPY
 * into vq_job's tables to restore.c (a restore), and PREPARE TRANSACTION /
 * COMMIT PREPARED / ROLLBACK PREPARED to wakeup.c (which keeps the notes of
 * a prepared transaction in prepared.c).
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/syscache.h"

#include "main/compat.h"
#include "main/requests.h"
#include "state/wakeup.h"
#include "run/session.h"
#include "executors/restore.h"
#include "launcher/guard.h"
#include "launcher/rolejobs.h"

static ProcessUtility_hook_type prev_process_utility = NULL;

/* Is this a DROP EXTENSION naming vq_job? */
static bool
DropsThisExtension(Node *stmt)
{
	ListCell   *lc;

	if (!IsA(stmt, DropStmt) || ((DropStmt *) stmt)->removeType != OBJECT_EXTENSION)
		return false;
	foreach(lc, ((DropStmt *) stmt)->objects)
		if (strcmp(strVal(lfirst(lc)), "vq_job") == 0)
			return true;
	return false;
}

/* Does the current role own the database (superusers own everything)? */
static bool
OwnsDatabase(Oid dboid)
{
	return vq_database_ownercheck(dboid, GetUserId());
}

/* Has the current role CREATEDB (superusers have)? */
static bool
MayCreateDatabases(void)
{
	HeapTuple	tup;
	bool		createdb = false;

	if (superuser())
		return true;
	tup = SearchSysCache1(AUTHOID, ObjectIdGetDatum(GetUserId()));
	if (HeapTupleIsValid(tup))
	{
		createdb = ((Form_pg_authid) GETSTRUCT(tup))->rolcreatedb;
		ReleaseSysCache(tup);
	}
	return createdb;
}

/* May the current role copy this database (CREATEDB, and a template or its owner)? */
static bool
MayCopyDatabase(Oid dboid)
{
	HeapTuple	tup;
	bool		is_template;

	if (!MayCreateDatabases())
		return false;
	tup = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(dboid));
	if (!HeapTupleIsValid(tup))
		return false;
	is_template = ((Form_pg_database) GETSTRUCT(tup))->datistemplate;
	ReleaseSysCache(tup);
	return is_template || OwnsDatabase(dboid);
}

/* The database named by a CREATE DATABASE's TEMPLATE option, or InvalidOid. */
static Oid
TemplateDatabase(CreatedbStmt *stmt)
{
	ListCell   *lc;

	foreach(lc, stmt->options)
	{
		DefElem    *opt = lfirst(lc);

		if (strcmp(opt->defname, "template") == 0 && opt->arg != NULL)
			return get_database_oid(defGetString(opt), true);
	}
	return InvalidOid;
}

/* Does an ALTER DATABASE move the database to another tablespace? */
static bool
MovesTablespace(AlterDatabaseStmt *stmt)
{
	ListCell   *lc;

	foreach(lc, stmt->options)
		if (strcmp(((DefElem *) lfirst(lc))->defname, "tablespace") == 0)
			return true;
	return false;
}

/*
 * The database a utility statement needs to itself, when the current role
 * may run that statement on it; else InvalidOid (PostgreSQL then reports its
 * own error, and nothing else happens).
 */
static Oid
DatabaseNeededAlone(Node *stmt)
{
	Oid			dboid = InvalidOid;
	bool		allowed = false;

	switch (nodeTag(stmt))
	{
		case T_DropdbStmt:
			dboid = get_database_oid(((DropdbStmt *) stmt)->dbname, true);
			allowed = OidIsValid(dboid) && OwnsDatabase(dboid);
			break;
		case T_CreatedbStmt:
			dboid = TemplateDatabase((CreatedbStmt *) stmt);
			allowed = OidIsValid(dboid) && MayCopyDatabase(dboid);
			break;
		case T_RenameStmt:
			if (((RenameStmt *) stmt)->renameType != OBJECT_DATABASE)
				break;
			dboid = get_database_oid(((RenameStmt *) stmt)->subname, true);
			allowed = OidIsValid(dboid) && OwnsDatabase(dboid) && MayCreateDatabases();
			break;
		case T_AlterDatabaseStmt:
			if (!MovesTablespace((AlterDatabaseStmt *) stmt))
				break;
			dboid = get_database_oid(((AlterDatabaseStmt *) stmt)->dbname, true);
			allowed = OidIsValid(dboid) && OwnsDatabase(dboid);
			break;
		default:
			break;
	}
	return allowed ? dboid : InvalidOid;
}

/* ProcessUtility hook: get vq_job's executors out of the way of database-level statements. */
static void
VqProcessUtility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
				 ProcessUtilityContext context, ParamListInfo params,
				 QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *stmt = pstmt->utilityStmt;
	Oid			dboid = DatabaseNeededAlone(stmt);

	VqSessionNoteStatement(stmt);
	VqCheckDropRole(stmt);
	VqRestoreNoteStatement(stmt);
	if (IsA(stmt, TransactionStmt))
		VqWakeupTransactionBegins((TransactionStmt *) stmt);
	if (OidIsValid(dboid))
		VqRequestStop(dboid);
	if (DropsThisExtension(stmt))
		VqWakeOnExtensionChangeAtCommit();

	/*
	 * When the statement's transaction ends, lift the stop (a dropped
	 * database stays stopped) and let the launcher look around: a new
	 * database may need serving.
	 */
	if (OidIsValid(dboid) || IsA(stmt, CreatedbStmt))
		VqResumeDatabaseAtEnd(IsA(stmt, DropdbStmt) ? InvalidOid : dboid);

	if (prev_process_utility)
		prev_process_utility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
	/* (COMMIT PREPARED: committed, its invalidations sent and its locks released by now) */
	if (IsA(stmt, TransactionStmt))
		VqWakeupTransactionDone((TransactionStmt *) stmt);
}

/* Install the utility hook (from _PG_init). */
void
VqGuardInit(void)
{
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = VqProcessUtility;
}
