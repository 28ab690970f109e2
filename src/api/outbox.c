/*
 * outbox.c: publishing to the transactional outbox. A published row joins the
 * caller's transaction: it exists only if the business write commits, and the
 * relay (relay.c) delivers it afterwards.
 *
 * For a DELAYED_JOB row the target is resolved now and its effective queue,
 * priority and max_attempts are stored as the snapshot
 * metadata.delivery.delayedJob, which the relay never re-resolves; the durable
 * context bound now is stored as metadata.context; headers are stored
 * untouched and never reach the job. scheduled_at NULL means "at commit"; a
 * past one of a DELAYED_JOB row is kept only for a publisher with a grant on
 * the job's queue (see InsertRow).
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "main/checks.h"
#include "main/errcodes.h"
#include "main/guc.h"
#include "util/spi_util.h"
#include "cache/registry.h"
#include "state/wakeup.h"
#include "run/context.h"
#include "run/roles.h"
#include "api/enqueue.h"

PG_FUNCTION_INFO_V1(vq_outbox_publish);
PG_FUNCTION_INFO_V1(vq_outbox_publish_to);

static SPIPlanPtr insert_plan = NULL;

/*
 * Insert one outbox row as the extension owner; returns its id and wakes the
 * relay at commit. target: the handler of a DELAYED_JOB row (else NULL),
 * whose job will be due at the row's scheduled_at: a past one is stored as
 * the time of this call unless the caller has a grant on its queue
 * (VqDueAt, as for vq_enqueue's run_at), so the row shows when its job will
 * be due and the relay enqueues it with run_at = scheduled_at.
 */
static int64
InsertRow(VqRegistry *registry, const char *type, const char *destination, FunctionCallInfo fcinfo,
		  int payload_arg, int scheduled_arg, int headers_arg, Jsonb *metadata, VqHandler *target)
{
	Datum		values[7];
	char		nulls[7] = {' ', ' ', ' ', ' ', ' ', ' ', ' '};
	VqSavedUser saved;
	bool		isnull;
	int64		id;
	Jsonb	   *headers = NULL;
	TimestampTz scheduled_at = PG_ARGISNULL(scheduled_arg) ? 0 : PG_GETARG_TIMESTAMPTZ(scheduled_arg);

	if (!PG_ARGISNULL(headers_arg))
	{
		headers = PG_GETARG_JSONB_P(headers_arg);
		VqCheckJsonObject(headers, "headers");
	}

	if (!PG_ARGISNULL(scheduled_arg))
	{
		VqCheckFiniteTime(scheduled_at, "scheduled_at");
		if (target != NULL)
			scheduled_at = VqDueAt(target->queue, GetUserId(), scheduled_at, GetCurrentTimestamp());
	}
	if (!PG_ARGISNULL(payload_arg))
		VqCheckSize(PG_GETARG_DATUM(payload_arg), vq_max_payload_bytes, "payload", "vq.max_payload_bytes");
	if (headers != NULL)
		VqCheckSize(JsonbPGetDatum(headers), vq_max_metadata_bytes, "headers", "vq.max_metadata_bytes");
	VqCheckSize(JsonbPGetDatum(metadata), vq_max_metadata_bytes, "metadata", "vq.max_metadata_bytes");

	values[0] = CStringGetTextDatum(type);
	values[1] = CStringGetTextDatum(destination);
	values[2] = PG_ARGISNULL(payload_arg) ? (Datum) 0 : PG_GETARG_DATUM(payload_arg);
	nulls[2] = PG_ARGISNULL(payload_arg) ? 'n' : ' ';
	values[3] = headers ? JsonbPGetDatum(headers) : DirectFunctionCall1(jsonb_in, CStringGetDatum("{}"));
	values[4] = JsonbPGetDatum(metadata);
	values[5] = TimestampTzGetDatum(scheduled_at);
	nulls[5] = PG_ARGISNULL(scheduled_arg) ? 'n' : ' ';
	values[6] = ObjectIdGetDatum(GetUserId());

	VqConnectAsOwner(registry->owner, &saved);
	if (SPI_execute_plan(VqKeepPlan(&insert_plan,
							  "INSERT INTO vq.outbox (destination_type, destination, payload, headers,"
							  " metadata, scheduled_at, published_by)"
							  " VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
							  7, (Oid[]) {TEXTOID, TEXTOID, JSONBOID, JSONBOID, JSONBOID, TIMESTAMPTZOID, REGROLEOID}),
						 values, nulls, false, 1) != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "vq_job: writing the outbox row failed");
	id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	VqFinishAsOwner(&saved);

	/* the relay runs in the executors: wake them at commit (or at the row's time) */
	VqWakeRelayAtCommit(id, !PG_ARGISNULL(scheduled_arg), scheduled_at);
	return id;
}

