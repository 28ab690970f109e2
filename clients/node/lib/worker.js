'use strict';
// Worker: runs the jobs of external handlers with vq_job's worker protocol.
//
// A worker runs one or more pipelines of two connections: one takes jobs (vq_take_jobs, in
// batches of up to the free capacity) and, for the first pipeline when it is a direct connection,
// LISTENs for "due <handler>" and "cancel <id>" for all; the other replies (vq_reply_jobs, one
// call for every job finished since the last one), writes logs and progress and extends leases.
// Takes and replies overlap; a take starts as soon as capacity frees.

const pg = require('./pg');
const { Conn } = require('./conn');
const { Job, RUNNING, LOST, NO_EXTEND } = require('./job');
const lit = require('./literal');

// (one handler: its name is not read back for each job)
const TAKE_SQL = 'SELECT execution_id, attempt, job_id, payload, handler FROM vq_take_jobs($1::text[], $2::integer, $3::interval)';
const TAKE_ONE_SQL = 'SELECT execution_id, attempt, job_id, payload FROM vq_take_jobs($1::text[], $2::integer, $3::interval)';
const REPLY_SQL = 'SELECT execution_id, attempt, ignored FROM vq_reply_jobs($1::uuid[], $2::integer[], $3::text[], $4::text[], $5::timestamptz[])';
const EXTEND_SQL = 'SELECT execution_id, cancel_requested FROM vq_extend_leases($1::uuid[], $2::integer[], $3::interval)';
const LOG_SQL = 'SELECT vq_log_jobs($1::uuid[], $2::integer[], $3::text[], $4::text[], $5::jsonb[])';
const PROGRESS_SQL = 'SELECT vq_progress_jobs($1::uuid[], $2::integer[], $3::bigint[], $4::bigint[], $5::bigint[])';
const HANDLERS_SQL = "SELECT name, kind, address FROM vq.handler_settings WHERE name = ANY($1::text[])";

const MAX_BATCH = 10000;        // most jobs one call of the protocol handles
const MAX_HANDLERS = 64;        // most handlers one take names
const MIN_LEASE = 1000;
const MAX_LEASE = 24 * 3600 * 1000;

// Results of the protocol's calls: rows as arrays, values as the server sent them but for the
// columns we parse ourselves (integers, jsonb, booleans).
const TYPES = {
  getTypeParser(oid) {
    switch (oid) {
      case 23: return (v) => +v;                 // int4
      case 3802: case 114: return JSON.parse;    // jsonb, json
      case 16: return (v) => v === 't';          // bool
      default: return (v) => v;
    }
  },
};

const silent = () => {};
const defaultLogger = {
  debug: silent,
  info: silent,
  warn: (...a) => console.warn('vq-job:', ...a),
  error: (...a) => console.error('vq-job:', ...a),
};

function intOption(options, name, dflt, min, max) {
  const v = options[name];
  if (v === undefined || v === null) return dflt;
  if (!Number.isInteger(v) || v < min || v > max) {
    throw new RangeError(`vq-job: option ${name} must be an integer from ${min} to ${max}, got ${v}`);
  }
  return v;
}

// A connection or server-availability error (worth retrying), as opposed to an error of the call.
function transient(err) {
  const code = err && err.code;
  return !code || typeof code !== 'string' || code.startsWith('08') || code.startsWith('57P') ||
    code === '53300' || code === '40001' || code === '40P01';
}

