/* SPDX-License-Identifier: MIT */
/*
 * The SEMQ plugin ABI: how a shared object applies messages that arrive.
 *
 * A plugin is a shared object named in a `[plugin NAME]` section of node.ini
 * with `path =` and `types =` (`*` or a comma list of type numbers). Every
 * other key of that section is an option handed to the plugin, which decides
 * what it accepts. The host loads it with dlopen(RTLD_NOW | RTLD_LOCAL) and
 * looks up these symbols by name:
 *
 *   int  semq_plugin_abi_version(void);                       required
 *   int  semq_plugin_init(const struct semq_plugin_init_args *a,
 *                         void **handle_out, char *err, size_t errsz);
 *                                                             required
 *   int  semq_plugin_handle(void *handle,
 *                           const struct semq_plugin_msg *m,
 *                           const struct semq_plugin_tx *tx,
 *                           char *err, size_t errsz);         required
 *   void semq_plugin_fini(void *handle);                      optional
 *
 * semq_plugin_abi_version() must return SEMQ_PLUGIN_ABI_VERSION as compiled
 * into the plugin; the host refuses a plugin built for another ABI. Later
 * versions only append fields in place of the `reserved` ones, so a struct's
 * size and the offsets of existing fields never change within one major ABI.
 *
 * Threading: init is called once per store worker (see `[node] workers`),
 * each time making a handle of its own, and fini once per handle. Each handle
 * is only ever called from one thread, one call at a time; calls on different
 * handles run in parallel. Keep mutable state in the handle: a global that
 * the calls change needs an atomic or a lock.
 *
 * Transactions: semq_plugin_handle() runs inside the transaction that records
 * the message as received, within a SAVEPOINT of its own: write your business
 * rows through `tx->db` and do NOT begin, commit or roll back yourself. Return
 *
 *   SEMQ_PLUGIN_OK         the effect is written; it commits with the receipt;
 *   SEMQ_PLUGIN_RETRY      transient failure: your writes are rolled back and
 *                          the message is retried later from the redo queue;
 *   SEMQ_PLUGIN_PERMANENT  the document is bad: your writes are rolled back
 *                          and the message is dead at once, for an operator.
 *
 * On RETRY or PERMANENT write one line into `err` saying what is wrong; the
 * operator sees it in `semqctl redo show`. Any other return value counts as
 * PERMANENT. A plugin must not keep pointers from `m` or `tx` after returning.
 *
 * Two database kinds: `tx->db_kind` says which one `tx->db` is. On a SQLite
 * node it is the `sqlite3 *`; on a PostgreSQL node (node.ini `db =
 * postgresql://...`) it is the libpq `PGconn *` with the transaction open
 * (READ COMMITTED), and several semqd instances may share that database.
 * Switch on db_kind in init and in handle, and refuse a kind you do not know.
 * On PostgreSQL:
 *  - a failed statement aborts the transaction until the host's ROLLBACK TO
 *    the savepoint: after an error return RETRY or PERMANENT at once;
 *  - statements prepared with PQprepare belong to the server session, which
 *    the host may replace (a new `PGconn *`, or the same one after PQreset):
 *    key a cache on the pointer AND PQbackendPID(), and give statements
 *    names of your own (prefix them with the plugin's name);
 *  - the host may close the connection before fini: fini must not use it;
 *  - link libpq as a shared library (-lpq), like semqd.
 * docs/PLUGINS.md shows the pattern.
 */
#ifndef SEMQ_PLUGIN_H
#define SEMQ_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SEMQ_PLUGIN_ABI_VERSION 1

enum semq_plugin_result {
	SEMQ_PLUGIN_OK = 0,
	SEMQ_PLUGIN_RETRY = 1,
	SEMQ_PLUGIN_PERMANENT = 2
};

/* Which database `tx->db` points into. */
enum semq_db_kind {
	SEMQ_DB_SQLITE = 1, /* tx->db is a `sqlite3 *` */
	SEMQ_DB_PG = 2      /* tx->db is a `PGconn *` (libpq) */
};

/* One `key = value` line of the plugin's config section (not path/types). */
struct semq_plugin_option {
	const char *key;
	const char *value;
	const char *where; /* "node.ini:14", for error messages */
};

/* The open transaction a call runs in. Borrowed for the call: do not keep
 * `db`, the host may hand over another connection on the next call. */
struct semq_plugin_tx {
	int db_kind; /* enum semq_db_kind */
	void *db;    /* the node's database connection: a `sqlite3 *` or a
			`PGconn *`, as db_kind says */
	void *reserved[6];
};

/* Arguments of semq_plugin_init(). Borrowed for the call: copy what you keep. */
struct semq_plugin_init_args {
	unsigned abi_version; /* SEMQ_PLUGIN_ABI_VERSION of the host */
	const char *name;     /* NAME of [plugin NAME] */
	const char *node_id;  /* this node's id */
	const struct semq_plugin_option *options;
	size_t n_options;
	/* The database, outside any transaction: create your tables here
	 * (CREATE TABLE IF NOT EXISTS). */
	const struct semq_plugin_tx *tx;
	void *reserved[6];
};

/* A message to apply. Borrowed for the call. */
struct semq_plugin_msg {
	const char *origin;
	const char *dest;
	uint64_t seq;
	uint32_t type;
	const char *key; /* NULL when the message has no key */
	uint64_t prev_seq;
	int64_t deliver_at; /* 0 when not delayed */
	int64_t created_at; /* unix ms at the origin */
	const uint8_t *payload;
	size_t payload_len;
	unsigned tries; /* 0 on first delivery, then 1, 2, ... on redo */
	void *reserved[7];
};

/* The entry points a plugin defines (declared here so that a plugin built
 * with -Wmissing-prototypes needs nothing more than this header). */
int semq_plugin_abi_version(void);
int semq_plugin_init(const struct semq_plugin_init_args *a, void **handle_out,
		     char *err, size_t errsz);
int semq_plugin_handle(void *handle, const struct semq_plugin_msg *m,
		       const struct semq_plugin_tx *tx, char *err,
		       size_t errsz);
void semq_plugin_fini(void *handle);

typedef int (*semq_plugin_abi_version_fn)(void);
typedef int (*semq_plugin_init_fn)(const struct semq_plugin_init_args *a,
				   void **handle_out, char *err, size_t errsz);
typedef int (*semq_plugin_handle_fn)(void *handle,
				     const struct semq_plugin_msg *m,
				     const struct semq_plugin_tx *tx, char *err,
				     size_t errsz);
typedef void (*semq_plugin_fini_fn)(void *handle);

#ifdef __cplusplus
}
#endif

#endif
