-- test/soak/accounting.sql: the soak's exact accounting, once everything has settled (and
-- soak_fault is loaded). Fills the temporary table acc (ord, measure, value, rule, ok) that
-- the driver prints; a row with ok = false is a violated 'must'. Details of violations go to
-- the temporary table bad (what, execution_id, k), which the driver prints with the jobs'
-- transitions.

SET client_min_messages = warning;

-- What each kind of producer transaction must end as, and which handler serves it.
CREATE TEMP TABLE expect (kind text PRIMARY KEY, handler text, states text[], is_job boolean);
INSERT INTO expect VALUES
    ('direct',        'soak_ok',     '{COMPLETED}', true),
    ('batch',         'soak_ok',     '{COMPLETED}', true),
    ('future',        'soak_ok',     '{COMPLETED}', true),
    ('outbox_job',    'soak_ok',     '{COMPLETED}', true),
    ('outbox_future', 'soak_ok',     '{COMPLETED}', true),
    ('cancel',        'soak_ok',     '{CANCELLED,COMPLETED}', true),
    ('busy',          'soak_busy',   '{COMPLETED}', true),
    ('flaky',         'soak_flaky',  '{COMPLETED}', true),
    ('doomed',        'soak_doomed', '{DEAD_LETTER}', true),
    ('slow',          'soak_slow',   '{DEAD_LETTER}', true),
    ('notify',        'soak_notify', '{COMPLETED}', true),
    ('outbox_notify', NULL,          NULL, false);

-- The soak's jobs, by key.
CREATE TEMP TABLE sj AS
SELECT j.execution_id, (j.payload ->> 'k')::uuid AS k, j.handler, j.state::text AS state,
       j.attempt_number, split_part(j.handler_address, '(', 1) AS fn, j.finished_at
  FROM vq.job j
 WHERE j.handler LIKE 'soak\_%';
CREATE INDEX ON sj (k);
CREATE INDEX ON sj (execution_id);
ANALYZE sj;

CREATE TEMP TABLE st AS
SELECT t.* FROM vq.job_transition t JOIN sj USING (execution_id);
CREATE INDEX ON st (execution_id, attempt_number);
ANALYZE st;

CREATE TEMP TABLE se AS
SELECT e.execution_id, count(*) AS n,
       count(*) FILTER (WHERE e.attempt <> j.attempt_number OR j.state NOT IN ('COMPLETED', 'CANCELLED')) AS wrong_attempt,
       count(*) FILTER (WHERE e.fn <> 'consumer' AND e.fn <> j.fn) AS wrong_fn
  FROM soak_effect e JOIN sj j USING (execution_id)
 GROUP BY 1;
CREATE INDEX ON se (execution_id);
ANALYZE se;

CREATE TEMP TABLE bad (what text, execution_id uuid, k uuid);
CREATE TEMP TABLE acc (ord int, measure text, value text, rule text, ok boolean);

-- ---- producers ----------------------------------------------------------------------------
INSERT INTO acc
SELECT 10, 'jobs committed by producers', count(*)::text, '', true
  FROM soak_produced p JOIN expect x USING (kind) WHERE x.is_job;
INSERT INTO acc
SELECT 11, '  of which ' || kind, count(*)::text, '', true
  FROM soak_produced p JOIN expect x USING (kind) WHERE x.is_job GROUP BY kind;
INSERT INTO acc
SELECT 12, 'outbox rows committed (DELAYED_JOB / NOTIFY)',
       count(*) FILTER (WHERE kind IN ('outbox_job', 'outbox_future')) || ' / ' ||
       count(*) FILTER (WHERE kind = 'outbox_notify'), '', true
  FROM soak_produced;

INSERT INTO acc
SELECT 13, 'producer transactions rolled back on purpose (pgbench count, at least)', :'rolled_back', '', true;
INSERT INTO acc
SELECT 14, 'pgbench runs (each started again after a fault ended it)', :'producer_runs', '', true;

-- ---- outcomes -----------------------------------------------------------------------------
INSERT INTO acc
SELECT 20, 'completed / dead-lettered / cancelled',
       count(*) FILTER (WHERE state = 'COMPLETED') || ' / ' || count(*) FILTER (WHERE state = 'DEAD_LETTER')
       || ' / ' || count(*) FILTER (WHERE state = 'CANCELLED'), '', true
  FROM sj;

-- lost: committed but no job, still unfinished, or completed without the effect of its run
INSERT INTO bad
SELECT 'no job for a committed key', p.execution_id, p.k
  FROM soak_produced p JOIN expect x USING (kind)
 WHERE x.is_job AND NOT EXISTS (SELECT 1 FROM sj WHERE sj.k = p.k);
