-- sql/schema/registry.sql: queues and handlers, with their configuration (contract overrides,
-- queue grants, vq_configure) and the registry cache every backend keeps of them: the tables,
-- the triggers that invalidate the cache, resolution and backoff, and the functions that
-- configure and register.

-- Named queues with their polling, concurrency and retry-backoff settings.
CREATE TABLE vq.queue (
    name                   text PRIMARY KEY
                           CONSTRAINT queue_name_format CHECK (name OPERATOR(pg_catalog.~) '^[a-zA-Z0-9._-]{1,128}$'),
    sleep_delay_ms         integer NOT NULL DEFAULT 5000    CONSTRAINT queue_sleep_delay_ms_positive CHECK (sleep_delay_ms > 0),
    max_concurrent_jobs    integer NOT NULL DEFAULT 5       CONSTRAINT queue_max_concurrent_jobs_positive CHECK (max_concurrent_jobs > 0),
    backoff_strategy       text    NOT NULL DEFAULT 'LINEAR'
                           CONSTRAINT queue_backoff_strategy_known CHECK (backoff_strategy IN ('FIXED', 'LINEAR', 'EXPONENTIAL')),
    backoff_base_delay_ms  integer NOT NULL DEFAULT 30000   CONSTRAINT queue_backoff_base_delay_ms_positive CHECK (backoff_base_delay_ms > 0),
    backoff_max_delay_ms   integer NOT NULL DEFAULT 3600000 CONSTRAINT queue_backoff_max_delay_ms_positive CHECK (backoff_max_delay_ms > 0),
    instances              integer NOT NULL DEFAULT 1       CONSTRAINT queue_instances_positive CHECK (instances > 0),
    paused                 boolean NOT NULL DEFAULT false,
    created_at             timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at             timestamptz NOT NULL DEFAULT pg_catalog.now()
);
INSERT INTO vq.queue (name) VALUES ('default');

-- A restore inserts the default queue's row, which the install script has already created: a COPY
-- or INSERT statement of the row "default" while it exists sets the existing row's settings, pause
-- and timestamps to the inserted ones instead of failing (vq_configure, which inserts with ON
-- CONFLICT, is a function call and goes on as before).
CREATE FUNCTION vq.queue_default_restored() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE vq.queue q
       SET sleep_delay_ms = NEW.sleep_delay_ms, max_concurrent_jobs = NEW.max_concurrent_jobs,
           backoff_strategy = NEW.backoff_strategy, backoff_base_delay_ms = NEW.backoff_base_delay_ms,
           backoff_max_delay_ms = NEW.backoff_max_delay_ms, instances = NEW.instances,
           paused = NEW.paused, created_at = NEW.created_at, updated_at = NEW.updated_at
     WHERE q.name OPERATOR(pg_catalog.=) NEW.name;
    IF FOUND THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER queue_default_restored BEFORE INSERT ON vq.queue
    FOR EACH ROW WHEN (NEW.name OPERATOR(pg_catalog.=) 'default' AND vq.loading_rows())
    EXECUTE FUNCTION vq.queue_default_restored();

