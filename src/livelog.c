/*
 * livelog.c: the log lines of a long-running handler become visible in
 * vq.job_log while it runs, not only with its outcome.
 *
 * A handler's vq_log() lines are kept in its executor's memory and written
 * in the transaction that records the outcome (jobapi.c); nothing the handler
 * does can commit before it ends. So once a handler has run for
 * VQ_LIVE_LOG_AFTER_MS, its executor also copies each line, in order, into
 * its slot's live log in shared memory (as far as VQ_LIVE_LOG_BYTES allow;
 * later lines wait for room), and any other executor of the database, every
 * vq.progress_flush_interval_ms (with the live progress), copies the lines
 * out, inserts them in its own transaction, and after that commits removes
 * them ("saving" marks the lines in between). When the handler ends, its
 * executor waits for a save in progress, closes the live log, and writes only
 * the lines nobody saved. Lines saved while the handler ran stay however the
 * attempt ends. With a single executor nobody saves: lines appear with the
 * outcome. If a saving executor dies between its insert and its commit, the
 * running executor stops waiting after a second and writes those lines
 * itself (at worst twice, if that commit had happened).
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/lwlock.h"
#include "utils/jsonb.h"

#include "executor.h"
#include "jobapi.h"
#include "livelog.h"
#include "shmem.h"

/* One line in a live log buffer: this header, the message bytes, the fields' jsonb bytes. */
typedef struct LiveLine
{
	int32		size;			/* of the whole entry, MAXALIGNed */
	int32		message_len;
	int32		fields_len;		/* 0: no fields */
	char		level[8];
	TimestampTz at;
} LiveLine;

#define CLOSE_WAIT_MS 1000

/* The running executor: its run, whether it opened the live log, how many lines it offered. */
static uint64 run_seq = 0;
static bool opened = false;
static int	offered = 0;

/* Another executor: what it copied out of each slot and has not committed yet. */
typedef struct Saving
{
	uint64		seq;			/* 0: nothing */
	int			nlines;
	int			nbytes;
} Saving;
static Saving saving[VQ_MAX_EXECUTORS];

static int
LineSize(VqLogEntry *e)
{
	return MAXALIGN(sizeof(LiveLine) + strlen(e->message) + (e->fields ? VARSIZE(e->fields) : 0));
}

/*
 * A run starts. The live log is opened (under the database's lock) only when
 * the first line is offered: runs of fast handlers never touch it.
 */
void
VqLiveLogBegin(uint64 seq)
{
	run_seq = seq;
	opened = false;
	offered = 0;
}

/* Offer the lines not offered yet, in order, while they fit. */
void
VqLiveLogPublish(List *entries)
{
	VqLiveLog  *log = &VqMyExecutorSlot->log;

	LWLockAcquire(VqMyDatabaseSlot->lock, LW_EXCLUSIVE);
	if (!opened)
	{
		log->seq = run_seq;
		log->first_line = log->nlines = log->nbytes = 0;
		log->saving = false;
		opened = true;
	}
	for (; offered < list_length(entries); offered++)
	{
		VqLogEntry *e = list_nth(entries, offered);
		int			size = LineSize(e);
		LiveLine   *l = (LiveLine *) (log->buf + log->nbytes);

		if (log->nbytes + size > VQ_LIVE_LOG_BYTES)
			break;
		l->size = size;
		l->message_len = strlen(e->message);
		l->fields_len = e->fields ? VARSIZE(e->fields) : 0;
		strlcpy(l->level, e->level, sizeof(l->level));
		l->at = e->at;
		memcpy((char *) (l + 1), e->message, l->message_len);
		if (e->fields)
			memcpy((char *) (l + 1) + l->message_len, e->fields, l->fields_len);
		log->nbytes += size;
		log->nlines++;
	}
	LWLockRelease(VqMyDatabaseSlot->lock);
}

/* The run ends: wait for a save in progress (a second at most), close; how many lines were saved. */
int
VqLiveLogClose(void)
{
	VqLiveLog  *log = &VqMyExecutorSlot->log;
	int			saved;

	if (!opened)
		return 0;
	for (int waited = 0;; waited++)
	{
		LWLockAcquire(VqMyDatabaseSlot->lock, LW_EXCLUSIVE);
		if (!log->saving || waited >= CLOSE_WAIT_MS)
			break;
		LWLockRelease(VqMyDatabaseSlot->lock);
		CHECK_FOR_INTERRUPTS();
		pg_usleep(1000);
	}
	saved = log->first_line;
	log->seq = 0;
	log->first_line = log->nlines = log->nbytes = 0;
	log->saving = false;
	LWLockRelease(VqMyDatabaseSlot->lock);
	opened = false;
	offered = 0;
	return saved;
}

/* The lines of a copied buffer, as log entries. */
static List *
ParseLines(char *buf, int nbytes)
{
	List	   *entries = NIL;

	for (int pos = 0; pos < nbytes;)
	{
		LiveLine   *l = (LiveLine *) (buf + pos);
		VqLogEntry *e = palloc(sizeof(VqLogEntry));

		e->level = pstrdup(l->level);
		e->message = pnstrdup((char *) (l + 1), l->message_len);
		e->fields = NULL;
		if (l->fields_len > 0)
		{
			e->fields = palloc(l->fields_len);
			memcpy(e->fields, (char *) (l + 1) + l->message_len, l->fields_len);
		}
		e->at = l->at;
		entries = lappend(entries, e);
		pos += l->size;
	}
	return entries;
}

/* Copy out and insert the lines offered by the other executors' running handlers. */
void
VqSaveLiveLogs(void)
{
	char	   *copies[VQ_MAX_EXECUTORS];
	VqRunningJob jobs[VQ_MAX_EXECUTORS];

	LWLockAcquire(VqMyDatabaseSlot->lock, LW_EXCLUSIVE);
	for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
	{
		VqExecutorSlot *e = &VqMyDatabaseSlot->executors[i];

		saving[i].seq = 0;
		if (e == VqMyExecutorSlot || e->pid == 0 || e->log.seq == 0 || e->log.nlines == 0 || e->log.saving ||
			!VqReadRunningJob(e, &jobs[i]) || jobs[i].seq != e->log.seq)
			continue;
		copies[i] = palloc(e->log.nbytes);
		memcpy(copies[i], e->log.buf, e->log.nbytes);
		saving[i].seq = e->log.seq;
		saving[i].nlines = e->log.nlines;
		saving[i].nbytes = e->log.nbytes;
		e->log.saving = true;
	}
	LWLockRelease(VqMyDatabaseSlot->lock);

	for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
		if (saving[i].seq != 0)
			VqWriteLogEntries(&jobs[i].execution_id, jobs[i].attempt_number,
							  ParseLines(copies[i], saving[i].nbytes));
}

/* The save committed: drop the saved lines from the live logs (of runs still going). */
void
VqLiveLogsSaved(void)
{
	LWLockAcquire(VqMyDatabaseSlot->lock, LW_EXCLUSIVE);
	for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
	{
		VqLiveLog  *log = &VqMyDatabaseSlot->executors[i].log;

		if (saving[i].seq == 0)
			continue;
		if (log->seq == saving[i].seq)
		{
			memmove(log->buf, log->buf + saving[i].nbytes, log->nbytes - saving[i].nbytes);
			log->nbytes -= saving[i].nbytes;
			log->nlines -= saving[i].nlines;
			log->first_line += saving[i].nlines;
			log->saving = false;
		}
		saving[i].seq = 0;
	}
	LWLockRelease(VqMyDatabaseSlot->lock);
}
