// Type declarations of vq-job, the Node.js client of vq_job. Self-contained: node-postgres'
// objects are described by what vq-job uses of them (no @types/pg needed).

/** Anything with node-postgres' query(): a Client, a PoolClient (joins its transaction) or a Pool. */
export interface Queryable {
  query(config: { text: string; values?: unknown[]; rowMode?: 'array' }): Promise<{ rows: any[] }>;
}

/** A node-postgres client configuration (pg.ClientConfig): host, port, user, database, password, ssl, ... */
export interface ClientConfig {
  connectionString?: string;
  host?: string;
  port?: number;
  user?: string;
  database?: string;
  password?: string | (() => string | Promise<string>);
  ssl?: unknown;
  application_name?: string;
  [option: string]: unknown;
}

/** A node-postgres Pool (pg.Pool). */
export interface Pool extends Queryable {
  connect(): Promise<Queryable & { release(err?: Error | boolean): void }>;
}

/** A time: a Date, epoch milliseconds, or a timestamptz literal. */
export type Time = Date | number | string;

export interface EnqueueOptions {
  /** When the job becomes due (default: now). */
  runAt?: Time;
  /** Your id for the job: a second enqueue with the same jobId is refused while the first exists. */
  jobId?: string;
  /** Queue (default: the handler's). */
  queue?: string;
  /** Higher runs first (default: the handler's). */
  priority?: number;
  /** Attempts before DEAD_LETTER (default: the handler's). */
  maxAttempts?: number;
  /** Per-call metadata (jsonb), merged with the durable context bound by vq_context_set. */
  metadata?: Record<string, unknown>;
  /** With jobId: the key also covers finished jobs for this long (ms or interval text). */
  uniqueFor?: number | string;
}

export interface EnqueueManyOptions {
  runAt?: Time;
  /** One per payload (NULL elements allowed). */
  jobIds?: Array<string | null>;
  queue?: string;
  priority?: number;
  maxAttempts?: number;
  metadata?: Record<string, unknown>;
}

/**
 * Enqueue a job with vq_enqueue on the caller's client (it joins the transaction in progress).
 * Resolves to the job's execution_id.
 */
export function enqueue(db: Queryable, handler: string, payload?: unknown, options?: EnqueueOptions): Promise<string>;

/** Enqueue one job per payload in one statement (vq_enqueue_many); resolves to their execution_ids, in order. */
export function enqueueMany(db: Queryable, handler: string, payloads: unknown[], options?: EnqueueManyOptions): Promise<string[]>;

export type LogLevel = 'DEBUG' | 'INFO' | 'WARN' | 'ERROR' | 'debug' | 'info' | 'warn' | 'error';

/** Why a job was asked to stop. */
export type CancelReason = 'cancel' | 'lost' | 'timeout' | 'stop';

export interface Progress {
  total?: number | bigint | null;
  succeeded?: number | bigint | null;
  failed?: number | bigint | null;
}

/** A job as its handler sees it. */
export interface Job<P = any> {
  /** The execution_id. */
  readonly id: string;
  /** 0 for the first attempt. */
  readonly attempt: number;
  readonly handler: string;
  /** The job_id given at enqueue (or the one vq_job made). */
  readonly jobId: string;
  readonly payload: P;
  /** True once the job should stop: vq_cancel asked, its lease was lost, the worker's timeout passed, or a forced stop. */
  readonly cancelled: boolean;
  readonly cancelReason: CancelReason | null;
  /** Aborts when `cancelled` becomes true (its reason: a JobCancelledError). */
  readonly signal: AbortSignal;
  /** True when the worker no longer holds the job (its lease expired): its result is not sent. */
  readonly lost: boolean;
  /** A line of the job's log (vq.job_log), written in batches: log(message), log(level, message, fields?), log(message, fields). */
  log(message: string, fields?: Record<string, unknown>): void;
  log(level: LogLevel, message: string, fields?: Record<string, unknown>): void;
  /** Absolute progress counters; a counter left out keeps its value. */
  progress(counts: Progress): void;
}

export class JobCancelledError extends Error {
  readonly reason: CancelReason;
}

/** A handler: returns (or resolves) to complete the job; throws (or rejects) to fail the attempt. */
export type Handler<P = any> = (payload: P, job: Job<P>) => unknown | Promise<unknown>;

