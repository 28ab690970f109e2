-- PARALLEL markings of the extension's functions (trigger functions aside), by the rules
-- PostgreSQL's opr_sanity test checks its own by: an IMMUTABLE function is PARALLEL SAFE; a
-- STABLE one (it only reads) is not PARALLEL UNSAFE; a VOLATILE or SECURITY DEFINER one (they
-- change something) is not PARALLEL SAFE. Every function breaking one is listed.
SELECT p.oid::regprocedure AS function, p.provolatile, p.proparallel, p.prosecdef
  FROM pg_proc p
  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
   AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'vq_job'
 WHERE p.prorettype <> 'trigger'::regtype
   AND ((p.provolatile = 'i' AND p.proparallel <> 's')
        OR (p.provolatile = 's' AND p.proparallel = 'u')
        OR (p.provolatile = 'v' AND p.proparallel = 's')
        OR (p.prosecdef AND p.proparallel = 's'))
 ORDER BY 1::text;
-- vq.queue_violations in particular, which opr_sanity flagged
SELECT provolatile, proparallel FROM pg_proc WHERE oid = 'vq.queue_violations'::regproc;
