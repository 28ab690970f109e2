/*
 * checks.h: the checks every SQL entry point shares (names, sizes, finite
 * times, a writable transaction) and the cut of stored error texts.
 */
#ifndef VQ_CHECKS_H
#define VQ_CHECKS_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "utils/jsonb.h"

/* True when name matches ^[a-zA-Z0-9._-]{1,128}$. */
extern bool vq_valid_name(const char *name, int len);

/* Error (VQ012) when a jsonb argument is larger than limit bytes (what names it). */
extern void VqCheckSize(Datum jsonb, int limit, const char *what, const char *setting);

/* Error (VQ006) unless value is NULL or a JSON object (what names it: metadata, headers). */
extern void VqCheckJsonObject(Jsonb *value, const char *what);

/* Error (VQ008) unless t is a finite timestamp (what names the argument). */
extern void VqCheckFiniteTime(TimestampTz t, const char *what);

/* t + span; error (VQ008, naming what) when that may leave the timestamp range. */
extern TimestampTz VqAddInterval(TimestampTz t, const Interval *span, const char *what);

/* An error text as stored (last_error, transitions, logs): within vq.log_max_line_bytes. */
extern char *VqCapText(const char *text);

/* text within limit bytes: cut at a character boundary and marked when it is longer. */
extern char *VqCapTextTo(const char *text, int limit);

/* Error (25006, in vq's words) when the current transaction cannot write (what: the function). */
extern void VqRequireWritable(const char *what);

/* The version of vq_job installed in this database (NULL: not installed). */
extern char *VqInstalledVersion(void);

/* Error (55000) unless the installed version is the library's: a database not updated yet. */
extern void VqRequireInstalledVersion(const char *what);

#endif							/* VQ_CHECKS_H */
