-- examples/schema.sql: the small shop the client examples work on. Run it once, as a
-- superuser, in a fresh database that has the extension:
--   psql -d app -c 'CREATE EXTENSION vq_job' -f examples/schema.sql
--
-- Roles: shop_app (the application: places orders, enqueues, publishes) and shop_consumer
-- (the external invoice renderer, a NOTIFY consumer). Both log in; give them passwords if
-- your server does not trust local connections.
\set ON_ERROR_STOP 1

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'shop_app') THEN
        CREATE ROLE shop_app LOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'shop_consumer') THEN
        CREATE ROLE shop_consumer LOGIN;
    END IF;
END
$$;

CREATE SCHEMA shop;
GRANT USAGE ON SCHEMA shop TO shop_app, shop_consumer;

CREATE TABLE shop.orders (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    customer   text NOT NULL,
    total      numeric(12, 2) NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
-- What the in-server handlers did (one row per run), with the durable context they saw.
CREATE TABLE shop.order_event (
    order_id bigint NOT NULL,
    kind     text NOT NULL,
    context  jsonb,
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
-- What the external invoice consumer produced (written in the transaction of its reply).
CREATE TABLE shop.invoice (
    order_id     bigint NOT NULL,
    execution_id uuid NOT NULL UNIQUE,
    rendered_by  text NOT NULL,
    at           timestamptz NOT NULL DEFAULT clock_timestamp()
);
GRANT SELECT, INSERT ON shop.orders, shop.order_event TO shop_app;
GRANT SELECT ON shop.invoice TO shop_app;
GRANT SELECT, INSERT ON shop.invoice TO shop_consumer;

-- Function handlers run in the server, as the role that enqueued the job (shop_app).
CREATE FUNCTION shop.send_confirmation(payload jsonb, ctx vq.job_context) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM vq_log('INFO', 'confirmation e-mail', jsonb_build_object('order_id', payload -> 'order_id'));
    INSERT INTO shop.order_event (order_id, kind, context)
    VALUES ((payload ->> 'order_id')::bigint, 'confirmation-email', ctx.metadata);
END
$$;
CREATE FUNCTION shop.follow_up(payload jsonb, ctx vq.job_context) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO shop.order_event (order_id, kind, context)
    VALUES ((payload ->> 'order_id')::bigint, 'follow-up', ctx.metadata);
END
$$;

-- Queues: function jobs on "shop"; invoice jobs, served outside the server, on
-- "shop_invoices" with a short fixed backoff so a failed render is retried soon.
SELECT vq_configure('{
  "queues": {
    "shop":          {"sleepDelayMs": 1000, "maxConcurrentJobs": 10},
    "shop_invoices": {"sleepDelayMs": 500, "maxConcurrentJobs": 10,
                      "backoffStrategy": "FIXED", "backoffBaseDelayMs": 200}
  }
}');
SELECT vq_register_handlers('[
  {"name": "shop.confirm-email",  "function": "shop.send_confirmation(jsonb, vq.job_context)", "queue": "shop"},
  {"name": "shop.follow-up",      "function": "shop.follow_up(jsonb, vq.job_context)",         "queue": "shop"},
  {"name": "shop.render-invoice", "channel": "shop_invoice", "queue": "shop_invoices", "maxAttempts": 3}
]');
-- A NOTIFY handler's consumer runs whatever the payload says: producing is granted, and so
-- is consuming (the consumer is not the enqueuing role).
SELECT vq_grant_producer('shop.render-invoice', 'shop_app');
SELECT vq_grant_consumer('shop.render-invoice', 'shop_consumer');
