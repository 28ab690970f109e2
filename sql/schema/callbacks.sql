-- sql/schema/callbacks.sql: administrators' callbacks: interceptors around every dispatch,
-- transition listeners (and the row triggers that call them), the callbacks queued for an
-- executor (vq.callback_event), and the functions that register them.

-- Interceptors (registered by an administrator): functions called around every dispatch of
-- every job, function and NOTIFY handlers alike, in (position, name) order, each as the owner
-- of its function. on_dispatch(vq.job_context) before the handler runs or the job is announced;
-- on_complete(vq.job_context, outcome text, error text) when the handler ended or the reply
-- came, before the outcome is written.
CREATE TABLE vq.interceptor (
    name           text PRIMARY KEY
                   CONSTRAINT interceptor_name_format CHECK (name OPERATOR(pg_catalog.~) '^[a-zA-Z0-9._-]{1,128}$'),
    on_dispatch    regprocedure,
    on_complete    regprocedure,
    position       integer NOT NULL DEFAULT 0,
    registered_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT interceptor_has_function CHECK (on_dispatch IS NOT NULL OR on_complete IS NOT NULL)
);

-- Transition listeners (registered by an administrator): fn(vq.job_transition, vq.job) called
-- in the transaction of every transition it subscribes to, as the owner of its function; or,
-- with a channel instead of a function, a NOTIFY naming the transition.
CREATE TABLE vq.transition_listener (
    name           text PRIMARY KEY
                   CONSTRAINT transition_listener_name_format CHECK (name OPERATOR(pg_catalog.~) '^[a-zA-Z0-9._-]{1,128}$'),
    fn             regprocedure,
    channel        text,
    kinds          text[],      -- transition kinds, or DEAD_LETTER (any transition into it); NULL: all
    queues         text[],      -- NULL: all
    handlers       text[],      -- NULL: all
    registered_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT transition_listener_one_target CHECK ((fn IS NULL) <> (channel IS NULL))
);

-- Held in the registry cache: a change invalidates it (vq.registry_changed, registry.sql).
CREATE TRIGGER interceptor_registry_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON vq.interceptor
    FOR EACH STATEMENT EXECUTE FUNCTION vq.registry_changed();
CREATE TRIGGER transition_listener_registry_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON vq.transition_listener
    FOR EACH STATEMENT EXECUTE FUNCTION vq.registry_changed();

-- Administrators' callbacks queued for an executor. A transition or a consumer's reply
-- recorded where no administrator code may run (a client's session: vq_cancel, vq_complete,
-- vq_fail, vq_redrive, ...; a handler's own code) calls no transition listener or
-- interceptor there: it queues one row here, in its own transaction, with the names of the
-- callbacks subscribed to it and what they receive as it was then; an executor calls them
-- after the commit and deletes the row in the transaction that calls them. Its rows carry
-- other roles' jobs: no role but a superuser sees them (readable under row security only so
-- that pg_dump by another role reads it, empty).
CREATE TABLE vq.callback_event (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    execution_id    uuid NOT NULL,
    attempt_number  integer NOT NULL,
    kind            text NOT NULL CONSTRAINT callback_event_kind_known
                    CHECK (kind IN ('listener', 'on_dispatch', 'on_complete')),
    callbacks       text[] NOT NULL,    -- listener or interceptor names, in the order they are called
    transition      vq.job_transition,  -- listener: the transition, and the job row after it
    job             vq.job,
    context         vq.job_context,     -- interceptor: what it receives
    outcome         text,
    error           text,
    queued_at       timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT callback_event_arguments CHECK (CASE kind
        WHEN 'listener' THEN (transition).execution_id IS NOT NULL AND (job).execution_id IS NOT NULL
        ELSE (context).execution_id IS NOT NULL END)
);

-- Transition listeners are called from these row triggers; their WHEN clause costs a cached
-- flag per transition while no listener is registered. A stored transition fires the first;
-- a job that completed without one (ENQUEUED -> COMPLETED, implied by its finished row) the second.
-- A restore's COPY or INSERT of history rows fires neither: it changes no state (and what the
-- listeners wrote is restored with their own tables).
CREATE FUNCTION vq.transition_listeners_exist() RETURNS boolean
    LANGUAGE c STABLE PARALLEL RESTRICTED AS 'MODULE_PATHNAME', 'vq_transition_listeners_exist';
CREATE FUNCTION vq.transition_recorded() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'vq_transition_recorded';
CREATE FUNCTION vq.job_finished_recorded() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'vq_job_finished_recorded';
CREATE TRIGGER transition_listeners AFTER INSERT ON vq.job_transition_data
    FOR EACH ROW WHEN (vq.transition_listeners_exist() AND NOT vq.loading_rows())
    EXECUTE FUNCTION vq.transition_recorded();
CREATE TRIGGER completion_listeners AFTER INSERT ON vq.job_finished
    FOR EACH ROW WHEN (NEW.state OPERATOR(pg_catalog.=) 'COMPLETED'::vq.job_state AND vq.transition_listeners_exist()
                       AND NOT vq.loading_rows())
    EXECUTE FUNCTION vq.job_finished_recorded();