/**
 * An error a handler throws to retry at a given time instead of after the queue's backoff
 * (the attempt is consumed): `throw Object.assign(new Error('rate limited'), { retryAt })`.
 */
export interface RetryableError extends Error {
  retryAt?: Time;
}

export interface Logger {
  debug(...args: unknown[]): void;
  info(...args: unknown[]): void;
  warn(...args: unknown[]): void;
  error(...args: unknown[]): void;
}

export interface WorkerOptions {
  /** Handler name (registered with vq_register_notify_handler) -> function. 1 to 64 handlers. */
  handlers: Record<string, Handler>;
  /** Handlers running at once (default 10). */
  concurrency?: number;
  /** Jobs taken beyond `concurrency`, waiting for a free handler (default 0). */
  prefetch?: number;
  /** Most jobs one take asks for (default min(concurrency + prefetch, 1000); at most 10000). */
  batchSize?: number;
  /** Take-and-reply connection pairs sharing `concurrency` (default 2 when concurrency >= 200, else 1; at most 16). */
  pipelines?: number;
  /** Lease of a taken job in ms (default 60000; 1000 .. 86400000); extended at half while its handler runs. */
  lease?: number;
  /** A handler running longer (ms) is asked to stop and its lease is no longer extended (default 0: no limit). */
  timeout?: number;
  /** How long stop() waits for running handlers (ms, default 30000) before failing their attempts. */
  stopTimeout?: number;
  /** Take this often without a wake-up (ms; default 2000 when listening, 500 when polling only). */
  pollInterval?: number;
  /** How often log lines and progress of running jobs are written (ms, default 1000); a reply writes them at once. */
  flushInterval?: number;
  /** LISTEN for wake-ups (default true). Through a transaction pooler the main connection never LISTENs. */
  listen?: boolean;
  /** Connection string of the main connections (else `config`, `pool`, or the PG* environment variables). */
  connectionString?: string;
  /** node-postgres client configuration of the main connections. */
  config?: ClientConfig;
  /** A pool the worker takes its two connections from (held until stop()). */
  pool?: Pool;
  /** A direct connection (not through a transaction pooler) to LISTEN on. */
  listenConnectionString?: string;
  /** The same as a client configuration. */
  listenConfig?: ClientConfig;
  /** application_name of the worker's own connections (default 'vq-job worker'). */
  applicationName?: string;
  /** Where the worker tells what it does (default: warnings and errors on the console). */
  logger?: Partial<Logger>;
  /** Unexpected errors (lost connections, failed calls); default: logger.error. */
  onError?: (err: Error) => void;
}

export interface WorkerStats {
  /** vq_take_jobs calls. */
  takes: number;
  /** Jobs taken. */
  taken: number;
  /** Replies applied, by outcome. */
  completed: number;
  failed: number;
  released: number;
  /** Jobs whose lease was lost (their result not sent). */
  lost: number;
  /** Replies the server ignored. */
  ignored: number;
  /** vq_reply_jobs calls. */
  replyCalls: number;
  /** Handlers running now. */
  running: number;
  /** Jobs taken and not finished now. */
  held: number;
}

export class Worker {
  constructor(options: WorkerOptions);
  readonly concurrency: number;
  readonly prefetch: number;
  readonly batchSize: number;
  readonly pipelines: number;
  readonly lease: number;
  readonly timeout: number;
  readonly stopTimeout: number;
  readonly pollInterval: number;
  /** A LISTEN is in place (wake-ups by notification). */
  readonly listening: boolean;
  /** The main connection goes through a pooler (known after start()). */
  readonly pooled: boolean | null;
  readonly stats: WorkerStats;
  /** Resolves once the worker has stopped (after stop(), whoever called it). */
  readonly stopped: Promise<void>;
  /** Connect, check the handlers, LISTEN; resolves once listening (or polling). */
  start(): Promise<void>;
  /** Stop taking, release the jobs not started, let running handlers finish (up to stopTimeout), reply, close. */
  stop(): Promise<void>;
  /**
   * Call stop() on these signals (default SIGTERM and SIGINT). A second signal exits at once
   * (128 + signal number); with exit: true the process exits when stopped. Returns a function
   * that removes the handlers. The library installs none by itself.
   */
  stopOnSignals(signals?: string[], options?: { exit?: boolean }): () => void;
}
