/*
 * launcher.h: the launcher background worker, which owns every database's
 * lifecycle (other processes send it requests: main/requests.h).
 */
#ifndef VQ_LAUNCHER_H
#define VQ_LAUNCHER_H

#include "postgres.h"

/* Register the launcher (from _PG_init). */
extern void VqLauncherInit(void);

#endif							/* VQ_LAUNCHER_H */