INSERT INTO bad
SELECT 'still ' || sj.state || ' after settling', sj.execution_id, sj.k
  FROM sj WHERE sj.state IN ('ENQUEUED', 'RUNNING');
INSERT INTO bad
SELECT 'COMPLETED without an effect row', sj.execution_id, sj.k
  FROM sj WHERE sj.state = 'COMPLETED' AND NOT EXISTS (SELECT 1 FROM se WHERE se.execution_id = sj.execution_id);
INSERT INTO acc
SELECT 21, 'lost (no job, unfinished, or completed without its effect)', count(*)::text, 'must be 0', count(*) = 0
  FROM bad WHERE what IN ('no job for a committed key', 'COMPLETED without an effect row')
              OR what LIKE 'still %';

INSERT INTO bad
SELECT 'job whose key no producer committed (a rolled-back enqueue?)', sj.execution_id, sj.k
  FROM sj WHERE NOT EXISTS (SELECT 1 FROM soak_produced p WHERE p.k = sj.k);
INSERT INTO bad
SELECT 'job other than the one its enqueue returned', sj.execution_id, sj.k
  FROM sj JOIN soak_produced p USING (k)
 WHERE p.execution_id IS NOT NULL AND p.execution_id <> sj.execution_id;
INSERT INTO acc
SELECT 22, 'jobs nobody committed, or not the id the enqueue returned', count(*)::text, 'must be 0', count(*) = 0
  FROM bad WHERE what IN ('job whose key no producer committed (a rolled-back enqueue?)',
                          'job other than the one its enqueue returned');

INSERT INTO bad
SELECT 'final state ' || sj.state || ' not in ' || x.states::text || ' for kind ' || p.kind, sj.execution_id, sj.k
  FROM sj JOIN soak_produced p USING (k) JOIN expect x USING (kind)
 WHERE sj.state NOT IN ('ENQUEUED', 'RUNNING')
   AND (sj.state <> ALL (x.states) OR sj.handler IS DISTINCT FROM x.handler)
   -- an attempt lost to a crash is consumed (checked below: only a kill -9 or an immediate stop
   -- may abandon one), so a job that needs its last attempt may end dead-lettered instead
   AND NOT (sj.state = 'DEAD_LETTER' AND 'COMPLETED' = ANY (x.states)
            AND EXISTS (SELECT 1 FROM st WHERE st.execution_id = sj.execution_id AND st.kind = 'ABANDONED'));
INSERT INTO acc
SELECT 23, 'jobs in an unexpected final state', count(*)::text, 'must be 0', count(*) = 0
  FROM bad WHERE what LIKE 'final state %';

-- ---- effects ------------------------------------------------------------------------------
INSERT INTO bad
SELECT 'PL/pgSQL job with ' || coalesce(se.n, 0) || ' effect rows and ' || coalesce(l.runs, 0) || ' ledger runs',
       sj.execution_id, sj.k
  FROM sj LEFT JOIN se USING (execution_id) LEFT JOIN soak_ledger l USING (k)
 WHERE sj.handler <> 'soak_notify' AND (coalesce(se.n, 0) > 1 OR coalesce(l.runs, 0) > 1);
INSERT INTO acc
SELECT 30, 'duplicate effects of a PL/pgSQL handler for one job', count(*)::text, 'must be 0', count(*) = 0
  FROM bad WHERE what LIKE 'PL/pgSQL job with %';
INSERT INTO bad
SELECT 'effect of an attempt that did not complete the job', se.execution_id, sj.k
  FROM se JOIN sj USING (execution_id) WHERE sj.handler <> 'soak_notify' AND se.wrong_attempt > 0;
INSERT INTO bad
SELECT 'effect written by another function than the job recorded', se.execution_id, sj.k
  FROM se JOIN sj USING (execution_id) WHERE se.wrong_fn > 0;
INSERT INTO bad
SELECT 'ledger runs differ from effect rows', sj.execution_id, sj.k
  FROM sj LEFT JOIN se USING (execution_id) LEFT JOIN soak_ledger l USING (k)
 WHERE sj.handler <> 'soak_notify' AND coalesce(se.n, 0) <> coalesce(l.runs, 0);
INSERT INTO acc
SELECT 31, 'effects of a failed attempt, of another function, or not in the ledger', count(*)::text, 'must be 0', count(*) = 0
  FROM bad WHERE what IN ('effect of an attempt that did not complete the job',
                          'effect written by another function than the job recorded',
                          'ledger runs differ from effect rows');
INSERT INTO acc
SELECT 32, 'NOTIFY jobs the consumer ran more than once (at least once; info)',
       count(*) FILTER (WHERE se.n > 1)::text, '', true
  FROM sj JOIN se USING (execution_id) WHERE sj.handler = 'soak_notify';