// One pipeline: a take connection and a reply connection, with its share of the worker's
// concurrency. A Worker runs one or more (option pipelines); the first one LISTENs for all.
class Pipeline {
  constructor(options, leader = null) {
    if (!options || typeof options !== 'object') throw new TypeError('vq-job: new Worker(options) needs options');
    const handlers = options.handlers;
    if (!handlers || typeof handlers !== 'object') throw new TypeError('vq-job: options.handlers must map handler names to functions');
    this._handlers = Object.create(null);
    for (const [name, fn] of Object.entries(handlers)) {
      if (typeof fn !== 'function') throw new TypeError(`vq-job: handler ${JSON.stringify(name)} must be a function`);
      this._handlers[name] = fn;
    }
    this._names = Object.keys(this._handlers);
    if (this._names.length < 1 || this._names.length > MAX_HANDLERS) {
      throw new RangeError(`vq-job: options.handlers must name 1 to ${MAX_HANDLERS} handlers`);
    }
    this.concurrency = intOption(options, 'concurrency', 10, 1, 1000000);
    this.prefetch = intOption(options, 'prefetch', 0, 0, 1000000);
    this.batchSize = intOption(options, 'batchSize', Math.min(this.concurrency + this.prefetch, 1000), 1, MAX_BATCH);
    this.lease = intOption(options, 'lease', 60000, MIN_LEASE, MAX_LEASE);
    this.timeout = intOption(options, 'timeout', 0, 0, Number.MAX_SAFE_INTEGER);
    this.stopTimeout = intOption(options, 'stopTimeout', 30000, 0, Number.MAX_SAFE_INTEGER);
    this.flushInterval = intOption(options, 'flushInterval', 1000, 1, 3600000);
    this._pollOption = intOption(options, 'pollInterval', null, 10, 3600000);
    this._leader = leader;         // the first pipeline (null: this one), which LISTENs for all
    this._group = [this];          // every pipeline of the worker (set by the Worker)
    this._listenOption = leader === null && (options.listen === undefined ? true : !!options.listen);
    this.logger = { ...defaultLogger, ...(options.logger || {}) };
    this._onError = typeof options.onError === 'function' ? options.onError
      : (err) => this.logger.error(err && err.message ? err.message : err);

    // connections
    const appName = options.applicationName || 'vq-job worker';
    if (options.pool) {
      const pool = options.pool;
      this._open = async () => {
        const client = await pool.connect();
        return { client, release: (err) => client.release(err) };
      };
    } else {
      const base = options.config ? { ...options.config }
        : options.connectionString ? { connectionString: options.connectionString } : {};
      if (base.application_name === undefined) base.application_name = appName;
      this._open = async () => plainClient(base);
    }
    this._listenConfig = null;
    if (leader === null && (options.listenConnectionString || options.listenConfig)) {
      const base = options.listenConfig ? { ...options.listenConfig } : { connectionString: options.listenConnectionString };
      if (base.application_name === undefined) base.application_name = `${appName} (listen)`;
      this._listenConfig = base;
    }

    this._takeConn = new Conn('take', this._open, (c) => this._initTake(c), (conn, err) => this._connLost(conn, err));
    this._replyConn = new Conn('reply', this._open, null, (conn, err) => this._connLost(conn, err));
    this._listenConn = null;

    // state
    this._started = false;
    this._stopping = false;
    this._stopped = false;
    this._stopPromise = null;
    let stoppedResolve;
    // Resolves once the worker has stopped (whoever called stop()).
    this.stopped = new Promise((resolve) => { stoppedResolve = resolve; });
    this._stoppedResolve = stoppedResolve;
    this.listening = false;        // a LISTEN is in place: wake-ups come by notification
    this.pooled = null;            // the main connection goes through a pooler (known after start)
    this._channels = [];
    this._handlerArray = lit.quotedArray(this._names);
    this._takeSql = this._names.length === 1 ? TAKE_ONE_SQL : TAKE_SQL;
    this._onlyHandler = this._names.length === 1 ? this._names[0] : null;
    this._leaseInterval = lit.interval(this.lease);

    this._jobs = new Map();        // taken, handler not finished: id -> Job
    this._queue = [];              // taken, not started
    this._qHead = 0;
    this._active = 0;              // handlers running
    this._pumping = false;

    this._taking = false;
    this._takePromise = null;
    this._idle = false;            // the last take found less than it asked: wait for a wake-up
    this._notified = false;        // a wake-up came while a take ran
    this._lastTaken = 0;
    this._takeScheduled = false;
    this._pollTimer = null;
    this._retryTimer = null;
    this._takeFailures = 0;

    this._rIds = []; this._rAttempts = []; this._rOutcomes = []; this._rErrors = []; this._rRetryAt = [];
    this._rAllComplete = true; this._rAnyRetryAt = false;
    this._lIds = []; this._lAttempts = []; this._lLevels = []; this._lMessages = []; this._lFields = [];
    this._lAnyFields = false;
    this._progress = new Map();    // id -> Job with progress to write
    this._flushing = false;
    this._flushPromise = null;
    this._flushScheduled = false;
    this._flushFailures = 0;
    this._flushTimer = null;
    this._lastFlush = 0;
    this._extending = false;
    this._extendPromise = null;
    this._housekeeper = null;
    this._drained = null;          // resolves when no handler runs (stop)

    this._stats = { takes: 0, taken: 0, completed: 0, failed: 0, released: 0, lost: 0, ignored: 0, replyCalls: 0 };

    this._kickFn = () => { this._takeScheduled = false; this._take(); };
    this._flushFn = () => { this._flushScheduled = false; if (!this._flushing && this._pending()) this._flushPromise = this._flush(); };
    this._pollFn = () => { this._pollTimer = null; this._wake(); };
    this._notifyFn = (msg) => { for (const p of this._group) p._onNotification(msg); };
  }

  // How often a worker takes without a wake-up.
  get pollInterval() {
    if (this._pollOption !== null) return this._pollOption;
    return (this._leader || this).listening ? 2000 : 500;
  }

  // Wake every pipeline (a notification may have been missed).
  _wakeGroup() {
    for (const p of this._group) p._wake();
  }