-- Registered handlers: a function (by OID and fixed signature) or a NOTIFY channel.
-- queue/priority/max_attempts are the contract defaults; all NULL for a plain handler.
CREATE TABLE vq.handler (
    name           text PRIMARY KEY
                   CONSTRAINT handler_name_format CHECK (name OPERATOR(pg_catalog.~) '^[a-zA-Z0-9._-]{1,128}$'),
    kind           text NOT NULL CONSTRAINT handler_kind_known CHECK (kind IN ('function', 'notify')),
    fn             regprocedure,
    takes_context  boolean NOT NULL DEFAULT false,
    channel        text,
    address        text NOT NULL,   -- dispatch address persisted on each job: 'schema.fn(args)' or 'notify:channel'
    queue          text REFERENCES vq.queue (name),
    priority       integer,
    max_attempts   integer CONSTRAINT handler_max_attempts_range CHECK (max_attempts BETWEEN 1 AND 1000),
    -- most jobs of this (function) handler running at once across the executors (NULL: no limit
    -- beyond the queue's capacity)
    max_running    integer CONSTRAINT handler_max_running_range CHECK (max_running BETWEEN 1 AND 10000),
    -- the idempotency window of its jobs enqueued with a job_id and no unique_for of their own
    -- (NULL: none; see vq_enqueue's unique_for)
    unique_for     interval CONSTRAINT handler_unique_for_positive CHECK (unique_for > interval '0'),
    registered_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT handler_target_matches_kind CHECK (
        (kind = 'function' AND fn IS NOT NULL AND channel IS NULL) OR
        (kind = 'notify' AND channel IS NOT NULL AND fn IS NULL)),
    CONSTRAINT handler_max_running_function CHECK (max_running IS NULL OR kind = 'function')
);

-- Per-handler configuration overrides (the "contracts" section of a vq_configure document).
-- A NULL field inherits the handler's default. May name a handler registered later.
CREATE TABLE vq.contract_override (
    handler       text PRIMARY KEY
                  CONSTRAINT contract_override_handler_format CHECK (handler OPERATOR(pg_catalog.~) '^[a-zA-Z0-9._-]{1,128}$'),
    queue         text REFERENCES vq.queue (name),
    priority      integer,
    max_attempts  integer CONSTRAINT contract_override_max_attempts_range CHECK (max_attempts BETWEEN 1 AND 1000),
    updated_at    timestamptz NOT NULL DEFAULT pg_catalog.now()
);

-- Roles allowed to choose, at enqueue, a queue other than the handler's, a priority above
-- the handler's or max_attempts above the handler's, for jobs that go to this queue: nobody
-- else can jump another team's line or hold its capacity.
CREATE TABLE vq.queue_grant (
    queue       text NOT NULL REFERENCES vq.queue (name) ON DELETE CASCADE,
    grantee     regrole NOT NULL,
    granted_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (queue, grantee)
);

------------------------------------------------------------------------------
-- Registry cache invalidation: a change to queues, handlers or overrides invalidates
-- the per-backend registry cache of every session at commit. (The other tables the cache
-- holds have the same trigger beside them: producer grants, destinations, interceptors,
-- transition listeners.)
------------------------------------------------------------------------------
CREATE FUNCTION vq.registry_changed() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'vq_registry_changed';

CREATE TRIGGER queue_registry_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON vq.queue
    FOR EACH STATEMENT EXECUTE FUNCTION vq.registry_changed();
CREATE TRIGGER handler_registry_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON vq.handler
    FOR EACH STATEMENT EXECUTE FUNCTION vq.registry_changed();
CREATE TRIGGER queue_grant_registry_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON vq.queue_grant
    FOR EACH STATEMENT EXECUTE FUNCTION vq.registry_changed();
CREATE TRIGGER contract_override_registry_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON vq.contract_override
    FOR EACH STATEMENT EXECUTE FUNCTION vq.registry_changed();

------------------------------------------------------------------------------
-- Resolution and backoff (C).
------------------------------------------------------------------------------
CREATE FUNCTION vq_resolve_target(
    target_id text,
    OUT target_id text, OUT handler_name text, OUT handler_address text,
    OUT queue text, OUT priority integer, OUT max_attempts integer)
RETURNS record
LANGUAGE c STABLE STRICT PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'vq_resolve_target';

CREATE FUNCTION vq_supported_target_ids() RETURNS SETOF text
    LANGUAGE c STABLE PARALLEL RESTRICTED AS 'MODULE_PATHNAME', 'vq_supported_target_ids';

CREATE FUNCTION vq_backoff_delay(strategy text, base_ms integer, max_ms integer, attempt integer)
RETURNS interval
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'vq_backoff_delay';

------------------------------------------------------------------------------
-- Configuration: queues, contract overrides, handlers. These functions run as the
-- extension owner with a pinned search_path; EXECUTE is not granted to PUBLIC, so an
-- administrator decides who may change configuration (GRANT EXECUTE ON FUNCTION ...;
-- privileges.sql).
------------------------------------------------------------------------------

-- Every violation of one queue's settings, each naming the queue and the field.
-- field_names gives the spelling to report (SQL argument names or vq_configure's JSON keys).
CREATE FUNCTION vq.queue_violations(
    queue_name text, sleep_delay_ms bigint, max_concurrent_jobs bigint, backoff_strategy text,
    backoff_base_delay_ms bigint, backoff_max_delay_ms bigint, instances bigint,
    field_names text[] DEFAULT ARRAY['sleep_delay_ms', 'max_concurrent_jobs', 'backoff_strategy',
                                     'backoff_base_delay_ms', 'backoff_max_delay_ms', 'instances'])
RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v text[] := '{}';
    nums bigint[] := ARRAY[sleep_delay_ms, max_concurrent_jobs, backoff_base_delay_ms,
                           backoff_max_delay_ms, instances];
    num_fields int[] := ARRAY[1, 2, 4, 5, 6];
BEGIN
    IF queue_name IS NULL OR queue_name !~ '^[a-zA-Z0-9._-]{1,128}$' THEN
        v := v || format('queue %s: name must match ^[a-zA-Z0-9._-]{1,128}$',
                         coalesce('"' || queue_name || '"', 'NULL'));
        queue_name := coalesce(queue_name, '');
    END IF;
    FOR i IN 1 .. 5 LOOP
        IF nums[i] IS NOT NULL AND (nums[i] <= 0 OR nums[i] > 2147483647) THEN
            v := v || format('queue "%s": %s must be a positive integer, got %s',
                             queue_name, field_names[num_fields[i]], nums[i]);
        END IF;
    END LOOP;
    IF backoff_strategy IS NOT NULL AND upper(backoff_strategy) NOT IN ('FIXED', 'LINEAR', 'EXPONENTIAL') THEN
        v := v || format('queue "%s": %s must be FIXED, LINEAR or EXPONENTIAL, got %s',
                         queue_name, field_names[3], quote_literal(backoff_strategy));
    END IF;
    RETURN v;
END
$$;

-- Raise one error listing every violation (message: the first; detail: all of them).
CREATE FUNCTION vq.raise_violations(violations text[], errcode text, summary text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF coalesce(cardinality(violations), 0) = 0 THEN
        RETURN;
    END IF;
    IF cardinality(violations) = 1 THEN
        RAISE EXCEPTION USING ERRCODE = errcode, MESSAGE = violations[1];
    END IF;
    RAISE EXCEPTION USING ERRCODE = errcode,
        MESSAGE = format('%s: %s violations: %s', summary, cardinality(violations),
                         array_to_string(violations, '; ')),
        DETAIL = array_to_string(violations, E'\n');
END
$$;

CREATE FUNCTION vq_create_queue(
    name                   text,
    sleep_delay_ms         integer DEFAULT 5000,
    max_concurrent_jobs    integer DEFAULT 5,
    backoff_strategy       text    DEFAULT 'LINEAR',
    backoff_base_delay_ms  integer DEFAULT 30000,
    backoff_max_delay_ms   integer DEFAULT 3600000,
    instances              integer DEFAULT 1)
RETURNS vq.queue
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q vq.queue;
BEGIN
    PERFORM vq.require_writable('vq_create_queue');
    PERFORM vq.raise_violations(
        vq.queue_violations(name, sleep_delay_ms, max_concurrent_jobs, backoff_strategy,
                            backoff_base_delay_ms, backoff_max_delay_ms, instances),
        'VQ101', 'invalid queue configuration');
    IF EXISTS (SELECT 1 FROM vq.queue x WHERE x.name OPERATOR(pg_catalog.=) vq_create_queue.name) THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ101', MESSAGE = format('queue "%s" already exists', name),
            HINT = 'Use vq_alter_queue() to change it.';
    END IF;
    BEGIN
        INSERT INTO vq.queue AS x (name, sleep_delay_ms, max_concurrent_jobs, backoff_strategy,
                                   backoff_base_delay_ms, backoff_max_delay_ms, instances)
        VALUES (name, coalesce(sleep_delay_ms, 5000), coalesce(max_concurrent_jobs, 5),
                upper(coalesce(backoff_strategy, 'LINEAR')), coalesce(backoff_base_delay_ms, 30000),
                coalesce(backoff_max_delay_ms, 3600000), coalesce(instances, 1))
        RETURNING x.* INTO q;
    EXCEPTION WHEN unique_violation THEN
        -- created concurrently since the check above
        RAISE EXCEPTION USING ERRCODE = 'VQ101', MESSAGE = format('queue "%s" already exists', name),
            HINT = 'Use vq_alter_queue() to change it.';
    END;
    RETURN q;
END
$$;

-- Change only the settings given (NULL keeps the current value).
CREATE FUNCTION vq_alter_queue(
    name                   text,
    sleep_delay_ms         integer DEFAULT NULL,
    max_concurrent_jobs    integer DEFAULT NULL,
    backoff_strategy       text    DEFAULT NULL,
    backoff_base_delay_ms  integer DEFAULT NULL,
    backoff_max_delay_ms   integer DEFAULT NULL,
    instances              integer DEFAULT NULL)
RETURNS vq.queue
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q vq.queue;
BEGIN
    PERFORM vq.require_writable('vq_alter_queue');
    PERFORM vq.raise_violations(
        vq.queue_violations(name, sleep_delay_ms, max_concurrent_jobs, backoff_strategy,
                            backoff_base_delay_ms, backoff_max_delay_ms, instances),
        'VQ101', 'invalid queue configuration');
    UPDATE vq.queue AS x SET
        sleep_delay_ms        = coalesce(vq_alter_queue.sleep_delay_ms, x.sleep_delay_ms),
        max_concurrent_jobs   = coalesce(vq_alter_queue.max_concurrent_jobs, x.max_concurrent_jobs),
        backoff_strategy      = coalesce(upper(vq_alter_queue.backoff_strategy), x.backoff_strategy),
        backoff_base_delay_ms = coalesce(vq_alter_queue.backoff_base_delay_ms, x.backoff_base_delay_ms),
        backoff_max_delay_ms  = coalesce(vq_alter_queue.backoff_max_delay_ms, x.backoff_max_delay_ms),
        instances             = coalesce(vq_alter_queue.instances, x.instances),
        updated_at            = now()
    WHERE x.name OPERATOR(pg_catalog.=) vq_alter_queue.name
    RETURNING x.* INTO q;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ004', MESSAGE = format('queue "%s" does not exist', name);
    END IF;
    RETURN q;
END
$$;

-- Drop a queue nothing refers to any more; the default queue stays.
CREATE FUNCTION vq_drop_queue(name text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
BEGIN
    PERFORM vq.require_writable('vq_drop_queue');
    IF name OPERATOR(pg_catalog.=) 'default' THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ103', MESSAGE = 'queue "default" cannot be dropped';
    END IF;
    -- Serialise against concurrent enqueues and registrations naming this queue.
    PERFORM 1 FROM vq.queue x WHERE x.name OPERATOR(pg_catalog.=) vq_drop_queue.name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ004', MESSAGE = format('queue "%s" does not exist', name);
    END IF;
    SELECT count(*) INTO n FROM vq.job j
     WHERE j.queue OPERATOR(pg_catalog.=) vq_drop_queue.name AND j.state IN ('ENQUEUED', 'RUNNING');
    IF n > 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ103',
            MESSAGE = format('queue "%s" still holds %s unfinished job(s)', name, n);
    END IF;
    IF EXISTS (SELECT 1 FROM vq.handler h WHERE h.queue OPERATOR(pg_catalog.=) vq_drop_queue.name)
       OR EXISTS (SELECT 1 FROM vq.contract_override o WHERE o.queue OPERATOR(pg_catalog.=) vq_drop_queue.name) THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ103',
            MESSAGE = format('queue "%s" is the default queue of a handler or contract override', name);
    END IF;
    DELETE FROM vq.queue x WHERE x.name OPERATOR(pg_catalog.=) vq_drop_queue.name;
END
$$;

-- Stop claiming from a queue (jobs already running finish), or start again.
CREATE FUNCTION vq_pause_queue(name text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_pause_queue');
    UPDATE vq.queue x SET paused = true, updated_at = now() WHERE x.name OPERATOR(pg_catalog.=) vq_pause_queue.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ004', MESSAGE = format('queue "%s" does not exist', name);
    END IF;
END
$$;

CREATE FUNCTION vq_resume_queue(name text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_resume_queue');
    UPDATE vq.queue x SET paused = false, updated_at = now() WHERE x.name OPERATOR(pg_catalog.=) vq_resume_queue.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ004', MESSAGE = format('queue "%s" does not exist', name);
    END IF;
    PERFORM vq.wake_executors();    -- its due jobs run now, not at the next poll
END
$$;

-- Every violation of one contract override.
CREATE FUNCTION vq.override_violations(handler text, queue text, max_attempts bigint,
                                       queue_field text DEFAULT 'queue',
                                       max_attempts_field text DEFAULT 'max_attempts',
                                       new_queues text[] DEFAULT '{}')
RETURNS text[]
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v text[] := '{}';
BEGIN
    IF handler IS NULL OR handler !~ '^[a-zA-Z0-9._-]{1,128}$' THEN
        v := v || format('contract %s: handler name must match ^[a-zA-Z0-9._-]{1,128}$',
                         coalesce('"' || handler || '"', 'NULL'));
    END IF;
    IF max_attempts IS NOT NULL AND max_attempts NOT BETWEEN 1 AND 1000 THEN
        v := v || format('contract "%s": %s must be between 1 and 1000, got %s',
                         handler, max_attempts_field, max_attempts);
    END IF;
    IF queue IS NOT NULL AND NOT queue OPERATOR(pg_catalog.=) ANY (new_queues)
       AND NOT EXISTS (SELECT 1 FROM vq.queue x WHERE x.name OPERATOR(pg_catalog.=) queue) THEN
        v := v || format('contract "%s": %s "%s" does not exist', handler, queue_field, queue);
    END IF;
    RETURN v;
END
$$;

-- Set the configuration override of a handler (NULL field = inherit the handler default).
CREATE FUNCTION vq_set_contract_override(handler text, queue text DEFAULT NULL,
                                         priority integer DEFAULT NULL, max_attempts integer DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_set_contract_override');
    PERFORM vq.raise_violations(vq.override_violations(handler, queue, max_attempts),
                                'VQ101', 'invalid contract override');
    INSERT INTO vq.contract_override AS o (handler, queue, priority, max_attempts)
    VALUES (handler, queue, priority, max_attempts)
    ON CONFLICT ON CONSTRAINT contract_override_pkey DO UPDATE
       SET queue = excluded.queue, priority = excluded.priority,
           max_attempts = excluded.max_attempts, updated_at = now();
END
$$;

CREATE FUNCTION vq_drop_contract_override(handler text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_drop_contract_override');
    DELETE FROM vq.contract_override o WHERE o.handler OPERATOR(pg_catalog.=) vq_drop_contract_override.handler;
    RETURN FOUND;
END
$$;

-- Apply a configuration document atomically:
-- {"queues": {"<name>": {"sleepDelayMs": ..., ...}}, "contracts": {"<handler>": {"maxAttempts": ..., "queue": ..., "priority": ...}}}
-- Queues named are created or updated (fields omitted keep their value, or the default for a
-- new queue); contracts named replace that handler's override. All violations are reported at
-- once: VQ104 when the document is malformed (not an object, an unknown key, a value of the
-- wrong JSON type), VQ101 when it is well formed and some value is invalid.
CREATE FUNCTION vq_configure(config jsonb) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    qkeys constant text[] := ARRAY['sleepDelayMs', 'maxConcurrentJobs', 'backoffStrategy',
                                   'backoffBaseDelayMs', 'backoffMaxDelayMs', 'instances'];
    ckeys constant text[] := ARRAY['maxAttempts', 'queue', 'priority'];
    v text[] := '{}';
    malformed boolean := false;   -- a violation of the document's shape is among v (VQ104)
    k text;
    q record;
    c record;
    nums bigint[];
    i int;
BEGIN
    PERFORM vq.require_writable('vq_configure');
    IF config IS NULL OR jsonb_typeof(config) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ104', MESSAGE = 'configuration must be a JSON object';
    END IF;
    FOR k IN SELECT jsonb_object_keys(config) LOOP
        IF k NOT IN ('queues', 'contracts') THEN
            v := v || format('unknown top-level key "%s" (expected "queues" and/or "contracts")', k);
        ELSIF jsonb_typeof(config -> k) <> 'object' THEN
            v := v || format('"%s" must be a JSON object', k);
        END IF;
    END LOOP;
    PERFORM vq.raise_violations(v, 'VQ104', 'invalid configuration');

    -- Validate every queue first.
    FOR q IN SELECT e.key AS name, e.value AS body FROM jsonb_each(coalesce(config -> 'queues', '{}')) e LOOP
        IF jsonb_typeof(q.body) <> 'object' THEN
            v := v || format('queue "%s": settings must be a JSON object', q.name);
            malformed := true;
            CONTINUE;
        END IF;
        FOR k IN SELECT jsonb_object_keys(q.body) LOOP
            IF k <> ALL (qkeys) THEN
                v := v || format('queue "%s": unknown field "%s"', q.name, k);
                malformed := true;
            END IF;
        END LOOP;
        nums := ARRAY[]::bigint[];
        FOREACH k IN ARRAY qkeys LOOP
            IF k = 'backoffStrategy' THEN
                nums := nums || NULL::bigint;
                IF q.body ? k AND jsonb_typeof(q.body -> k) <> 'string' THEN
                    v := v || format('queue "%s": backoffStrategy must be a string', q.name);
                    malformed := true;
                END IF;
            ELSIF q.body ? k AND (jsonb_typeof(q.body -> k) <> 'number'
                                  OR (q.body ->> k) !~ '^-?[0-9]{1,18}$') THEN
                v := v || format('queue "%s": %s must be a positive integer, got %s', q.name, k, q.body -> k);
                malformed := malformed OR jsonb_typeof(q.body -> k) <> 'number';
                nums := nums || NULL::bigint;
            ELSE
                nums := nums || (q.body ->> k)::bigint;
            END IF;
        END LOOP;
        v := v || vq.queue_violations(q.name, nums[1], nums[2],
                                      CASE WHEN jsonb_typeof(q.body -> 'backoffStrategy') = 'string'
                                           THEN q.body ->> 'backoffStrategy' END,
                                      nums[4], nums[5], nums[6], qkeys);
    END LOOP;
    -- Validate every contract override; it may name a queue this document creates.
    FOR c IN SELECT e.key AS name, e.value AS body FROM jsonb_each(coalesce(config -> 'contracts', '{}')) e LOOP
        IF jsonb_typeof(c.body) <> 'object' THEN
            v := v || format('contract "%s": settings must be a JSON object', c.name);
            malformed := true;
            CONTINUE;
        END IF;
        FOR k IN SELECT jsonb_object_keys(c.body) LOOP
            IF k <> ALL (ckeys) THEN
                v := v || format('contract "%s": unknown field "%s"', c.name, k);
                malformed := true;
            END IF;
        END LOOP;
        IF c.body ? 'queue' AND jsonb_typeof(c.body -> 'queue') <> 'string' THEN
            v := v || format('contract "%s": queue must be a string', c.name);
            malformed := true;
        END IF;
        FOREACH k IN ARRAY ARRAY['maxAttempts', 'priority'] LOOP
            IF c.body ? k AND (jsonb_typeof(c.body -> k) <> 'number'
                               OR (c.body ->> k) !~ '^-?[0-9]{1,9}$') THEN
                v := v || format('contract "%s": %s must be an integer, got %s', c.name, k, c.body -> k);
                malformed := malformed OR jsonb_typeof(c.body -> k) <> 'number';
            END IF;
        END LOOP;
        v := v || vq.override_violations(
                      c.name,
                      CASE WHEN jsonb_typeof(c.body -> 'queue') = 'string' THEN c.body ->> 'queue' END,
                      CASE WHEN jsonb_typeof(c.body -> 'maxAttempts') = 'number'
                                AND (c.body ->> 'maxAttempts') ~ '^-?[0-9]{1,9}$'
                           THEN (c.body ->> 'maxAttempts')::bigint END,
                      'queue', 'maxAttempts',
                      ARRAY(SELECT jsonb_object_keys(coalesce(config -> 'queues', '{}'))));
    END LOOP;
    -- A malformed document (unknown key, wrong JSON type) is VQ104, invalid values alone VQ101;
    -- either way the error lists every violation.
    PERFORM vq.raise_violations(v, CASE WHEN malformed THEN 'VQ104' ELSE 'VQ101' END, 'invalid configuration');


    -- Apply queues, so contracts below may name queues created by this same call.
    FOR q IN SELECT e.key AS name, e.value AS body FROM jsonb_each(coalesce(config -> 'queues', '{}')) e LOOP
        INSERT INTO vq.queue AS x (name, sleep_delay_ms, max_concurrent_jobs, backoff_strategy,
                                   backoff_base_delay_ms, backoff_max_delay_ms, instances)
        VALUES (q.name,
                coalesce((q.body ->> 'sleepDelayMs')::int, 5000),
                coalesce((q.body ->> 'maxConcurrentJobs')::int, 5),
                upper(coalesce(q.body ->> 'backoffStrategy', 'LINEAR')),
                coalesce((q.body ->> 'backoffBaseDelayMs')::int, 30000),
                coalesce((q.body ->> 'backoffMaxDelayMs')::int, 3600000),
                coalesce((q.body ->> 'instances')::int, 1))
        ON CONFLICT ON CONSTRAINT queue_pkey DO UPDATE SET
            sleep_delay_ms        = coalesce((q.body ->> 'sleepDelayMs')::int, x.sleep_delay_ms),
            max_concurrent_jobs   = coalesce((q.body ->> 'maxConcurrentJobs')::int, x.max_concurrent_jobs),
            backoff_strategy      = coalesce(upper(q.body ->> 'backoffStrategy'), x.backoff_strategy),
            backoff_base_delay_ms = coalesce((q.body ->> 'backoffBaseDelayMs')::int, x.backoff_base_delay_ms),
            backoff_max_delay_ms  = coalesce((q.body ->> 'backoffMaxDelayMs')::int, x.backoff_max_delay_ms),
            instances             = coalesce((q.body ->> 'instances')::int, x.instances),
            updated_at            = now();
    END LOOP;

    FOR c IN SELECT e.key AS name, e.value AS body FROM jsonb_each(coalesce(config -> 'contracts', '{}')) e LOOP
        INSERT INTO vq.contract_override AS o (handler, queue, priority, max_attempts)
        VALUES (c.name, c.body ->> 'queue', (c.body ->> 'priority')::int, (c.body ->> 'maxAttempts')::int)
        ON CONFLICT ON CONSTRAINT contract_override_pkey DO UPDATE
           SET queue = excluded.queue, priority = excluded.priority,
               max_attempts = excluded.max_attempts, updated_at = now();
    END LOOP;
END
$$;

-- Every violation of one handler registration.
CREATE FUNCTION vq.handler_violations(name text, kind text, fn regprocedure, channel text,
                                      queue text, max_attempts bigint, what text DEFAULT NULL,
                                      max_running bigint DEFAULT NULL, unique_for interval DEFAULT NULL)
RETURNS text[]
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v text[] := '{}';
    label text := coalesce(what, format('handler %s', coalesce('"' || name || '"', 'NULL')));
    p record;
BEGIN
    IF name IS NULL OR name !~ '^[a-zA-Z0-9._-]{1,128}$' THEN
        v := v || format('%s: name must match ^[a-zA-Z0-9._-]{1,128}$', label);
    ELSIF EXISTS (SELECT 1 FROM vq.handler h WHERE h.name OPERATOR(pg_catalog.=) handler_violations.name) THEN
        v := v || format('%s: name is already registered', label);
    END IF;
    IF kind = 'function' THEN
        IF fn IS NULL THEN
            v := v || format('%s: function is missing', label);
        ELSE
            SELECT pr.prokind, pr.proretset, pr.pronargs, pr.proargtypes[0] AS arg1,
                   pr.proargtypes[1] AS arg2 INTO p
              FROM pg_catalog.pg_proc pr WHERE pr.oid OPERATOR(pg_catalog.=) fn::oid;
            IF NOT FOUND THEN
                v := v || format('%s: function %s does not exist', label, fn::oid);
            ELSIF p.prokind <> 'f' OR p.proretset
                  OR p.arg1 IS DISTINCT FROM 'pg_catalog.jsonb'::regtype::oid
                  OR NOT (p.pronargs = 1 OR (p.pronargs = 2 AND p.arg2 = 'vq.job_context'::regtype::oid)) THEN
                v := v || format('%s: function %s must be a plain non-set-returning function with signature (jsonb) or (jsonb, vq.job_context)',
                                 label, fn);
            END IF;
        END IF;
    ELSE
        IF channel IS NULL OR channel = '' OR octet_length(channel) > 63 THEN
            v := v || format('%s: channel must be 1 to 63 bytes long', label);
        END IF;
    END IF;
    IF max_attempts IS NOT NULL AND max_attempts NOT BETWEEN 1 AND 1000 THEN
        v := v || format('%s: max_attempts must be between 1 and 1000, got %s', label, max_attempts);
    END IF;
    IF max_running IS NOT NULL AND kind <> 'function' THEN
        v := v || format('%s: max_running applies to function handlers only (a NOTIFY consumer decides how many it runs)', label);
    ELSIF max_running IS NOT NULL AND max_running NOT BETWEEN 1 AND 10000 THEN
        v := v || format('%s: max_running must be between 1 and 10000, got %s', label, max_running);
    END IF;
    IF queue IS NOT NULL AND NOT EXISTS (SELECT 1 FROM vq.queue x WHERE x.name OPERATOR(pg_catalog.=) queue) THEN
        v := v || format('%s: queue "%s" does not exist', label, queue);
    END IF;
    IF unique_for IS NOT NULL AND unique_for <= interval '0' THEN
        v := v || format('%s: unique_for must be a positive interval, got %s', label, unique_for);
    END IF;
    RETURN v;
END
$$;

-- Insert one validated handler row.
CREATE FUNCTION vq.insert_handler(name text, kind text, fn regprocedure, channel text,
                                  queue text, priority integer, max_attempts integer,
                                  max_running integer DEFAULT NULL, unique_for interval DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- With search_path pinned to pg_catalog, fn::text names every other schema explicitly.
    INSERT INTO vq.handler AS h (name, kind, fn, takes_context, channel, address, queue, priority, max_attempts,
                                 max_running, unique_for)
    SELECT insert_handler.name, insert_handler.kind, insert_handler.fn,
           coalesce((SELECT pr.pronargs OPERATOR(pg_catalog.=) 2 FROM pg_catalog.pg_proc pr
                      WHERE pr.oid OPERATOR(pg_catalog.=) insert_handler.fn::oid), false),
           insert_handler.channel,
           CASE insert_handler.kind WHEN 'function' THEN insert_handler.fn::text
                ELSE 'notify:' OPERATOR(pg_catalog.||) insert_handler.channel END,
           insert_handler.queue, insert_handler.priority, insert_handler.max_attempts, insert_handler.max_running,
           insert_handler.unique_for;
EXCEPTION WHEN unique_violation THEN
    -- registered concurrently since it was validated
    RAISE EXCEPTION USING ERRCODE = 'VQ102',
        MESSAGE = format('handler "%s": name is already registered', insert_handler.name);
END
$$;

CREATE FUNCTION vq_register_handler(name text, fn regprocedure, queue text DEFAULT NULL,
                                    priority integer DEFAULT NULL, max_attempts integer DEFAULT NULL,
                                    max_running integer DEFAULT NULL, unique_for interval DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_register_handler');
    PERFORM vq.raise_violations(vq.handler_violations(name, 'function', fn, NULL, queue, max_attempts,
                                                      NULL, max_running, unique_for),
                                'VQ102', 'handler registration failed');
    PERFORM vq.insert_handler(name, 'function', fn, NULL, queue, priority, max_attempts, max_running, unique_for);
END
$$;

CREATE FUNCTION vq_register_notify_handler(name text, channel text, queue text DEFAULT NULL,
                                           priority integer DEFAULT NULL, max_attempts integer DEFAULT NULL,
                                           unique_for interval DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_register_notify_handler');
    PERFORM vq.raise_violations(vq.handler_violations(name, 'notify', NULL, channel, queue, max_attempts,
                                                      NULL, NULL, unique_for),
                                'VQ102', 'handler registration failed');
    PERFORM vq.insert_handler(name, 'notify', NULL, channel, queue, priority, max_attempts, NULL, unique_for);
END
$$;

-- vq_register_handlers' first step, run as its caller (called from C, not by PUBLIC): the
-- "function" of each element of handlers resolved the way regprocedure input resolves it in
-- the caller's own session (vq_register_handler's fn argument), with caller_search_path (the
-- caller's search_path) and the caller's privileges: one entry per element, {"oid": ...},
-- {"missing": true}, {"invalid": "<why>"}, or null (no "function" string to resolve).
CREATE FUNCTION vq.handler_functions(handlers jsonb, caller_search_path text) RETURNS jsonb
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    resolved jsonb := '[]';
    e jsonb;
    fn regprocedure;
BEGIN
    IF pg_catalog.jsonb_typeof(handlers) IS DISTINCT FROM 'array' THEN
        RETURN resolved;
    END IF;
    FOR e IN SELECT x FROM pg_catalog.jsonb_array_elements(handlers) x LOOP
        IF pg_catalog.jsonb_typeof(e) OPERATOR(pg_catalog.=) 'object'
           AND pg_catalog.jsonb_typeof(e OPERATOR(pg_catalog.->) 'function') OPERATOR(pg_catalog.=) 'string' THEN
            BEGIN
                -- only this lookup sees the caller's path (the function's own SET restores ours)
                PERFORM pg_catalog.set_config('search_path', caller_search_path, true);
                fn := pg_catalog.to_regprocedure(e OPERATOR(pg_catalog.->>) 'function');
                PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
                e := CASE WHEN fn IS NULL THEN '{"missing": true}'::jsonb
                          ELSE pg_catalog.jsonb_build_object('oid', fn::oid) END;
            EXCEPTION WHEN OTHERS THEN
                -- to_regprocedure still raises for malformed signatures and unknown types
                e := pg_catalog.jsonb_build_object('invalid', SQLERRM);
            END;
        ELSE
            e := 'null';
        END IF;
        resolved := resolved OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_array(e);
    END LOOP;
    RETURN resolved;
END
$$;

-- Register a set of handlers at once, or none: every violation in the set is reported in
-- one error. Each element: {"name": ..., "function": "fn(jsonb)" | "channel": ...,
-- "queue": ..., "priority": ..., "maxAttempts": ..., "maxRunning": ..., "uniqueFor": "<interval>"};
-- functions are resolved as regprocedure input does with the caller's search_path
-- (vq.handler_functions, before this runs; functions is its result). Returns the number
-- registered. Run by vq_register_handlers (C) as the extension owner.
CREATE FUNCTION vq.register_handlers(handlers jsonb, functions jsonb) RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    allowed constant text[] := ARRAY['name', 'function', 'channel', 'queue', 'priority', 'maxAttempts', 'maxRunning',
                                     'uniqueFor'];
    v text[] := '{}';
    h record;
    k text;
    label text;
    fn regprocedure;
    r jsonb;
    unique_window interval;
    seen text[] := '{}';
    ok boolean;
    n int := 0;
BEGIN
    PERFORM vq.require_writable('vq_register_handlers');
    IF handlers IS NULL OR jsonb_typeof(handlers) <> 'array' THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ102', MESSAGE = 'handlers must be a JSON array of objects';
    END IF;
    FOR h IN SELECT e.value AS body, e.ordinality AS pos FROM jsonb_array_elements(handlers) WITH ORDINALITY e LOOP
        IF jsonb_typeof(h.body) <> 'object' THEN
            v := v || format('element %s: must be a JSON object', h.pos);
            CONTINUE;
        END IF;
        label := format('element %s (handler %s)', h.pos, coalesce('"' || (h.body ->> 'name') || '"', 'NULL'));
        ok := true;
        FOR k IN SELECT jsonb_object_keys(h.body) LOOP
            IF k <> ALL (allowed) THEN
                v := v || format('%s: unknown field "%s"', label, k);
            END IF;
        END LOOP;
        FOREACH k IN ARRAY ARRAY['priority', 'maxAttempts', 'maxRunning'] LOOP
            IF h.body ? k AND (jsonb_typeof(h.body -> k) <> 'number' OR (h.body ->> k) !~ '^-?[0-9]{1,9}$') THEN
                v := v || format('%s: %s must be an integer, got %s', label, k, h.body -> k);
                ok := false;
            END IF;
        END LOOP;
        IF (h.body ? 'function') = (h.body ? 'channel') THEN
            v := v || format('%s: exactly one of "function" and "channel" is required', label);
            CONTINUE;
        END IF;
        fn := NULL;
        IF h.body ? 'function' THEN
            r := functions -> (h.pos::int - 1);
            IF jsonb_typeof(h.body -> 'function') <> 'string' THEN
                v := v || format('%s: function must be a string such as "schema.fn(jsonb)"', label);
            ELSIF r ? 'oid' THEN
                fn := (r ->> 'oid')::oid;
            ELSIF r ? 'invalid' THEN
                v := v || format('%s: function %s is not a valid function signature (%s)',
                                 label, h.body ->> 'function', r ->> 'invalid');
            ELSE
                v := v || format('%s: function %s does not exist', label, h.body ->> 'function');
            END IF;
        END IF;
        IF (h.body ->> 'name') = ANY (seen) THEN
            v := v || format('%s: name appears more than once in this set', label);
        END IF;
        seen := seen || (h.body ->> 'name');
        IF h.body ? 'channel' AND jsonb_typeof(h.body -> 'channel') <> 'string' THEN
            v := v || format('%s: channel must be a string', label);
        END IF;
        IF h.body ? 'queue' AND jsonb_typeof(h.body -> 'queue') <> 'string' THEN
            v := v || format('%s: queue must be a string', label);
        END IF;
        unique_window := NULL;
        IF h.body ? 'uniqueFor' THEN
            BEGIN
                unique_window := CASE WHEN jsonb_typeof(h.body -> 'uniqueFor') = 'string'
                                      THEN (h.body ->> 'uniqueFor')::interval END;
            EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow THEN
                unique_window := NULL;
            END;
            IF unique_window IS NULL THEN
                v := v || format('%s: uniqueFor must be an interval such as "10 minutes", got %s',
                                 label, h.body -> 'uniqueFor');
            END IF;
        END IF;
        -- a missing or malformed function was reported above; do not report it twice
        v := v || pg_catalog.array_remove(
                      vq.handler_violations(h.body ->> 'name',
                                            CASE WHEN h.body ? 'function' THEN 'function' ELSE 'notify' END,
                                            fn, h.body ->> 'channel', h.body ->> 'queue',
                                            CASE WHEN ok THEN (h.body ->> 'maxAttempts')::bigint END, label,
                                            CASE WHEN ok THEN (h.body ->> 'maxRunning')::bigint END, unique_window),
                      format('%s: function is missing', label));
    END LOOP;
    PERFORM vq.raise_violations(v, 'VQ102', 'handler registration failed');

    FOR h IN SELECT e.value AS body, e.ordinality AS pos FROM jsonb_array_elements(handlers) WITH ORDINALITY e LOOP
        PERFORM vq.insert_handler(h.body ->> 'name',
                                  CASE WHEN h.body ? 'function' THEN 'function' ELSE 'notify' END,
                                  ((functions -> (h.pos::int - 1)) ->> 'oid')::oid::regprocedure, h.body ->> 'channel',
                                  h.body ->> 'queue', (h.body ->> 'priority')::int, (h.body ->> 'maxAttempts')::int,
                                  (h.body ->> 'maxRunning')::int, (h.body ->> 'uniqueFor')::interval);
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;

-- Resolves the functions as the caller (vq.handler_functions), then runs vq.register_handlers
-- as the extension owner.
CREATE FUNCTION vq_register_handlers(handlers jsonb) RETURNS integer
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_register_handlers';

-- Remove a handler. Jobs already enqueued for it stay and still run: each runs the function
-- (by OID) or is announced on the channel recorded when it was enqueued, whatever is
-- registered since. New enqueues for the name fail until it is registered again. Its consumer
-- and producer grants are deleted with it (foreign keys ON DELETE CASCADE): a handler
-- registered again under the name, even in the same transaction, has none until they are
-- given again. Returns false when no such handler was registered.
CREATE FUNCTION vq_unregister_handler(name text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_unregister_handler');
    DELETE FROM vq.handler h WHERE h.name OPERATOR(pg_catalog.=) vq_unregister_handler.name;
    RETURN FOUND;
END
$$;

-- Let a role choose this queue, or a priority / max_attempts above the handler's, at enqueue.
CREATE FUNCTION vq_grant_queue(queue text, grantee regrole) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_grant_queue');
    IF NOT EXISTS (SELECT 1 FROM vq.queue q WHERE q.name OPERATOR(pg_catalog.=) vq_grant_queue.queue) THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ004', MESSAGE = format('queue "%s" does not exist', queue);
    END IF;
    IF grantee IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ008', MESSAGE = 'grantee must not be null';
    END IF;
    INSERT INTO vq.queue_grant (queue, grantee) VALUES (queue, grantee) ON CONFLICT DO NOTHING;
END
$$;

CREATE FUNCTION vq_revoke_queue(queue text, grantee regrole) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_revoke_queue');
    DELETE FROM vq.queue_grant g
     WHERE g.queue OPERATOR(pg_catalog.=) vq_revoke_queue.queue
       AND g.grantee OPERATOR(pg_catalog.=) vq_revoke_queue.grantee;
    RETURN FOUND;
END
$$;
