/* SPDX-License-Identifier: MIT */
/*
 * semqctl — the operator's command line for one SEMQ node (SPEC §8).
 *
 *   semqctl [-c node.ini] [--json] [--create] COMMAND [ARGS]
 *
 * It reads the node's configuration (-c, else $SEMQ_CONFIG, else
 * /etc/semq/node.ini), opens the node's database through the store
 * (migrating it as semqd would; a database that does not exist is refused,
 * not created, unless --create: a wrong -c or db must not look like an
 * empty node) and runs one command against it: `status` shows what is queued where, `send`
 * queues a message and wakes the daemon, `outbound list|show|cancel` lists,
 * inspects and cancels the node's outbound messages, `redo
 * list|show|retry|discard` lists, inspects, retries and gives up on entries
 * of the redo queue, and `received list` shows the received record with the
 * inbound watermarks; `peers` asks the running daemon, over its admin HTTP,
 * for its live connections. Every listing is also available as JSON (--json)
 * for scripts.
 *
 * DESIGN
 *  - One table of commands per command group (name, handler, options,
 *    usage, help), in the group's file beside its handlers (ctl_status.c,
 *    ctl_send.c, ctl_outbound.c, ctl_redo.c, ctl_received.c, ctl_lives.c,
 *    ctl_peers.c, ctl_trace.c; what they share is ctl.h). This file holds
 *    the list of groups, main() and the parser: main() only parses the
 *    global options, finds the command in the tables, lets the generic
 *    parser fill in the command's options, and dispatches; --help and
 *    `COMMAND --help` are printed from the tables. A new command is one
 *    more entry in its group's table; a name may be two words ("redo
 *    list").
 *  - Global options (-c, --json, --create, --help, --version) are accepted
 *    before or after the command; `help COMMAND` is `COMMAND --help`. A command option that takes a value takes the next argument
 *    verbatim, so `--data --json` sends the text "--json".
 *  - Exit codes (SPEC §8): 0 ok; 2 usage or configuration error, reported as
 *    one line naming the argument (plus a "Try ... --help" line), or every
 *    line config_load() found; 1 runtime failure, reported as one line.
 *  - Every argument is checked before the database is touched.
 */
#include "ctl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <semq/error.h>
#include <semq/semq.h>

#include "config.h"

/* ---- the table of commands ----------------------------------------------- */

/* The command groups, each a table in its file beside the handlers, in the
 * order --help lists them. */
static const struct ctl_cmd *const ctl_groups[] = {
	ctl_status_commands, ctl_send_commands,     ctl_outbound_commands,
	ctl_redo_commands,   ctl_received_commands, ctl_lives_commands,
	ctl_peers_commands,  ctl_trace_commands,    NULL};

/* Every command: cmd runs over each group's table in turn. */
#define each_cmd(g, cmd)                                                       \
	for (g = ctl_groups; *g; g++)                                          \
		for (cmd = *g; cmd->name; cmd++)

/* The global options, for the main help and every command's help. */
static const char global_opts_help[] =
	"  -c, --config FILE  the node's configuration; default $SEMQ_CONFIG, "
	"else\n"
	"                     " SEMQ_CONFIG_DEFAULT "\n"
	"      --json         print JSON instead of text\n"
	"      --create       create the node's database when it does not "
	"exist (by\n"
	"                     default semqctl refuses: the node creates it on "
	"first\n"
	"                     start)\n"
	"  -h, --help         this help; 'semqctl COMMAND --help' or "
	"'semqctl help\n"
	"                     COMMAND' for one command\n"
	"  -V, --version      print the version\n";
static void print_main_help(FILE *f)
{
	const struct ctl_cmd *const *g, *cmd;

	fputs("Usage: semqctl [-c node.ini] [--json] [--create] COMMAND "
	      "[ARGS]\n"
	      "\n"
	      "Administers the SEMQ node configured in node.ini, through its "
	      "database.\n"
	      "\n"
	      "Commands:\n",
	      f);
	each_cmd(g, cmd)
	{
		fprintf(f, "  %-18s %s\n", cmd->name, cmd->summary);
	}
	fprintf(f, "  %-18s %s\n", "help [COMMAND]",
		"this help, or one command's");
	fputs("\nOptions:\n", f);
	fputs(global_opts_help, f);
	fputs("\n"
	      "Exit status: 0 ok, 1 runtime failure (e.g. the database does "
	      "not exist),\n"
	      "2 usage or configuration error.\n",
	      f);
}