  // Counters since start (a copy). running: handlers running; held: jobs taken and not finished
  // (running or waiting for a free handler).
  get stats() {
    return { ...this._stats, running: this._active, held: this._held() };
  }

  // Jobs taken and not finished (a handler still running for a job whose lease was lost counts).
  _held() {
    return this._active + this._queue.length - this._qHead;
  }

  // Connect, check the handlers, LISTEN; resolves once listening (or polling).
  async start() {
    if (this._started) throw new Error('vq-job: worker.start() was called already');
    this._started = true;
    try {
      // (both connections at once: a start costs one connection's latency, not two)
      await Promise.all([this._takeConn.client(), this._replyConn.client()]);
      if (this._listenConfig !== null && this._listenOption) await this._openListen();
    } catch (err) {
      this._stopping = true;
      this._stopped = true;
      await this._closeConnections();
      throw err;
    }
    const period = Math.max(20, Math.min(1000, this.lease / 4, this.flushInterval, this.timeout || Infinity));
    this._housekeeper = setInterval(() => this._housekeeping(), period);
    this._housekeeper.unref();
    this._wake();
  }

  // The take connection: check the handlers, learn whether a pooler is in between, LISTEN.
  async _initTake(client) {
    const { rows } = await client.query({ text: HANDLERS_SQL, values: [this._names] });
    const found = new Map(rows.map((r) => [r.name, r]));
    const channels = new Set();
    for (const name of this._names) {
      const h = found.get(name);
      if (!h) throw new Error(`vq-job: handler ${JSON.stringify(name)} is not registered (vq_register_notify_handler)`);
      if (h.kind !== 'notify') {
        throw new Error(`vq-job: handler ${JSON.stringify(name)} is a ${h.kind} handler: its jobs run in the server`);
      }
      channels.add(h.address.startsWith('notify:') ? h.address.slice(7) : h.address);
    }
    this._channels = [...channels];
    const { rows: [me] } = await client.query('SELECT pg_backend_pid() AS pid');
    // Behind a pooler the backend key the client got is the pooler's, not the server process's.
    const pooled = client.processID !== me.pid;
    if (this.pooled !== pooled) {
      this.pooled = pooled;
      if (pooled && this._leader === null) {
        this.logger.info(this._listenConfig !== null
          ? 'the main connection goes through a pooler: LISTEN on the listen connection'
          : `the main connection goes through a pooler: no LISTEN, taking every ${this.pollInterval} ms`);
      }
    }
    if (this._listenOption && this._listenConfig === null && !pooled) {
      client.on('notification', this._notifyFn);
      await this._listen(client);
      this.listening = true;
      if (this._started && !this._stopping) this._wakeGroup();   // (a reconnection: jobs may have come meanwhile)
    }
  }

  async _listen(client) {
    for (const ch of this._channels) await client.query(`LISTEN ${client.escapeIdentifier(ch)}`);
  }

  async _openListen() {
    const config = this._listenConfig;
    this._listenConn = new Conn('listen', async () => plainClient(config), async (client) => {
      const { rows: [me] } = await client.query('SELECT pg_backend_pid() AS pid');
      if (client.processID !== me.pid) {
        this.logger.warn('the listen connection goes through a pooler: notifications may be lost; give a direct connection');
      }
      client.on('notification', this._notifyFn);
      await this._listen(client);
      this.listening = true;
      if (this._started && !this._stopping) this._wakeGroup();
    }, (conn, err) => this._connLost(conn, err));
    await this._listenConn.client();
  }

  _connLost(conn, err) {
    if (this._stopping) return;
    this._onError(new Error(`vq-job: the ${conn.name} connection was lost: ${err && err.message ? err.message : err}`));
    if (conn === this._listenConn || (conn === this._takeConn && this._listenConn === null)) {
      this.listening = false;
      if (conn === this._listenConn) this._reopenListen(1);
    }
    this._wake();
  }

  _reopenListen(n) {
    if (this._stopping) return;
    const t = setTimeout(() => {
      if (this._stopping) return;
      this._listenConn.client().catch((err) => {
        this._onError(err);
        this._reopenListen(n + 1);
      });
    }, Math.min(5000, 100 * 2 ** n));
    t.unref();
  }

  // ---- taking -------------------------------------------------------------------------------

  _onNotification(msg) {
    const p = msg.payload;
    if (typeof p !== 'string') return;
    if (p.startsWith('due ')) {
      if (this._handlers[p.slice(4)] !== undefined) this._wake();     // (each pipeline is told)
    } else if (p.startsWith('cancel ')) {
      const job = this._jobs.get(p.slice(7));
      if (job !== undefined) this._cancelJob(job, 'cancel');
    }
  }

