/*
 * backoff.c: the backoff table (delay before a retry) and its SQL face vq_backoff_delay().
 *
 *   FIXED        base
 *   LINEAR       min(base * (n + 1), max)
 *   EXPONENTIAL  min(base * 2^n, max)
 * with n the zero-based attempt number.
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "util/backoff.h"

PG_FUNCTION_INFO_V1(vq_backoff_delay);

/* Parse a strategy name, case-insensitively; false when unknown. */
bool
VqParseBackoffStrategy(const char *name, VqBackoffStrategy *strategy)
{
	if (pg_strcasecmp(name, "FIXED") == 0)
		*strategy = VQ_BACKOFF_FIXED;
	else if (pg_strcasecmp(name, "LINEAR") == 0)
		*strategy = VQ_BACKOFF_LINEAR;
	else if (pg_strcasecmp(name, "EXPONENTIAL") == 0)
		*strategy = VQ_BACKOFF_EXPONENTIAL;
	else
		return false;
	return true;
}

/* Delay in ms before zero-based attempt n; never overflows. */
int64
VqBackoffDelayMs(VqBackoffStrategy strategy, int64 base_ms, int64 max_ms, int attempt)
{
	switch (strategy)
	{
		case VQ_BACKOFF_FIXED:
			return base_ms;
		case VQ_BACKOFF_LINEAR:
			/* base and attempt are int32, so the product fits in int64 */
			return Min(base_ms * ((int64) attempt + 1), max_ms);
		case VQ_BACKOFF_EXPONENTIAL:
			if (attempt >= 62 || base_ms > (max_ms >> attempt))
				return max_ms;
			return Min(base_ms << attempt, max_ms);
	}
	return base_ms;				/* not reached */
}

/* vq_backoff_delay(strategy, base_ms, max_ms, attempt) returns the delay as an interval. */
Datum
vq_backoff_delay(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	int32		base_ms = PG_GETARG_INT32(1);
	int32		max_ms = PG_GETARG_INT32(2);
	int32		attempt = PG_GETARG_INT32(3);
	VqBackoffStrategy strategy;
	Interval   *result;

	if (!VqParseBackoffStrategy(name, &strategy))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown backoff strategy \"%s\"", name),
				 errhint("Use FIXED, LINEAR or EXPONENTIAL.")));
	if (base_ms <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("base_ms must be a positive integer, got %d", base_ms)));
	if (max_ms <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_ms must be a positive integer, got %d", max_ms)));
	if (attempt < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("attempt must be zero or more (attempts are zero-based), got %d", attempt)));

	result = (Interval *) palloc0(sizeof(Interval));
	result->time = VqBackoffDelayMs(strategy, base_ms, max_ms, attempt) * INT64CONST(1000);
	PG_RETURN_INTERVAL_P(result);
}
