/*
 * settings.c: the settings vq_job's workers (executors, the saver) run their
 * own statements with, and those user code (a handler, a destination
 * function) runs with.
 *
 * A worker connects to its database as the bootstrap superuser, and
 * ALTER DATABASE ... SET and ALTER ROLE ... SET apply to it as to any
 * session. Its own transactions need some settings whatever those say
 * (serializable transactions fail, a read-only one cannot record anything,
 * lock_timeout cuts its lock waits, session_replication_role = replica
 * silences its triggers, exit_on_error ends it on a handler's error, a role
 * setting runs it as another role ...), so it pins them (PGC_S_OVERRIDE) once
 * connected: PINS below, with search_path and synchronous_commit. Its own
 * statements never run in parallel: its plans are kept plans, prepared
 * without CURSOR_OPT_PARALLEL_OK (spi_util.c), its VACUUM says PARALLEL 0
 * (jobvacuum.c) and its CLUSTER sets max_parallel_maintenance_workers to 0
 * (compact.c), whatever the parallel settings.
 *
 * User code gets what a session of its role in this database would get now
 * (PostgreSQL's order: ALTER ROLE r IN DATABASE d, ALTER ROLE r, ALTER
 * DATABASE d, ALTER ROLE ALL, then the server's configuration), at the GUC
 * nest level that ends with it: neither the pins nor the settings of the
 * executor's own role reach it. Within what a transaction already started
 * can change: its isolation level and deferrability are the executor's
 * transaction's (READ COMMITTED, not deferrable), while a default of
 * read-only makes it read-only. Not applied: search_path
 * (vq.handler_search_path), application_name (it names the job), role,
 * session_authorization and exit_on_error (the executor's), and settings that
 * only take effect when a session starts. statement_timeout and the idle
 * timeouts show their values but PostgreSQL enforces them for client
 * statements only: vq.execution_timeout_ms bounds user code.
 *
 * Cost: per transaction that runs user code, one scan of pg_db_role_setting
 * (a few rows); per job, one set_config_option per setting whose value for
 * the role differs from the executor's: none unless something is set.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_db_role_setting.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "main/guc.h"
#include "util/spi_util.h"
#include "run/settings.h"

/* A setting a worker pins; for_user_code: user code gets its role's value instead. */
typedef struct Pin
{
	const char *name;
	const char *value;
	bool		for_user_code;
} Pin;

static const Pin PINS[] = {
	{"default_transaction_isolation", "read committed", true},
	{"default_transaction_read_only", "off", true},
	{"default_transaction_deferrable", "off", true},
	{"statement_timeout", "0", true},
	{"lock_timeout", "0", true},
	{"idle_in_transaction_session_timeout", "0", true},
	{"idle_session_timeout", "0", true},
#if PG_VERSION_NUM >= 170000
	{"transaction_timeout", "0", true},
#endif
	{"session_replication_role", "origin", true},
	{"row_security", "on", true},
	{"plan_cache_mode", "auto", true},
	{"vacuum_cost_delay", "0", true},
	{"exit_on_error", "off", false},
	{"role", "none", false},
};

/* Settings never given to user code (see the header comment). */
static const char *const NOT_FOR_USER_CODE[] = {
	"search_path", "application_name", "role", "session_authorization", "exit_on_error", "client_encoding",
};

/* One setting: a name and a value. */
typedef struct Setting
{
	char	   *name;
	char	   *value;
} Setting;

/* pg_db_role_setting's entries that make a session's defaults, lowest precedence first. */
#define SOURCES 4

/*
 * What user code of a role gets that differs from the executor's own, and
 * the pg_db_role_setting arrays (ALTER ROLE ALL, the database, the role, the
 * role in the database) it was worked out from.
 */
typedef struct RoleSettings
{
	Oid			role;			/* hash key */
	uint64		base_generation;	/* base_generation when worked out */
	ArrayType  *sources[SOURCES];	/* NULL: none */
	List	   *differing;		/* Setting *, to set for user code */
	bool		read_only;		/* its default_transaction_read_only is on */
	MemoryContext cxt;
} RoleSettings;