  // Jobs may be due: take now (or right after the take in progress).
  _wake() {
    if (this._stopping) return;
    this._idle = false;
    if (this._taking) {
      this._notified = true;
      return;
    }
    this._take();
  }

  // Capacity freed: take again soon, unless waiting for a wake-up.
  _kick() {
    if (this._idle || this._taking || this._takeScheduled || this._stopping) return;
    this._takeScheduled = true;
    setImmediate(this._kickFn);
  }

  _take() {
    if (this._taking || this._stopping || this._retryTimer !== null) return;
    const free = this.concurrency + this.prefetch - this._held();
    if (free <= 0 || this._rIds.length >= MAX_BATCH) return;   // (capacity or the flush will kick)
    const want = free < this.batchSize ? free : this.batchSize;
    this._taking = true;
    this._notified = false;
    if (this._pollTimer !== null) {
      clearTimeout(this._pollTimer);
      this._pollTimer = null;
    }
    const sentAt = Date.now();
    this._stats.takes++;
    this._takePromise = this._takeConn.query({
      text: this._takeSql, values: [this._handlerArray, want, this._leaseInterval], rowMode: 'array', types: TYPES,
    }).then((res) => this._taken(res.rows, want, sentAt), (err) => this._takeFailed(err));
  }

  _taken(rows, want, sentAt) {
    this._taking = false;
    this._takePromise = null;
    this._takeFailures = 0;
    this._lastTaken = rows.length;
    this._stats.taken += rows.length;
    const lease = { until: sentAt + this.lease };
    const only = this._onlyHandler;
    if (this._stopping) {
      for (const r of rows) this._reply(new Job(this, r[0], r[1], only || r[4], r[2], r[3], lease), 'release', null);
      this._scheduleFlush();
      return;
    }
    const jobs = this._jobs;
    const queue = this._queue;
    for (let i = 0; i < rows.length; i++) {
      const r = rows[i];
      const job = new Job(this, r[0], r[1], only || r[4], r[2], r[3], lease);
      if (r[1] > 0) {
        const older = jobs.get(job.id);
        if (older !== undefined) this._lose(older);   // (a later attempt: that one's lease expired)
      }
      jobs.set(job.id, job);
      queue.push(job);
    }
    if (rows.length < want && !this._notified) {
      this._idle = true;
      this._armPoll();
    } else {
      this._idle = false;
    }
    this._notified = false;
    this._pump();
    this._kick();
  }

  _takeFailed(err) {
    this._taking = false;
    this._takePromise = null;
    if (this._stopping) return;
    this._takeFailures++;
    this._onError(err);
    // Retry later (a lost connection reconnects on the next take).
    const delay = Math.min(5000, 100 * 2 ** Math.min(this._takeFailures, 6));
    this._retryTimer = setTimeout(() => { this._retryTimer = null; this._wake(); }, delay);
    this._retryTimer.unref();
  }

  _armPoll() {
    if (this._pollTimer !== null) clearTimeout(this._pollTimer);
    this._pollTimer = setTimeout(this._pollFn, this.pollInterval);
  }

  // ---- running ------------------------------------------------------------------------------

  // Start queued jobs while handlers are free.
  _pump() {
    if (this._pumping) return;
    this._pumping = true;
    try {
      const q = this._queue;
      while (this._active < this.concurrency && this._qHead < q.length) {
        const job = q[this._qHead];
        q[this._qHead++] = undefined;
        if (job._state !== 0) continue;          // (replied meanwhile: a forced stop)
        if (job.cancelled) {
          if (this._jobs.get(job.id) === job) this._jobs.delete(job.id);
          job._state = 2;
          if ((job._flags & LOST) !== 0) this._stats.lost++;
          else this._reply(job, 'fail', 'cancelled before it started');
          continue;
        }
        this._run(job);
      }
      if (this._qHead === q.length) {
        q.length = 0;
        this._qHead = 0;
      } else if (this._qHead > 1024 && this._qHead * 2 > q.length) {
        this._queue = q.slice(this._qHead);
        this._qHead = 0;
      }
    } finally {
      this._pumping = false;
    }
  }

  _run(job) {
    this._active++;
    job._state = 1;
    job._flags |= RUNNING;
    if (this.timeout > 0) job._startedAt = Date.now();
    let result;
    try {
      result = this._handlers[job.handler](job.payload, job);
    } catch (err) {
      this._finish(job, true, err);
      return;
    }
    if (result !== null && (typeof result === 'object' || typeof result === 'function') && typeof result.then === 'function') {
      result.then(() => this._finish(job, false, undefined), (err) => this._finish(job, true, err));
    } else {
      this._finish(job, false, undefined);
    }
  }

