/*
 * roles.c: every switch of vq_job's current user, in one place.
 *
 * vq_job writes its tables as the extension owner (after checking the caller
 * itself) and runs user code as the role the work belongs to, never with more
 * rights. A
 * transaction or subtransaction abort restores the user and security context
 * it started with, so an error between a switch and its restore leaves
 * nothing behind.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "commands/trigger.h"
#include "catalog/namespace.h"
#include "executor/spi.h"
#include "utils/guc.h"

#include "main/guc.h"
#include "run/roles.h"
#include "run/session.h"
#include "run/settings.h"

/* Switch to userid, keeping the security context bits we had and adding extra ones. */
static void
SwitchUser(Oid userid, int extra, VqSavedUser *saved)
{
	GetUserIdAndSecContext(&saved->userid, &saved->sec_context);
	saved->gucnestlevel = 0;
	SetUserIdAndSecContext(userid, saved->sec_context | SECURITY_LOCAL_USERID_CHANGE | extra);
}

/* vq_job's own writes, as the extension owner. */
void
VqBecomeOwner(Oid owner, VqSavedUser *saved)
{
	SwitchUser(owner, 0, saved);
}

/* Back from VqBecomeOwner. */
void
VqRestoreUser(VqSavedUser *saved)
{
	SetUserIdAndSecContext(saved->userid, saved->sec_context);
}

/* vq_job's own statements on an SPI connection of their own, as the extension owner (see roles.h). */
void
VqConnectAsOwner(Oid owner, VqSavedUser *saved)
{
	VqBecomeOwner(owner, saved);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "vq_job: SPI_connect failed");
}

/* Back from VqConnectAsOwner: the connection is finished, the user is ours again. */
void
VqFinishAsOwner(VqSavedUser *saved)
{
	SPI_finish();
	VqRestoreUser(saved);
}

/*
 * A background worker connected without a user name starts with no
 * session_authorization setting: record the session user in it (as a normal
 * connection does), so that the value VqEnterUserCode saves restores this
 * session user when user code ends. In a transaction (the check looks the
 * role up).
 */
void
VqRecordSessionUser(void)
{
	SetConfigOption("session_authorization", GetUserNameFromId(GetSessionUserId(), false),
					PGC_SUSET, PGC_S_OVERRIDE);
}

/*
 * User code as role, in a session that is the role's: session_user,
 * current_user and is_superuser are the role's (set at a new GUC nest level,
 * so they end with the code, as its own SETs do), and
 * SECURITY_LOCAL_USERID_CHANGE forbids SET ROLE and SET SESSION AUTHORIZATION
 * (the executor connected as a superuser: those would regain its rights).
 * Not a security-restricted operation: deferred constraints and triggers
 * must be able to fire, and what a handler leaves in the session is removed
 * after the job instead (session.c). Its settings are those a session of the
 * role in this database would get (settings.c), but search_path =
 * vq.handler_search_path + pg_temp.
 */
void
VqEnterUserCode(Oid role, VqSavedUser *saved)
{
	GetUserIdAndSecContext(&saved->userid, &saved->sec_context);
	Assert(saved->sec_context == 0);
	saved->gucnestlevel = NewGUCNestLevel();
	(void) set_config_option("session_authorization", GetUserNameFromId(role, false),
							 PGC_SUSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	SetUserIdAndSecContext(role, SECURITY_LOCAL_USERID_CHANGE);
	/* what a session of the role in this database would get (settings.c) */
	VqApplyUserCodeSettings(role);
	(void) set_config_option("search_path", psprintf("%s, pg_temp", vq_handler_search_path),
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	VqSessionUserCodeBegins(role);
}

/*
 * Back from user code that returned: its deferred constraints and triggers
 * are checked now, as its own (an error is the code's error); whatever it SET
 * (even without LOCAL) ends with it; the session and current user are ours
 * again.
 */
void
VqLeaveUserCode(VqSavedUser *saved)
{
	AfterTriggerFireDeferred();
	SetUserIdAndSecContext(saved->userid, saved->sec_context);
	AtEOXact_GUC(false, saved->gucnestlevel);
}

/* An administrator's callback as the owner of its function (see roles.h). */
void
VqEnterCallback(Oid owner, VqSavedUser *saved)
{
	SwitchUser(owner, SECURITY_RESTRICTED_OPERATION, saved);
	saved->gucnestlevel = NewGUCNestLevel();
	/* executors run with this path already; a client's session (a consumer's reply) may not */
	if (strcmp(namespace_search_path, VQ_WORKER_SEARCH_PATH) != 0)
		(void) set_config_option("search_path", VQ_WORKER_SEARCH_PATH,
								 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
}

/* Back from a callback that returned. */
void
VqLeaveCallback(VqSavedUser *saved)
{
	AtEOXact_GUC(false, saved->gucnestlevel);
	SetUserIdAndSecContext(saved->userid, saved->sec_context);
}
