/*
 * livelog.c: the log lines of a running handler become visible in
 * vq.job_log while it runs, not only with its outcome.
 *
 * A handler's vq_log() lines are kept in its executor's memory and written
 * in the transaction that records the outcome (jobapi.c); nothing the handler
 * does can commit before it ends. So its executor also copies each line, as
 * it is logged, into its slot's live log in shared memory: a ring of
 * VQ_LIVE_LOG_BYTES it appends to without a lock (a line that does not fit
 * waits, with the lines after it, until a save made room and the handler
 * logs again). Every vq.progress_flush_interval_ms the launcher has the
 * saver (saver.c) copy the lines of every running handler of the database
 * out, insert them in its own transaction, and after that commits mark them
 * saved (the ring's tail; "saving" marks the lines in between). When the
 * handler ends, its executor waits for a save in progress, closes the live
 * log, and writes only the lines nobody saved. Lines saved while the handler
 * ran stay however the attempt ends. If the saver dies between its insert and
 * its commit, the running executor stops waiting after a second and writes
 * those lines itself (at worst twice, if that commit had happened).
 *
 * Cost: a line's bytes copied once more; a run that logged takes the
 * database slot's lock once, when it ends; a run that did not, nothing.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/lwlock.h"
#include "utils/jsonb.h"

#include "main/shmem.h"
#include "run/joblog.h"
#include "run/livelog.h"

/* One line in a live log: this header, the message bytes, the fields' jsonb bytes. */
typedef struct LiveLine
{
	int32		size;			/* of the whole entry, MAXALIGNed */
	int32		message_len;
	int32		fields_len;		/* 0: no fields */
	char		level[8];
	TimestampTz at;
} LiveLine;

#define CLOSE_WAIT_MS 1000

/* The running executor: its run, whether it appended a line, how many lines it offered, its head. */
static uint64 run_seq = 0;
static bool opened = false;
static int	offered = 0;
static uint32 head = 0;

/* The saver: what it copied out of each executor's live log and has not committed yet. */
typedef struct Saving
{
	uint64		seq;			/* 0: nothing */
	int			nlines;
	uint32		head;			/* the ring position up to which it copied */
} Saving;
static Saving saving[VQ_MAX_EXECUTORS];

static int
LineSize(VqLogEntry *e)
{
	return MAXALIGN(sizeof(LiveLine) + strlen(e->message) + (e->fields ? VARSIZE(e->fields) : 0));
}

/* Copy n bytes into the ring at position pos (wrapping). */
static void
RingWrite(VqLiveLog *log, uint32 pos, const void *from, int n)
{
	uint32		at = pos % VQ_LIVE_LOG_BYTES;
	int			first = Min(n, (int) (VQ_LIVE_LOG_BYTES - at));

	memcpy(log->buf + at, from, first);
	memcpy(log->buf, (const char *) from + first, n - first);
}

/* Copy n bytes out of the ring from position pos (wrapping). */
static void
RingRead(VqLiveLog *log, uint32 pos, void *to, int n)
{
	uint32		at = pos % VQ_LIVE_LOG_BYTES;
	int			first = Min(n, (int) (VQ_LIVE_LOG_BYTES - at));

	memcpy(to, log->buf + at, first);
	memcpy((char *) to + first, log->buf, n - first);
}

/* A run starts (its live log was closed when the last one ended): its lines belong to seq. */
void
VqLiveLogBegin(uint64 seq)
{
	run_seq = seq;
	opened = false;
	offered = 0;
	head = 0;
	pg_atomic_write_u64(&VqMyExecutorSlot->log.seq, seq);
}

/* Append one line at the head (its room was checked). */
static void
AppendLine(VqLiveLog *log, VqLogEntry *e, int size)
{
	char	   *entry = palloc(size);
	LiveLine   *l = (LiveLine *) entry;

	l->size = size;
	l->message_len = strlen(e->message);
	l->fields_len = e->fields ? VARSIZE(e->fields) : 0;
	strlcpy(l->level, e->level, sizeof(l->level));
	l->at = e->at;
	memcpy(entry + sizeof(LiveLine), e->message, l->message_len);
	if (e->fields)
		memcpy(entry + sizeof(LiveLine) + l->message_len, e->fields, l->fields_len);
	RingWrite(log, head, entry, size);
	pfree(entry);
	head += size;
}

