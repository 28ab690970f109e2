/*
 * util.h: logging, memory, growable buffers, text escaping and the clock,
 * shared by every part of vq_consumer.  Calls nothing else of the program.
 */
#ifndef VQC_UTIL_H
#define VQC_UTIL_H

#include <stdbool.h>
#include <stddef.h>

#define VQC_PRINTF(a, b) __attribute__((format(printf, a, b)))

/* --verbose: verbose() writes too */
extern bool log_verbose;

/* One line on stderr, "vq_consumer: " first, control characters as \xNN. */
void		logmsg(const char *fmt,...) VQC_PRINTF(1, 2);
/* The same, only with --verbose. */
void		verbose(const char *fmt,...) VQC_PRINTF(1, 2);

void	   *xmalloc(size_t n);
void	   *xrealloc(void *p, size_t n);
char	   *xstrdup(const char *s);
char	   *xstrndup(const char *s, size_t n);
char	   *xasprintf(const char *fmt,...) VQC_PRINTF(1, 2);

/* A growable byte buffer, always NUL-terminated (the data may hold NULs too). */
typedef struct
{
	char	   *data;
	size_t		len;
	size_t		cap;
} StrBuf;

void		sb_reserve(StrBuf *sb, size_t more);
void		sb_append(StrBuf *sb, const char *data, size_t n);
void		sb_append_str(StrBuf *sb, const char *s);
void		sb_printf(StrBuf *sb, const char *fmt,...) VQC_PRINTF(2, 3);
/* Drop the first n bytes. */
void		sb_consume(StrBuf *sb, size_t n);
void		sb_free(StrBuf *sb);

/* `s` as a JSON string, escaped as PostgreSQL's to_json escapes it. */
void		sb_append_json_string(StrBuf *sb, const char *s);
/* `s` as a double-quoted element of a PostgreSQL array literal. */
void		sb_append_array_text(StrBuf *sb, const char *s);

/*
 * src[0..n) as valid UTF-8 without NUL bytes into dst (n + 1 bytes): invalid
 * bytes become '?', continuation bytes at the very start are dropped.
 * Returns the new end of dst.
 */
char	   *utf8_sanitize(char *dst, const unsigned char *src, size_t n);

/* Seconds on the monotonic clock. */
double		now_sec(void);

#endif
