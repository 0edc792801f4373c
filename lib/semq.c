/* SPDX-License-Identifier: MIT */
/*
 * libsemq: enqueue a message inside the caller's own transaction on the node
 * database, and wake the daemon. See include/semq/semq.h.
 *
 * semq_enqueue() is one prepared INSERT into tb_0031, so this library and a
 * bare INSERT from any other language do exactly the same thing: the row is
 * written once, and the node numbers it (origin, seq, prev_seq) in its next
 * batch after the commit (migration 0007).
 */
#include <semq/semq.h>

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define KEY_MAX 255

const char *semq_strerror(int code)
{
	switch (code) {
	case SEMQ_OK: return "ok";
	case SEMQ_AGAIN: return "try again";
	case SEMQ_DECLINED: return "declined";
	case SEMQ_DUPLICATE: return "duplicate";
	case SEMQ_ERR_INVALID: return "invalid argument";
	case SEMQ_ERR_NOMEM: return "out of memory";
	case SEMQ_ERR_IO: return "I/O error";
	case SEMQ_ERR_DB: return "database error";
	case SEMQ_ERR_PROTO: return "protocol error";
	case SEMQ_ERR_TOO_BIG: return "too big";
	case SEMQ_ERR_VERSION: return "version mismatch";
	case SEMQ_ERR_NOT_FOUND: return "not found";
	case SEMQ_ERR_CONFIG: return "configuration error";
	case SEMQ_ERR_PLUGIN: return "plugin error";
	case SEMQ_ERR_INTERNAL: return "internal error";
	}
	return "unknown error";
}

int semq_id_valid(const char *id)
{
	size_t n = 0;

	if (!id)
		return 0;
	for (; id[n]; n++) {
		unsigned char c = (unsigned char)id[n];
		if (n >= SEMQ_ID_MAX)
			return 0;
		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '_' ||
		      c == '-'))
			return 0;
	}
	return n > 0;
}