/*
 * The values a session starts from before any pg_db_role_setting entry
 * (the server's configuration, or the built-in default), of every setting
 * the executor's own may differ in: the pins for user code, and whatever
 * the executor's connection took from pg_db_role_setting. Worked out at the
 * start and after every reload.
 */
static List *base = NIL;		/* Setting *, in TopMemoryContext */
static List *connect_names = NIL;	/* names the executor's connection set from pg_db_role_setting */
static uint64 base_generation = 1;
static HTAB *role_settings = NULL;

/* Pin synchronous_commit as vq.worker_synchronous_commit says (again after a reload: the rest stays pinned). */
void
VqPinSynchronousCommit(void)
{
	SetConfigOption("synchronous_commit", vq_worker_synchronous_commit ? "on" : "off", PGC_SUSET, PGC_S_OVERRIDE);
}

/* Pin the settings the worker's own transactions need (once, after connecting, before its first transaction). */
void
VqPinWorkerSettings(void)
{
	/* vq_job's own statements are schema-qualified; nothing should come from elsewhere. */
	SetConfigOption("search_path", VQ_WORKER_SEARCH_PATH, PGC_SUSET, PGC_S_OVERRIDE);
	VqPinSynchronousCommit();
	for (size_t i = 0; i < lengthof(PINS); i++)
		SetConfigOption(PINS[i].name, PINS[i].value, PGC_SUSET, PGC_S_OVERRIDE);
}

/* Is this setting one user code never gets? */
static bool
NotForUserCode(const char *name)
{
	for (size_t i = 0; i < lengthof(NOT_FOR_USER_CODE); i++)
		if (pg_strcasecmp(name, NOT_FOR_USER_CODE[i]) == 0)
			return true;
	return pg_strncasecmp(name, "transaction_", 12) == 0;
}

/* The entries of pg_db_role_setting that make a session's defaults for role in this database. */
static void
ReadSources(Oid role, ArrayType **sources)
{
	Relation	rel = table_open(DbRoleSettingRelationId, AccessShareLock);
	TableScanDesc scan = table_beginscan_catalog(rel, 0, NULL);
	HeapTuple	tup;

	memset(sources, 0, sizeof(ArrayType *) * SOURCES);
	while (HeapTupleIsValid(tup = heap_getnext(scan, ForwardScanDirection)))
	{
		Form_pg_db_role_setting form = (Form_pg_db_role_setting) GETSTRUCT(tup);
		bool		isnull;
		Datum		d;
		int			which;

		if (form->setdatabase != InvalidOid && form->setdatabase != MyDatabaseId)
			continue;
		if (form->setrole != InvalidOid && form->setrole != role)
			continue;
		/* ALL, the database, the role, the role in the database */
		which = (OidIsValid(form->setrole) ? 2 : 0) + (OidIsValid(form->setdatabase) ? 1 : 0);
		d = heap_getattr(tup, Anum_pg_db_role_setting_setconfig, RelationGetDescr(rel), &isnull);
		if (!isnull)
			sources[which] = DatumGetArrayTypePCopy(d);
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
}

/* The names and values of a setconfig array (name=value items). */
static List *
ArraySettings(ArrayType *array)
{
	List	   *settings = NIL;
	Datum	   *items;
	bool	   *nulls;
	int			n;

	if (array == NULL)
		return NIL;
	deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT, &items, &nulls, &n);
	for (int i = 0; i < n; i++)
	{
		Setting    *s;

		if (nulls[i])
			continue;
		s = palloc(sizeof(Setting));
		ParseLongOption(TextDatumGetCString(items[i]), &s->name, &s->value);
		if (s->value != NULL)
			settings = lappend(settings, s);
	}
	return settings;
}

