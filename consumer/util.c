/*
 * util.c: logging, memory, growable buffers, text escaping and the clock.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

bool		log_verbose = false;

/*
 * Control characters (a newline in a server message, an escape sequence in a
 * notification) are written as \xNN, so that nothing logged can forge lines
 * or drive the terminal.
 */
static void
vlogmsg(const char *fmt, va_list ap)
{
	char		buf[2048];

	vsnprintf(buf, sizeof(buf), fmt, ap);
	fputs("vq_consumer: ", stderr);
	for (const unsigned char *c = (const unsigned char *) buf; *c; c++)
	{
		if (*c < 0x20 || *c == 0x7f)
			fprintf(stderr, "\\x%02x", *c);
		else
			fputc(*c, stderr);
	}
	fputc('\n', stderr);
}

void
logmsg(const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vlogmsg(fmt, ap);
	va_end(ap);
}

void
verbose(const char *fmt,...)
{
	va_list		ap;

	if (!log_verbose)
		return;
	va_start(ap, fmt);
	vlogmsg(fmt, ap);
	va_end(ap);
}

void *
xmalloc(size_t n)
{
	return xrealloc(NULL, n);
}

void *
xrealloc(void *p, size_t n)
{
	void	   *q = realloc(p, n ? n : 1);

	if (q == NULL)
	{
		logmsg("out of memory");
		exit(1);
	}
	return q;
}

char *
xstrdup(const char *s)
{
	return xstrndup(s, strlen(s));
}

char *
xstrndup(const char *s, size_t n)
{
	char	   *p = xmalloc(n + 1);

	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

char *
xasprintf(const char *fmt,...)
{
	va_list		ap;
	int			n;
	char	   *p;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	p = xmalloc((size_t) n + 1);
	va_start(ap, fmt);
	vsnprintf(p, (size_t) n + 1, fmt, ap);
	va_end(ap);
	return p;
}

void
sb_reserve(StrBuf *sb, size_t more)
{
	size_t		cap = sb->cap ? sb->cap : 256;

	if (sb->len + more + 1 <= sb->cap)
		return;
	while (cap < sb->len + more + 1)
		cap *= 2;
	sb->data = xrealloc(sb->data, cap);
	sb->cap = cap;
}

void
sb_append(StrBuf *sb, const char *data, size_t n)
{
	sb_reserve(sb, n);
	memcpy(sb->data + sb->len, data, n);
	sb->len += n;
	sb->data[sb->len] = '\0';
}

void
sb_append_str(StrBuf *sb, const char *s)
{
	sb_append(sb, s, strlen(s));
}

void
sb_printf(StrBuf *sb, const char *fmt,...)
{
	va_list		ap;
	int			n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	sb_reserve(sb, (size_t) n);
	va_start(ap, fmt);
	vsnprintf(sb->data + sb->len, (size_t) n + 1, fmt, ap);
	va_end(ap);
	sb->len += (size_t) n;
}

void
sb_consume(StrBuf *sb, size_t n)
{
	if (n >= sb->len)
		sb->len = 0;
	else
	{
		memmove(sb->data, sb->data + n, sb->len - n);
		sb->len -= n;
	}
	if (sb->data)
		sb->data[sb->len] = '\0';
}

void
sb_free(StrBuf *sb)
{
	free(sb->data);
	sb->data = NULL;
	sb->len = sb->cap = 0;
}

void
sb_append_json_string(StrBuf *sb, const char *s)
{
	const char *run = s;

	sb_append(sb, "\"", 1);
	for (; *s != '\0'; s++)
	{
		unsigned char c = (unsigned char) *s;
		const char *esc = NULL;
		char		hex[8];

		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		sb_append(sb, run, (size_t) (s - run));
		run = s + 1;
		esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\b' ? "\\b" : c == '\f' ? "\\f" :
			c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" : NULL;
		if (esc == NULL)
		{
			snprintf(hex, sizeof(hex), "\\u%04x", c);
			esc = hex;
		}
		sb_append_str(sb, esc);
	}
	sb_append(sb, run, (size_t) (s - run));
	sb_append(sb, "\"", 1);
}

void
sb_append_array_text(StrBuf *sb, const char *s)
{
	sb_append(sb, "\"", 1);
	for (; *s != '\0'; s++)
	{
		if (*s == '"' || *s == '\\')
			sb_append(sb, "\\", 1);
		sb_append(sb, s, 1);
	}
	sb_append(sb, "\"", 1);
}

/* The length of the valid UTF-8 sequence at src[i..n), or 0. */
static size_t
utf8_sequence(const unsigned char *src, size_t i, size_t n)
{
	unsigned char c = src[i];
	size_t		len = 0;
	unsigned char lo = 0x80,
				hi = 0xBF;

	if (c >= 0x01 && c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		len = 2;
	else if (c >= 0xE0 && c <= 0xEF)
	{
		len = 3;
		lo = c == 0xE0 ? 0xA0 : lo;
		hi = c == 0xED ? 0x9F : hi;
	}
	else if (c >= 0xF0 && c <= 0xF4)
	{
		len = 4;
		lo = c == 0xF0 ? 0x90 : lo;
		hi = c == 0xF4 ? 0x8F : hi;
	}
	if (len == 0 || i + len > n || src[i + 1] < lo || src[i + 1] > hi)
		return 0;
	for (size_t k = 2; k < len; k++)
		if ((src[i + k] & 0xC0) != 0x80)
			return 0;
	return len;
}

char *
utf8_sanitize(char *dst, const unsigned char *src, size_t n)
{
	size_t		i = 0;

	while (i < n && (src[i] & 0xC0) == 0x80)
		i++;
	while (i < n)
	{
		size_t		len = utf8_sequence(src, i, n);

		if (len == 0)
		{
			*dst++ = '?';
			i++;
			continue;
		}
		memcpy(dst, src + i, len);
		dst += len;
		i += len;
	}
	*dst = '\0';
	return dst;
}

double
now_sec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}