  _finish(job, failed, err) {
    if ((job._flags & RUNNING) !== 0) {
      job._flags &= ~RUNNING;
      this._active--;
    }
    if (job._state === 2) {                       // already replied for (a forced stop)
      this._pump();
      this._kick();
      this._checkDrained();
      return;
    }
    job._state = 2;
    if (this._jobs.get(job.id) === job) this._jobs.delete(job.id);
    if ((job._flags & LOST) !== 0) {
      this._stats.lost++;
      this.logger.debug(`job ${job.id} attempt ${job.attempt}: the lease was lost, its result is not sent`);
    } else if (failed) {
      let message;
      if (err instanceof Error) {
        message = err.message || err.name || 'Error';
        if (err.stack) this._addLog(job, 'ERROR', err.stack, null);
      } else {
        message = err === undefined ? 'the handler failed (no error given)' : String(err);
      }
      const retryAt = err && err.retryAt !== undefined && err.retryAt !== null ? toIso(err.retryAt) : null;
      this._reply(job, retryAt !== null ? 'retry' : 'fail', message, retryAt);
    } else {
      this._reply(job, 'complete', null);
    }
    this._pump();
    this._kick();
    this._checkDrained();
  }

  _cancelJob(job, reason) {
    if (job.cancelled) return;
    job._cancel(reason);
    this.logger.debug(`job ${job.id} attempt ${job.attempt}: asked to stop (${reason})`);
  }

  // The worker no longer holds the job: ask it to stop; its result will not be sent.
  _lose(job) {
    if ((job._flags & LOST) !== 0) return;
    job._flags |= LOST | NO_EXTEND;
    if (this._jobs.get(job.id) === job) this._jobs.delete(job.id);
    if (job._state === 0) {                       // (not started: it never will)
      job._state = 2;
      this._stats.lost++;
    }
    this._cancelJob(job, 'lost');
  }

  _checkDrained() {
    if (this._drained !== null && this._active === 0) {
      const resolve = this._drained;
      this._drained = null;
      resolve();
    }
  }

  // ---- replies, logs, progress --------------------------------------------------------------

  _reply(job, outcome, error, retryAt = null) {
    this._rIds.push(job.id);
    this._rAttempts.push(job.attempt);
    this._rOutcomes.push(outcome);
    this._rErrors.push(error);
    this._rRetryAt.push(retryAt);
    if (outcome !== 'complete') this._rAllComplete = false;
    if (retryAt !== null) this._rAnyRetryAt = true;
    this._scheduleFlush();
  }

  _addLog(job, level, message, fields) {
    this._lIds.push(job.id);
    this._lAttempts.push(job.attempt);
    this._lLevels.push(level);
    this._lMessages.push(message);
    if (fields !== null) {
      this._lFields.push(lit.jsonText(fields));
      this._lAnyFields = true;
    } else {
      this._lFields.push(null);
    }
    if (this._lIds.length >= MAX_BATCH) this._scheduleFlush();
  }

  _addProgress(job) {
    this._progress.set(job.id, job);
  }

  _scheduleFlush() {
    if (this._flushScheduled || this._flushing || this._flushTimer !== null) return;
    this._flushScheduled = true;
    setImmediate(this._flushFn);
  }

  _pending() {
    return this._rIds.length > 0 || this._lIds.length > 0 || this._progress.size > 0;
  }

  async _flush() {
    if (this._flushing) return;
    this._flushing = true;
    try {
      while (this._pending()) {
        await this._flushOnce();
        this._flushFailures = 0;
      }
    } catch (err) {
      this._flushFailures++;
      this._onError(err);
      if (!this._stopped) {
        const delay = Math.min(5000, 100 * 2 ** Math.min(this._flushFailures, 6));
        this._flushTimer = setTimeout(() => { this._flushTimer = null; this._scheduleFlush(); }, delay);
        this._flushTimer.unref();
      }
    } finally {
      this._flushing = false;
      this._flushPromise = null;
      this._lastFlush = Date.now();
    }
    this._kick();
  }

