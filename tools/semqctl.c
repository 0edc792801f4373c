/* SPDX-License-Identifier: MIT */
/*
 * semqctl — the operator's command line for one SEMQ node (SPEC §8).
 *
 *   semqctl -c node.ini [--json] COMMAND [ARGS]
 *
 * It reads the node's configuration, opens the node's database through the
 * store (creating and migrating it when it is new, exactly as semqd would) and
 * runs one command against it: `status` shows what is queued where, `send`
 * queues a message and wakes the daemon. Every listing is also available as
 * one JSON object (--json) for scripts.
 *
 * DESIGN
 *  - One table of commands (name, handler, options, usage, help). main()
 *    only parses the global options, finds the command in the table, lets the
 *    generic parser fill in the command's options, and dispatches. A new
 *    command is one more table entry; a name may be two words ("redo list").
 *  - Global options (-c, --json, --help) are accepted before or after the
 *    command. A command option that takes a value takes the next argument
 *    verbatim, so `--data --json` sends the text "--json".
 *  - Exit codes (SPEC §8): 0 ok; 2 usage or configuration error, reported as
 *    one line naming the argument (plus a "Try ... --help" line), or every
 *    line config_load() found; 1 runtime failure, reported as one line.
 *  - Every argument is checked before the database is touched.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include <semq/error.h>
#include <semq/semq.h>

#include "config.h"
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
	int json;
	int help;
	const struct ctl_cmd *cmd;
	/* Option values by index in cmd->opts; "" for a flag that is set. */
	const char *val[CTL_MAX_OPTS];
	const char *pos[CTL_MAX_ARGS];
	size_t n_pos;
	struct config *cfg; /* owned; config_free */
	struct store *st;   /* owned; store_free */
};

static int cmd_status(struct ctl *c);
static int cmd_send(struct ctl *c);

/* ---- the table of commands ----------------------------------------------- */

static const struct ctl_opt status_opts[] = {{NULL, NULL}};

static const struct ctl_opt send_opts[] = {{"--to", "D"},
					   {"--type", "T"},
					   {"--key", "K"},
					   {"--delay", "DURATION"},
					   {"--deliver-at", "UNIX_MS"},
					   {"--data", "S"},
					   {"--file", "F"},
					   {NULL, NULL}};

static const struct ctl_cmd ctl_cmds[] = {
	{"status", cmd_status, status_opts, "",
	 "counts per table, status and stream; inbound watermarks",
	 "Shows the node id and database, then one line per table, stream and\n"
	 "status with its count and the age of its oldest row, then every\n"
	 "inbound stream with its confirmed_through watermark. --json prints\n"
	 "{\"node\", \"db\", \"schema_version\", \"queues\": [...], "
	 "\"streams_in\": [...]}.\n"},
	{"send", cmd_send, send_opts,
	 "--to D --type T [--key K] [--delay DURATION | --deliver-at UNIX_MS] "
	 "(--data S | --file F | -)",
	 "queue a message to node D and wake the daemon",
	 "Queues a message to node D in the outbound table tb_0031, in one\n"
	 "transaction, then wakes the semqd serving the database so it sends\n"
	 "at once. Give exactly one payload source.\n"
	 "\n"
	 "  --to D               destination node id (1-64 of A-Za-z0-9._-)\n"
	 "  --type T             message type, 0..4294967295\n"
	 "  --key K              business object id, at most 255 bytes;\n"
	 "                       messages with one key take effect in order\n"
	 "  --delay DURATION     run at the destination after 5s, 1m, 2h...\n"
	 "  --deliver-at UNIX_MS run at the destination at this time\n"
	 "  --data S             the payload is the text S\n"
	 "  --file F             the payload is the contents of file F\n"
	 "  -                    the payload is read from stdin\n"
	 "\n"
	 "Prints the message id (origin/dest/seq); --json prints\n"
	 "{\"origin\", \"dest\", \"seq\", \"woke_daemon\"}.\n"},
	{NULL, NULL, NULL, NULL, NULL, NULL}};

/* ---- messages ------------------------------------------------------------ */

