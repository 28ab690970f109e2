/*
 * session.h: what a handler leaves in the executor's session, removed after
 * every job.
 */
#ifndef VQ_SESSION_H
#define VQ_SESSION_H

#include "postgres.h"

#include "nodes/nodes.h"

/* User code of this role starts (VqEnterUserCode calls it). */
extern void VqSessionUserCodeBegins(Oid role);

/* The utility hook saw this statement (notes what must be undone after the job). */
extern void VqSessionNoteStatement(Node *stmt);

/*
 * After a job's (sub)transaction ended, however it ended: drop what its user
 * code left in the session. Returns true when the open transaction must end
 * before other user code runs in it (the code changed its constraint modes).
 */
extern bool VqSessionCleanUp(void);

#endif							/* VQ_SESSION_H */