  // One round: progress, then log lines, then replies (at most MAX_BATCH of each).
  async _flushOnce() {
    const conn = this._replyConn;
    if (this._progress.size > 0) {
      const jobs = [];
      for (const job of this._progress.values()) {
        jobs.push(job);
        if (jobs.length === MAX_BATCH) break;
      }
      for (const job of jobs) this._progress.delete(job.id);
      const values = [lit.plainArray(jobs.map((j) => j.id)), lit.plainArray(jobs.map((j) => j.attempt)),
        lit.numberArray(jobs.map((j) => j._progress.total)), lit.numberArray(jobs.map((j) => j._progress.succeeded)),
        lit.numberArray(jobs.map((j) => j._progress.failed))];
      try {
        await conn.query({ text: PROGRESS_SQL, values, rowMode: 'array' });
      } catch (err) {
        if (transient(err)) for (const job of jobs) if (!this._progress.has(job.id)) this._progress.set(job.id, job);
        throw err;
      }
    }
    if (this._lIds.length > 0) {
      const n = Math.min(this._lIds.length, MAX_BATCH);
      const ids = this._lIds.splice(0, n);
      const attempts = this._lAttempts.splice(0, n);
      const levels = this._lLevels.splice(0, n);
      const messages = this._lMessages.splice(0, n);
      const fields = this._lFields.splice(0, n);
      const anyFields = this._lAnyFields;
      if (this._lIds.length === 0) this._lAnyFields = false;
      try {
        await conn.query({
          text: LOG_SQL,
          values: [lit.plainArray(ids), lit.plainArray(attempts), lit.plainArray(levels), lit.quotedArray(messages),
            anyFields ? lit.quotedArray(fields) : null],
          rowMode: 'array',
        });
      } catch (err) {
        if (transient(err)) {
          this._lIds.unshift(...ids); this._lAttempts.unshift(...attempts); this._lLevels.unshift(...levels);
          this._lMessages.unshift(...messages); this._lFields.unshift(...fields);
          this._lAnyFields = this._lAnyFields || anyFields;
        }
        throw err;
      }
    }
    if (this._rIds.length > 0) {
      let ids, attempts, outcomes, errors, retryAt;
      const allComplete = this._rAllComplete;
      const anyRetryAt = this._rAnyRetryAt;
      if (this._rIds.length <= MAX_BATCH) {
        ids = this._rIds; attempts = this._rAttempts; outcomes = this._rOutcomes; errors = this._rErrors; retryAt = this._rRetryAt;
        this._rIds = []; this._rAttempts = []; this._rOutcomes = []; this._rErrors = []; this._rRetryAt = [];
        this._rAllComplete = true; this._rAnyRetryAt = false;
      } else {
        ids = this._rIds.splice(0, MAX_BATCH); attempts = this._rAttempts.splice(0, MAX_BATCH);
        outcomes = this._rOutcomes.splice(0, MAX_BATCH); errors = this._rErrors.splice(0, MAX_BATCH);
        retryAt = this._rRetryAt.splice(0, MAX_BATCH);
      }
      let res;
      try {
        res = await conn.query({
          text: REPLY_SQL,
          values: [lit.plainArray(ids), lit.plainArray(attempts), allComplete ? null : lit.plainArray(outcomes),
            allComplete ? null : lit.quotedArray(errors), anyRetryAt ? lit.quotedArray(retryAt) : null],
          rowMode: 'array',
          types: TYPES,
        });
      } catch (err) {
        if (transient(err)) {
          this._rIds.unshift(...ids); this._rAttempts.unshift(...attempts); this._rOutcomes.unshift(...outcomes);
          this._rErrors.unshift(...errors); this._rRetryAt.unshift(...retryAt);
          if (!allComplete) this._rAllComplete = false;
          if (anyRetryAt) this._rAnyRetryAt = true;
        }
        throw err;
      }
      this._stats.replyCalls++;
      let ignored = null;
      if (res.rows.length > 0) {
        ignored = new Set();
        for (const r of res.rows) {
          ignored.add(r[0]);
          this.logger.debug(`job ${r[0]} attempt ${r[1]}: reply ignored (${r[2]})`);
        }
        this._stats.ignored += res.rows.length;
      }
      let applied = 0;
      for (let i = 0; i < ids.length; i++) {
        if (ignored !== null && ignored.has(ids[i])) continue;
        applied++;
        const o = outcomes[i];
        if (o === 'complete') this._stats.completed++;
        else if (o === 'release') this._stats.released++;
        else this._stats.failed++;
      }
      // Our replies freed capacity in the queue: a take that found less than it asked may find more now.
      if (applied > 0 && this._idle && this._lastTaken > 0) this._wake();
    }
  }

  // ---- leases, timeouts, periodic flush -----------------------------------------------------

  _housekeeping() {
    if (this._stopped) return;
    const now = Date.now();
    if (!this._flushing && !this._flushScheduled && this._flushTimer === null &&
        (this._lIds.length > 0 || this._progress.size > 0) && now - this._lastFlush >= this.flushInterval) {
      this._scheduleFlush();
    }
    if (this._jobs.size === 0) return;
    const half = this.lease / 2;
    let extend = null;
    for (const job of this._jobs.values()) {
      if (this.timeout > 0 && job._state === 1 && (job._flags & NO_EXTEND) === 0 && now - job._startedAt >= this.timeout) {
        // Too long: ask it to stop and let the lease run out (the server abandons the attempt).
        job._flags |= NO_EXTEND;
        this._cancelJob(job, 'timeout');
      }
      if ((job._flags & NO_EXTEND) === 0 && job._lease.until - now < half) (extend || (extend = [])).push(job);
    }
    if (extend !== null && !this._extending) this._extendPromise = this._extend(extend);
  }

