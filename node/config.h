/* SPDX-License-Identifier: MIT */
/*
 * node.ini: the node's configuration (SPEC §9), parsed with inih into a typed
 * struct from one declarative table of keys (section, key, type, default,
 * check). The same table documents the keys: config_describe() prints it.
 *
 * Every problem found is reported, each on one line of the form
 * "node.ini:14: unknown key 'lissen' in [node]", not only the first.
 * Relative paths are resolved against the directory of the config file.
 */
#ifndef SEMQ_CONFIG_H
#define SEMQ_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <semq/plugin.h>
#include <semq/semq.h>

#include "config_value.h" /* struct cfg_addr, config_instance_valid() */

struct cfg_peer {
	char name[SEMQ_ID_MAX + 1]; /* [peer NAME]: the peer's node id */
	struct cfg_addr connect;    /* dial out when set */
	int trusted_relay;
	int line; /* where the section starts */
};

struct cfg_route {
	char dest[SEMQ_ID_MAX + 1]; /* destination id, or "default" */
	char via[SEMQ_ID_MAX + 1];  /* next hop: a [peer] name */
	int line;
};

struct cfg_plugin {
	char name[SEMQ_ID_MAX + 1];
	char *path;    /* resolved */
	int all_types; /* types = * */
	uint32_t *types;
	size_t n_types;
	struct semq_plugin_option *options; /* strings owned by the config */
	size_t n_options;
	int64_t deadline_ms; /* a call longer is stuck; 0: [node]
				plugin_timeout */
	int line;
};

enum log_level_cfg { CFG_LOG_ERROR, CFG_LOG_WARN, CFG_LOG_INFO, CFG_LOG_DEBUG };

struct config {
	char *file; /* the path given to config_load */

	/* [node] */
	char id[SEMQ_ID_MAX + 1];
	char *db;   /* resolved path, or a postgresql:// URL as written */
	int db_url; /* db is a postgresql:// or postgres:// URL */
	/* Name of this instance among those serving `id` (SPEC §11); "" = the
	 * only one. Default: "" with a SQLite file, "HOST-PID" with a URL. */
	char instance[SEMQ_INSTANCE_MAX + 1];
	struct cfg_addr listen;
	struct cfg_addr admin;
	char *admin_token; /* NULL when unset */
	int allow_listed;  /* allow = listed: only [peer] ids may connect */
	int relay;
	int store_and_forward;
	int synchronous;                /* 0 off, 1 normal, 2 full, 3 extra */
	int64_t poll_interval_ms;       /* 50ms */
	int64_t query_after_ms;         /* 30s */
	int64_t custody_query_after_ms; /* 10m */
	int64_t outbound_retention_ms;  /* 1d */
	int64_t receipt_retention_ms;   /* 7d */
	int64_t ping_interval_ms;       /* 10s */
	int64_t handshake_timeout_ms;   /* 10s */
	unsigned max_connections;       /* 4096: authenticated */
	unsigned max_handshakes;        /* 256: before authentication */
	unsigned max_handshakes_per_address;  /* 16 */
	unsigned max_connections_per_address; /* 256 */
	unsigned max_connections_per_peer;    /* 16 */
	int64_t write_timeout_ms;             /* 60s */
	size_t memory_budget;                 /* 256 MiB */
	unsigned max_hops;                    /* 8 */
	int64_t plugin_timeout_ms;            /* 30s */
	int64_t peer_down_after_ms;           /* 5m: /health degraded */
	int64_t backlog_age_warn_ms;          /* 15m: /health degraded */
	unsigned workers;         /* store workers; 0: auto (config_workers) */
	int64_t idle_timeout_ms;  /* 60s */
	int64_t reconnect_min_ms; /* 500ms */
	int64_t reconnect_max_ms; /* 30s */
	unsigned window;          /* 1000 */
	unsigned drain_rate;      /* msgs/s; 0 = unlimited */
	unsigned batch_max;       /* messages per commit; 1000 */
	size_t max_payload;       /* 16 MiB */
	size_t max_frame;         /* max_payload + 64 KiB */
	int log_level;            /* enum log_level_cfg */
	char *log_file;           /* NULL = stderr */

	/* [tls] */
	char *tls_cert, *tls_key, *tls_ca; /* resolved; NULL when unset */
	char *tls_crl;                     /* resolved; NULL when unset */
	char (*tls_deny)[SEMQ_ID_MAX + 1]; /* ids refused at the handshake */
	size_t n_tls_deny;

