/*
 * session.c: a job's session ends with the job.
 *
 * A handler runs in the executor's process, in a session that is the
 * enqueuing role's while it runs (roles.c: session_user, current_user and
 * is_superuser are that role's; settings live at a GUC nest level that ends
 * with it). What PostgreSQL keeps per session beyond a transaction is removed
 * here after every job, whether the handler returned or raised: prepared
 * statements, cursors (WITH HOLD ones included), temporary objects, session
 * advisory locks, and, when the next job belongs to
 * another role, the sequence values lastval() / currval() would show.
 *
 * Transaction-scoped state needs no cleanup because jobs of different roles
 * never share a transaction (executor.c). One exception: SET CONSTRAINTS
 * changes the constraint modes for the rest of the transaction, so after a
 * handler that ran it the executor ends the transaction before the next job.
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "commands/async.h"
#include "commands/prepare.h"
#include "commands/sequence.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "storage/lock.h"
#include "utils/portal.h"

#include "session.h"

/* The role whose code ran since the last cleanup (InvalidOid: none). */
static Oid	user_code_role = InvalidOid;
/* The role whose code ran last: lastval() must not cross to another role. */
static Oid	last_role = InvalidOid;
/* The user code ran SET CONSTRAINTS. */
static bool constraints_set = false;

void
VqSessionUserCodeBegins(Oid role)
{
	if (role != last_role)
		ResetSequenceCaches();
	user_code_role = role;
	last_role = role;
}

void
VqSessionNoteStatement(Node *stmt)
{
	if (OidIsValid(user_code_role) && IsA(stmt, ConstraintsSetStmt))
		constraints_set = true;
}

bool
VqSessionCleanUp(void)
{
	Oid			temp_namespace;
	Oid			temp_toast_namespace;
	bool		end_transaction = constraints_set;

	if (!OidIsValid(user_code_role))
		return false;

	DropAllPreparedStatements();
	/* cursors: none of the executor's own is open between jobs */
	PortalHashTableDeleteAll();
	LockReleaseSession(USER_LOCKMETHOD);
	/* (PostgreSQL refuses LISTEN in a background process; should that change, this undoes it) */
	Async_UnlistenAll();
	GetTempNamespaceState(&temp_namespace, &temp_toast_namespace);
	if (OidIsValid(temp_namespace))
		ResetTempTableNamespace();
	user_code_role = InvalidOid;
	constraints_set = false;
	return end_transaction;
}