  async _extend(jobs) {
    this._extending = true;
    const lease = { until: Date.now() + this.lease };
    try {
      for (let i = 0; i < jobs.length; i += MAX_BATCH) {
        const part = jobs.slice(i, i + MAX_BATCH);
        const res = await this._replyConn.query({
          text: EXTEND_SQL,
          values: [lit.plainArray(part.map((j) => j.id)), lit.plainArray(part.map((j) => j.attempt)), this._leaseInterval],
          rowMode: 'array',
          types: TYPES,
        });
        const held = new Map();
        for (const r of res.rows) held.set(r[0], r[1]);
        for (const job of part) {
          if (job._state === 2) continue;
          const cancel = held.get(job.id);
          if (cancel === undefined) {
            this._lose(job);
          } else {
            job._lease = lease;
            if (cancel) this._cancelJob(job, 'cancel');
          }
        }
      }
    } catch (err) {
      if (!this._stopped) this._onError(err);
    } finally {
      this._extending = false;
      this._extendPromise = null;
    }
  }

  // ---- stopping -----------------------------------------------------------------------------

  // Stop taking, give back the jobs not started, let the running ones finish (up to stopTimeout),
  // reply, close the connections.
  stop() {
    if (this._stopPromise === null) {
      this._stopPromise = this._stop();
      this._stopPromise.then(this._stoppedResolve, this._stoppedResolve);
    }
    return this._stopPromise;
  }

  async _stop() {
    this._stopping = true;
    if (this._pollTimer !== null) clearTimeout(this._pollTimer);
    if (this._retryTimer !== null) clearTimeout(this._retryTimer);
    this._pollTimer = null;
    this._retryTimer = null;
    // Jobs taken and not started go back, no attempt consumed.
    const q = this._queue;
    for (let i = this._qHead; i < q.length; i++) {
      const job = q[i];
      if (job === undefined || job._state !== 0) continue;
      job._state = 2;
      if (this._jobs.get(job.id) === job) this._jobs.delete(job.id);
      if ((job._flags & LOST) === 0) this._reply(job, 'release', null);
    }
    this._queue = [];
    this._qHead = 0;
    const deadline = Date.now() + this.stopTimeout;
    const until = (promise) => {
      let timer = null;
      const timedOut = new Promise((resolve) => { timer = setTimeout(resolve, Math.max(0, deadline - Date.now())); });
      return Promise.race([promise, timedOut]).finally(() => clearTimeout(timer));
    };
    if (this._takePromise !== null) await until(this._takePromise);     // (its jobs are released)
    if (this._active > 0) {
      await until(new Promise((resolve) => { this._drained = resolve; }));
      this._drained = null;
      if (this._active > 0) {
        // Still running: ask them to stop, and fail the attempts (retried with the queue's backoff).
        for (const job of this._jobs.values()) {
          if (job._state !== 1) continue;
          job._state = 2;
          if (this._jobs.get(job.id) === job) this._jobs.delete(job.id);
          this._cancelJob(job, 'stop');
          if ((job._flags & LOST) === 0) this._reply(job, 'fail', `the worker stopped before the handler finished (stopTimeout ${this.stopTimeout} ms)`);
        }
      }
    }
    if (this._flushTimer !== null) {
      clearTimeout(this._flushTimer);
      this._flushTimer = null;
    }
    // Final flush: a few tries.
    for (let tries = 0; tries < 5; tries++) {
      for (let p = this._flushPromise; p !== null; p = this._flushPromise) {
        await p;
        if (this._flushPromise === p) this._flushPromise = null;
      }
      if (!this._pending()) break;
      this._flushing = true;
      try {
        while (this._pending()) await this._flushOnce();
      } catch (err) {
        this._onError(err);
        await new Promise((r) => setTimeout(r, 100 * 2 ** tries));
      } finally {
        this._flushing = false;
      }
    }
    for (let p = this._extendPromise; p !== null; p = this._extendPromise) {
      await p;
      if (this._extendPromise === p) this._extendPromise = null;
    }
    this._stopped = true;
    if (this._housekeeper !== null) clearInterval(this._housekeeper);
    await this._closeConnections();
    this.listening = false;
  }

  async _closeConnections() {
    const conns = [this._takeConn, this._replyConn, this._listenConn].filter((c) => c !== null);
    await Promise.all(conns.map((c) => c.close().catch((err) => this.logger.debug(`closing ${c.name}: ${err.message}`))));
  }
}

// The pipelines a worker runs when none is said: two for a large concurrency (each take and
// reply commit waits for its WAL flush: two pipelines keep the server busy meanwhile), else one.
function defaultPipelines(concurrency) {
  return concurrency >= 200 ? 2 : 1;
}

