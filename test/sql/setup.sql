-- Runs first: the regression database is not served by vq_job's executors (the tests
-- check what SQL calls do to rows, and the executors would run those jobs meanwhile),
-- whatever the server's vq.databases says; then the extension is created.
DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET vq.serve_database = off', current_database()); END $$;
CREATE EXTENSION vq_job;
SELECT extversion FROM pg_extension WHERE extname = 'vq_job';