static int fail(char *err, size_t errsz, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int fail(char *err, size_t errsz, int code, const char *fmt, ...)
{
	va_list ap;

	if (err && errsz) {
		va_start(ap, fmt);
		vsnprintf(err, errsz, fmt, ap);
		va_end(ap);
	}
	return code;
}

int semq_enqueue(sqlite3 *db, const struct semq_msg *m, int64_t *id_out,
		 char *err, size_t errsz)
{
	static const char sql[] =
		"INSERT INTO tb_0031(dest, type, msg_key, payload, deliver_at)"
		" VALUES (?1, ?2, ?3, ?4, ?5)";
	sqlite3_stmt *st = NULL;
	int r = SEMQ_ERR_INTERNAL, rc;
	size_t i;

	if (!db || !m)
		return fail(err, errsz, SEMQ_ERR_INVALID, "%s",
			    "semq_enqueue: db and message are required");
	if (!semq_id_valid(m->dest))
		return fail(err, errsz, SEMQ_ERR_INVALID,
			    "dest '%s': not a node id (1-64 of A-Za-z0-9._-)",
			    m->dest ? m->dest : "(null)");
	if (m->key && strlen(m->key) > KEY_MAX)
		return fail(err, errsz, SEMQ_ERR_INVALID, "%s",
			    "key: longer than 255 bytes");
	if (!m->payload && m->payload_len)
		return fail(err, errsz, SEMQ_ERR_INVALID, "%s",
			    "payload: NULL with a non-zero length");
	if (m->payload_len > INT_MAX)
		return fail(err, errsz, SEMQ_ERR_TOO_BIG, "%s",
			    "payload: larger than max_payload");
	if (m->deliver_at < 0)
		return fail(err, errsz, SEMQ_ERR_INVALID, "%s",
			    "deliver_at: negative");
	for (i = 0; i < sizeof m->reserved / sizeof m->reserved[0]; i++)
		if (m->reserved[i])
			return fail(err, errsz, SEMQ_ERR_INVALID, "%s",
				    "reserved fields must be zero");

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
		r = fail(err, errsz, SEMQ_ERR_DB,
			 "not a SEMQ node database? %s", sqlite3_errmsg(db));
		goto out;
	}
	sqlite3_bind_text(st, 1, m->dest, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, m->type);
	if (m->key && m->key[0])
		sqlite3_bind_text(st, 3, m->key, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(st, 3);
	sqlite3_bind_blob(st, 4, m->payload ? m->payload : "",
			  (int)m->payload_len, SQLITE_STATIC);
	sqlite3_bind_int64(st, 5, m->deliver_at);
	rc = sqlite3_step(st);
	if (rc != SQLITE_DONE) {
		const char *msg = sqlite3_errmsg(db);
		int code = SEMQ_ERR_DB;
		if (strstr(msg, "larger than max_payload"))
			code = SEMQ_ERR_TOO_BIG;
		else if ((rc & 0xff) == SQLITE_CONSTRAINT)
			code = SEMQ_ERR_INVALID;
		r = fail(err, errsz, code, "%s", msg);
		goto out;
	}
	sqlite3_finalize(st);
	st = NULL;

	if (id_out)
		*id_out = sqlite3_last_insert_rowid(db);
	r = SEMQ_OK;
out:
	sqlite3_finalize(st);
	return r;
}

int semq_wake_name(const char *db_path, char *out, size_t outsz,
		   size_t *len_out)
{
	char canon[PATH_MAX];
	uint64_t h = 1469598103934665603ULL; /* FNV-1a 64 */
	const unsigned char *p;
	int n;

	if (!db_path || !out || outsz < 32)
		return SEMQ_ERR_INVALID;
	if (!realpath(db_path, canon)) {
		/* Not created yet: the canonical directory plus the name is
		 * what realpath() will say once the file exists. */
		char dir[PATH_MAX], dcanon[PATH_MAX];
		const char *base = strrchr(db_path, '/');
		size_t dlen = base ? (size_t)(base - db_path) : 0;

		if (errno != ENOENT || dlen >= sizeof dir)
			return SEMQ_ERR_IO;
		memcpy(dir, db_path, dlen);
		dir[dlen] = '\0';
		base = base ? base + 1 : db_path;
		if (!*base ||
		    !realpath(dlen ? dir : (base == db_path ? "." : "/"),
			      dcanon) ||
		    (size_t)snprintf(canon, sizeof canon, "%s/%s",
				     strcmp(dcanon, "/") ? dcanon : "",
				     base) >= sizeof canon)
			return SEMQ_ERR_IO;
	}
	for (p = (const unsigned char *)canon; *p; p++) {
		h ^= *p;
		h *= 1099511628211ULL;
	}
	out[0] = '\0';
	n = snprintf(out + 1, outsz - 1, "semq-wake-%016llx",
		     (unsigned long long)h);
	if (len_out)
		*len_out = 1 + (size_t)n;
	return SEMQ_OK;
}

int semq_notify(const char *db_path)
{
	struct sockaddr_un sa;
	char name[64];
	size_t len;
	int fd, r;

	r = semq_wake_name(db_path, name, sizeof name, &len);
	if (r != SEMQ_OK)
		return r;
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, name, len);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return SEMQ_ERR_IO;
	if (sendto(fd, "w", 1, 0, (struct sockaddr *)&sa,
		   (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len)) ==
	    1)
		r = SEMQ_OK;
	else if (errno == EAGAIN || errno == EWOULDBLOCK)
		r = SEMQ_OK; /* wakes already queued: the daemon will look */
	else
		r = SEMQ_DECLINED; /* nobody listening */
	close(fd);
	return r;
}

int semq_notify_db(sqlite3 *db)
{
	const char *f = db ? sqlite3_db_filename(db, "main") : NULL;

	if (!f || !*f)
		return SEMQ_DECLINED;
	return semq_notify(f);
}