static int usage_err(const struct ctl *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A usage error: one line naming the culprit, one pointing at --help. */
static int usage_err(const struct ctl *c, const char *fmt, ...)
{
	va_list ap;

	fputs("semqctl: ", stderr);
	if (c->cmd)
		fprintf(stderr, "%s: ", c->cmd->name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (c->cmd)
		fprintf(stderr, "\nTry 'semqctl %s --help'.\n", c->cmd->name);
	else
		fputs("\nTry 'semqctl --help'.\n", stderr);
	return EXIT_USAGE;
}

/* A runtime failure: one line. */
static int fail(const char *fmt, ...)
{
	va_list ap;

	fputs("semqctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return EXIT_FAIL;
}

static void print_main_help(FILE *f)
{
	const struct ctl_cmd *cmd;

	fputs("Usage: semqctl -c node.ini [--json] COMMAND [ARGS]\n"
	      "\n"
	      "Administers the SEMQ node configured in node.ini, through its "
	      "database.\n"
	      "\n"
	      "Commands:\n",
	      f);
	for (cmd = ctl_cmds; cmd->name; cmd++)
		fprintf(f, "  %-10s %s\n", cmd->name, cmd->summary);
	fputs("\n"
	      "Options:\n"
	      "  -c, --config FILE  the node's configuration (required)\n"
	      "      --json         print one JSON object instead of text\n"
	      "  -h, --help         this help; 'semqctl COMMAND --help' for "
	      "one command\n"
	      "\n"
	      "Exit status: 0 ok, 1 runtime failure, 2 usage or configuration "
	      "error.\n",
	      f);
}

static void print_cmd_help(const struct ctl_cmd *cmd, FILE *f)
{
	fprintf(f, "Usage: semqctl -c node.ini [--json] %s%s%s\n\n%s",
		cmd->name, *cmd->usage ? " " : "", cmd->usage, cmd->help);
}

/* ---- argument parsing ---------------------------------------------------- */

/* Does the command `name` (one or more words) start argv? Returns the number
 * of words it takes, 0 when it does not match. */
static int cmd_match(const char *name, char **argv, int argc)
{
	int used = 0;
	size_t n;

	while (*name) {
		n = strcspn(name, " ");
		if (used >= argc || strlen(argv[used]) != n ||
		    strncmp(argv[used], name, n) != 0)
			return 0;
		used++;
		name += n;
		name += strspn(name, " ");
	}
	return used;
}

/*
 * -c/--config, --json, -h/--help at argv[*i]. Returns 1 when it was one
 * (*i then points at its last word), 0 when it is not a global option, or
 * EXIT_USAGE (negated) after reporting a problem.
 */
static int parse_global(struct ctl *c, int argc, char **argv, int *i)
{
	const char *a = argv[*i], *v = NULL;

	if (!strcmp(a, "--json")) {
		c->json = 1;
		return 1;
	}
	if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
		c->help = 1;
		return 1;
	}
	if (!strcmp(a, "-c") || !strcmp(a, "--config")) {
		if (*i + 1 >= argc)
			return -usage_err(c,
					  "%s needs a value: the node.ini "
					  "path",
					  a);
		v = argv[++*i];
	} else if (!strncmp(a, "--config=", 9)) {
		v = a + 9;
	} else if (!strncmp(a, "-c", 2)) {
		v = a + 2;
	} else {
		return 0;
	}
	if (c->config_path)
		return -usage_err(c, "-c/--config is given twice");
	if (!*v)
		return -usage_err(c, "-c/--config '' is empty");
	c->config_path = v;
	return 1;
}

/* An option of the current command at argv[*i]: 1 when it was one, 0 when it
 * is not an option of this command, or -EXIT_USAGE after reporting. */
static int parse_cmd_opt(struct ctl *c, int argc, char **argv, int *i)
{
	const char *a = argv[*i], *eq = strchr(a, '=');
	size_t n = eq ? (size_t)(eq - a) : strlen(a);
	const struct ctl_opt *o;
	int k;

	for (k = 0, o = c->cmd->opts; o && o->name && k < CTL_MAX_OPTS;
	     k++, o++) {
		if (strlen(o->name) != n || strncmp(o->name, a, n) != 0)
			continue;
		if (c->val[k])
			return -usage_err(c, "%s is given twice", o->name);
		if (!o->arg) {
			if (eq)
				return -usage_err(c, "%s takes no value",
						  o->name);
			c->val[k] = "";
		} else if (eq) {
			c->val[k] = eq + 1;
		} else if (*i + 1 < argc) {
			c->val[k] = argv[++*i];
		} else {
			return -usage_err(c, "%s needs a value %s", o->name,
					  o->arg);
		}
		return 1;
	}
	return 0;
}

/* Finds the command at argv[*i] in the table (*i then points at its last
 * word). EXIT_OK or EXIT_USAGE after reporting. */
static int find_cmd(struct ctl *c, int argc, char **argv, int *i)
{
	const struct ctl_cmd *cmd;
	int used;

	for (cmd = ctl_cmds; cmd->name; cmd++) {
		used = cmd_match(cmd->name, argv + *i, argc - *i);
		if (used) {
			c->cmd = cmd;
			*i += used - 1;
			return EXIT_OK;
		}
	}
	return usage_err(c, "unknown command '%s'", argv[*i]);
}

/*
 * Fills c from argv: the global options anywhere, the command, then the
 * command's options and positional arguments. EXIT_OK or EXIT_USAGE (after
 * reporting). A help request stops the checks of what is required.
 */
static int parse_args(struct ctl *c, int argc, char **argv)
{
	int i, r, only_pos = 0;
	const char *a;

	for (i = 1; i < argc; i++) {
		a = argv[i];
		if (!only_pos) {
			r = parse_global(c, argc, argv, &i);
			if (r < 0)
				return -r;
			if (r)
				continue;
		}
		if (!c->cmd) {
			if (a[0] == '-')
				return usage_err(c, "unknown option '%s'", a);
			r = find_cmd(c, argc, argv, &i);
			if (r)
				return r;
			continue;
		}
		if (!only_pos && !strcmp(a, "--")) {
			only_pos = 1;
			continue;
		}
		if (!only_pos) {
			r = parse_cmd_opt(c, argc, argv, &i);
			if (r < 0)
				return -r;
			if (r)
				continue;
			if (a[0] == '-' && a[1])
				return usage_err(c, "unknown option '%s'", a);
		}
		if (c->n_pos == CTL_MAX_ARGS)
			return usage_err(c, "too many arguments at '%s'", a);
		c->pos[c->n_pos++] = a;
	}
	if (c->help)
		return EXIT_OK;
	if (!c->cmd)
		return usage_err(c, "no command given");
	if (!c->config_path) {
		/* Not the command's fault: report it as a global option. */
		c->cmd = NULL;
		return usage_err(c, "-c node.ini is required");
	}
	return EXIT_OK;
}

/* The value of option `name` of the current command, NULL when not given. */
static const char *opt(const struct ctl *c, const char *name)
{
	const struct ctl_opt *o;
	int k;

	for (k = 0, o = c->cmd->opts; o && o->name && k < CTL_MAX_OPTS;
	     k++, o++)
		if (!strcmp(o->name, name))
			return c->val[k];
	return NULL;
}

/* A decimal number 0..max, digits only. SEMQ_OK or SEMQ_ERR_INVALID. */
static int parse_uint(const char *s, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;

	if (!*s)
		return SEMQ_ERR_INVALID;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return SEMQ_ERR_INVALID;
		if (v > (max - (uint64_t)(*s - '0')) / 10)
			return SEMQ_ERR_INVALID;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	*out = v;
	return SEMQ_OK;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the node: configuration and database -------------------------------- */

/* Loads c->config_path into c->cfg. EXIT_OK, or EXIT_USAGE after printing
 * every problem config_load() found. */
static int ctl_load_config(struct ctl *c)
{
	char *errs = NULL;
	size_t n;
	int r;

	r = config_load(c->config_path, &c->cfg, &errs);
	if (r == SEMQ_OK)
		return EXIT_OK;
	if (errs && *errs) {
		n = strlen(errs);
		fputs(errs, stderr);
		if (errs[n - 1] != '\n')
			fputc('\n', stderr);
	} else {
		fprintf(stderr, "semqctl: %s: %s\n", c->config_path,
			semq_strerror(r));
	}
	free(errs);
	return r == SEMQ_ERR_NOMEM || r == SEMQ_ERR_INTERNAL ? EXIT_FAIL
							     : EXIT_USAGE;
}

/* Opens the node's database (creating and migrating it) into c->st. */
static int ctl_open_store(struct ctl *c)
{
	struct store_opts o = {
		.path = c->cfg->db,
		.node_id = c->cfg->id,
		.max_payload = c->cfg->max_payload,
		.synchronous = c->cfg->synchronous,
		.redo_levels_ms = c->cfg->redo_levels_ms,
		.n_redo_levels = c->cfg->n_redo_levels,
		.max_tries = c->cfg->max_tries,
	};
	char err[SEMQ_ERRLEN] = "";

	if (store_open(&o, &c->st, err, sizeof err) != SEMQ_OK)
		return fail("%s", err[0] ? err : "cannot open the database");
	return EXIT_OK;
}

/* Prints a JSON document (stolen) on stdout. */
static int print_json(json_t *doc)
{
	int r;

	if (!doc)
		return fail("out of memory");
	r = json_dumpf(doc, stdout, JSON_INDENT(2));
	json_decref(doc);
	if (r)
		return fail("writing JSON to stdout failed");
	fputc('\n', stdout);
	return EXIT_OK;
}

/* ---- status -------------------------------------------------------------- */

/* The tables in the order status shows them. */
static const char *const status_tables[] = {"tb_0031", "tb_0030", "tb_0033"};

static const char *status_name(const char *table, int status)
{
	if (!strcmp(table, "tb_0031")) {
		switch (status) {
		case SS_UNSEND: return "unsent";
		case SS_SEND: return "sent";
		case SS_ACK: return "relay-acked";
		case SS_ACK2: return "confirmed";
		case SS_CANCELLED: return "cancelled";
		}
	} else if (!strcmp(table, "tb_0030")) {
		switch (status) {
		case AS_INIT: return "unacked";
		case AS_OK: return "acked";
		}
	} else if (!strcmp(table, "tb_0033")) {
		switch (status) {
		case RS_PENDING: return "pending";
		case RS_WAITING: return "waiting";
		case RS_DONE: return "done";
		case RS_DEAD: return "dead";
		case RS_DISCARDED: return "discarded";
		}
	}
	return "unknown";
}

/* One stat_row, copied out of the store's callback (strings owned). */
struct stat_copy {
	char *table, *origin, *dest;
	int status;
	int64_t count, oldest;
};

struct stream_copy {
	char *origin, *dest;
	uint64_t confirmed_through;
};

/* What status collects before printing. All owned; status_free. */
struct status_data {
	struct stat_copy *rows;
	size_t n_rows, cap_rows;
	struct stream_copy *streams;
	size_t n_streams, cap_streams;
	int failed; /* out of memory in a callback */
};

static void status_free(struct status_data *d)
{
	size_t i;

	for (i = 0; i < d->n_rows; i++) {
		free(d->rows[i].table);
		free(d->rows[i].origin);
		free(d->rows[i].dest);
	}
	for (i = 0; i < d->n_streams; i++) {
		free(d->streams[i].origin);
		free(d->streams[i].dest);
	}
	free(d->rows);
	free(d->streams);
}

/* The capacity after `cap` when an array is full. */
static size_t next_cap(size_t cap)
{
	return cap ? cap * 2 : 16;
}

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

static int status_stat_cb(void *ctx, const struct stat_row *r)
{
	struct status_data *d = ctx;
	struct stat_copy *s;
	size_t cap = next_cap(d->cap_rows);

	if (d->n_rows == d->cap_rows) {
		s = realloc(d->rows, cap * sizeof *d->rows);
		if (!s)
			goto nomem;
		d->rows = s;
		d->cap_rows = cap;
	}
	s = &d->rows[d->n_rows];
	memset(s, 0, sizeof *s);
	s->table = strdup(r->table ? r->table : "?");
	s->origin = dup_or_null(r->origin);
	s->dest = dup_or_null(r->dest);
	s->status = r->status;
	s->count = r->count;
	s->oldest = r->oldest;
	d->n_rows++;
	if (!s->table || (r->origin && !s->origin) || (r->dest && !s->dest))
		goto nomem;
	return 0;
nomem:
	d->failed = 1;
	return 1;
}

static int status_stream_cb(void *ctx, const char *origin, const char *dest,
			    uint64_t confirmed_through)
{
	struct status_data *d = ctx;
	struct stream_copy *s;
	size_t cap = next_cap(d->cap_streams);

	if (d->n_streams == d->cap_streams) {
		s = realloc(d->streams, cap * sizeof *d->streams);
		if (!s)
			goto nomem;
		d->streams = s;
		d->cap_streams = cap;
	}
	s = &d->streams[d->n_streams++];
	s->origin = dup_or_null(origin);
	s->dest = dup_or_null(dest);
	s->confirmed_through = confirmed_through;
	if ((origin && !s->origin) || (dest && !s->dest))
		goto nomem;
	return 0;
nomem:
	d->failed = 1;
	return 1;
}

static int table_rank(const char *table)
{
	size_t i;

	for (i = 0; i < sizeof status_tables / sizeof status_tables[0]; i++)
		if (!strcmp(table, status_tables[i]))
			return (int)i;
	return (int)i;
}

static int strcmp_null(const char *a, const char *b)
{
	return strcmp(a ? a : "", b ? b : "");
}

/* Table order of SPEC §4, then stream, then status. */
static int stat_cmp(const void *pa, const void *pb)
{
	const struct stat_copy *a = pa, *b = pb;
	int d = table_rank(a->table) - table_rank(b->table);

	if (!d)
		d = strcmp(a->table, b->table);
	if (!d)
		d = strcmp_null(a->origin, b->origin);
	if (!d)
		d = strcmp_null(a->dest, b->dest);
	if (!d)
		d = (a->status > b->status) - (a->status < b->status);
	return d;
}

/* "3s", "5m", "2h" for ages under a day, else the UTC time. */
static const char *fmt_oldest(int64_t oldest, int64_t now, char *buf, size_t sz)
{
	int64_t age = now - oldest;
	time_t t = (time_t)(oldest / 1000);
	struct tm tm;

	if (oldest <= 0)
		snprintf(buf, sz, "-");
	else if (age >= 0 && age < 60 * 1000)
		snprintf(buf, sz, "%llds", (long long)(age / 1000));
	else if (age >= 0 && age < 3600 * 1000)
		snprintf(buf, sz, "%lldm", (long long)(age / 60000));
	else if (age >= 0 && age < 86400 * 1000)
		snprintf(buf, sz, "%lldh", (long long)(age / 3600000));
	else if (gmtime_r(&t, &tm))
		strftime(buf, sz, "%Y-%m-%dT%H:%M:%SZ", &tm);
	else
		snprintf(buf, sz, "%lld", (long long)oldest);
	return buf;
}

static int width(int w, const char *s)
{
	int n = (int)strlen(s ? s : "-");

	return n > w ? n : w;
}

static void status_print_text(const struct ctl *c, const struct status_data *d)
{
	int wt = 5, wo = 6, wd = 4, ws = 6, wc = 5;
	char sbuf[48], tbuf[48];
	int64_t now = now_ms();
	size_t i;

	printf("node %s  db %s  schema %d\n\n", c->cfg->id, c->cfg->db,
	       store_schema_version(c->st));
	if (!d->n_rows)
		printf("no messages\n");
	for (i = 0; i < d->n_rows; i++) {
		const struct stat_copy *r = &d->rows[i];
		wt = width(wt, r->table);
		wo = width(wo, r->origin);
		wd = width(wd, r->dest);
		snprintf(sbuf, sizeof sbuf, "%d %s", r->status,
			 status_name(r->table, r->status));
		ws = width(ws, sbuf);
		snprintf(sbuf, sizeof sbuf, "%lld", (long long)r->count);
		wc = width(wc, sbuf);
	}
	if (d->n_rows)
		printf("%-*s  %-*s  %-*s  %-*s  %*s  %s\n", wt, "TABLE", wo,
		       "ORIGIN", wd, "DEST", ws, "STATUS", wc, "COUNT",
		       "OLDEST");
	for (i = 0; i < d->n_rows; i++) {
		const struct stat_copy *r = &d->rows[i];
		snprintf(sbuf, sizeof sbuf, "%d %s", r->status,
			 status_name(r->table, r->status));
		printf("%-*s  %-*s  %-*s  %-*s  %*lld  %s\n", wt, r->table, wo,
		       r->origin ? r->origin : "-", wd, r->dest ? r->dest : "-",
		       ws, sbuf, wc, (long long)r->count,
		       fmt_oldest(r->oldest, now, tbuf, sizeof tbuf));
	}
	if (!d->n_streams)
		return;
	wo = 6;
	wd = 4;
	for (i = 0; i < d->n_streams; i++) {
		wo = width(wo, d->streams[i].origin);
		wd = width(wd, d->streams[i].dest);
	}
	printf("\ninbound streams\n%-*s  %-*s  %s\n", wo, "ORIGIN", wd, "DEST",
	       "CONFIRMED_THROUGH");
	for (i = 0; i < d->n_streams; i++)
		printf("%-*s  %-*s  %llu\n", wo,
		       d->streams[i].origin ? d->streams[i].origin : "-", wd,
		       d->streams[i].dest ? d->streams[i].dest : "-",
		       (unsigned long long)d->streams[i].confirmed_through);
}

/* The --json document of status (new reference, NULL when out of memory). */
static json_t *status_json(const struct ctl *c, const struct status_data *d)
{
	json_t *doc = NULL, *queues = json_array(), *streams = json_array();
	json_t *e;
	size_t i;

	if (!queues || !streams)
		goto out;
	for (i = 0; i < d->n_rows; i++) {
		const struct stat_copy *r = &d->rows[i];
		e = json_pack("{s:s, s:s?, s:s?, s:i, s:s, s:I, s:I}", "table",
			      r->table, "origin", r->origin, "dest", r->dest,
			      "status", r->status, "status_name",
			      status_name(r->table, r->status), "count",
			      (json_int_t)r->count, "oldest",
			      (json_int_t)r->oldest);
		if (!e || json_array_append_new(queues, e))
			goto out;
	}
	for (i = 0; i < d->n_streams; i++) {
		e = json_pack("{s:s?, s:s?, s:I}", "origin",
			      d->streams[i].origin, "dest", d->streams[i].dest,
			      "confirmed_through",
			      (json_int_t)d->streams[i].confirmed_through);
		if (!e || json_array_append_new(streams, e))
			goto out;
	}
	/* "o" steals the arrays, even when packing fails. */
	doc = json_pack("{s:s, s:s, s:i, s:o, s:o}", "node", c->cfg->id, "db",
			c->cfg->db, "schema_version",
			store_schema_version(c->st), "queues", queues,
			"streams_in", streams);
	queues = streams = NULL;
out:
	json_decref(queues);
	json_decref(streams);
	return doc;
}

static int cmd_status(struct ctl *c)
{
	struct status_data d = {0};
	int r;

	if (c->n_pos)
		return usage_err(c, "unexpected argument '%s'", c->pos[0]);
	r = ctl_load_config(c);
	if (r)
		return r;
	r = ctl_open_store(c);
	if (r)
		return r;

	r = EXIT_FAIL;
	if (store_stats(c->st, status_stat_cb, &d) != SEMQ_OK ||
	    store_streams_in(c->st, status_stream_cb, &d) != SEMQ_OK) {
		fail("%s: reading the queues: %s", c->cfg->db,
		     store_errmsg(c->st));
		goto out;
	}
	if (d.failed) {
		fail("out of memory");
		goto out;
	}
	if (d.n_rows)
		qsort(d.rows, d.n_rows, sizeof *d.rows, stat_cmp);
	if (c->json) {
		r = print_json(status_json(c, &d));
		goto out;
	}
	status_print_text(c, &d);
	r = EXIT_OK;
out:
	status_free(&d);
	return r;
}

/* ---- send ---------------------------------------------------------------- */

/*
 * Reads all of fd into a new buffer (*buf_out, caller frees), but no more
 * than max bytes: SEMQ_ERR_TOO_BIG when there is more. SEMQ_ERR_IO (errno
 * set) or SEMQ_ERR_NOMEM otherwise.
 */
static int read_capped(int fd, size_t max, uint8_t **buf_out, size_t *len_out)
{
	uint8_t *buf = NULL, *nb;
	size_t len = 0, cap = 0;
	ssize_t n;
	int r = SEMQ_ERR_INTERNAL;

	for (;;) {
		if (len == cap) {
			if (cap > max) {
				r = SEMQ_ERR_TOO_BIG;
				goto out;
			}
			cap = cap ? cap * 2 : 4096;
			if (cap > max + 1)
				cap = max + 1;
			nb = realloc(buf, cap);
			if (!nb) {
				r = SEMQ_ERR_NOMEM;
				goto out;
			}
			buf = nb;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = SEMQ_ERR_IO;
			goto out;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len > max) {
			r = SEMQ_ERR_TOO_BIG;
			goto out;
		}
	}
	*buf_out = buf;
	*len_out = len;
	buf = NULL;
	r = SEMQ_OK;
out:
	free(buf);
	return r;
}

/* The message send is asked to queue, checked; payload owned (free). */
struct send_req {
	const char *to;
	uint32_t type;
	const char *key;
	int64_t deliver_at;
	const char *data, *file;
	int from_stdin;
	uint8_t *payload;
	size_t payload_len;
};

/* Checks every argument of send that does not need the configuration. */
static int send_check_args(struct ctl *c, struct send_req *q)
{
	const char *type = opt(c, "--type"), *delay = opt(c, "--delay");
	const char *at = opt(c, "--deliver-at");
	uint64_t v;
	int64_t ms;
	const char *given[3];
	size_t i, n_given = 0;

	for (i = 0; i < c->n_pos; i++) {
		if (strcmp(c->pos[i], "-"))
			return usage_err(c, "unexpected argument '%s'",
					 c->pos[i]);
		if (q->from_stdin)
			return usage_err(c, "- is given twice");
		q->from_stdin = 1;
	}
	q->to = opt(c, "--to");
	if (!q->to)
		return usage_err(c, "--to D is required");
	if (!semq_id_valid(q->to))
		return usage_err(c,
				 "--to '%s' is not a node id (1-64 of "
				 "A-Za-z0-9._-)",
				 q->to);
	if (!type)
		return usage_err(c, "--type T is required");
	if (parse_uint(type, UINT32_MAX, &v))
		return usage_err(c, "--type '%s' is not a number 0..%lu", type,
				 (unsigned long)UINT32_MAX);
	q->type = (uint32_t)v;
	q->key = opt(c, "--key");
	if (q->key && !*q->key)
		return usage_err(c, "--key '' is empty; leave it out for no "
				    "key");
	if (q->key && strlen(q->key) > SEMQ_KEY_MAX)
		return usage_err(c, "--key is %zu bytes long, at most %d",
				 strlen(q->key), SEMQ_KEY_MAX);
	if (delay && at)
		return usage_err(c, "--delay and --deliver-at are both given; "
				    "give one");
	if (delay) {
		if (config_parse_duration(delay, &ms) != SEMQ_OK || ms < 0)
			return usage_err(c,
					 "--delay '%s' is not a duration "
					 "(250ms, 5s, 1m, 2h, 1d)",
					 delay);
		q->deliver_at = now_ms() + ms;
	}
	if (at) {
		if (parse_uint(at, INT64_MAX, &v))
			return usage_err(c,
					 "--deliver-at '%s' is not a unix "
					 "time in ms",
					 at);
		q->deliver_at = (int64_t)v;
	}
	q->data = opt(c, "--data");
	q->file = opt(c, "--file");
	if (q->data)
		given[n_given++] = "--data";
	if (q->file)
		given[n_given++] = "--file";
	if (q->from_stdin)
		given[n_given++] = "- (stdin)";
	if (n_given == 0)
		return usage_err(c, "no payload: give --data S, --file F or - "
				    "(stdin)");
	if (n_given > 1)
		return usage_err(c,
				 "%s and %s%s%s are given; give exactly one "
				 "payload source",
				 given[0], given[1], n_given > 2 ? " and " : "",
				 n_given > 2 ? given[2] : "");
	return EXIT_OK;
}

/* Reads the payload into q, at most max_payload bytes. */
static int send_read_payload(struct ctl *c, struct send_req *q)
{
	size_t max = c->cfg->max_payload;
	int fd = -1, r = EXIT_FAIL, e;

	if (q->data) {
		if (strlen(q->data) > max)
			return usage_err(c,
					 "--data is %zu bytes, larger than "
					 "max_payload %zu",
					 strlen(q->data), max);
		q->payload_len = strlen(q->data);
		q->payload = malloc(q->payload_len + 1);
		if (!q->payload)
			return fail("out of memory");
		memcpy(q->payload, q->data, q->payload_len + 1);
		return EXIT_OK;
	}
	if (q->file) {
		fd = open(q->file, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return usage_err(c, "--file '%s': %s", q->file,
					 strerror(errno));
	}
	e = read_capped(q->file ? fd : STDIN_FILENO, max, &q->payload,
			&q->payload_len);
	if (e == SEMQ_OK)
		r = EXIT_OK;
	else if (e == SEMQ_ERR_TOO_BIG && q->file)
		r = usage_err(c, "--file '%s' is larger than max_payload %zu",
			      q->file, max);
	else if (e == SEMQ_ERR_TOO_BIG)
		r = usage_err(c, "- (stdin) is larger than max_payload %zu",
			      max);
	else if (e == SEMQ_ERR_IO && q->file)
		r = usage_err(c, "--file '%s': %s", q->file, strerror(errno));
	else if (e == SEMQ_ERR_IO)
		r = fail("send: reading stdin: %s", strerror(errno));
	else
		r = fail("send: %s", semq_strerror(e));
	if (fd >= 0)
		close(fd);
	return r;
}

static int cmd_send(struct ctl *c)
{
	struct send_req q = {0};
	struct msg m;
	struct msgid id;
	char err[SEMQ_ERRLEN] = "", idbuf[MSGID_STRLEN];
	uint64_t seq = 0;
	int r, woke;

	r = send_check_args(c, &q);
	if (r)
		goto out;
	r = ctl_load_config(c);
	if (r)
		goto out;
	r = send_read_payload(c, &q);
	if (r)
		goto out;
	r = ctl_open_store(c);
	if (r)
		goto out;

	memset(&m, 0, sizeof m);
	snprintf(m.id.dest, sizeof m.id.dest, "%s", q.to);
	m.type = q.type;
	if (q.key) {
		m.has_key = 1;
		snprintf(m.key, sizeof m.key, "%s", q.key);
	}
	m.deliver_at = q.deliver_at;
	m.payload = q.payload; /* borrowed by the store for the call */
	m.payload_len = q.payload_len;
	if (store_enqueue(c->st, &m, &seq, err, sizeof err) != SEMQ_OK) {
		r = fail("send: %s", err[0] ? err : store_errmsg(c->st));
		goto out;
	}

	memset(&id, 0, sizeof id);
	snprintf(id.origin, sizeof id.origin, "%s", c->cfg->id);
	snprintf(id.dest, sizeof id.dest, "%s", q.to);
	id.seq = seq;
	woke = semq_notify(c->cfg->db) == SEMQ_OK;
	if (c->json) {
		r = print_json(json_pack("{s:s, s:s, s:I, s:b}", "origin",
					 id.origin, "dest", id.dest, "seq",
					 (json_int_t)seq, "woke_daemon", woke));
		goto out;
	}
	printf("queued %s\n", msgid_str(&id, idbuf, sizeof idbuf));
	if (!woke)
		fprintf(stderr,
			"semqctl: no semqd is running on %s to wake; "
			"the message is sent when it starts\n",
			c->cfg->db);
	r = EXIT_OK;
out:
	free(q.payload);
	return r;
}

int main(int argc, char **argv)
{
	struct ctl c;
	int r;

	memset(&c, 0, sizeof c);
	r = parse_args(&c, argc, argv);
	if (r)
		goto out;
	if (c.help) {
		if (c.cmd)
			print_cmd_help(c.cmd, stdout);
		else
			print_main_help(stdout);
		goto out;
	}
	r = c.cmd->run(&c);
out:
	store_free(c.st);
	config_free(c.cfg);
	if (fflush(stdout) != 0 && r == EXIT_OK)
		r = fail("writing to stdout: %s", strerror(errno));
	return r;
}
