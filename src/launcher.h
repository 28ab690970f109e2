/*
 * launcher.h: the launcher background worker and the database guard.
 */
#ifndef VQ_LAUNCHER_H
#define VQ_LAUNCHER_H

/* Register the launcher and the utility hook (from _PG_init). */
extern void VqLauncherInit(void);

/* Is this database in vq.databases (or is that list empty)? */
extern bool VqDatabaseSelected(const char *name);

#endif							/* VQ_LAUNCHER_H */