	struct cfg_peer *peers;
	size_t n_peers;
	struct cfg_route *routes;
	size_t n_routes;
	struct cfg_plugin *plugins;
	size_t n_plugins;

	/* [redo] */
	int64_t *redo_levels_ms;
	size_t n_redo_levels;
	unsigned max_tries;
	int64_t redo_retention_ms; /* 7d */

	/* [relay]: custody quotas (semq_custody) and unknown destinations */
	unsigned quota_messages;            /* 20,000,000 */
	size_t quota_bytes;                 /* 20 GiB */
	unsigned quota_messages_per_origin; /* 1,000,000 */
	size_t quota_bytes_per_origin;      /* 1 GiB */
	int64_t unknown_dest_after_ms;      /* 1d */
	/* [relay]: a forward-only relay's answers and admission */
	int relay_ack; /* yes: RelayAck FORWARDED for a forwarded message */
	char (*relay_require)[SEMQ_ID_MAX + 1]; /* require_connected ids */
	size_t n_relay_require;

	/* Lines of the section headers; 0 when the section is absent. */
	int node_line, tls_line, route_line, redo_line, relay_line;
};

/*
 * Reads and checks `path`. On SEMQ_OK *out owns the config (config_free).
 * On SEMQ_ERR_CONFIG (or SEMQ_ERR_IO when the file cannot be read), *errs_out
 * gets every problem, one per line, each starting with "FILE:LINE: " (caller
 * frees); *out is NULL.
 */
int config_load(const char *path, struct config **out, char **errs_out);
void config_free(struct config *c); /* accepts NULL */

/* The configuration file when none is named on the command line. */
#define SEMQ_CONFIG_DEFAULT "/etc/semq/node.ini"

/*
 * Which configuration file to read: `given` (-c) when not NULL, else
 * $SEMQ_CONFIG when set and not empty, else SEMQ_CONFIG_DEFAULT. *how gets
 * how it was chosen, for messages ("-c", "$SEMQ_CONFIG", "the default:
 * neither -c nor $SEMQ_CONFIG given"). Both borrowed (argv, the environment
 * or static).
 */
const char *config_pick_path(const char *given, const char **how);
/*
 * Is the file `path` there? SEMQ_OK when it is (config_load says what else
 * is wrong with it); else SEMQ_ERR_NOT_FOUND with one line in err naming
 * the path and `how` it was chosen, for a program to print after "PROG: ".
 */
int config_file_exists(const char *path, const char *how, char *err,
		       size_t errsz);

/*
 * For a reload (SIGHUP, net.c): calls fn(ctx, section, NULL, key) for every
 * key of [node], [tls], [redo] and [relay] whose value differs between a and
 * b ("node", NULL, "db"), and fn(ctx, "plugin", NAME, "added" | "removed" |
 * "changed") for the [plugin] sections. [peer] and [route] are compared by
 * the caller, which applies them.
 */
void config_diff(const struct config *a, const struct config *b,
		 void (*fn)(void *ctx, const char *sect, const char *name,
			    const char *key),
		 void *ctx);

/* The peer named `name`, or NULL. Borrowed from c. */
const struct cfg_peer *config_peer(const struct config *c, const char *name);

/* Checks what semqd needs beyond config_load: [tls] complete, at least one
 * plugin or peer... Problems appended to *errs_out as by config_load. */
int config_check_daemon(const struct config *c, char **errs_out);
/* [node] workers resolved: as set, else on PostgreSQL the number of cores
 * (at least 2), on SQLite 1. */
unsigned config_workers(const struct config *c);

/* Writes a reference of every section and key (type, default, meaning). */
void config_describe(FILE *f);
/* The same as the manual page semq.ini(5), in roff; version and date (e.g.
 * "2026-11-26") for its title line. */
void config_describe_man(FILE *f, const char *version, const char *date);

/* Parses helpers, exposed for semqctl and tests: "5s", "30s", "1m", "6h",
 * "2d", "250ms", a bare number = seconds. SEMQ_ERR_INVALID when malformed. */
int config_parse_duration(const char *s, int64_t *ms_out);
/* "16MiB", "64KiB", "1000" (bytes), "2M" ... */
int config_parse_size(const char *s, size_t *out);
int config_parse_addr(const char *s, struct cfg_addr *out);

#endif
