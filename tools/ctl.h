/* SPDX-License-Identifier: MIT */
/*
 * What the files of semqctl share (tools/ctl.h): the run's state (struct
 * ctl), a command's table entry (struct ctl_cmd), and the helpers every
 * command group uses — messages and exit codes, the node's configuration
 * and database, the listing filters, table cells and times, the payload
 * and JSON printers, and the admin HTTP client. semqctl.c holds main(),
 * the table of commands and the parser; each command group is one file
 * (ctl_status.c, ctl_send.c, ctl_outbound.c, ctl_redo.c, ctl_received.c,
 * ctl_lives.c, ctl_peers.c, ctl_trace.c); ctl_common.c and ctl_admin.c
 * hold the shared helpers.
 */
#ifndef SEMQ_CTL_H
#define SEMQ_CTL_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "store.h"
#include "types.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

#define CTL_MAX_OPTS 16 /* options of one command */
#define CTL_MAX_ARGS 8  /* positional arguments of one command */

/* One option of a command: "--to" with a value named "D", or a flag. */
struct ctl_opt {
	const char *name; /* "--to" */
	const char *arg;  /* placeholder of its value; NULL for a flag */
};

struct ctl;

/* One command: its words, what runs it, and what --help says about it. */
struct ctl_cmd {
	const char *name; /* "status", or two words: "redo list" */
	int (*run)(struct ctl *c);
	const struct ctl_opt *opts; /* terminated by a {NULL} entry */
	const char *usage;          /* arguments after the name */
	const char *summary;        /* one line for `semqctl --help` */
	const char *help;           /* what it does and its options, for
				       `semqctl COMMAND --help` */
};

/* Everything one run of semqctl knows. Strings point into argv. */
struct ctl {
	const char *config_path;
	const char *config_how; /* how config_path was chosen, for messages */
	int json;
	int help;
	int version;
	int create; /* --create: make the database when it is not there */
	const char *group; /* "redo" in `redo --help`: help for the group */
	const struct ctl_cmd *cmd;
	/* Option values by index in cmd->opts; "" for a flag that is set. */
	const char *val[CTL_MAX_OPTS];
	const char *pos[CTL_MAX_ARGS];
	size_t n_pos;
	struct config *cfg; /* owned; config_free */
	struct store *st;   /* owned; store_free */
	char db[512];       /* cfg->db as shown: a URL without its password */
};

/* ---- the commands (one file per group) ------------------------------------ */

extern const struct ctl_cmd ctl_status_commands[];
extern const struct ctl_cmd ctl_send_commands[];
extern const struct ctl_cmd ctl_outbound_commands[];
extern const struct ctl_cmd ctl_redo_commands[];
extern const struct ctl_cmd ctl_received_commands[];
extern const struct ctl_cmd ctl_lives_commands[];
extern const struct ctl_cmd ctl_peers_commands[];
extern const struct ctl_cmd ctl_trace_commands[];

/* ---- messages (ctl_common.c) ---------------------------------------------- */

/* A usage error: one line naming the culprit, one pointing at --help.
 * Returns EXIT_USAGE. */
