/*
 * loop.h: the event loop: one poll() over the session, the self-pipe, the
 * commands' or coprocesses' pipes and the timers; the stop sequence.
 */
#ifndef VQC_LOOP_H
#define VQC_LOOP_H

/* Run until stopped (or --once is done); returns the exit status. */
int			loop_run(void);

#endif
