/*
 * errcodes.h: the SQLSTATEs vq_job raises (docs/reference.md lists them).
 */
#ifndef VQ_ERRCODES_H
#define VQ_ERRCODES_H

#include "postgres.h"

/*
 * SQLSTATEs. Class VQ0xx: enqueue validation; VQ1xx: configuration (queues,
 * handlers, contract overrides); VQ2xx: an operation refused because of the
 * jobs it would touch (raised by the install script). Persistence errors keep PostgreSQL's own codes
 * (40001, 40P01, 55P03, 08xxx), which clients already treat as retryable.
 */
#define ERRCODE_VQ_INVALID_HANDLER_NAME     MAKE_SQLSTATE('V','Q','0','0','1')
#define ERRCODE_VQ_HANDLER_NOT_REGISTERED   MAKE_SQLSTATE('V','Q','0','0','2')
#define ERRCODE_VQ_INVALID_MAX_ATTEMPTS     MAKE_SQLSTATE('V','Q','0','0','3')
#define ERRCODE_VQ_UNKNOWN_QUEUE            MAKE_SQLSTATE('V','Q','0','0','4')
#define ERRCODE_VQ_CONTEXT_COLLISION        MAKE_SQLSTATE('V','Q','0','0','5')
#define ERRCODE_VQ_INVALID_METADATA         MAKE_SQLSTATE('V','Q','0','0','6')
#define ERRCODE_VQ_INVALID_JOB_ID           MAKE_SQLSTATE('V','Q','0','0','7')
#define ERRCODE_VQ_INVALID_ARGUMENT         MAKE_SQLSTATE('V','Q','0','0','8')
#define ERRCODE_VQ_NOT_IN_JOB               MAKE_SQLSTATE('V','Q','0','0','9')
#define ERRCODE_VQ_NO_SUCH_JOB              MAKE_SQLSTATE('V','Q','0','1','0')
#define ERRCODE_VQ_REPLY_IGNORED            MAKE_SQLSTATE('V','Q','0','1','1')
#define ERRCODE_VQ_TOO_LARGE                MAKE_SQLSTATE('V','Q','0','1','2')
#define ERRCODE_VQ_INVALID_DESTINATION      MAKE_SQLSTATE('V','Q','1','0','5')
#define ERRCODE_VQ_JOB_ID_CONFLICT          MAKE_SQLSTATE('V','Q','2','0','1')

#endif							/* VQ_ERRCODES_H */