/* Add the names of a list of settings to names (no duplicates). */
static List *
AddNames(List *names, List *settings)
{
	ListCell   *lc;

	foreach(lc, settings)
	{
		char	   *name = ((Setting *) lfirst(lc))->name;
		ListCell   *n;
		bool		found = false;

		foreach(n, names)
			found |= pg_strcasecmp(lfirst(n), name) == 0;
		if (!found)
			names = lappend(names, pstrdup(name));
	}
	return names;
}

/* Free a list of settings and their strings. */
static void
FreeSettings(List *settings)
{
	ListCell   *lc;

	foreach(lc, settings)
	{
		Setting    *s = lfirst(lc);

		pfree(s->name);
		pfree(s->value);
	}
	list_free_deep(settings);
}

/*
 * Work out the base values (see base): those the configuration files give
 * (pg_show_all_file_settings, as pg_file_settings shows it), or the built-in
 * default. Superuser only: called by the executor itself, in a transaction.
 */
static void
RefreshBase(List *names)
{
	static SPIPlanPtr plan = NULL;
	MemoryContext old;
	Datum		values[1];

	if (names == NIL)
		return;
	values[0] = PointerGetDatum(strlist_to_textarray(names));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "vq_job: SPI_connect failed");
	/* a kept plan: never parallel (SPI_execute_with_args would plan it so) */
	if (SPI_execute_plan(VqKeepPlan(&plan,
									"SELECT s.name, coalesce(f.setting, s.boot_val) FROM pg_catalog.pg_settings s"
									" LEFT JOIN (SELECT DISTINCT ON (pg_catalog.lower(name)) pg_catalog.lower(name) AS name, setting"
									"  FROM pg_catalog.pg_show_all_file_settings() WHERE applied"
									"  ORDER BY pg_catalog.lower(name), seqno DESC) f ON f.name OPERATOR(pg_catalog.=) s.name"
									" WHERE s.name OPERATOR(pg_catalog.=) ANY ($1)",
									1, (Oid[]) {TEXTARRAYOID}),
						 values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "vq_job: reading the configuration's settings failed");
	old = MemoryContextSwitchTo(TopMemoryContext);
	FreeSettings(base);
	base = NIL;
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		Setting    *s = palloc(sizeof(Setting));
		char	   *value = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);

		s->name = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		s->value = value ? value : pstrdup("");
		base = lappend(base, s);
	}
	MemoryContextSwitchTo(old);
	SPI_finish();
	base_generation++;
}

/*
 * After connecting, in a transaction: note what the connection took from
 * pg_db_role_setting, and work out the base values.
 */
void
VqNoteConnectionSettings(void)
{
	ArrayType  *sources[SOURCES];
	MemoryContext old;
	List	   *names = NIL;

	ReadSources(GetSessionUserId(), sources);
	for (int i = 0; i < SOURCES; i++)
		names = AddNames(names, ArraySettings(sources[i]));
	for (size_t i = 0; i < lengthof(PINS); i++)
		if (PINS[i].for_user_code)
			names = AddNames(names, list_make1(&(Setting) {.name = (char *) PINS[i].name}));
	old = MemoryContextSwitchTo(TopMemoryContext);
	connect_names = NIL;
	for (int i = 0; i < list_length(names); i++)
		connect_names = lappend(connect_names, pstrdup(list_nth(names, i)));
	MemoryContextSwitchTo(old);
	RefreshBase(connect_names);
}

/* After a reload, in a transaction: the configuration's values may have changed. */
void
VqRefreshSettingsBase(void)
{
	RefreshBase(connect_names);
}

/* Try a list of settings at the current GUC nest level; add their names to *names. */
static void
TrySettings(List *settings, List **names)
{
	ListCell   *lc;

	foreach(lc, settings)
	{
		Setting    *s = lfirst(lc);

		if (NotForUserCode(s->name))
			continue;
		/* (one that cannot be set in a running session is left out) */
		if (set_config_option(s->name, s->value, PGC_SUSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, DEBUG1, false) > 0)
			*names = AddNames(*names, list_make1(s));
	}
}