-- Interceptors and transition listeners (administrators only; see the tables above).
CREATE FUNCTION vq_register_interceptor(name text, on_dispatch regprocedure DEFAULT NULL,
                                        on_complete regprocedure DEFAULT NULL, "position" integer DEFAULT 0)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_register_interceptor');
    IF name IS NULL OR name !~ '^[a-zA-Z0-9._-]{1,128}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ106',
            MESSAGE = format('interceptor name %s: must match ^[a-zA-Z0-9._-]{1,128}$', coalesce('"' || name || '"', 'NULL'));
    END IF;
    IF on_dispatch IS NULL AND on_complete IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ106',
            MESSAGE = format('interceptor "%s": give on_dispatch, on_complete or both', name);
    END IF;
    IF "position" IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ106', MESSAGE = format('interceptor "%s": position must not be null', name);
    END IF;
    PERFORM vq.check_callback(format('interceptor "%s": on_dispatch', name), on_dispatch,
                              ARRAY['vq.job_context'::regtype]);
    PERFORM vq.check_callback(format('interceptor "%s": on_complete', name), on_complete,
                              ARRAY['vq.job_context'::regtype, 'pg_catalog.text'::regtype, 'pg_catalog.text'::regtype]);
    INSERT INTO vq.interceptor (name, on_dispatch, on_complete, position)
    VALUES (name, on_dispatch, on_complete, "position")
    ON CONFLICT ON CONSTRAINT interceptor_pkey DO UPDATE
       SET on_dispatch = excluded.on_dispatch, on_complete = excluded.on_complete,
           position = excluded.position, registered_at = now();
END
$$;

CREATE FUNCTION vq_unregister_interceptor(name text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_unregister_interceptor');
    DELETE FROM vq.interceptor i WHERE i.name OPERATOR(pg_catalog.=) vq_unregister_interceptor.name;
    RETURN FOUND;
END
$$;

CREATE FUNCTION vq_register_transition_listener(name text, fn regprocedure DEFAULT NULL,
                                                kinds text[] DEFAULT NULL, queues text[] DEFAULT NULL,
                                                handlers text[] DEFAULT NULL, channel text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bad text;
BEGIN
    PERFORM vq.require_writable('vq_register_transition_listener');
    IF name IS NULL OR name !~ '^[a-zA-Z0-9._-]{1,128}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ106',
            MESSAGE = format('transition listener name %s: must match ^[a-zA-Z0-9._-]{1,128}$',
                             coalesce('"' || name || '"', 'NULL'));
    END IF;
    IF (fn IS NULL) = (channel IS NULL) THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ106',
            MESSAGE = format('transition listener "%s": give either a function or a channel', name);
    END IF;
    IF channel IS NOT NULL AND (channel = '' OR octet_length(channel) >= 64) THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ106',
            MESSAGE = format('transition listener "%s": channel must be 1 to 63 bytes', name);
    END IF;
    SELECT k INTO bad FROM unnest(kinds) k
     WHERE k IS NULL OR k NOT IN ('CLAIMED', 'COMPLETED', 'FAILED', 'ABANDONED', 'INTERRUPTED', 'CANCELLED',
                                  'REDRIVEN', 'DEAD_LETTER') LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ106',
            MESSAGE = format('transition listener "%s": unknown kind %s (known: CLAIMED, COMPLETED, FAILED, ABANDONED, INTERRUPTED, CANCELLED, REDRIVEN, DEAD_LETTER)',
                             name, coalesce('"' || bad || '"', 'NULL'));
    END IF;
    PERFORM vq.check_callback(format('transition listener "%s"', name), fn,
                              ARRAY['vq.job_transition'::regtype, 'vq.job'::regtype]);
    INSERT INTO vq.transition_listener (name, fn, channel, kinds, queues, handlers)
    VALUES (name, fn, channel, kinds, queues, handlers)
    ON CONFLICT ON CONSTRAINT transition_listener_pkey DO UPDATE
       SET fn = excluded.fn, channel = excluded.channel, kinds = excluded.kinds, queues = excluded.queues,
           handlers = excluded.handlers, registered_at = now();
END
$$;

CREATE FUNCTION vq_unregister_transition_listener(name text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_unregister_transition_listener');
    DELETE FROM vq.transition_listener l WHERE l.name OPERATOR(pg_catalog.=) vq_unregister_transition_listener.name;
    RETURN FOUND;
END
$$;

-- A callback function (NULL: none) must be a plain function taking exactly these argument types.
CREATE FUNCTION vq.check_callback(what text, fn regprocedure, args regtype[]) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p record;
BEGIN
    IF fn IS NULL THEN
        RETURN;
    END IF;
    SELECT pr.prokind, pr.proretset, ARRAY(SELECT pg_catalog.unnest(pr.proargtypes)) AS argtypes INTO p
      FROM pg_catalog.pg_proc pr WHERE pr.oid OPERATOR(pg_catalog.=) fn::oid;
    IF NOT coalesce(p.prokind = 'f' AND NOT p.proretset AND p.argtypes = args::oid[], false) THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ106',
            MESSAGE = format('%s: function %s must take (%s) and return one value', what, fn,
                             array_to_string(args, ', '));
    END IF;
END
$$;
