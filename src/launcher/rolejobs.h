/*
 * rolejobs.h: DROP ROLE is refused while the role has unfinished work here.
 */
#ifndef VQ_ROLEJOBS_H
#define VQ_ROLEJOBS_H

#include "postgres.h"

#include "nodes/nodes.h"

/* The utility hook's check: error if stmt drops a role with unfinished jobs or outbox rows. */
extern void VqCheckDropRole(Node *stmt);

#endif							/* VQ_ROLEJOBS_H */
