/*
 * session.c: a job's session ends with the job.
 *
 * A handler runs in the executor's process, in a session that is the
 * enqueuing role's while it runs (roles.c: session_user, current_user and
 * is_superuser are that role's; settings live at a GUC nest level that ends
 * with it). What PostgreSQL keeps per session beyond a transaction is removed
 * here after every job, whether the handler returned or raised: prepared
 * statements, cursors (WITH HOLD ones included), temporary objects, session
 * advisory locks, and, when the next job belongs to
 * another role, the sequence values lastval() / currval() would show.
 *
 * Connections to other servers that contrib modules keep for the session go
 * too: dblink's named and unnamed connections after every job, and
 * postgres_fdw's cached connections when the transaction that ran the job
 * ends (they take part in it until then: its remote transaction commits with
 * it). Those modules are looked for only among the libraries this process
 * has loaded (an executor whose handlers never used them never loads them),
 * and their C functions are called by library and symbol, never by a name a
 * tenant could shadow on the search_path.
 *
 * Transaction-scoped state needs no cleanup because jobs of different roles
 * never share a transaction (executor.c). One exception: SET CONSTRAINTS
 * changes the constraint modes for the rest of the transaction, so after a
 * handler that ran it the executor ends the transaction before the next job.
 */
#include "postgres.h"

#include <dlfcn.h>
#ifdef __GLIBC__
#include <link.h>
#endif

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "commands/prepare.h"
#include "commands/sequence.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "storage/lock.h"
#include "utils/array.h"
#include "utils/elog.h"
#include "utils/memutils.h"
#include "utils/portal.h"

#include "run/session.h"

/* The role whose code ran since the last cleanup (InvalidOid: none). */
static Oid	user_code_role = InvalidOid;
/* The role whose code ran last: lastval() must not cross to another role. */
static Oid	last_role = InvalidOid;
/* The user code ran SET CONSTRAINTS. */
static bool constraints_set = false;

/* The functions of contrib modules that close what they keep, once this process loaded them. */
static PGFunction dblink_get_connections_fn = NULL;
static PGFunction dblink_disconnect_fn = NULL;
static PGFunction fdw_disconnect_all_fn = NULL;
/* Libraries loaded when we last looked (-1: never looked). */
static long long libraries_seen = -1;
/* User code ran in the transaction now open: close postgres_fdw's connections at its end. */
static bool fdw_close_at_end = false;
static bool xact_callback_registered = false;

#ifdef __GLIBC__
/* dl_iterate_phdr callback: the first object tells how many objects were ever loaded. */
static int
ObjectsLoaded(struct dl_phdr_info *info, size_t size, void *arg)
{
	*(long long *) arg = (long long) info->dlpi_adds;
	return 1;
}
#endif

/* How many shared objects this process loaded so far (or a new number each call, where unknown). */
static long long
LibrariesLoaded(void)
{
	static long long calls = 0;
	long long	n = ++calls;

#ifdef __GLIBC__
	(void) dl_iterate_phdr(ObjectsLoaded, &n);
#endif
	return n;
}

/* A function of a library in $libdir if this process has loaded it (never loads it). */
static PGFunction
LoadedFunction(const char *library, const char *symbol)
{
	char		path[MAXPGPATH];
	void	   *handle;

	snprintf(path, sizeof(path), "%s/%s%s", pkglib_path, library, DLSUFFIX);
#ifdef RTLD_NOLOAD
	handle = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
#else
	handle = NULL;
#endif
	/* (the reference is kept: PostgreSQL never unloads a library) */
	return handle != NULL ? (PGFunction) dlsym(handle, symbol) : NULL;
}

/* Look for dblink and postgres_fdw, when a library was loaded since the last look. */
static void
LookForLibraries(void)
{
	long long	loaded = LibrariesLoaded();

	if (loaded == libraries_seen)
		return;
	libraries_seen = loaded;
	if (dblink_disconnect_fn == NULL)
	{
		dblink_get_connections_fn = LoadedFunction("dblink", "dblink_get_connections");
		dblink_disconnect_fn = dblink_get_connections_fn ? LoadedFunction("dblink", "dblink_disconnect") : NULL;
	}
	if (fdw_disconnect_all_fn == NULL)
		fdw_disconnect_all_fn = LoadedFunction("postgres_fdw", "postgres_fdw_disconnect_all");
}

