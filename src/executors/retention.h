/*
 * retention.h: deleting expired finished jobs and published outbox rows.
 */
#ifndef VQ_RETENTION_H
#define VQ_RETENTION_H

/* One round of retention, in transactions of its own, within a time budget; true if it left expired rows. */
extern bool VqRunRetention(void);

#endif							/* VQ_RETENTION_H */
