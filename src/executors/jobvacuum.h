/*
 * jobvacuum.h: vacuuming vq.job_active as often as the jobs need it.
 */
#ifndef VQ_JOBVACUUM_H
#define VQ_JOBVACUUM_H

#include "datatype/timestamp.h"

/* Executor 0, between claims, outside any transaction: vacuum vq.job_active when due (see jobvacuum.c). */
extern void VqVacuumJobTable(TimestampTz now);

#endif							/* VQ_JOBVACUUM_H */