/* Offer the lines not offered yet, in order, while they fit (no lock: the saver reads up to head). */
void
VqLiveLogPublish(List *entries)
{
	VqLiveLog  *log = &VqMyExecutorSlot->log;
	uint32		tail = pg_atomic_read_u32(&log->tail);
	bool		appended = false;

	for (; offered < list_length(entries); offered++)
	{
		VqLogEntry *e = list_nth(entries, offered);
		int			size = LineSize(e);

		if (head - tail + size > VQ_LIVE_LOG_BYTES)
			break;
		AppendLine(log, e, size);
		appended = true;
	}
	if (!appended)
		return;
	pg_write_barrier();			/* the bytes before the head that shows them */
	pg_atomic_write_u32(&log->head, head);
	opened = true;
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
	saved = log->saved_lines;
	VqLiveLogReset(log);
	LWLockRelease(VqMyDatabaseSlot->lock);
	opened = false;
	offered = 0;
	head = 0;
	return saved;
}

/* The lines of a copied buffer, as log entries; *nlines: how many. */
static List *
ParseLines(char *buf, int nbytes, int *nlines)
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
	*nlines = list_length(entries);
	return entries;
}

/*
 * The lines of executor i's running job not saved yet, copied out (caller
 * holds the slot's lock); NULL when there are none. *job: the job they belong to.
 */
static char *
CopyUnsaved(int i, VqRunningJob *job, uint32 *to, int *nbytes)
{
	VqExecutorSlot *e = &VqMyDatabaseSlot->executors[i];
	uint64		seq = pg_atomic_read_u64(&e->log.seq);
	uint32		tail = pg_atomic_read_u32(&e->log.tail);
	char	   *copy;

	if (e->pid == 0 || seq == 0 || e->log.saving || !VqReadRunningJob(e, job) || job->seq != seq)
		return NULL;
	*to = pg_atomic_read_u32(&e->log.head);
	pg_read_barrier();			/* (the bytes up to the head we read are written) */
	*nbytes = (int) (*to - tail);
	if (*nbytes <= 0)
		return NULL;
	copy = palloc(*nbytes);
	RingRead(&e->log, tail, copy, *nbytes);
	return copy;
}

/* The saver: copy out and insert the lines offered by the running handlers of the database. */
void
VqSaveLiveLogs(void)
{
	char	   *copies[VQ_MAX_EXECUTORS];
	int			nbytes[VQ_MAX_EXECUTORS];
	VqRunningJob jobs[VQ_MAX_EXECUTORS];

	LWLockAcquire(VqMyDatabaseSlot->lock, LW_EXCLUSIVE);
	for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
	{
		saving[i].seq = 0;
		copies[i] = CopyUnsaved(i, &jobs[i], &saving[i].head, &nbytes[i]);
		if (copies[i] == NULL)
			continue;
		saving[i].seq = jobs[i].seq;
		VqMyDatabaseSlot->executors[i].log.saving = true;
	}
	LWLockRelease(VqMyDatabaseSlot->lock);

	for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
		if (saving[i].seq != 0)
			VqWriteLogEntries(&jobs[i].execution_id, jobs[i].attempt_number,
							  ParseLines(copies[i], nbytes[i], &saving[i].nlines));
}

/* The save committed: mark the saved lines so in the live logs (of runs still going). */
void
VqLiveLogsSaved(void)
{
	LWLockAcquire(VqMyDatabaseSlot->lock, LW_EXCLUSIVE);
	for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
	{
		VqLiveLog  *log = &VqMyDatabaseSlot->executors[i].log;

		if (saving[i].seq == 0)
			continue;
		if (pg_atomic_read_u64(&log->seq) == saving[i].seq)
		{
			pg_atomic_write_u32(&log->tail, saving[i].head);
			log->saved_lines += saving[i].nlines;
			log->saving = false;
		}
		saving[i].seq = 0;
	}
	LWLockRelease(VqMyDatabaseSlot->lock);
}

/* Empty a live log (a new executor in the slot: its predecessor may have died mid-run). */
void
VqLiveLogReset(VqLiveLog *log)
{
	pg_atomic_write_u64(&log->seq, 0);
	pg_atomic_write_u32(&log->head, 0);
	pg_atomic_write_u32(&log->tail, 0);
	log->saved_lines = 0;
	log->saving = false;
}
