-- sql/schema/outbox.sql: the transactional outbox: its rows, the destination types a relay
-- delivers to, and the functions that publish and register.

-- Transactional outbox: rows written in the business transaction, relayed after commit.
CREATE TABLE vq.outbox (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    destination_type  text NOT NULL,
    destination       text NOT NULL,
    payload           jsonb,
    headers           jsonb NOT NULL DEFAULT '{}',
    metadata          jsonb NOT NULL DEFAULT '{}',
    scheduled_at      timestamptz,
    status            text NOT NULL DEFAULT 'PENDING'
                      CONSTRAINT outbox_status_known CHECK (status IN ('PENDING', 'PUBLISHED', 'FAILED')),
    attempts          integer NOT NULL DEFAULT 0,
    next_attempt_at   timestamptz,
    last_error        text,
    published_by      regrole NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at        timestamptz NOT NULL DEFAULT pg_catalog.now(),
    published_at      timestamptz
);
-- The relay's claim paths: rows due at publication in publication order (scanned from the
-- relay's position), and the timed ones (a scheduled_at, or a retry time) in due order; and
-- the retention of published rows.
CREATE INDEX outbox_pending_idx ON vq.outbox (id)
    WHERE status = 'PENDING' AND scheduled_at IS NULL AND next_attempt_at IS NULL;
CREATE INDEX outbox_timed_idx ON vq.outbox (coalesce(next_attempt_at, scheduled_at), id)
    WHERE status = 'PENDING' AND (scheduled_at IS NOT NULL OR next_attempt_at IS NOT NULL);
CREATE INDEX outbox_published_idx ON vq.outbox (published_at) WHERE status = 'PUBLISHED';
CREATE INDEX outbox_failed_idx ON vq.outbox (updated_at) WHERE status = 'FAILED';

-- What a destination function returns to the outbox relay.
CREATE TYPE vq.publish_status AS ENUM ('SUCCESS', 'RETRYABLE', 'PERMANENT', 'UNRESOLVABLE');
CREATE TYPE vq.publish_result AS (status vq.publish_status, message text);

-- User-registered outbox destination types, each delivered by a SQL function
-- fn(destination text, payload jsonb, headers jsonb, metadata jsonb) RETURNS vq.publish_result,
-- run as the role that published the row.
CREATE TABLE vq.destination (
    type           text PRIMARY KEY
                   CONSTRAINT destination_type_format CHECK (type OPERATOR(pg_catalog.~) '^[a-zA-Z0-9._-]{1,128}$'
                                                         AND type NOT IN ('DELAYED_JOB', 'NOTIFY')),
    fn             regprocedure NOT NULL,
    registered_at  timestamptz NOT NULL DEFAULT pg_catalog.now()
);

-- Held in the registry cache: a change invalidates it (vq.registry_changed, registry.sql).
CREATE TRIGGER destination_registry_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON vq.destination
    FOR EACH STATEMENT EXECUTE FUNCTION vq.registry_changed();

------------------------------------------------------------------------------
-- Transactional outbox (C). Rows join the caller's transaction; the relay in the
-- background workers delivers them after commit.
------------------------------------------------------------------------------
CREATE FUNCTION vq_outbox_publish(target text, payload jsonb, scheduled_at timestamptz DEFAULT NULL,
                                  headers jsonb DEFAULT '{}')
RETURNS bigint
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_outbox_publish';
COMMENT ON FUNCTION vq_outbox_publish(text, jsonb, timestamptz, jsonb)
    IS 'record a delayed job to enqueue after commit; snapshots its effective settings now; returns the outbox id';
CREATE FUNCTION vq_outbox_publish_to(destination_type text, destination text, payload jsonb,
                                     scheduled_at timestamptz DEFAULT NULL, headers jsonb DEFAULT '{}')
RETURNS bigint
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_outbox_publish_to';
COMMENT ON FUNCTION vq_outbox_publish_to(text, text, jsonb, timestamptz, jsonb)
    IS 'record a message for a NOTIFY channel or a registered destination type; returns the outbox id';

-- Register a destination type delivered by fn(destination text, payload jsonb, headers jsonb,
-- metadata jsonb) RETURNS vq.publish_result.
CREATE FUNCTION vq_register_destination(type text, fn regprocedure) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p record;
BEGIN
    PERFORM vq.require_writable('vq_register_destination');
    IF fn IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ105', MESSAGE = 'destination function must not be null';
    END IF;
    IF type IS NULL OR type !~ '^[a-zA-Z0-9._-]{1,128}$' OR type IN ('DELAYED_JOB', 'NOTIFY') THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ105',
            MESSAGE = format('destination type %s: must match ^[a-zA-Z0-9._-]{1,128}$ and not be DELAYED_JOB or NOTIFY',
                             coalesce('"' || type || '"', 'NULL'));
    END IF;
    SELECT pr.prokind, pr.proretset, pr.pronargs, pr.proargtypes::oid[] AS args, pr.prorettype INTO p
      FROM pg_catalog.pg_proc pr WHERE pr.oid OPERATOR(pg_catalog.=) fn::oid;
    IF NOT coalesce(p.prokind = 'f' AND NOT p.proretset AND p.pronargs = 4
                    AND p.prorettype = 'vq.publish_result'::regtype
                    AND p.args[0] = 'pg_catalog.text'::regtype AND p.args[1] = 'pg_catalog.jsonb'::regtype
                    AND p.args[2] = 'pg_catalog.jsonb'::regtype AND p.args[3] = 'pg_catalog.jsonb'::regtype,
                    false) THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ105',
            MESSAGE = format('destination type "%s": function %s must be (text, jsonb, jsonb, jsonb) RETURNS vq.publish_result', type, fn);
    END IF;
    INSERT INTO vq.destination (type, fn) VALUES (type, fn)
    ON CONFLICT ON CONSTRAINT destination_pkey DO UPDATE SET fn = excluded.fn, registered_at = now();
END
$$;

CREATE FUNCTION vq_unregister_destination(type text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_unregister_destination');
    DELETE FROM vq.destination d WHERE d.type OPERATOR(pg_catalog.=) vq_unregister_destination.type;
    RETURN FOUND;
END
$$;
