/*
 * settings.h: the settings vq_job's workers run their own statements with
 * (settings.c).
 */
#ifndef VQ_SETTINGS_H
#define VQ_SETTINGS_H

#include "postgres.h"

/* Pin the settings the worker's own transactions need (once, after connecting; again after a reload). */
extern void VqPinWorkerSettings(void);

#endif							/* VQ_SETTINGS_H */