int usage_err(const struct ctl *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* A runtime failure: one line. Returns EXIT_FAIL. */
int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The record of an operator's change on semqctl's stderr. */
void operator_said(const struct ctl *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* ---- options, numbers, the clock (ctl_common.c) --------------------------- */

/* The value of option `name` of the current command (borrowed from argv),
 * NULL when not given. */
const char *opt(const struct ctl *c, const char *name);
/* A decimal number 0..max, digits only. SEMQ_OK or SEMQ_ERR_INVALID. */
int parse_uint(const char *s, uint64_t max, uint64_t *out);
int64_t now_ms(void);

/* ---- the node: configuration and database (ctl_common.c) ------------------ */

int ctl_load_config(struct ctl *c);
int ctl_open_store(struct ctl *c);
/* Prints a JSON document (stolen) on stdout. */
int print_json(json_t *doc);

/* ---- listings (ctl_common.c) ---------------------------------------------- */

#define LIST_LIMIT_DEFAULT 100
#define LIST_LIMIT_MAX 100000
#define SHOW_PAYLOAD_MAX 4096 /* bytes of the payload that show prints */
#define ERROR_COLS 40         /* characters of LAST_ERROR in a listing */
#define CELL_MAX 1024         /* bytes of one cleaned table cell */

#define result_name semq_result_name

/* The text of column `col` of row i of a listing (i == TABLE_HEAD: the
 * heading), in buf (CELL_MAX bytes) or static. */
#define TABLE_HEAD SIZE_MAX
#define TABLE_MAX_COLS 16
typedef const char *(*table_cell_fn)(const void *ctx, size_t i, int col,
				     int64_t now, char *buf, size_t sz);

/* Room for element n of an array v of *cap elements of `size` bytes: v
 * itself, or v grown (doubled, 16 at first; *cap updated) when n == *cap.
 * NULL when out of memory, and v is still the caller's. */
void *grow(void *v, size_t n, size_t *cap, size_t size);
/* strdup, NULL for NULL (caller frees). */
char *dup_or_null(const char *s);
int strcmp_null(const char *a, const char *b);
const char *fmt_oldest(int64_t oldest, int64_t now, char *buf, size_t sz);
/* --status S of `table`: SEMQ_OK with *out, else SEMQ_ERR_INVALID (the
 * caller says what is accepted: semq_status_list). */
int parse_status(const char *table, const char *s, int *out);
int parse_filter(struct ctl *c, struct store_filter *f, struct semq_where *w);
const char *cell(const char *s, size_t max_chars, char *buf, size_t bufsz);
void print_table(const void *ctx, size_t n, int n_cols, table_cell_fn fn);
const char *fmt_age(int64_t at, int64_t now, char *buf, size_t sz);
const char *fmt_time(int64_t ms, char *buf, size_t sz);
const char *fmt_until(int64_t at, int64_t now, char *buf, size_t sz);
void show_payload(const struct msg *m);
void show_long_text(const char *label, const char *s);
void payload_json(json_t *o, const struct msg *m, int *failed);

/* ---- what status collects (ctl_status.c; received list reads its
 * streams) ------------------------------------------------------------------ */

/* One stat_row, copied out of the store's callback (strings owned). */
struct stat_copy {
	char *table, *origin, *dest;
	int status;
	int64_t count, oldest;
};

struct stream_copy {
	char *origin, *dest;
	uint64_t life;
	uint64_t confirmed_through;
};

/* One outbound stream of this node: its counter and resynchronisations. */
struct out_copy {
	char *dest, *note;
	uint64_t last_seq;
	int64_t resyncs, resync_at;
};

/* What status collects before printing. All owned; status_free. */
struct status_data {
	struct stat_copy *rows;
	size_t n_rows, cap_rows;
	struct stream_copy *streams;
	size_t n_streams, cap_streams;
	struct out_copy *outs;
	size_t n_outs, cap_outs;
	/* custody: what this relay holds (relay 1: a origin, b dest), and
	 * what of this node's a relay holds (relay 0: a dest, b relay) */
	struct held_copy {
		char a[SEMQ_ID_MAX + 1], b[SEMQ_ID_MAX + 1];
		int relay;
		int64_t messages, bytes, at;
	} * held;
	size_t n_held, cap_held;
	/* this node's confirmed messages dead at their destination (a: dest,
	 * at: the first such answer) */
	struct held_copy *dead;
	size_t n_dead, cap_dead;
	int failed; /* out of memory in a callback */
};

void status_free(struct status_data *d);
/* store_streams_in's callback: the inbound streams into a status_data. */
int status_stream_cb(void *ctx, const char *origin, const char *dest,
		     uint64_t life, uint64_t confirmed_through);

/* ---- the daemon's admin HTTP (ctl_admin.c) -------------------------------- */

/*
 * Asks the running daemon for GET `path` (the command `what` needs [node]
 * admin) and parses its 200 answer: EXIT_OK with *doc (caller frees) whose
 * `field` has the JSON type `want` (JSON_ARRAY, JSON_OBJECT); else a
 * message naming the failure and its exit status.
 */
int admin_get_json(struct ctl *c, const char *what, const char *path,
		   const char *field, json_type want, json_t **doc_out);

#endif