-- ---- outbox -------------------------------------------------------------------------------
INSERT INTO bad
SELECT 'outbox DELAYED_JOB row with ' || (SELECT count(*) FROM sj WHERE sj.k = p.k) || ' jobs', NULL, p.k
  FROM soak_produced p
 WHERE p.kind IN ('outbox_job', 'outbox_future') AND (SELECT count(*) FROM sj WHERE sj.k = p.k) <> 1;
INSERT INTO bad
SELECT 'outbox row ' || coalesce(o.status, 'missing'), NULL, p.k
  FROM soak_produced p LEFT JOIN vq.outbox o ON o.id = p.outbox_id
 WHERE p.kind IN ('outbox_job', 'outbox_future', 'outbox_notify')
   AND (o.id IS NULL OR o.status <> 'PUBLISHED' OR (o.payload ->> 'k')::uuid <> p.k);
INSERT INTO bad
SELECT 'outbox row whose key no producer committed', NULL, (o.payload ->> 'k')::uuid
  FROM vq.outbox o
 WHERE NOT EXISTS (SELECT 1 FROM soak_produced p WHERE p.outbox_id = o.id);
INSERT INTO acc
SELECT 40, 'outbox rows -> jobs (exactly one each)',
       (SELECT count(*) FROM soak_produced WHERE kind IN ('outbox_job', 'outbox_future')) || ' -> ' ||
       (SELECT count(*) FROM sj JOIN soak_produced p USING (k) WHERE p.kind IN ('outbox_job', 'outbox_future'))
       || '; ' || count(*) || ' without exactly one', 'must be 0 without', count(*) = 0
  FROM bad WHERE what LIKE 'outbox DELAYED_JOB row with %';
INSERT INTO acc
SELECT 41, 'outbox rows not PUBLISHED, missing, or uncommitted', count(*)::text, 'must be 0', count(*) = 0
  FROM bad WHERE what LIKE 'outbox row %';

INSERT INTO acc
SELECT 42, 'NOTIFY outbox rows heard by a listener (it misses what is sent while it reconnects)',
       count(DISTINCT h.outbox_id) || ' of ' || (SELECT count(*) FROM soak_produced WHERE kind = 'outbox_notify'), '', true
  FROM soak_heard h;
INSERT INTO bad
SELECT 'NOTIFY outbox row heard ' || count(*) || ' times', NULL, (SELECT p.k FROM soak_produced p WHERE p.outbox_id = h.outbox_id)
  FROM soak_heard h GROUP BY h.outbox_id HAVING count(*) > 1;
INSERT INTO bad
SELECT 'notification for outbox id ' || h.outbox_id || ', which no NOTIFY publish committed', NULL, NULL
  FROM soak_heard h
 WHERE NOT EXISTS (SELECT 1 FROM soak_produced p WHERE p.outbox_id = h.outbox_id AND p.kind = 'outbox_notify');
INSERT INTO acc
SELECT 43, 'NOTIFY outbox rows delivered twice, or never committed', count(*)::text, 'must be 0', count(*) = 0
  FROM bad WHERE what LIKE 'NOTIFY outbox row heard %' OR what LIKE 'notification for outbox id %';

-- ---- attempts -----------------------------------------------------------------------------
-- Every abandonment, with its cause, the claim of that attempt, and the disorderly fault
-- (kill -9 of a server process, immediate stop) that overlaps [claim, abandonment], if any.
CREATE TEMP TABLE ab AS
SELECT t.execution_id, t.attempt_number, t.at, t.error,
       CASE WHEN t.error LIKE 'executor process % stopped while the job was running' THEN 'death'
            WHEN t.error LIKE 'execution timed out%' THEN 'timeout'
            -- (a worker outside the server that held the job did not answer in time)
            WHEN t.error LIKE 'lease expired at % with no reply from the worker' THEN 'noreply'
            ELSE 'other' END AS cause,
       (SELECT max(c.at) FROM st c WHERE c.execution_id = t.execution_id AND c.kind = 'CLAIMED'
           AND c.attempt_number = t.attempt_number AND c.at <= t.at) AS claimed_at
  FROM st t WHERE t.kind = 'ABANDONED';
ALTER TABLE ab ADD COLUMN crash_at timestamptz;
UPDATE ab SET crash_at = (SELECT max(f.t0) FROM soak_fault f
                           WHERE f.kind IN ('kill_executor', 'kill_launcher', 'immediate')
                             AND f.t0 <= ab.at AND f.t1 >= coalesce(ab.claimed_at, '-infinity'));
ALTER TABLE ab ADD COLUMN consumer_fault boolean;
UPDATE ab SET consumer_fault = EXISTS (SELECT 1 FROM soak_fault f
                           WHERE f.kind IN ('kill_executor', 'kill_launcher', 'immediate', 'fast', 'kill_consumer')
                             AND f.t0 <= ab.at AND f.t1 >= coalesce(ab.claimed_at, '-infinity'));
