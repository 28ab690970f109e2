'use strict';
// A job taken by a Worker, as its handler sees it.

const LEVELS = { DEBUG: 'DEBUG', INFO: 'INFO', WARN: 'WARN', WARNING: 'WARN', ERROR: 'ERROR' };

// Why a job was asked to stop (job.cancelReason).
const REASONS = {
  cancel: 'vq_cancel asked the job to stop',
  lost: "the job's lease was lost: another worker may run it",
  timeout: 'the handler ran longer than the worker\'s timeout',
  stop: 'the worker is stopping',
};

// Job._flags
const RUNNING = 1;      // its handler runs
const LOST = 2;         // the worker no longer holds it
const NO_EXTEND = 4;    // its lease is not extended any more

class Job {
  constructor(worker, id, attempt, handler, jobId, payload, lease) {
    this.id = id;                 // execution_id
    this.attempt = attempt;       // 0 for the first attempt
    this.handler = handler;
    this.jobId = jobId;
    this.payload = payload;
    this.cancelled = false;
    this.cancelReason = null;     // 'cancel' | 'lost' | 'timeout' | 'stop'
    this._worker = worker;
    this._lease = lease;          // { until: epoch ms (local clock, conservative) }, shared by a take's jobs
    this._state = 0;              // 0 taken, 1 started, 2 finished (replied or dropped)
    this._flags = 0;
    this._startedAt = 0;
    this._controller = null;
    this._progress = null;
  }

  // An AbortSignal that aborts when the job is asked to stop (created on first use).
  get signal() {
    if (this._controller === null) {
      this._controller = new AbortController();
      if (this.cancelled) this._controller.abort(reasonError(this.cancelReason));
    }
    return this._controller.signal;
  }

  // True when the worker no longer holds the job (its lease expired): its reply is not sent.
  get lost() {
    return (this._flags & LOST) !== 0;
  }

  // log([level,] message[, fields]): a line of the job's log (vq.job_log), written in batches.
  // log('text') is INFO; log('WARN', 'text'); log('text', { key: 1 }); log('ERROR', 'text', { key: 1 }).
  log(...args) {
    let level = 'INFO';
    let message;
    let fields = null;
    const known = typeof args[0] === 'string' && LEVELS[args[0].toUpperCase()] !== undefined;
    if (args.length >= 3 || (args.length === 2 && known && typeof args[1] !== 'object')) {
      level = LEVELS[String(args[0]).toUpperCase()];
      if (level === undefined) throw new TypeError(`job.log: unknown level ${JSON.stringify(args[0])} (DEBUG, INFO, WARN, ERROR)`);
      message = args[1];
      fields = args[2] === undefined ? null : args[2];
    } else {
      message = args[0];
      fields = args[1] === undefined ? null : args[1];
    }
    if (message === undefined || message === null) throw new TypeError('job.log: a message is needed');
    if (typeof message !== 'string') message = message instanceof Error ? (message.stack || String(message)) : String(message);
    this._worker._addLog(this, level, message, fields);
  }

  // progress({ total, succeeded, failed }): absolute counters; a counter left out keeps its value.
  progress(counts) {
    if (counts === null || typeof counts !== 'object') throw new TypeError('job.progress: give { total, succeeded, failed }');
    const p = this._progress || (this._progress = { total: null, succeeded: null, failed: null });
    for (const k of ['total', 'succeeded', 'failed']) {
      const v = counts[k];
      if (v === undefined || v === null) continue;
      if (!(typeof v === 'bigint' ? v >= 0n : Number.isSafeInteger(v) && v >= 0)) {
        throw new TypeError(`job.progress: ${k} must be a non-negative integer, got ${v}`);
      }
      p[k] = v;
    }
    this._worker._addProgress(this);
  }

  // (worker) ask the job to stop; reason: a key of REASONS.
  _cancel(reason) {
    if (this.cancelled) return;
    this.cancelled = true;
    this.cancelReason = reason;
    if (this._controller !== null) this._controller.abort(reasonError(reason));
  }

  toJSON() {
    return { id: this.id, attempt: this.attempt, handler: this.handler, jobId: this.jobId, cancelled: this.cancelled };
  }
}

class JobCancelledError extends Error {
  constructor(reason) {
    super(REASONS[reason] || String(reason));
    this.name = 'JobCancelledError';
    this.reason = reason;
  }
}

function reasonError(reason) {
  return new JobCancelledError(reason);
}

module.exports = { Job, JobCancelledError, LEVELS, RUNNING, LOST, NO_EXTEND };
