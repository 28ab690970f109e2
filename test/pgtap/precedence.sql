-- precedence.sql (pgTAP): effective queue, priority and max_attempts of an enqueued job.
-- Per field, highest first: the call's argument, the contract override, the handler's
-- default, the framework default (default, 0, 3). Checked as a full matrix: 64 handlers
-- (each field's handler default set or not x override set or not) x 8 argument
-- combinations, for vq_enqueue, vq_enqueue_in and vq_enqueue_many (both batch rows); then
-- named cases, vq_resolve_target and vq.handler_settings against the same rule. This is
-- the only place the rule is tested; test/sql shows the rows (enqueue*.sql, resolve.sql,
-- handlers.sql) and that changes reach the registry cache (enqueue.sql, resolve.sql).
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS vq_job;

SELECT plan(67);

-- Values per level:       framework   handler      override      argument
--   queue                 default     q_handler    q_override    q_argument
--   priority              0           5            9             13
--   max_attempts          3           7            11            17
CREATE FUNCTION prec_fn(payload jsonb) RETURNS void LANGUAGE plpgsql AS $$BEGIN END$$;

-- Handler h_<hq><hp><hm>_<oq><op><om>: a 1 bit means that field's handler default
-- (h..) or contract override (o..) is set.
CREATE TABLE prec_handler AS
SELECT format('h_%s%s%s_%s%s%s', hq::int, hp::int, hm::int, oq::int, op::int, om::int) AS handler,
       hq, hp, hm, oq, op, om
  FROM (VALUES (false), (true)) a(hq), (VALUES (false), (true)) b(hp), (VALUES (false), (true)) c(hm),
       (VALUES (false), (true)) d(oq), (VALUES (false), (true)) e(op), (VALUES (false), (true)) f(om);
-- Argument combinations: a 1 bit means the call passes that field.
CREATE TABLE prec_args AS
SELECT aq, ap, am,
       CASE WHEN aq THEN 'q_argument' END AS arg_queue,
       CASE WHEN ap THEN 13 END AS arg_priority,
       CASE WHEN am THEN 17 END AS arg_max_attempts
  FROM (VALUES (false), (true)) a(aq), (VALUES (false), (true)) b(ap), (VALUES (false), (true)) c(am);

DO $$
DECLARE
    h record;
BEGIN
    PERFORM vq_create_queue(n) FROM unnest(ARRAY['q_handler', 'q_override', 'q_argument']) n;
    FOR h IN SELECT * FROM prec_handler LOOP
        PERFORM vq_register_handler(h.handler, 'prec_fn(jsonb)',
                                    CASE WHEN h.hq THEN 'q_handler' END,
                                    CASE WHEN h.hp THEN 5 END,
                                    CASE WHEN h.hm THEN 7 END);
        IF h.oq OR h.op OR h.om THEN
            PERFORM vq_set_contract_override(h.handler,
                                             CASE WHEN h.oq THEN 'q_override' END,
                                             CASE WHEN h.op THEN 9 END,
                                             CASE WHEN h.om THEN 11 END);
        END IF;
    END LOOP;
END
$$;

-- Every handler x argument combination, through each enqueue form (a batch of two).
CREATE TABLE prec_job AS
SELECT h.*, a.aq, a.ap, a.am, f.form, x.pos, x.id
  FROM prec_handler h
 CROSS JOIN prec_args a
 CROSS JOIN (VALUES ('vq_enqueue'), ('vq_enqueue_in'), ('vq_enqueue_many')) f(form)
 CROSS JOIN LATERAL unnest(CASE f.form
        WHEN 'vq_enqueue' THEN
            ARRAY[vq_enqueue(h.handler, '{}', NULL, a.arg_queue, a.arg_priority, a.arg_max_attempts)]
        WHEN 'vq_enqueue_in' THEN
            ARRAY[vq_enqueue_in(h.handler, '{}', '1 minute', a.arg_queue, a.arg_priority, a.arg_max_attempts)]
        ELSE
            vq_enqueue_many(h.handler, '{"{}","{}"}', NULL, a.arg_queue, a.arg_priority, a.arg_max_attempts)
     END) WITH ORDINALITY x(id, pos);

-- The rule, written out per field.
CREATE VIEW prec_expected AS
SELECT p.*,
       CASE WHEN aq THEN 'q_argument' WHEN oq THEN 'q_override' WHEN hq THEN 'q_handler' ELSE 'default' END AS e_queue,
       CASE WHEN ap THEN 13 WHEN op THEN 9 WHEN hp THEN 5 ELSE 0 END AS e_priority,
       CASE WHEN am THEN 17 WHEN om THEN 11 WHEN hm THEN 7 ELSE 3 END AS e_max_attempts
  FROM prec_job p;

SELECT is((SELECT count(*) FROM prec_job p JOIN vq.job j ON j.execution_id = p.id), 64::bigint * 8 * (1 + 1 + 2),
          'every combination was enqueued (64 handlers x 8 argument sets x 4 jobs)');

-- The matrix: one test per form and field, over all 512 (1024 for the batch) jobs.
SELECT results_eq(
    format($q$SELECT p.handler, p.aq, p.ap, p.am, p.pos, j.%1$I::text FROM prec_job p
              JOIN vq.job j ON j.execution_id = p.id WHERE p.form = %2$L ORDER BY 1, 2, 3, 4, 5$q$, f.field, m.form),
    format($q$SELECT handler, aq, ap, am, pos, %1$I::text FROM prec_expected
              WHERE form = %2$L ORDER BY 1, 2, 3, 4, 5$q$, 'e_' || f.field, m.form),
    format('%s: %s = argument > contract override > handler default > framework default, every combination',
           m.form, f.field))
  FROM (VALUES (1, 'vq_enqueue'), (2, 'vq_enqueue_in'), (3, 'vq_enqueue_many')) m(mn, form),
       (VALUES (1, 'queue'), (2, 'priority'), (3, 'max_attempts')) f(fn, field)
 ORDER BY m.mn, f.fn;

-- Named cases: (handler, argument bits) => queue/priority/max_attempts, for each form.
CREATE FUNCTION prec_settings(p_handler text, p_args text, p_form text) RETURNS text LANGUAGE sql AS $$
    SELECT string_agg(DISTINCT format('%s/%s/%s', j.queue, j.priority, j.max_attempts), ' | ')
      FROM prec_job p JOIN vq.job j ON j.execution_id = p.id
     WHERE p.handler = p_handler AND p.form = p_form
       AND format('%s%s%s', p.aq::int, p.ap::int, p.am::int) = p_args
$$;
SELECT is(prec_settings(c.handler, c.args, m.form), c.expected, format('%s: %s', m.form, c.description))
  FROM (VALUES
    (1,  'h_000_000', '000', 'default/0/3',     'plain handler, nothing set: framework defaults'),
    (2,  'h_100_000', '000', 'q_handler/0/3',   'queue: handler default over framework default'),
    (3,  'h_100_100', '000', 'q_override/0/3',  'queue: override over handler default'),
    (4,  'h_100_100', '100', 'q_argument/0/3',  'queue: argument over override'),
    (5,  'h_010_000', '000', 'default/5/3',     'priority: handler default over framework default'),
    (6,  'h_010_010', '000', 'default/9/3',     'priority: override over handler default'),
    (7,  'h_010_010', '010', 'default/13/3',    'priority: argument over override'),
    (8,  'h_001_000', '000', 'default/0/7',     'max_attempts: handler default over framework default'),
    (9,  'h_001_001', '000', 'default/0/11',    'max_attempts: override over handler default'),
    (10, 'h_001_001', '001', 'default/0/17',    'max_attempts: argument over override'),
    (11, 'h_111_010', '000', 'q_handler/9/7',   'an override of one field leaves the others at the handler defaults'),
    (12, 'h_111_111', '010', 'q_override/13/11', 'an argument for one field leaves the others at the overrides'),
    (13, 'h_000_101', '000', 'q_override/0/11', 'overrides on a plain handler; priority falls back to the framework'),
    (14, 'h_111_111', '111', 'q_argument/13/17', 'every argument given wins over everything')
  ) c(n, handler, args, expected, description),
  (VALUES (1, 'vq_enqueue'), (2, 'vq_enqueue_in'), (3, 'vq_enqueue_many')) m(mn, form)
 ORDER BY m.mn, c.n;

-- Resolution applies the same rule: vq_resolve_target and the handler_settings view agree
-- with what a call without arguments stored.
SELECT results_eq(
    $$SELECT h.handler, r.queue, r.priority, r.max_attempts
        FROM prec_handler h, vq_resolve_target(h.handler) r ORDER BY 1$$,
    $$SELECT handler, e_queue, e_priority, e_max_attempts FROM prec_expected
       WHERE form = 'vq_enqueue' AND NOT (aq OR ap OR am) ORDER BY 1$$,
    'vq_resolve_target: the same effective settings for all 64 handlers');
SELECT results_eq(
    $$SELECT s.name, s.queue, s.priority, s.max_attempts FROM vq.handler_settings s
       WHERE s.name LIKE 'h\_%' ORDER BY 1$$,
    $$SELECT handler, e_queue, e_priority, e_max_attempts FROM prec_expected
       WHERE form = 'vq_enqueue' AND NOT (aq OR ap OR am) ORDER BY 1$$,
    'vq.handler_settings: the same effective settings for all 64 handlers');

-- The job_id (idempotent insert) paths resolve the same way.
SELECT vq_enqueue('h_111_111', '{}', NULL, NULL, 13, NULL, 'prec-one') AS one_id \gset
SELECT is((SELECT format('%s/%s/%s', queue, priority, max_attempts) FROM vq.job WHERE execution_id = :'one_id'),
          'q_override/13/11', 'vq_enqueue with a job_id: same precedence');
SELECT vq_enqueue_many('h_110_001', '{"{}","{}"}', NULL, 'q_argument', NULL, NULL, '{prec-many, NULL}') AS many_ids \gset
SELECT is((SELECT string_agg(DISTINCT format('%s/%s/%s', queue, priority, max_attempts), ' | ')
             FROM vq.job WHERE execution_id = ANY (:'many_ids'::uuid[])),
          'q_argument/5/11', 'vq_enqueue_many with job_ids: same precedence on every row');

-- An override row whose fields are all NULL changes nothing.
SELECT lives_ok($$SELECT vq_set_contract_override('h_111_000')$$, 'an override with every field NULL is accepted');
SELECT vq_enqueue('h_111_000') AS null_override_id \gset
SELECT is((SELECT format('%s/%s/%s', queue, priority, max_attempts) FROM vq.job WHERE execution_id = :'null_override_id'),
          'q_handler/5/7', 'an all-NULL override leaves the handler defaults in force');

-- prec_effective(handler[, priority][, resolver]): queue/priority/max_attempts of new jobs
-- from every enqueue form (a batch of two), and, without a priority argument, of
-- vq.handler_settings and (unless resolver is false) vq_resolve_target: one value when they
-- all agree.
CREATE FUNCTION prec_effective(p_handler text, p_priority int DEFAULT NULL, p_resolver boolean DEFAULT true)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    ids uuid[];
BEGIN
    ids := ARRAY[vq_enqueue(p_handler, '{}', NULL, NULL, p_priority),
                 vq_enqueue_in(p_handler, '{}', '1 minute', NULL, p_priority)]
           || vq_enqueue_many(p_handler, '{"{}","{}"}', NULL, NULL, p_priority);
    RETURN (SELECT string_agg(DISTINCT x.s, ' | ') FROM (
        SELECT format('%s/%s/%s', j.queue, j.priority, j.max_attempts) FROM vq.job j WHERE j.execution_id = ANY (ids)
        UNION ALL
        SELECT format('%s/%s/%s', r.queue, r.priority, r.max_attempts) FROM vq_resolve_target(p_handler) r
         WHERE p_priority IS NULL AND p_resolver
        UNION ALL
        SELECT format('%s/%s/%s', h.queue, h.priority, h.max_attempts) FROM vq.handler_settings h
         WHERE h.name = p_handler AND p_priority IS NULL) x(s));
END
$$;

-- Zero, negative and limit values are values like any other; a NOTIFY handler resolves the same way.
SELECT vq_register_handler('p_values', 'prec_fn(jsonb)', 'q_handler', 5, 7) AS registered \gset
SELECT vq_set_contract_override('p_values', NULL, -3, 1) AS overridden \gset
SELECT is(prec_effective('p_values'), 'q_handler/-3/1',
          'override values -3 and 1 win over the handler defaults (every form, resolver and view)');
SELECT is(prec_effective('p_values', 0), 'q_handler/0/1', 'a priority argument of 0 wins over the override (every form)');
SELECT vq_register_notify_handler('p_notify', 'prec_chan', 'q_handler', -1, 4) AS registered \gset
SELECT vq_set_contract_override('p_notify', 'default', 0, 3) AS overridden \gset
SELECT is(prec_effective('p_notify'), 'default/0/3',
          'NOTIFY handler: an override equal to the framework defaults still wins over the handler defaults');
SELECT vq_drop_contract_override('p_notify') AS dropped \gset
SELECT is(prec_effective('p_notify', p_resolver => false), 'q_handler/-1/4',
          'NOTIFY handler: once the override is dropped, the handler defaults are back (every form and the view)');

-- Settings are resolved once, at enqueue: a later override changes new jobs only. (That
-- vq_resolve_target follows such changes is shown by test/sql/resolve.sql.)
SELECT lives_ok($$SELECT vq_set_contract_override('h_100_100', 'q_argument', 1, 1)$$, 'override changed after enqueue');
SELECT is((SELECT count(*) FROM prec_expected p JOIN vq.job j ON j.execution_id = p.id
            WHERE p.handler = 'h_100_100'
              AND (j.queue, j.priority, j.max_attempts) IS DISTINCT FROM (p.e_queue, p.e_priority, p.e_max_attempts)),
          0::bigint, 'jobs already enqueued keep the settings resolved when they were enqueued');
SELECT is(prec_effective('h_100_100', p_resolver => false), 'q_argument/1/1',
          'jobs enqueued after the change get the new override (every form and the view)');
SELECT lives_ok($$SELECT vq_drop_contract_override('h_100_100')$$, 'override dropped');
SELECT is(prec_effective('h_100_100', p_resolver => false), 'q_handler/0/3',
          'after the override is dropped, the handler default is back (every form and the view)');

SELECT * FROM finish();
