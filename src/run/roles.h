/*
 * roles.h: every switch of vq_job's current user, in one place.
 */
#ifndef VQ_ROLES_H
#define VQ_ROLES_H

#include "postgres.h"

/* Who to switch back to. */
typedef struct VqSavedUser
{
	Oid			userid;
	int			sec_context;
	int			gucnestlevel;	/* user code only */
} VqSavedUser;

/* vq_job's own writes, as the extension owner (PUBLIC may not write its tables). */
extern void VqBecomeOwner(Oid owner, VqSavedUser *saved);

/* Back from VqBecomeOwner. */
extern void VqRestoreUser(VqSavedUser *saved);

/*
 * The same on an SPI connection of its own, for a function called by a
 * client or a trigger (the caller was checked first): connect as the
 * extension owner, and finish and switch back (an error does both with the
 * (sub)transaction).
 */
extern void VqConnectAsOwner(Oid owner, VqSavedUser *saved);
extern void VqFinishAsOwner(VqSavedUser *saved);

/* Record the session user in session_authorization (executors, once, in a transaction). */
extern void VqRecordSessionUser(void);

/*
 * User code (a handler, a destination function) as role, in a session that is
 * the role's (session_user too), at a new GUC nest level, with search_path =
 * vq.handler_search_path + pg_temp; and back, firing its deferred triggers
 * first. (An error rolls the switch back with the (sub)transaction.) Call
 * VqSessionCleanUp after the (sub)transaction ends.
 */
extern void VqEnterUserCode(Oid role, VqSavedUser *saved);
extern void VqLeaveUserCode(VqSavedUser *saved);

/*
 * An administrator's callback (an interceptor, a transition listener) as the
 * owner of its function: a security-restricted operation at a new GUC nest
 * level (it can neither change role nor leave anything in the session), with
 * search_path = VQ_WORKER_SEARCH_PATH (the executors' own, settings.h); and back.
 */
extern void VqEnterCallback(Oid owner, VqSavedUser *saved);
extern void VqLeaveCallback(VqSavedUser *saved);

#endif							/* VQ_ROLES_H */