/* Call a function of a contrib module directly (no catalog, no search_path); NULL result: isnull. */
static Datum
CallLoaded(PGFunction fn, int nargs, Datum arg, bool *isnull)
{
	LOCAL_FCINFO(fcinfo, 1);
	Datum		result;

	InitFunctionCallInfoData(*fcinfo, NULL, nargs, InvalidOid, NULL, NULL);
	fcinfo->args[0].value = arg;
	fcinfo->args[0].isnull = false;
	result = fn(fcinfo);		/* (no FmgrInfo: these functions use none) */
	*isnull = fcinfo->isnull;
	return result;
}

/*
 * Close dblink's unnamed connection, if open: dblink tells only by failing
 * with "connection not available", which is caught here (that error alone;
 * anything else, a cancel included, goes on).
 */
static void
CloseUnnamedDblink(void)
{
	MemoryContext context = CurrentMemoryContext;
	uint32		holdoff = InterruptHoldoffCount;
	bool		isnull;

	PG_TRY();
	{
		(void) CallLoaded(dblink_disconnect_fn, 0, (Datum) 0, &isnull);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(context);
		edata = CopyErrorData();
		if (edata->sqlerrcode != ERRCODE_CONNECTION_DOES_NOT_EXIST)
			PG_RE_THROW();
		FlushErrorState();
		FreeErrorData(edata);
		InterruptHoldoffCount = holdoff;	/* (an ERROR resets it) */
	}
	PG_END_TRY();
}

/* Close every dblink connection, named or not. */
static void
CloseDblinkConnections(void)
{
	bool		isnull;
	Datum		names = CallLoaded(dblink_get_connections_fn, 0, (Datum) 0, &isnull);

	if (!isnull)
	{
		Datum	   *items;
		int			n;

		deconstruct_array(DatumGetArrayTypeP(names), TEXTOID, -1, false, TYPALIGN_INT, &items, NULL, &n);
		for (int i = 0; i < n; i++)
			(void) CallLoaded(dblink_disconnect_fn, 1, items[i], &isnull);
	}
	CloseUnnamedDblink();
}

/*
 * End of a transaction in which user code ran: close postgres_fdw's cached
 * connections (its own callback, registered when it first connected, thus
 * after this one and called before it, has ended their remote transactions).
 */
static void
SessionXactCallback(XactEvent event, void *arg)
{
	if (event != XACT_EVENT_COMMIT && event != XACT_EVENT_ABORT)
		return;
	if (fdw_close_at_end && fdw_disconnect_all_fn != NULL)
	{
		bool		isnull;

		(void) CallLoaded(fdw_disconnect_all_fn, 0, (Datum) 0, &isnull);
	}
	fdw_close_at_end = false;
}

/* User code of this role starts: what the previous role's left that lasts a session goes. */
void
VqSessionUserCodeBegins(Oid role)
{
	if (role != last_role)
		ResetSequenceCaches();
	user_code_role = role;
	last_role = role;
	if (!xact_callback_registered)
	{
		RegisterXactCallback(SessionXactCallback, NULL);
		xact_callback_registered = true;
	}
}

/* The utility hook saw a statement of user code: note what must be undone after the job. */
void
VqSessionNoteStatement(Node *stmt)
{
	if (OidIsValid(user_code_role) && IsA(stmt, ConstraintsSetStmt))
		constraints_set = true;
}

/* After a job: drop what its code left in the session (true: end the open transaction first). */
bool
VqSessionCleanUp(void)
{
	Oid			temp_namespace;
	Oid			temp_toast_namespace;
	bool		end_transaction = constraints_set;

	if (!OidIsValid(user_code_role))
		return false;

	DropAllPreparedStatements();
	/* cursors: none of the executor's own is open between jobs */
	PortalHashTableDeleteAll();
	LockReleaseSession(USER_LOCKMETHOD);
	/* (PostgreSQL refuses LISTEN in a background process; should that change, this undoes it) */
	Async_UnlistenAll();
	GetTempNamespaceState(&temp_namespace, &temp_toast_namespace);
	if (OidIsValid(temp_namespace))
		ResetTempTableNamespace();
	LookForLibraries();
	if (dblink_disconnect_fn != NULL)
		CloseDblinkConnections();
	fdw_close_at_end |= fdw_disconnect_all_fn != NULL;
	user_code_role = InvalidOid;
	constraints_set = false;
	return end_transaction;
}
