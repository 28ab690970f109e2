-- scripts/demo.sql — demo run by ./scripts/run against database vq_demo
-- (placeholder; to be replaced with a real walkthrough).
SELECT extversion FROM pg_extension WHERE extname = 'vq_job';