class Worker {
  constructor(options) {
    if (!options || typeof options !== 'object') throw new TypeError('vq-job: new Worker(options) needs options');
    const concurrency = intOption(options, 'concurrency', 10, 1, 1000000);
    const prefetch = intOption(options, 'prefetch', 0, 0, 1000000);
    const n = Math.min(intOption(options, 'pipelines', defaultPipelines(concurrency), 1, 16), concurrency);
    const batchSize = intOption(options, 'batchSize', Math.min(concurrency + prefetch, 1000), 1, MAX_BATCH);
    this._parts = [];
    for (let i = 0; i < n; i++) {
      const c = Math.floor(concurrency / n) + (i < concurrency % n ? 1 : 0);
      const f = Math.floor(prefetch / n) + (i < prefetch % n ? 1 : 0);
      this._parts.push(new Pipeline({ ...options, concurrency: c, prefetch: f, batchSize: Math.min(batchSize, c + f) },
        i === 0 ? null : this._parts[0]));
    }
    for (const p of this._parts) p._group = this._parts;
    const first = this._parts[0];
    this.concurrency = concurrency;
    this.prefetch = prefetch;
    this.batchSize = batchSize;
    this.pipelines = n;
    this.lease = first.lease;
    this.timeout = first.timeout;
    this.stopTimeout = first.stopTimeout;
    this.logger = first.logger;
    this._onError = first._onError;
    this._stopPromise = null;
    let stoppedResolve;
    // Resolves once the worker has stopped (whoever called stop()).
    this.stopped = new Promise((resolve) => { stoppedResolve = resolve; });
    this._stoppedResolve = stoppedResolve;
  }

  get pollInterval() {
    return this._parts[0].pollInterval;
  }

  // A LISTEN is in place: wake-ups come by notification.
  get listening() {
    return this._parts[0].listening;
  }

  // The main connections go through a pooler (known after start()).
  get pooled() {
    return this._parts[0].pooled;
  }

  // Counters since start (a copy). running: handlers running; held: jobs taken and not finished
  // (running or waiting for a free handler).
  get stats() {
    const total = { takes: 0, taken: 0, completed: 0, failed: 0, released: 0, lost: 0, ignored: 0, replyCalls: 0, running: 0, held: 0 };
    for (const p of this._parts) {
      const s = p.stats;
      for (const k of Object.keys(total)) total[k] += s[k];
    }
    return total;
  }

  // Connect, check the handlers, LISTEN; resolves once listening (or polling).
  async start() {
    // (the first pipeline checks the handlers and learns whether a pooler is in between)
    await this._parts[0].start();
    try {
      await Promise.all(this._parts.slice(1).map((p) => p.start()));
    } catch (err) {
      await Promise.all(this._parts.map((p) => p.stop().catch(() => {})));
      throw err;
    }
  }

  // Stop taking, give back the jobs not started, let the running ones finish (up to stopTimeout),
  // reply, close the connections.
  stop() {
    if (this._stopPromise === null) {
      this._stopPromise = Promise.all(this._parts.map((p) => p.stop())).then(() => {});
      this._stopPromise.then(this._stoppedResolve, this._stoppedResolve);
    }
    return this._stopPromise;
  }

  // Stop on these signals (the library installs nothing by itself). Returns a function that
  // removes the handlers. A second signal while stopping exits at once (exit status 128 + signal).
  stopOnSignals(signals = ['SIGTERM', 'SIGINT'], options = {}) {
    const { exit = false } = options;
    const handlers = new Map();
    let stopping = false;
    const remove = () => {
      for (const [sig, fn] of handlers) process.removeListener(sig, fn);
      handlers.clear();
    };
    for (const sig of signals) {
      const fn = () => {
        if (stopping) {
          const os = require('os');
          process.exit(128 + (os.constants.signals[sig] || 1));
        }
        stopping = true;
        this.logger.info(`${sig}: stopping`);
        this.stop().then(() => {
          remove();
          if (exit) process.exit(0);
        }, (err) => {
          this._onError(err);
          remove();
          if (exit) process.exit(1);
        });
      };
      handlers.set(sig, fn);
      process.on(sig, fn);
    }
    return remove;
  }
}

async function plainClient(config) {
  const client = new pg.Client(config);
  // (errors before the caller's listeners are attached)
  const early = () => {};
  client.on('error', early);
  try {
    await client.connect();
  } catch (err) {
    client.removeListener('error', early);
    throw err;
  }
  client.removeListener('error', early);
  return { client, release: () => client.end() };
}

function toIso(t) {
  if (t instanceof Date) return t.toISOString();
  if (typeof t === 'number') return new Date(t).toISOString();
  return String(t);
}

module.exports = { Worker, TYPES, toIso };
