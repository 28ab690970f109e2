-- vq_job 0.1.0 -> 0.2.0: how a database at 0.1.0 becomes what a fresh install of 0.2.0
-- creates (sql/schema/ holds the fragments of 0.2.0; sql/README.md says how the two are kept
-- equal, and test/scenarios/upgrade.sh compares them).
\echo Use "ALTER EXTENSION vq_job UPDATE TO '0.2.0'" to load this file. \quit
