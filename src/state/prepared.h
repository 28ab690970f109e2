/*
 * prepared.h: the wake-up notes of prepared transactions, kept from PREPARE
 * TRANSACTION until COMMIT PREPARED (see prepared.c).
 */
#ifndef VQ_PREPARED_H
#define VQ_PREPARED_H

#include "postgres.h"

#include "nodes/parsenodes.h"

#include "state/wakeup.h"

/* Reserve the shared table (from _PG_init). */
extern void VqPreparedInit(void);

/* The utility hook is about to run a transaction statement. */
extern void VqPreparedStatementBegins(TransactionStmt *stmt);

/* The utility hook ran a transaction statement without an error. */
extern void VqPreparedStatementDone(TransactionStmt *stmt);

/* PREPARE TRANSACTION (wakeup.c, at XACT_EVENT_PREPARE): keep this transaction's notes under its GID. */
extern void VqPreparedKeepNotes(const VqWakeNotes *notes);

#endif							/* VQ_PREPARED_H */
