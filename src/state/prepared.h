/*
 * prepared.h: the wake-up notes of prepared transactions, kept in shared
 * memory from PREPARE TRANSACTION until COMMIT PREPARED (see prepared.c).
 */
#ifndef VQ_PREPARED_H
#define VQ_PREPARED_H

#include "postgres.h"

#include "utils/timestamp.h"

#include "main/limits.h"

/* Claim levels a prepared transaction's notes keep (with more, its commit forgets every position). */
#define VQ_PREPARED_LEVELS 4

/* What a transaction noted for its commit (state/wakeup.c), as a prepared transaction keeps it. */
typedef struct VqWakeNotes
{
	int			nlevels;
	struct
	{
		char		lane[VQ_LANE_MAX + 1];
		int32		priority;
		TimestampTz scheduled_at;
	}			levels[VQ_PREPARED_LEVELS];
	bool		forget_positions;
	bool		due;
	uint32		queue_hint;
	TimestampTz next_due;
	uint64		takers;			/* VqTakeWakeBit of the external handlers given due jobs */
	bool		relay;
	int64		relay_low_id;
	bool		callbacks;
	bool		extension_changed;
} VqWakeNotes;

/* Reserve the shared table (from _PG_init). */
extern void VqPreparedInit(void);

/* The utility hook is about to run PREPARE TRANSACTION gid: its notes are kept under that GID. */
extern void VqPreparedBegins(const char *gid);

/* PREPARE TRANSACTION (wakeup.c, at XACT_EVENT_PREPARE): keep this transaction's notes under its GID. */
extern void VqPreparedKeepNotes(const VqWakeNotes *notes);

/*
 * COMMIT PREPARED or ROLLBACK PREPARED gid succeeded: take the notes kept
 * for it (into *notes); false when there are none (lost with a restart, or
 * prepared by other means than the utility hook saw).
 */
extern bool VqPreparedTakeNotes(const char *gid, VqWakeNotes *notes);

#endif							/* VQ_PREPARED_H */
