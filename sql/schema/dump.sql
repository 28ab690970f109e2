-- sql/schema/dump.sql: what pg_dump keeps of the extension's tables: the config-dump
-- registrations. Last, after every table and sequence exists.

-- User data in these tables survives pg_dump / restore, and so do the positions of the identity
-- sequences (a restored database hands out ids after the restored ones). The default queue's row
-- is dumped too: the install script creates it, and the restore's insert of it sets its settings
-- and pause instead (vq.queue_default_restored, in registry.sql).
SELECT pg_catalog.pg_extension_config_dump('vq.queue', '');
SELECT pg_catalog.pg_extension_config_dump('vq.handler', '');
SELECT pg_catalog.pg_extension_config_dump('vq.contract_override', '');
SELECT pg_catalog.pg_extension_config_dump('vq.job_active', '');
SELECT pg_catalog.pg_extension_config_dump('vq.job_finished', '');
SELECT pg_catalog.pg_extension_config_dump('vq.job_transition_data', '');
SELECT pg_catalog.pg_extension_config_dump('vq.job_log', '');
SELECT pg_catalog.pg_extension_config_dump('vq.outbox', '');
SELECT pg_catalog.pg_extension_config_dump('vq.consumer_grant', '');
SELECT pg_catalog.pg_extension_config_dump('vq.producer_grant', '');
SELECT pg_catalog.pg_extension_config_dump('vq.queue_grant', '');
SELECT pg_catalog.pg_extension_config_dump('vq.destination', '');
SELECT pg_catalog.pg_extension_config_dump('vq.interceptor', '');
SELECT pg_catalog.pg_extension_config_dump('vq.job_id_window', '');
SELECT pg_catalog.pg_extension_config_dump('vq.transition_listener', '');
SELECT pg_catalog.pg_extension_config_dump('vq.job_transition_data_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('vq.job_log_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('vq.outbox_id_seq', '');

-- queued calls survive pg_dump / restore (with their ids: the sequence too)
SELECT pg_catalog.pg_extension_config_dump('vq.callback_event', '');
SELECT pg_catalog.pg_extension_config_dump('vq.callback_event_id_seq', '');