/* {"context": <bound durable context>}: the metadata of a row for any other destination. */
static Jsonb *
ContextMetadata(void)
{
	Jsonb	   *context = VqMergeBoundContext(NULL);
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"context\": ");
	(void) JsonbToCString(&buf, &context->root, VARSIZE(context));
	appendStringInfoChar(&buf, '}');
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data)));
}

/* The metadata of a DELAYED_JOB row: the delivery snapshot of the target and the bound context. */
static Jsonb *
DelayedJobMetadata(VqRegistry *registry, const char *target, VqHandler **target_handler)
{
	VqHandler  *handler;
	StringInfoData buf;
	Jsonb	   *context = VqMergeBoundContext(NULL);

	if (!vq_valid_name(target, strlen(target)))
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_HANDLER_NAME),
				 errmsg("invalid target \"%s\"", target),
				 errdetail("Targets are handler names and must match ^[a-zA-Z0-9._-]{1,128}$.")));
	handler = VqLookupHandler(registry, target);
	if (handler == NULL)
		VqReportUnregisteredHandler(registry, target);
	/* the job will run as the publishing role */
	VqCheckEnqueuePrivilege(handler, GetUserId());
	*target_handler = handler;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"delivery\": {\"delayedJob\": {\"queue\": ");
	escape_json(&buf, handler->queue_name);
	appendStringInfo(&buf, ", \"priority\": %d, \"maxAttempts\": %d}}, \"context\": ",
					 handler->priority, handler->max_attempts);
	(void) JsonbToCString(&buf, &context->root, VARSIZE(context));
	appendStringInfoChar(&buf, '}');
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data)));
}

/* vq_outbox_publish(target, payload, scheduled_at DEFAULT NULL, headers DEFAULT '{}') RETURNS bigint */
Datum
vq_outbox_publish(PG_FUNCTION_ARGS)
{
	VqRegistry *registry;
	char	   *target;
	VqHandler  *handler;
	Jsonb	   *metadata;

	VqRequireWritable("vq_outbox_publish");
	registry = VqRegistryGet();
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_HANDLER_NAME),
				 errmsg("target must not be null")));
	target = text_to_cstring(PG_GETARG_TEXT_PP(0));
	metadata = DelayedJobMetadata(registry, target, &handler);
	PG_RETURN_INT64(InsertRow(registry, "DELAYED_JOB", target, fcinfo, 1, 2, 3, metadata, handler));
}

/*
 * vq_outbox_publish_to(destination_type, destination, payload, scheduled_at
 * DEFAULT NULL, headers DEFAULT '{}') RETURNS bigint: DELAYED_JOB (as
 * vq_outbox_publish), NOTIFY (destination = channel) or a registered type.
 */
Datum
vq_outbox_publish_to(PG_FUNCTION_ARGS)
{
	VqRegistry *registry;
	char	   *type;
	char	   *destination;
	Jsonb	   *metadata;
	VqHandler  *handler = NULL;

	VqRequireWritable("vq_outbox_publish_to");
	registry = VqRegistryGet();
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_DESTINATION),
				 errmsg("destination_type and destination must not be null")));
	type = text_to_cstring(PG_GETARG_TEXT_PP(0));
	destination = text_to_cstring(PG_GETARG_TEXT_PP(1));

	if (strcmp(type, "DELAYED_JOB") == 0)
		metadata = DelayedJobMetadata(registry, destination, &handler);
	else
	{
		if (strcmp(type, "NOTIFY") == 0)
		{
			if (destination[0] == '\0' || strlen(destination) >= NAMEDATALEN)
				ereport(ERROR,
						(errcode(ERRCODE_VQ_INVALID_DESTINATION),
						 errmsg("NOTIFY channel must be 1 to %d bytes long", NAMEDATALEN - 1)));
		}
		else if (VqLookupDestination(registry, type) == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_VQ_INVALID_DESTINATION),
					 errmsg("unknown destination type \"%s\"", type),
					 errhint("Use DELAYED_JOB, NOTIFY, or a type registered with vq_register_destination().")));
		metadata = ContextMetadata();
	}
	PG_RETURN_INT64(InsertRow(registry, type, destination, fcinfo, 2, 3, 4, metadata, handler));
}
