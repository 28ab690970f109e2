/*
 * executor.h: the executor processes (executor.c): who this executor is, for
 * the files that run jobs inside it.
 */
#ifndef VQ_EXECUTOR_H
#define VQ_EXECUTOR_H

#include "postgres.h"

#include "main/shmem.h"

/* This executor's database, its number, and its shared-memory entries (set at start). */
extern Oid	VqMyDatabase;
extern int	VqMyExecutorIndex;
extern VqDatabaseSlot *VqMyDatabaseSlot;
extern VqExecutorSlot *VqMyExecutorSlot;

#endif							/* VQ_EXECUTOR_H */
