/* SPDX-License-Identifier: MIT */
/*
 * The log: one function, one line per event, one write(2) per line so that
 * lines from the network and store threads never interleave.
 */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static atomic_int g_level = LOG_INFO;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_fd = -1; /* -1 = stderr */
static char *g_path;

static const char *level_text[] = {"ERROR", "WARN", "INFO", "DEBUG", "NOTICE"};
/* syslog priorities for journald, by level */
static const int level_prio[] = {3, 4, 6, 7, 5};
static pthread_once_t g_journal_once = PTHREAD_ONCE_INIT;
static int g_journal; /* stderr is the journal */

/* JOURNAL_STREAM is "DEV:INO" of the stream systemd connected to stdout
 * and stderr; a stderr redirected since (a shell, a test) does not match. */
static void journal_detect(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;
	char end;

	if (!js || sscanf(js, "%llu:%llu%c", &dev, &ino, &end) != 2)
		return;
	if (fstat(STDERR_FILENO, &st) != 0)
		return;
	g_journal = (unsigned long long)st.st_dev == dev &&
		    (unsigned long long)st.st_ino == ino;
}

int log_journal(void)
{
	pthread_once(&g_journal_once, journal_detect);
	return g_journal;
}

void log_set_level(int level)
{
	if (level < LOG_ERROR)
		level = LOG_ERROR;
	if (level > LOG_DEBUG)
		level = LOG_DEBUG;
	atomic_store(&g_level, level);
}

int log_get_level(void)
{
	return atomic_load(&g_level);
}

static int open_append(const char *path)
{
	return open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
}

int log_open(const char *path)
{
	int fd = -1;
	char *copy = NULL;

	if (path) {
		fd = open_append(path);
		if (fd < 0)
			return SEMQ_ERR_IO;
		copy = strdup(path);
		if (!copy) {
			close(fd);
			return SEMQ_ERR_NOMEM;
		}
	}
	pthread_mutex_lock(&g_mu);
	if (g_fd >= 0)
		close(g_fd);
	free(g_path);
	g_fd = fd;
	g_path = copy;
	pthread_mutex_unlock(&g_mu);
	return SEMQ_OK;
}

int log_reopen(void)
{
	int r = SEMQ_OK;

	pthread_mutex_lock(&g_mu);
	if (g_path) {
		int fd = open_append(g_path);
		if (fd < 0) {
			r = SEMQ_ERR_IO;
		} else {
			close(g_fd);
			g_fd = fd;
		}
	}
	pthread_mutex_unlock(&g_mu);
	return r;
}

void log_vmsg(int level, const char *subsys, const char *peer,
	      const struct msgid *id, const char *fmt, va_list ap)
{
	char line[2048];
	struct timespec ts;
	struct tm tm;
	size_t n;
	int k, saved = errno;

	if (level < LOG_ERROR || level > LOG_NOTICE)
		level = LOG_ERROR;
	if ((level == LOG_NOTICE ? LOG_INFO : level) > atomic_load(&g_level))
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = 0;
	pthread_mutex_lock(&g_mu);
	if (g_fd < 0 && log_journal())
		n = (size_t)snprintf(line, sizeof line, "<%d>",
				     level_prio[level]);
	pthread_mutex_unlock(&g_mu);
	n += strftime(line + n, sizeof line - n, "%Y-%m-%dT%H:%M:%S", &tm);
	k = snprintf(line + n, sizeof line - n, ".%03ldZ %-5s %-6s ",
		     ts.tv_nsec / 1000000, level_text[level],
		     subsys ? subsys : "-");
	n += k > 0 ? (size_t)k : 0;
	if (peer && n < sizeof line) {
		k = snprintf(line + n, sizeof line - n, "peer=%s ", peer);
		n += k > 0 ? (size_t)k : 0;
	}
	if (id && n < sizeof line) {
		k = snprintf(line + n, sizeof line - n, "msg=%s/%s/%llu ",
			     id->origin, id->dest, (unsigned long long)id->seq);
		n += k > 0 ? (size_t)k : 0;
	}
	if (n < sizeof line) {
		k = vsnprintf(line + n, sizeof line - n, fmt, ap);
		n += k > 0 ? (size_t)k : 0;
	}
	if (n >= sizeof line - 1)
		n = sizeof line - 2; /* truncated: still one line */
	line[n++] = '\n';

	pthread_mutex_lock(&g_mu);
	if (write(g_fd >= 0 ? g_fd : STDERR_FILENO, line, n) < 0) {
		/* nowhere left to report it */
	}
	pthread_mutex_unlock(&g_mu);
	errno = saved;
}

void log_msg(int level, const char *subsys, const char *peer,
	     const struct msgid *id, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vmsg(level, subsys, peer, id, fmt, ap);
	va_end(ap);
}
