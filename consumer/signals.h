/*
 * signals.h: SIGTERM / SIGINT (stop), SIGCHLD (a child ended) and the
 * self-pipe that wakes the event loop's poll() when one arrives.
 */
#ifndef VQC_SIGNALS_H
#define VQC_SIGNALS_H

#include <signal.h>

/* SIGTERM / SIGINT received so far, and the last of them */
extern volatile sig_atomic_t stop_signals;
extern volatile sig_atomic_t last_stop_signal;

void		signals_setup(void);
/* The read end of the self-pipe: readable after any of the signals. */
int			signals_fd(void);
/* Empty the self-pipe (after poll() said it is readable). */
void		signals_drain(void);
void		signals_close(void);

#endif
