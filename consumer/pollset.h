/*
 * pollset.h: the descriptors one round of the event loop waits for.  Each
 * part of the program adds its own and keeps the index to look at revents.
 */
#ifndef VQC_POLLSET_H
#define VQC_POLLSET_H

#include <poll.h>

#include "util.h"

typedef struct
{
	struct pollfd *fds;
	int			n;
	int			cap;
	double		timeout_at;		/* monotonic time to wake at, at the latest */
} PollSet;

/* Wait for events on fd; returns its index. */
static inline int
ps_add(PollSet *ps, int fd, short events)
{
	if (ps->n == ps->cap)
	{
		ps->cap = ps->cap ? ps->cap * 2 : 16;
		ps->fds = xrealloc(ps->fds, sizeof(struct pollfd) * (size_t) ps->cap);
	}
	ps->fds[ps->n] = (struct pollfd) {fd, events, 0};
	return ps->n++;
}

/* What poll() reported for index idx (0 for idx < 0: nothing added). */
static inline short
ps_revents(const PollSet *ps, int idx)
{
	return idx < 0 || idx >= ps->n ? 0 : ps->fds[idx].revents;
}

/* Wake at `at` at the latest. */
static inline void
ps_wake_at(PollSet *ps, double at)
{
	if (at < ps->timeout_at)
		ps->timeout_at = at;
}

#endif