static void print_cmd_help(const struct ctl_cmd *cmd, FILE *f)
{
	fprintf(f, "Usage: semqctl [-c node.ini] [--json] %s%s%s\n\n%s",
		cmd->name, *cmd->usage ? " " : "", cmd->usage, cmd->help);
	fprintf(f, "\nGlobal options:\n%s", global_opts_help);
}

/* `semqctl redo --help`: the usage and summary of each command of the
 * group `word`. */
static void print_group_help(const char *word, FILE *f)
{
	const struct ctl_cmd *const *g, *cmd;
	size_t n = strlen(word);

	fprintf(f,
		"Usage: semqctl [-c node.ini] [--json] %s COMMAND [ARGS]\n\n",
		word);
	each_cmd(g, cmd)
	{
		if (strncmp(cmd->name, word, n) || cmd->name[n] != ' ')
			continue;
		fprintf(f, "  %s%s%s\n      %s\n", cmd->name,
			*cmd->usage ? " " : "", cmd->usage, cmd->summary);
	}
	fprintf(f,
		"\n'semqctl %s COMMAND --help' for the options of one.\n"
		"\nGlobal options:\n%s",
		word, global_opts_help);
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
 * -c/--config, --json, --create, -h/--help, -V/--version at argv[*i]. Returns 1 when it was one
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
	if (!strcmp(a, "-V") || !strcmp(a, "--version")) {
		c->version = 1;
		return 1;
	}
	if (!strcmp(a, "--create")) {
		c->create = 1;
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

/* Is `word` the first word of two-word commands ("outbound")? Then subs
 * gets their second words ("list, show, cancel") and 1 is returned. */
static int cmd_group(const char *word, char *subs, size_t sz)
{
	const struct ctl_cmd *const *g, *cmd;
	size_t n = strlen(word), o = 0;
	int k = 0;

	subs[0] = '\0';
	each_cmd(g, cmd)
	{
		if (strncmp(cmd->name, word, n) || cmd->name[n] != ' ')
			continue;
		if (o < sz)
			o += (size_t)snprintf(subs + o, sz - o, "%s%s",
					      k++ ? ", " : "",
					      cmd->name + n + 1);
	}
	return k > 0;
}

/* Finds the command at argv[*i] in the table (*i then points at its last
 * word). EXIT_OK or EXIT_USAGE after reporting. */
static int find_cmd(struct ctl *c, int argc, char **argv, int *i)
{
	const struct ctl_cmd *const *g, *cmd;
	const char *word = argv[*i];
	char subs[256];
	int used;

	each_cmd(g, cmd)
	{
		used = cmd_match(cmd->name, argv + *i, argc - *i);
		if (used) {
			c->cmd = cmd;
			*i += used - 1;
			return EXIT_OK;
		}
	}
	if (cmd_group(word, subs, sizeof subs)) {
		/* "redo --help", "help redo": the group's commands. */
		if (*i + 1 < argc && (!strcmp(argv[*i + 1], "--help") ||
				      !strcmp(argv[*i + 1], "-h"))) {
			c->help = 1;
			*i += 1;
		}
		if (c->help) {
			c->group = word;
			return EXIT_OK;
		}
		return usage_err(c, "'%s' needs one of: %s", word, subs);
	}
	return usage_err(c, "unknown command '%s'", word);
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
		if (!c->cmd && c->group)
			return usage_err(c, "unexpected argument '%s'", a);
		if (!c->cmd) {
			if (a[0] == '-')
				return usage_err(c, "unknown option '%s'", a);
			if (!strcmp(a, "help") && !c->help) {
				c->help = 1; /* help COMMAND = COMMAND --help */
				continue;
			}
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
	if (c->help || c->version)
		return EXIT_OK;
	if (!c->cmd)
		return usage_err(c, "no command given");
	c->config_path = config_pick_path(c->config_path, &c->config_how);
	return EXIT_OK;
}

int main(int argc, char **argv)
{
	struct ctl c;
	int r;

	umask(077); /* a database it creates is its owner's only, as semqd's */
	memset(&c, 0, sizeof c);
	r = parse_args(&c, argc, argv);
	if (r)
		goto out;
	if (c.help) {
		if (c.cmd)
			print_cmd_help(c.cmd, stdout);
		else if (c.group)
			print_group_help(c.group, stdout);
		else
			print_main_help(stdout);
		goto out;
	}
	if (c.version) {
		printf("semqctl %s\n", SEMQ_VERSION);
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
