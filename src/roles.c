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
#include "utils/guc.h"

#include "roles.h"
#include "vq_job.h"

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

/*
 * User code as role: SECURITY_RESTRICTED_OPERATION (no role change, no
 * temporary objects that outlive it), at a new GUC nest level with
 * search_path = vq.handler_search_path + pg_temp.
 */
void
VqEnterUserCode(Oid role, VqSavedUser *saved)
{
	SwitchUser(role, SECURITY_RESTRICTED_OPERATION, saved);
	saved->gucnestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", psprintf("%s, pg_temp", vq_handler_search_path),
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
}

/* Back from user code: whatever it SET (even without LOCAL) ends with it; restore the user. */
void
VqLeaveUserCode(VqSavedUser *saved)
{
	AtEOXact_GUC(false, saved->gucnestlevel);
	SetUserIdAndSecContext(saved->userid, saved->sec_context);
}
