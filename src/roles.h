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
 * User code (a handler, a destination function) as role: a security-
 * restricted operation at a new GUC nest level, with search_path =
 * vq.handler_search_path + pg_temp; and back. (An error rolls the switch back
 * with the (sub)transaction.)
 */
extern void VqEnterUserCode(Oid role, VqSavedUser *saved);
extern void VqLeaveUserCode(VqSavedUser *saved);

#endif							/* VQ_ROLES_H */
