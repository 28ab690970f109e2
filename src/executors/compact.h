/*
 * compact.h: giving back the space a long-held snapshot made vq.job_active take.
 */
#ifndef VQ_COMPACT_H
#define VQ_COMPACT_H

#include "datatype/timestamp.h"

/* Executor 0, between claims: rewrite vq.job_active when it is mostly free space (see compact.c). */
extern void VqCompactJobTable(TimestampTz now);

#endif							/* VQ_COMPACT_H */