ALTER TABLE ab ADD COLUMN consumer_stop boolean;
UPDATE ab SET consumer_stop = EXISTS (SELECT 1 FROM soak_fault f
                           WHERE f.kind = 'consumer_restart'
                             AND f.t0 <= ab.at AND f.t1 >= coalesce(ab.claimed_at, '-infinity'));

INSERT INTO acc
SELECT 50, 'attempts consumed: handler errors / timeouts / crashes (executor died)',
       (SELECT count(*) FROM st WHERE kind = 'FAILED') || ' / ' ||
       count(*) FILTER (WHERE cause = 'timeout') || ' / ' ||
       count(*) FILTER (WHERE cause = 'death' AND crash_at IS NOT NULL), '', true
  FROM ab;
INSERT INTO acc
SELECT 51, 'NOTIFY jobs without a consumer reply in time, after: a consumer SIGTERM / a kill -9 or server stop / no fault',
       count(*) FILTER (WHERE consumer_stop AND NOT consumer_fault) || ' / ' || count(*) FILTER (WHERE consumer_fault)
       || ' / ' || count(*) FILTER (WHERE NOT consumer_fault AND NOT consumer_stop), '', true
  FROM ab WHERE cause = 'noreply';
INSERT INTO acc
SELECT 52, 'jobs INTERRUPTED by orderly stops (no attempt consumed)', count(DISTINCT execution_id)::text, '', true
  FROM st WHERE kind = 'INTERRUPTED';

-- an executor's death that no disorderly fault explains: an orderly stop cost an attempt
INSERT INTO bad
SELECT 'ABANDONED (' || ab.error || ') at ' || ab.at || ' with no kill -9 or immediate stop since its claim at '
       || coalesce(ab.claimed_at::text, '?'), ab.execution_id, NULL
  FROM ab WHERE cause IN ('death', 'other') AND crash_at IS NULL;
-- an attempt consumed without a FAILED or ABANDONED transition (an INTERRUPTED that counted)
INSERT INTO bad
SELECT 'attempt_number ' || sj.attempt_number || ' but ' || n.c || ' FAILED/ABANDONED transitions back to ENQUEUED',
       sj.execution_id, sj.k
  FROM sj CROSS JOIN LATERAL (SELECT count(*) AS c FROM st WHERE st.execution_id = sj.execution_id
                                 AND st.kind IN ('FAILED', 'ABANDONED') AND st.to_state = 'ENQUEUED') n
 WHERE sj.attempt_number <> n.c;
INSERT INTO acc
SELECT 53, 'attempts consumed by orderly stops and restarts', count(*)::text, 'must be 0', count(*) = 0
  FROM bad WHERE what LIKE 'ABANDONED (%' OR what LIKE 'attempt\_number %';
INSERT INTO bad
SELECT 'job abandoned twice for one crash', a.execution_id, NULL
  FROM ab a WHERE a.cause = 'death' AND a.crash_at IS NOT NULL
 GROUP BY a.execution_id, a.crash_at HAVING count(*) > 1;
INSERT INTO acc
SELECT 54, 'crashes that consumed more than one attempt of a job', count(*)::text, 'must be 0', count(*) = 0
  FROM bad WHERE what = 'job abandoned twice for one crash';

INSERT INTO acc
SELECT 60, 'longest RUNNING after its executor died (s; jobs)',
       coalesce(round(extract(epoch FROM max(at - crash_at))::numeric, 2)::text, '-') || '; ' || count(*), '', true
  FROM ab WHERE cause = 'death' AND crash_at IS NOT NULL;
INSERT INTO acc
SELECT 61, '  after ' || f.kind || ' (s; jobs)',
       round(extract(epoch FROM max(ab.at - ab.crash_at))::numeric, 2) || '; ' || count(*), '', true
  FROM ab JOIN soak_fault f ON f.t0 = ab.crash_at
 WHERE ab.cause = 'death'
 GROUP BY f.kind;

-- ---- faults -------------------------------------------------------------------------------
INSERT INTO acc
SELECT 70, 'faults', string_agg(kind || ' ' || n, ', ' ORDER BY kind), '', true
  FROM (SELECT kind, count(*) n FROM soak_fault GROUP BY kind) f;
INSERT INTO acc
SELECT 71, 'fault kinds dealt that never took effect', coalesce(string_agg(DISTINCT k, ', '), 'none'),
       'must be none', count(*) = 0
  FROM unnest(string_to_array(:'faults', ' ')) k
 WHERE k <> '' AND NOT EXISTS (SELECT 1 FROM soak_fault f WHERE f.kind = k);
