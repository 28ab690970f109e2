-- catalog.sql: a canonical description of everything the extension owns in the current
-- database, one line per fact, for diff: two databases with the same description have the same
-- extension objects, definitions, privileges, comments and config-dump registrations.
--
--   psql -X -q -d DB -f test/upgrade/catalog.sql [-v extension=vq_job] [-v rows=off]
--
-- What it describes: the extension (version, schema, requirements) and its member objects;
-- each schema it created; each function of its own or in its schemas (identity and full
-- arguments, result, language, kind, volatility, strictness, security definer, leakproof,
-- parallel marking, cost, rows, configuration, library and symbol, body); each relation
-- (tables, partitions, views, sequences, composite types: kind, options, partitioning, row
-- security, columns with type, not null, default, identity and generation, constraints,
-- indexes, triggers, policies, rules, view definitions, sequence parameters); types (enum labels,
-- domains, ranges); the privileges of all of these (ACLs and the extension's initial privileges,
-- pg_init_privs); comments and security labels; the config-dump registrations (extconfig with
-- extcondition); and, unless rows=off, the rows of its tables without their timestamps (the rows
-- its scripts insert, such as the default queue: describe databases without user data).
--
-- What it leaves out, so that two databases (or clusters) can be compared: OIDs, the order of
-- creation (each line names its object; lines are sorted by object, then in definition order),
-- internal triggers (the foreign keys' own, named by OID), array types and row types made with
-- their table, sequence positions, and the name of the extension's owner (written OWNER).
-- Run it as a superuser (row security would hide rows otherwise); it changes nothing, and works
-- on a hot standby.
\set QUIET on
\set ON_ERROR_STOP on
\pset format unaligned
\pset tuples_only on
\pset footer off
\if :{?extension}
\else
\set extension vq_job
\endif
\if :{?rows}
\else
\set rows on
\endif

-- Names qualified the same way, values written the same way, whatever the session's defaults.
SET search_path = pg_catalog, pg_temp;
SET DateStyle = 'ISO, MDY';
SET IntervalStyle = postgres;
SET TimeZone = 'UTC';
SET extra_float_digits = 1;
SET bytea_output = hex;
SET quote_all_identifiers = off;

SELECT count(*) = 0 AS catalog_missing FROM pg_extension WHERE extname = :'extension' \gset
\if :catalog_missing
\warn 'catalog.sql: extension' :extension 'is not installed in this database'
DO $$ BEGIN RAISE EXCEPTION 'catalog.sql: the extension to describe is not installed'; END $$;
\endif

WITH
ext AS (
    SELECT e.oid, e.extname, e.extowner, e.extversion, e.extrelocatable, e.extnamespace,
           e.extconfig, e.extcondition
      FROM pg_extension e WHERE e.extname = :'extension'),
-- the extension's member objects (CREATE EXTENSION and ALTER EXTENSION ... ADD record them)
member AS (
    SELECT d.classid, d.objid
      FROM pg_depend d, ext
     WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid AND d.deptype = 'e'),
-- the schemas it created, and what lives in them or belongs to it
ns AS (
    SELECT n.oid, n.nspname, n.nspowner, n.nspacl FROM pg_namespace n
     WHERE (n.tableoid, n.oid) IN (SELECT classid, objid FROM member)),
rel AS (
    SELECT c.oid, c.tableoid, c.relname, c.relkind, c.relowner, c.relacl, c.relpersistence,
           c.reloptions, c.relrowsecurity, c.relforcerowsecurity, c.relreplident, c.relispartition,
           c.relpartbound, c.reltablespace, c.relam, c.relispopulated
      FROM pg_class c
     WHERE c.relnamespace IN (SELECT oid FROM ns)
        OR (c.tableoid, c.oid) IN (SELECT classid, objid FROM member)),
fn AS (
    SELECT p.tableoid, p.* FROM pg_proc p
     WHERE p.pronamespace IN (SELECT oid FROM ns)
        OR (p.tableoid, p.oid) IN (SELECT classid, objid FROM member)),
typ AS (   -- not the array types and row types PostgreSQL makes with each type and relation
    SELECT t.tableoid, t.* FROM pg_type t
     WHERE (t.typnamespace IN (SELECT oid FROM ns)
            OR (t.tableoid, t.oid) IN (SELECT classid, objid FROM member))
       AND NOT (t.typcategory = 'A' AND t.typelem <> 0)
       AND (t.typrelid = 0 OR t.typtype = 'c' AND
            (SELECT c.relkind FROM pg_class c WHERE c.oid = t.typrelid) = 'c')),
con AS (
    SELECT k.tableoid, k.* FROM pg_constraint k
     WHERE k.conrelid IN (SELECT oid FROM rel) OR k.contypid IN (SELECT oid FROM typ)),
trg AS (
    SELECT g.tableoid, g.* FROM pg_trigger g WHERE g.tgrelid IN (SELECT oid FROM rel) AND NOT g.tgisinternal),
pol AS (
    SELECT p.oid, p.tableoid, p.polrelid FROM pg_policy p WHERE p.polrelid IN (SELECT oid FROM rel)),
rul AS (
    SELECT r.oid, r.tableoid, r.ev_class FROM pg_rewrite r
     WHERE r.ev_class IN (SELECT oid FROM rel) AND r.rulename <> '_RETURN'),
-- every object described, for ACLs, initial privileges, comments and labels (objsubid: a column)
owned AS (
    SELECT classid, objid, 0 AS objsubid FROM member
    UNION SELECT tableoid, oid, 0 FROM rel
    UNION SELECT 'pg_class'::regclass, a.attrelid, a.attnum FROM pg_attribute a
           WHERE a.attrelid IN (SELECT oid FROM rel) AND a.attnum > 0 AND NOT a.attisdropped
    UNION SELECT tableoid, oid, 0 FROM fn
    UNION SELECT tableoid, oid, 0 FROM typ
    UNION SELECT tableoid, oid, 0 FROM pg_namespace WHERE oid IN (SELECT oid FROM ns)
    UNION SELECT tableoid, oid, 0 FROM con
    UNION SELECT tableoid, oid, 0 FROM trg
    UNION SELECT tableoid, oid, 0 FROM pol
    UNION SELECT tableoid, oid, 0 FROM rul),
obj AS (
    SELECT o.classid, o.objid, o.objsubid, i.type, i.identity
      FROM owned o, LATERAL pg_identify_object(o.classid, o.objid, o.objsubid) i),
-- a role as written here: PUBLIC, OWNER (the extension's owner) or its name
role_name AS (
    SELECT r.oid, CASE WHEN r.oid = ext.extowner THEN 'OWNER' ELSE r.rolname::text END AS name
      FROM pg_roles r, ext),
-- the privileges to write: each ACL (NULL is "default": the built-in privileges of the owner
-- and PUBLIC), and the initial privileges pg_dump compares it with (pg_init_privs)
acl_src AS (
    SELECT 'acl' AS what, 'pg_class'::regclass AS classid, oid AS objid, 0 AS objsubid, relacl AS acl
      FROM rel WHERE relkind NOT IN ('i', 'I', 'c')
    UNION ALL
    SELECT 'acl', 'pg_class'::regclass, a.attrelid, a.attnum, a.attacl FROM pg_attribute a
     WHERE a.attrelid IN (SELECT oid FROM rel) AND a.attnum > 0 AND NOT a.attisdropped
       AND a.attacl IS NOT NULL
    UNION ALL SELECT 'acl', 'pg_proc'::regclass, oid, 0, proacl FROM fn
    UNION ALL SELECT 'acl', 'pg_type'::regclass, oid, 0, typacl FROM typ
    UNION ALL SELECT 'acl', 'pg_namespace'::regclass, oid, 0, nspacl FROM ns
    UNION ALL
    SELECT 'initial privileges (' || CASE ip.privtype WHEN 'e' THEN 'extension' WHEN 'i' THEN 'initdb'
                                          ELSE ip.privtype::text END || ')',
           ip.classoid, ip.objoid, ip.objsubid, ip.initprivs
      FROM pg_init_privs ip
     WHERE (ip.classoid, ip.objoid, ip.objsubid) IN (SELECT classid, objid, objsubid FROM owned)),
privilege(name, letter) AS (
    VALUES ('SELECT', 'r'), ('INSERT', 'a'), ('UPDATE', 'w'), ('DELETE', 'd'), ('TRUNCATE', 'D'),
           ('REFERENCES', 'x'), ('TRIGGER', 't'), ('EXECUTE', 'X'), ('USAGE', 'U'), ('CREATE', 'C'),
           ('CONNECT', 'c'), ('TEMPORARY', 'T')),
-- an aclitem[] as text: "GRANTEE=privileges/GRANTOR ...", roles written as above, sorted, the
-- privileges in aclitem's letters and order ('*': with grant option)
acl_text AS (
    SELECT s.what, s.classid, s.objid, s.objsubid,
           coalesce((SELECT string_agg(g.item, ' ' ORDER BY g.item COLLATE "C")
                       FROM (SELECT coalesce(ge.name, CASE WHEN e.grantee = 0 THEN 'PUBLIC' ELSE e.grantee::text END)
                                    || '=' || string_agg(coalesce(v.letter, e.privilege_type)
                                                         || CASE WHEN e.is_grantable THEN '*' ELSE '' END,
                                                         '' ORDER BY strpos('arwdDxtXUCcT', v.letter), e.privilege_type)
                                    || '/' || coalesce(gr.name, e.grantor::text) AS item
                               FROM aclexplode(s.acl) e
                               LEFT JOIN privilege v ON v.name = e.privilege_type
                               LEFT JOIN role_name ge ON ge.oid = e.grantee
                               LEFT JOIN role_name gr ON gr.oid = e.grantor
                              GROUP BY ge.name, e.grantee, gr.name, e.grantor) g),
                    CASE WHEN s.acl IS NULL THEN 'default' ELSE 'none' END) AS acl
      FROM acl_src s),
owner_note AS (   -- ", owner NAME" where an object's owner is not the extension's
    SELECT r.oid, CASE WHEN r.name = 'OWNER' THEN '' ELSE ', owner ' || r.name END AS note FROM role_name r),
pos AS (   -- each column's position among the relation's columns that are not dropped
    SELECT a.attrelid, a.attnum, a.attname, a.atttypid, a.atttypmod, a.attnotnull, a.atthasdef,
           a.attidentity, a.attgenerated, a.attcollation, a.attoptions, a.attstattarget,
           row_number() OVER (PARTITION BY a.attrelid ORDER BY a.attnum) AS position
      FROM pg_attribute a
     WHERE a.attrelid IN (SELECT oid FROM rel WHERE relkind NOT IN ('S', 'i', 'I'))
       AND a.attnum > 0 AND NOT a.attisdropped),
line AS (
    -- the extension
    SELECT '1' AS k1, 0 AS k2, format('extension %s: version %s, schema %s, %s%s', e.extname, e.extversion,
               (SELECT nspname FROM pg_namespace WHERE oid = e.extnamespace),
               CASE WHEN e.extrelocatable THEN 'relocatable' ELSE 'not relocatable' END,
               coalesce(', requires ' || (SELECT string_agg(r.extname, ', ' ORDER BY r.extname)
                                            FROM pg_depend d JOIN pg_extension r ON r.oid = d.refobjid
                                           WHERE d.classid = 'pg_extension'::regclass AND d.objid = e.oid
                                             AND d.refclassid = 'pg_extension'::regclass), '')) AS t
      FROM ext e
    UNION ALL
    -- its members
    SELECT '2', 0, format('member %s %s', i.type, i.identity)
      FROM member m, LATERAL pg_identify_object(m.classid, m.objid, 0) i
    UNION ALL
    -- its schemas
    SELECT '3 ' || n.nspname, 0, format('schema %s%s', n.nspname, o.note)
      FROM ns n JOIN owner_note o ON o.oid = n.nspowner
    UNION ALL
    -- types: enums, domains, ranges, base types (composite types are relations, below)
    SELECT '4 ' || t.oid::regtype::text, 0,
           format('type %s: %s%s', t.oid::regtype,
                  CASE t.typtype
                      WHEN 'e' THEN 'enum (' || (SELECT string_agg(quote_literal(l.enumlabel), ', ' ORDER BY l.enumsortorder)
                                                   FROM pg_enum l WHERE l.enumtypid = t.oid) || ')'
                      WHEN 'd' THEN concat_ws(' ', 'domain over', format_type(t.typbasetype, t.typtypmod),
                                              CASE WHEN t.typnotnull THEN 'not null' END,
                                              'default ' || t.typdefault,
                                              'collate ' || CASE WHEN t.typcollation <> 0 THEN
                                                  (SELECT collname FROM pg_collation WHERE oid = t.typcollation) END)
                      WHEN 'r' THEN 'range of ' || (SELECT format_type(r.rngsubtype, NULL) FROM pg_range r
                                                     WHERE r.rngtypid = t.oid)
                      WHEN 'm' THEN 'multirange'
                      WHEN 'c' THEN 'composite type'
                      ELSE format('base type (input %s, output %s, length %s)', t.typinput, t.typoutput, t.typlen)
                  END, o.note)
      FROM typ t JOIN owner_note o ON o.oid = t.typowner
     WHERE t.typtype <> 'c'
    UNION ALL
    -- relations other than indexes and sequences
    SELECT '5 ' || r.oid::regclass::text, 0,
           format('%s %s', i.type, r.oid::regclass) || coalesce(': ' || nullif(concat_ws(', ',
                  CASE r.relkind WHEN 'p' THEN 'partitioned' END,
                  CASE r.relpersistence WHEN 'u' THEN 'unlogged' WHEN 't' THEN 'temporary' END,
                  CASE WHEN r.relkind IN ('r', 'm') AND r.relam <> 0
                            AND (SELECT amname FROM pg_am WHERE oid = r.relam) <> 'heap'
                       THEN 'access method ' || (SELECT amname FROM pg_am WHERE oid = r.relam) END,
                  'options (' || array_to_string(r.reloptions, ', ') || ')',
                  'partition by ' || CASE WHEN r.relkind = 'p' THEN pg_get_partkeydef(r.oid) END,
                  'inherits ' || (SELECT string_agg(h.inhparent::regclass::text, ', ' ORDER BY h.inhseqno)
                                    FROM pg_inherits h WHERE h.inhrelid = r.oid),
                  'partition bound ' || CASE WHEN r.relispartition THEN pg_get_expr(r.relpartbound, r.oid) END,
                  CASE WHEN r.relrowsecurity THEN 'row security' END,
                  CASE WHEN r.relforcerowsecurity THEN 'forced row security' END,
                  CASE WHEN r.relkind IN ('r', 'p', 'm') THEN 'replica identity ' || CASE r.relreplident
                      WHEN 'd' THEN 'default' WHEN 'n' THEN 'nothing' WHEN 'f' THEN 'full' ELSE 'index' END END,
                  CASE WHEN r.relkind = 'm' AND NOT r.relispopulated THEN 'not populated' END,
                  CASE WHEN r.reltablespace <> 0 THEN 'tablespace ' ||
                      (SELECT spcname FROM pg_tablespace WHERE oid = r.reltablespace) END,
                  nullif(substr(o.note, 3), '')), ''), '')
      FROM rel r JOIN owner_note o ON o.oid = r.relowner,
           LATERAL pg_identify_object('pg_class'::regclass, r.oid, 0) i
     WHERE r.relkind NOT IN ('i', 'I', 'S')
    UNION ALL
    -- their columns, in order
    SELECT '5 ' || p.attrelid::regclass::text, p.position::int,
           format('%s %s: %s', i.type, i.identity, concat_ws(' ', p.position, format_type(p.atttypid, p.atttypmod),
                  CASE WHEN p.attnotnull THEN 'not null' END,
                  CASE WHEN p.atthasdef AND p.attgenerated = '' THEN 'default ' ||
                      (SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d
                        WHERE d.adrelid = p.attrelid AND d.adnum = p.attnum) END,
                  CASE p.attidentity WHEN 'a' THEN 'generated always as identity'
                                     WHEN 'd' THEN 'generated by default as identity' END,
                  CASE WHEN p.attgenerated = 's' THEN 'generated always as (' ||
                      (SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d
                        WHERE d.adrelid = p.attrelid AND d.adnum = p.attnum) || ') stored' END,
                  CASE WHEN p.attcollation <> (SELECT typcollation FROM pg_type WHERE oid = p.atttypid) THEN
                      'collate ' || (SELECT collname FROM pg_collation WHERE oid = p.attcollation) END,
                  'options (' || (SELECT string_agg(o, ', ' ORDER BY o) FROM unnest(p.attoptions) o
                                   WHERE o ~ '^n_distinct(_inherited)?=') || ')',
                  CASE WHEN p.attstattarget >= 0 THEN 'statistics ' || p.attstattarget END))
      FROM pos p, LATERAL pg_identify_object('pg_class'::regclass, p.attrelid, p.attnum::int) i
    UNION ALL
    -- constraints (of tables and of domains)
    SELECT '5 ' || coalesce(k.conrelid::regclass::text, k.contypid::regtype::text), 1000,
           format('%s %s: %s%s', i.type, i.identity, pg_get_constraintdef(k.oid),
                  CASE WHEN NOT k.conislocal OR k.coninhcount > 0
                       THEN format(' (inherited %s time(s)%s)', k.coninhcount,
                                   CASE WHEN k.conislocal THEN ', also local' ELSE '' END) ELSE '' END)
      FROM con k, LATERAL pg_identify_object(k.tableoid, k.oid, 0) i
    UNION ALL
    -- indexes
    SELECT '5 ' || x.indrelid::regclass::text, 2000,
           format('index %s: %s', x.indexrelid::regclass, concat_ws(', ', pg_get_indexdef(x.indexrelid),
                  CASE WHEN x.indisclustered THEN 'clustered' END,
                  CASE WHEN x.indisreplident THEN 'replica identity' END,
                  CASE WHEN NOT x.indisvalid THEN 'not valid' END,
                  'partition of ' || (SELECT h.inhparent::regclass::text FROM pg_inherits h
                                       WHERE h.inhrelid = x.indexrelid)))
      FROM pg_index x WHERE x.indexrelid IN (SELECT oid FROM rel)
    UNION ALL
    -- triggers (not the internal ones of foreign keys)
    SELECT '5 ' || g.tgrelid::regclass::text, 3000,
           format('%s %s: %s%s', i.type, i.identity, pg_get_triggerdef(g.oid),
                  CASE g.tgenabled WHEN 'O' THEN '' WHEN 'D' THEN ' (disabled)'
                                   WHEN 'R' THEN ' (enabled replica)' WHEN 'A' THEN ' (enabled always)' END)
      FROM trg g, LATERAL pg_identify_object(g.tableoid, g.oid, 0) i
    UNION ALL
    -- row-security policies
    SELECT '5 ' || format('%I.%I', p.schemaname, p.tablename), 4000,
           format('policy %s on %I.%I: %s', quote_ident(p.policyname), p.schemaname, p.tablename, concat_ws(' ',
                  p.permissive, 'for', p.cmd, 'to', array_to_string(p.roles, ', '),
                  'using (' || p.qual || ')', 'with check (' || p.with_check || ')'))
      FROM pg_policies p
     WHERE (p.schemaname, p.tablename) IN (SELECT n.nspname, c.relname FROM pg_class c
                                             JOIN pg_namespace n ON n.oid = c.relnamespace
                                            WHERE c.oid IN (SELECT oid FROM rel))
    UNION ALL
    -- rules other than views' own
    SELECT '5 ' || r.ev_class::regclass::text, 5000, format('%s %s: %s', i.type, i.identity, pg_get_ruledef(r.oid))
      FROM rul r, LATERAL pg_identify_object(r.tableoid, r.oid, 0) i
    UNION ALL
    -- view definitions, line by line
    SELECT '5 ' || r.oid::regclass::text, 100000 + d.n::int,
           format('%s %s definition: %s', i.type, r.oid::regclass, d.l)
      FROM rel r, LATERAL pg_identify_object('pg_class'::regclass, r.oid, 0) i,
           LATERAL regexp_split_to_table(pg_get_viewdef(r.oid, true), E'\n') WITH ORDINALITY d(l, n)
     WHERE r.relkind IN ('v', 'm')
    UNION ALL
    -- sequences (parameters, not positions)
    SELECT '5 ' || s.seqrelid::regclass::text, 0,
           format('sequence %s: %s, start %s, increment %s, minimum %s, maximum %s, cache %s, %s%s%s',
                  s.seqrelid::regclass, format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement, s.seqmin,
                  s.seqmax, s.seqcache, CASE WHEN s.seqcycle THEN 'cycle' ELSE 'no cycle' END,
                  coalesce((SELECT format(', owned by %s.%I%s', d.refobjid::regclass, a.attname,
                                          CASE d.deptype WHEN 'i' THEN ' (identity)' ELSE '' END)
                              FROM pg_depend d
                              JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
                             WHERE d.classid = 'pg_class'::regclass AND d.objid = s.seqrelid
                               AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')), ''),
                  o.note)
      FROM pg_sequence s JOIN rel r ON r.oid = s.seqrelid JOIN owner_note o ON o.oid = r.relowner
    UNION ALL
    -- functions: their arguments (names, types, defaults), a line of properties, then the body
    -- line by line
    SELECT '6 ' || i.identity, -1,
           format('%s %s arguments: (%s)', i.type, i.identity, pg_get_function_arguments(p.oid))
      FROM fn p, LATERAL pg_identify_object(p.tableoid, p.oid, 0) i
    UNION ALL
    SELECT '6 ' || i.identity, 0,
           format('%s %s: %s', i.type, i.identity, concat_ws('; ',
                  'returns ' || pg_get_function_result(p.oid),
                  'language ' || (SELECT lanname FROM pg_language WHERE oid = p.prolang),
                  CASE p.provolatile WHEN 'i' THEN 'immutable' WHEN 's' THEN 'stable' ELSE 'volatile' END,
                  CASE WHEN p.proisstrict THEN 'strict' END,
                  CASE WHEN p.prosecdef THEN 'security definer' END,
                  CASE WHEN p.proleakproof THEN 'leakproof' END,
                  'parallel ' || CASE p.proparallel WHEN 's' THEN 'safe' WHEN 'r' THEN 'restricted' ELSE 'unsafe' END,
                  'cost ' || p.procost,
                  CASE WHEN p.proretset THEN 'rows ' || p.prorows END,
                  'set ' || array_to_string(p.proconfig, ', '),
                  CASE WHEN p.prosupport <> 0 THEN 'support ' || p.prosupport::regproc END,
                  'library ' || p.probin,
                  CASE WHEN p.probin IS NOT NULL OR p.prolang IN (SELECT oid FROM pg_language WHERE lanname = 'internal')
                       THEN 'symbol ' || p.prosrc END) || o.note)
      FROM fn p JOIN owner_note o ON o.oid = p.proowner,
           LATERAL pg_identify_object(p.tableoid, p.oid, 0) i
    UNION ALL
    SELECT '6 ' || i.identity, d.n::int, format('%s %s body: %s', i.type, i.identity, d.l)
      FROM fn p, LATERAL pg_identify_object(p.tableoid, p.oid, 0) i,
           LATERAL regexp_split_to_table(CASE WHEN p.prosqlbody IS NOT NULL THEN pg_get_function_sqlbody(p.oid)
                                               ELSE p.prosrc END, E'\n') WITH ORDINALITY d(l, n)
     WHERE p.probin IS NULL AND p.prolang NOT IN (SELECT oid FROM pg_language WHERE lanname = 'internal')
    UNION ALL
    -- privileges
    SELECT '7 ' || o.identity, CASE WHEN a.what = 'acl' THEN 0 ELSE 1 END,
           format('%s %s %s: %s', a.what, o.type, o.identity, a.acl)
      FROM acl_text a JOIN obj o ON o.classid = a.classid AND o.objid = a.objid AND o.objsubid = a.objsubid
    UNION ALL
    -- comments and security labels
    SELECT '8 ' || o.identity, 0, format('comment %s %s: %s', o.type, o.identity,
                                         replace(replace(d.description, E'\\', E'\\\\'), E'\n', E'\\n'))
      FROM pg_description d JOIN obj o ON o.classid = d.classoid AND o.objid = d.objoid AND o.objsubid = d.objsubid
    UNION ALL
    SELECT '8 ' || o.identity, 1, format('security label (%s) %s %s: %s', l.provider, o.type, o.identity, l.label)
      FROM pg_seclabel l JOIN obj o ON o.classid = l.classoid AND o.objid = l.objoid AND o.objsubid = l.objsubid
    UNION ALL
    -- what pg_dump dumps of the extension's tables and sequences (pg_extension_config_dump)
    SELECT '9 ' || c.tab::regclass::text, 0, format('config dump %s %s: condition %s',
               CASE (SELECT relkind FROM pg_class WHERE oid = c.tab) WHEN 'S' THEN 'sequence' ELSE 'table' END,
               c.tab::regclass, quote_literal(c.cond))
      FROM ext e, LATERAL unnest(e.extconfig, e.extcondition) c(tab, cond)
)
-- (a value that spans lines is written on one, with \n)
SELECT replace(t, E'\n', E'\\n') FROM line ORDER BY k1 COLLATE "C", k2, t COLLATE "C";

-- The rows of the extension's tables (leaf tables: a partitioned table's are its partitions'),
-- without timestamp columns, whose values depend on when the script ran.
\if :rows
SELECT format('SELECT %L || (pg_catalog.to_jsonb(t) OPERATOR(pg_catalog.-) %L::text[])::text FROM %s t ORDER BY 1',
              'row ' || c.oid::regclass::text || ': ',
              coalesce((SELECT array_agg(a.attname::text) FROM pg_attribute a
                         WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                           AND a.atttypid IN ('timestamptz'::regtype, 'timestamp'::regtype, 'date'::regtype,
                                              'timetz'::regtype, 'time'::regtype)), '{}'),
              c.oid::regclass)
  FROM pg_class c
 WHERE c.relkind = 'r'
   AND (c.relnamespace IN (SELECT d.objid FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
                            WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
                              AND d.classid = 'pg_namespace'::regclass AND e.extname = :'extension')
        OR c.oid IN (SELECT d.objid FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
                      WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
                        AND d.classid = 'pg_class'::regclass AND e.extname = :'extension'))
 ORDER BY c.oid::regclass::text COLLATE "C" \gexec
\endif
