-- Callbacks of what a client's session records are queued for an executor (vq.callback_event),
-- never called in the session: the event names the function callbacks subscribed, in their
-- order, and carries their arguments as they were. The executors do not serve this database
-- (setup.sql), so the events stay queued to be looked at.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
CREATE TABLE public.cbq_seen (cb text, kind text);
CREATE FUNCTION public.cbq_noop(p jsonb) RETURNS void LANGUAGE sql AS '';
CREATE FUNCTION public.cbq_listen(t vq.job_transition, j vq.job) RETURNS void
    LANGUAGE sql AS $$ INSERT INTO public.cbq_seen VALUES ('listener', t.kind) $$;
CREATE FUNCTION public.cbq_complete(c vq.job_context, outcome text, error text) RETURNS void
    LANGUAGE sql AS $$ INSERT INTO public.cbq_seen VALUES ('on_complete', outcome) $$;
SELECT vq_register_handler('cbq_fn', 'public.cbq_noop(jsonb)');
SELECT vq_register_notify_handler('cbq_notify', 'cbq_channel');
SELECT vq_register_transition_listener('cbq-b', 'public.cbq_listen(vq.job_transition, vq.job)',
                                       handlers => '{cbq_fn,cbq_notify}');
SELECT vq_register_transition_listener('cbq-a', 'public.cbq_listen(vq.job_transition, vq.job)',
                                       handlers => '{cbq_fn,cbq_notify}');
SELECT vq_register_transition_listener('cbq-other', 'public.cbq_listen(vq.job_transition, vq.job)',
                                       handlers => '{someone_else}');
SELECT vq_register_interceptor('cbq-i2', on_complete => 'public.cbq_complete(vq.job_context, text, text)', "position" => 2);
SELECT vq_register_interceptor('cbq-i1', on_complete => 'public.cbq_complete(vq.job_context, text, text)', "position" => 1);

-- vq_cancel of an ENQUEUED job: one event for the CANCELLED transition, both listeners by name.
SELECT vq_enqueue('cbq_fn', '{"n": 1}', run_at => now() + interval '1 hour', job_id => 'cbq-1') AS id1 \gset
SELECT vq_cancel(:'id1');
SELECT count(*) AS called_here FROM public.cbq_seen;
SELECT kind, callbacks, attempt_number, (transition).kind AS t_kind, (transition).from_state,
       (transition).to_state, (job).state AS job_state, (job).job_id, (job).payload, context IS NULL AS no_context
  FROM vq.callback_event WHERE execution_id = :'id1';

-- A transition rolled back queues nothing.
SELECT vq_enqueue('cbq_fn', '{"n": 2}', run_at => now() + interval '1 hour') AS id2 \gset
BEGIN;
SELECT vq_cancel(:'id2');
ROLLBACK;
SELECT count(*) AS queued_for_rolled_back FROM vq.callback_event WHERE execution_id = :'id2';

-- A worker's take and reply: the listeners of the CLAIMED transition (a take records it while
-- listeners are registered), then the interceptors' on_complete (by position) and the
-- listeners of the FAILED transition.
SELECT vq_enqueue('cbq_notify', '{"n": 3}', job_id => 'cbq-3') AS id3 \gset
SELECT count(*) AS taken FROM vq_take_jobs(ARRAY['cbq_notify']);
SELECT vq_fail(:'id3', 'no luck');
SELECT count(*) AS called_here FROM public.cbq_seen;
SELECT kind, callbacks, (context).job_id, outcome, error, (transition).kind AS t_kind, (job).state AS job_state
  FROM vq.callback_event WHERE execution_id = :'id3' ORDER BY id;

-- Hidden from other roles (row security): the rows carry other roles' jobs.
CREATE ROLE cbq_plain;
SET ROLE cbq_plain;
SELECT count(*) FROM vq.callback_event;
RESET ROLE;
DROP ROLE cbq_plain;

-- Clean up (the events, which no executor will run here, too).
DELETE FROM vq.callback_event WHERE execution_id IN (:'id1', :'id2', :'id3');
SELECT vq_unregister_transition_listener(n) FROM unnest('{cbq-a,cbq-b,cbq-other}'::text[]) n;
SELECT vq_unregister_interceptor(n) FROM unnest('{cbq-i1,cbq-i2}'::text[]) n;
DELETE FROM vq.job WHERE handler IN ('cbq_fn', 'cbq_notify');
SELECT vq_unregister_handler('cbq_fn'), vq_unregister_handler('cbq_notify');
DROP TABLE public.cbq_seen;
DROP FUNCTION public.cbq_noop(jsonb), public.cbq_listen(vq.job_transition, vq.job),
              public.cbq_complete(vq.job_context, text, text);