/*
 * Work out what user code of a role gets that differs from the executor's:
 * apply, at a GUC nest level of their own, the base values and the role's
 * pg_db_role_setting entries in PostgreSQL's order, note every value
 * PostgreSQL then shows (normalized), roll them back and keep those that
 * differ. In rs->cxt, reset by the caller.
 */
static void
WorkOut(RoleSettings *rs, ArrayType **sources)
{
	MemoryContext old = MemoryContextSwitchTo(rs->cxt);
	int			level = NewGUCNestLevel();
	List	   *names = NIL;
	List	   *values = NIL;
	ListCell   *n;
	ListCell   *v;

	TrySettings(base, &names);
	for (int i = 0; i < SOURCES; i++)
	{
		rs->sources[i] = sources[i] ? DatumGetArrayTypePCopy(PointerGetDatum(sources[i])) : NULL;
		TrySettings(ArraySettings(sources[i]), &names);
	}
	foreach(n, names)
	{
		const char *value = GetConfigOption(lfirst(n), true, false);

		values = lappend(values, pstrdup(value ? value : ""));
	}
	rs->read_only = DefaultXactReadOnly;
	AtEOXact_GUC(false, level);
	rs->differing = NIL;
	forboth(n, names, v, values)
	{
		const char *now = GetConfigOption(lfirst(n), true, false);
		Setting    *s;

		if (now != NULL && strcmp(now, lfirst(v)) == 0)
			continue;
		s = palloc(sizeof(Setting));
		s->name = lfirst(n);
		s->value = lfirst(v);
		rs->differing = lappend(rs->differing, s);
	}
	rs->base_generation = base_generation;
	MemoryContextSwitchTo(old);
}

/* Are two sets of pg_db_role_setting arrays the same? */
static bool
SameSources(ArrayType **a, ArrayType **b)
{
	for (int i = 0; i < SOURCES; i++)
	{
		if ((a[i] == NULL) != (b[i] == NULL))
			return false;
		if (a[i] != NULL && (VARSIZE(a[i]) != VARSIZE(b[i]) || memcmp(a[i], b[i], VARSIZE(a[i])) != 0))
			return false;
	}
	return true;
}

/*
 * What user code of a role gets: looked at once per transaction (jobs of
 * different roles never share one), worked out again when the role's
 * pg_db_role_setting entries or the base values changed.
 */
static RoleSettings *
SettingsOf(Oid role)
{
	static LocalTransactionId checked_in = InvalidLocalTransactionId;
	static RoleSettings *checked = NULL;
	ArrayType  *sources[SOURCES];
	RoleSettings *rs;
	bool		found;

	if (checked != NULL && checked->role == role && checked_in == MyProc->lxid &&
		checked->base_generation == base_generation)
		return checked;
	if (role_settings == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(RoleSettings);
		role_settings = hash_create("vq_job role settings", 16, &ctl, HASH_ELEM | HASH_BLOBS);
	}
	ReadSources(role, sources);
	rs = hash_search(role_settings, &role, HASH_ENTER, &found);
	if (!found)
	{
		rs->cxt = AllocSetContextCreate(TopMemoryContext, "vq_job role settings", ALLOCSET_SMALL_SIZES);
		rs->base_generation = 0;
	}
	if (rs->base_generation != base_generation || !SameSources(rs->sources, sources))
	{
		MemoryContextReset(rs->cxt);
		WorkOut(rs, sources);
	}
	checked = rs;
	checked_in = MyProc->lxid;
	return rs;
}

/*
 * At user code's GUC nest level, as its role: give it what a session of the
 * role in this database would get (see the header comment).
 */
void
VqApplyUserCodeSettings(Oid role)
{
	RoleSettings *rs = SettingsOf(role);
	ListCell   *lc;

	foreach(lc, rs->differing)
	{
		Setting    *s = lfirst(lc);

		(void) set_config_option(s->name, s->value, PGC_SUSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	}
	/* (a started transaction can become read-only, not the other way round) */
	if (rs->read_only && !XactReadOnly)
		(void) set_config_option("transaction_read_only", "on", PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
}
