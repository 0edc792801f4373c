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
 *  - One table of commands (name, handler, options, usage, help). main()
 *    only parses the global options, finds the command in the table, lets the
 *    generic parser fill in the command's options, and dispatches. A new
 *    command is one more table entry; a name may be two words ("redo list").
 *  - Global options (-c, --json, --create, --help, --version) are accepted
 *    before or after the command; `help COMMAND` is `COMMAND --help`. A command option that takes a value takes the next argument
 *    verbatim, so `--data --json` sends the text "--json".
 *  - Exit codes (SPEC §8): 0 ok; 2 usage or configuration error, reported as
 *    one line naming the argument (plus a "Try ... --help" line), or every
 *    line config_load() found; 1 runtime failure, reported as one line.
 *  - Every argument is checked before the database is touched.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include <semq/error.h>
#include <semq/semq.h>

#include "config.h"
#include "ctl_trace.h"
#include "jsontext.h"
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

static int cmd_status(struct ctl *c);
static int cmd_send(struct ctl *c);
static int cmd_outbound_list(struct ctl *c);
static int cmd_outbound_show(struct ctl *c);
static int cmd_outbound_cancel(struct ctl *c);
static int cmd_outbound_renumber(struct ctl *c);
static int cmd_lives(struct ctl *c);
static int cmd_lives_drop(struct ctl *c);
static int cmd_redo_list(struct ctl *c);
static int cmd_redo_show(struct ctl *c);
static int cmd_redo_retry(struct ctl *c);
static int cmd_redo_discard(struct ctl *c);
static int cmd_received_list(struct ctl *c);
static int cmd_peers(struct ctl *c);
static int cmd_trace(struct ctl *c);

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

static const struct ctl_opt outbound_list_opts[] = {
	{"--status", "S"},   {"--dest", "D"},  {"--key", "K"},
	{"--since", "WHEN"}, {"--limit", "N"}, {NULL, NULL}};

static const struct ctl_opt outbound_id_opts[] = {{"--dest", "D"},
						  {NULL, NULL}};

static const struct ctl_opt redo_list_opts[] = {
	{"--status", "S"},   {"--dest", "D"},     {"--key", "K"},
	{"--since", "WHEN"}, {"--where", "EXPR"}, {"--group-by", "error"},
	{"--limit", "N"},    {"--offset", "N"},   {NULL, NULL}};

static const struct ctl_opt redo_show_opts[] = {{NULL, NULL}};

static const struct ctl_opt redo_retry_opts[] = {
	{"--all-dead", NULL}, {"--where", "EXPR"}, {"--dest", "D"},
	{"--key", "K"},       {"--since", "WHEN"}, {"--status", "S"},
	{"--dry-run", NULL},  {NULL, NULL}};

static const struct ctl_opt redo_discard_opts[] = {
	{"--reason", "TEXT"}, {"--where", "EXPR"}, {"--dest", "D"},
	{"--key", "K"},       {"--since", "WHEN"}, {"--status", "S"},
	{"--dry-run", NULL},  {NULL, NULL}};

static const struct ctl_opt received_list_opts[] = {
	{"--origin", "O"},   {"--dest", "D"},  {"--key", "K"},
	{"--since", "WHEN"}, {"--limit", "N"}, {NULL, NULL}};

static const struct ctl_opt peers_opts[] = {{NULL, NULL}};

static const struct ctl_opt lives_opts[] = {{NULL, NULL}};

static const struct ctl_opt trace_opts[] = {
	{"--key", "K"},   {"--id", "ORIGIN/DEST/SEQ"},
	{"--dest", "D"},  {"--since", "DURATION"},
	{"--limit", "N"}, {NULL, NULL}};

static const struct ctl_opt lives_drop_opts[] = {{"--force", NULL},
						 {NULL, NULL}};

#define BULK_JSON_HELP                                                         \
	"BULK --json prints {\"verb\", \"dry_run\", \"count\", \"entries\":\n" \
	"[{\"id\", \"message\", \"key\", \"status_name\", "                    \
	"\"last_error\"}...],\n"                                               \
	"\"woke_daemon\"}: the entries as they were before.\n"

static const struct ctl_cmd ctl_cmds[] = {
	{"status", cmd_status, status_opts, "",
	 "counts per table, status and stream; inbound watermarks",
	 "Shows the node id and database, then one line per table, stream and\n"
	 "status with its count and, for unconfirmed rows (tb_0031 unsent,\n"
	 "sent, relay-acked; tb_0030 unacked), the age of the first of them,\n"
	 "then every inbound stream with its confirmed_through watermark, and\n"
	 "per destination this node's confirmed messages that were dead there\n"
	 "when it confirmed them (its redo entry; a snapshot: 'semqctl trace'\n"
	 "asks the destination now). The\n"
	 "counts are kept by the database (semq_counts): status reads a few\n"
	 "rows per stream, however long the queues. --json prints\n"
	 "{\"node\", \"db\", \"schema_version\", \"dead_at_dest\": "
	 "[{\"dest\",\n"
	 "\"messages\", \"first_at\"}...], \"queues\": [...] (with\n"
	 "\"oldest\" null where none is shown), \"streams_in\": [...]}.\n"},
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
	{"outbound list", cmd_outbound_list, outbound_list_opts,
	 "[--status unsent|sent|relay-acked|held|confirmed|cancelled|N] "
	 "[--dest D] [--key K] [--since WHEN] [--limit N]",
	 "list the outbound queue tb_0031, newest first",
	 "Lists rows of the outbound queue tb_0031, newest first: ID\n"
	 "(origin/dest/seq), TYPE, KEY, STATUS, RESULT (the destination's\n"
	 "verdict), ATTEMPTS, AGE and LAST_ERROR (shortened).\n"
	 "\n"
	 "  --status S   only rows in status S: unsent (0), sent (4),\n"
	 "               relay-acked (6), held (8: for the operator, see\n"
	 "               outbound renumber), confirmed (100), cancelled (-2)\n"
	 "  --dest D     only messages to node D\n"
	 "  --key K      only messages with key K (where is bill K?)\n"
	 "  --since WHEN only rows created since WHEN: a duration back\n"
	 "               (90s, 15m, 2h, 3d) or 2026-11-26T03:00:00Z\n"
	 "  --limit N    at most N rows, 1..100000 (default 100)\n"
	 "\n"
	 "RESULT \"dead at D\": D answered that its redo entry for the\n"
	 "message is dead; a snapshot from the confirmation (a later retry\n"
	 "at D does not come back here): 'semqctl trace' asks D now.\n"
	 "\n"
	 "--json prints an array of objects with every column: id, origin,\n"
	 "dest, seq, rowid, type, key, prev_seq, deliver_at, created_at,\n"
	 "status, status_name, result, result_name, attempts,\n"
	 "next_attempt_at, sent_at, acked_at, last_error, payload_len,\n"
	 "custodian (the relay holding it in custody, status relay-acked)\n"
	 "(times in unix ms; result, key, last_error and custodian null\n"
	 "when none).\n"},
	{"outbound show", cmd_outbound_show, outbound_id_opts,
	 "ORIGIN/DEST/SEQ | SEQ --dest D",
	 "one outbound message with every column and its payload",
	 "Shows one message of tb_0031: every column, then the payload as\n"
	 "text when it is printable UTF-8, else as a hex dump; at most 4 KiB\n"
	 "of it, then how many more bytes there are.\n"
	 "\n"
	 "  ORIGIN/DEST/SEQ  the message id, e.g. R1/S1/7\n"
	 "  SEQ --dest D     a message of this node to D, e.g. 7 --dest S1\n"
	 "\n"
	 "--json prints the object of 'outbound list --json' plus \"payload\"\n"
	 "(all of it, base64) and \"payload_text\" when it is UTF-8.\n"
	 "A message that is not there is exit 1.\n"},
	{"outbound cancel", cmd_outbound_cancel, outbound_id_opts,
	 "ORIGIN/DEST/SEQ | SEQ --dest D",
	 "cancel an unconfirmed message of this node (sends a tombstone)",
	 "Cancels a message of this node that its destination has not\n"
	 "confirmed (status unsent, sent or relay-acked -> -2 cancelled) and\n"
	 "wakes the daemon, which sends a tombstone for it. The destination\n"
	 "records the tombstone without effect (result 4 cancelled), or, if\n"
	 "the message took effect first, answers that verdict and the row\n"
	 "becomes confirmed with it. Cancelling a cancelled message is a\n"
	 "no-op (exit 0).\n"
	 "\n"
	 "  ORIGIN/DEST/SEQ  the message id, e.g. R1/S1/7\n"
	 "  SEQ --dest D     a message of this node to D, e.g. 7 --dest S1\n"
	 "\n"
	 "Exit 1 when the message is already confirmed, not there, or a copy\n"
	 "held for another origin. --json prints {\"id\", \"cancelled\",\n"
	 "\"status\", \"already_cancelled\", \"woke_daemon\"} (also when the\n"
	 "cancel is refused, with \"cancelled\": false). A held message\n"
	 "(status 8: its destination cannot tell whether it has it) has no\n"
	 "tombstone to send: cancelling it ends it at once, cancelled.\n"},
	{"outbound renumber", cmd_outbound_renumber, outbound_id_opts,
	 "ORIGIN/DEST/SEQ | SEQ --dest D",
	 "send an unconfirmed message of this node again under a new seq",
	 "Gives an unconfirmed message of this node the next seq of its\n"
	 "stream, and so the unconfirmed later messages of its key, in\n"
	 "order; they go back to unsent and the daemon is woken to send\n"
	 "them. For a held message (status 8) whose destination could not\n"
	 "tell whether it has it: renumber it when you know it is a new\n"
	 "message (it did not take effect), cancel it when it took effect.\n"
	 "The daemon renumbers by itself a message its destination refused\n"
	 "because it holds another message under that seq\n"
	 "(docs/PROTOCOL.md, \"Lives of a node\").\n"
	 "\n"
	 "  ORIGIN/DEST/SEQ  the message id, e.g. R1/S1/7\n"
	 "  SEQ --dest D     a message of this node to D, e.g. 7 --dest S1\n"
	 "\n"
	 "Exit 1 when the message is confirmed, not there, or a copy held\n"
	 "for another origin. --json prints {\"id\", \"new_seq\",\n"
	 "\"renumbered\", \"woke_daemon\"}.\n"},
	{"redo list", cmd_redo_list, redo_list_opts,
	 "[--status pending|waiting|dead|done|discarded|N] [--dest D] "
	 "[--key K] [--since WHEN] [--where EXPR] [--group-by error] "
	 "[--limit N] [--offset N]",
	 "list the redo queue tb_0033, oldest first",
	 "Lists entries of the redo queue tb_0033 (failed messages waiting\n"
	 "for a retry, delayed messages, entries held behind an earlier one\n"
	 "of their key), oldest first: ID (the entry), MESSAGE\n"
	 "(origin/dest/seq), TYPE, KEY, STATUS, TRIES (attempts made), LEVEL\n"
	 "(the backoff level a next failure uses), NEXT (when a pending entry\n"
	 "runs: \"in 25s\", or \"due\"; \"-\" for the others) and LAST_ERROR\n"
	 "(shortened; 'redo show ID' prints it whole).\n"
	 "\n"
	 "  --status S   only entries in status S: pending (0), waiting (1),\n"
	 "               dead (-1), done (2), discarded (-2)\n"
	 "  --dest D     only messages to node D\n"
	 "  --key K      only messages with key K\n"
	 "  --since WHEN only entries created since WHEN: a duration back\n"
	 "               (90s, 15m, 2h, 3d) or 2026-11-26T03:00:00Z\n"
	 "  --where EXPR error~TEXT (last_error contains TEXT, any case)\n"
	 "               or error=TEXT (last_error is TEXT)\n"
	 "  --group-by error  one line per distinct last_error of the\n"
	 "               entries selected: COUNT, OLDEST, NEWEST (ages of\n"
	 "               the first and last entry), DESTS and ERROR, the\n"
	 "               largest group first; --json prints {\"groups\":\n"
	 "               [{\"error\", \"count\", \"oldest\", \"newest\",\n"
	 "               \"dests\": [...]}...]} (times in unix ms)\n"
	 "  --limit N    at most N entries (groups), 1..100000 (default 100)\n"
	 "  --offset N   skip the first N entries (groups)\n"
	 "\n"
	 "--json prints an array of objects with every column: id, message,\n"
	 "origin, dest, seq, type, key, prev_seq, deliver_at, msg_created_at,\n"
	 "status, status_name, tries, level, next_attempt_at, created_at,\n"
	 "updated_at, last_error, discard_reason, payload_len (times in unix\n"
	 "ms; key, last_error and discard_reason null when none).\n"},
	{"redo show", cmd_redo_show, redo_show_opts, "ID",
	 "one redo entry with every column and its payload",
	 "Shows one entry of tb_0033: every column, the whole last_error and\n"
	 "discard_reason, when it runs next (UTC and relative) and what a\n"
	 "further failure would do, then the payload as text when it is\n"
	 "printable UTF-8, else as a hex dump; at most 4 KiB of it, then how\n"
	 "many more bytes there are.\n"
	 "\n"
	 "  ID   the entry's id, as 'redo list' shows it\n"
	 "\n"
	 "--json prints the object of 'redo list --json' plus \"payload\"\n"
	 "(all of it, base64) and \"payload_text\" when it is UTF-8.\n"
	 "An entry that is not there is exit 1.\n"},
	{"redo retry", cmd_redo_retry, redo_retry_opts,
	 "ID | --all-dead | --where EXPR [--dest D] [--key K] [--since WHEN] "
	 "[--dry-run]",
	 "run dead redo entries again now",
	 "Makes a dead entry pending again, due now, and wakes the semqd\n"
	 "serving the database so it runs it at once. The backoff level\n"
	 "starts over; tries are kept, so a retryable failure makes it dead\n"
	 "again at once while tries >= max_tries.\n"
	 "\n"
	 "  ID           the dead entry to retry\n"
	 "  --all-dead   every dead entry\n"
	 "\n"
	 "Bulk (BULK below): every dead entry that --where EXPR (error~TEXT:\n"
	 "last_error contains TEXT, any case; error=TEXT: is TEXT) and the\n"
	 "filters --dest D, --key K, --since WHEN (as 'redo list') select;\n"
	 "--status may only say dead. --dry-run lists exactly those entries\n"
	 "and changes nothing. The real run retries the entries it lists, in\n"
	 "transactions of 500, with progress on stderr (retried 500/1950).\n"
	 "\n" BULK_JSON_HELP
	 "Exit 1 when the entry is not dead or not there. --json prints\n"
	 "{\"id\", \"message\", \"retried\", \"status\", \"status_name\",\n"
	 "\"woke_daemon\"} (also when it is refused, with \"retried\": "
	 "false),\n"
	 "or for --all-dead {\"retried\": [{\"id\", \"message\"}...],\n"
	 "\"count\", \"woke_daemon\"}.\n"},
	{"redo discard", cmd_redo_discard, redo_discard_opts,
	 "ID --reason TEXT | --where EXPR --reason TEXT [--dest D] [--key K] "
	 "[--since WHEN] [--status dead|pending|waiting] [--dry-run]",
	 "give up on a redo entry, with a reason; releases its key",
	 "Discards a pending, waiting or dead entry: it will never take\n"
	 "effect, and the reason is kept with it. When it was the head of\n"
	 "its key, the next waiting entry of the key is released (pending,\n"
	 "due now or at its deliver_at), and the daemon is woken to run it.\n"
	 "\n"
	 "  ID             the entry to discard\n"
	 "  --reason TEXT  why, for whoever looks later (required, 1..1000\n"
	 "                 bytes)\n"
	 "\n"
	 "Bulk: every entry that --where EXPR and the filters --dest,\n"
	 "--key, --since select, in status --status (dead unless it says\n"
	 "pending or waiting), discarded one by one as above (each releases\n"
	 "the next waiting entry of its key), in transactions of 500 with\n"
	 "progress on stderr; --dry-run lists them and changes nothing.\n"
	 "\n" BULK_JSON_HELP
	 "Exit 1 when the entry is done or discarded already, or not there.\n"
	 "--json prints {\"id\", \"message\", \"discarded\", \"status\",\n"
	 "\"discard_reason\", \"released\": [{\"id\", \"message\", "
	 "\"status\",\n"
	 "\"next_attempt_at\"}...], \"still_waiting\", \"woke_daemon\"}\n"
	 "(when refused: \"discarded\": false with the entry's status).\n"},
	{"received list", cmd_received_list, received_list_opts,
	 "[--origin O] [--dest D] [--key K] [--since WHEN] [--limit N]",
	 "list the received record tb_0030, newest first",
	 "Lists the received record tb_0030, newest first: MESSAGE\n"
	 "(origin/dest/seq), TYPE, KEY, RECEIVED (how long ago), VIA (the\n"
	 "relay that delivered it, - when direct), RESULT (processed, redo,\n"
	 "scheduled, cancelled) and ACK (acked once every 810-Response it\n"
	 "needs arrived; unacked says which are missing). Then one line per\n"
	 "inbound stream (per life of its origin) with its confirmed_through\n"
	 "watermark: the rows at or below it stay for [node]\n"
	 "receipt_retention, then they are purged and no longer listed.\n"
	 "\n"
	 "  --origin O   only messages from node O\n"
	 "  --dest D     only messages to node D (a relay's or instance's)\n"
	 "  --key K      only messages with key K\n"
	 "  --since WHEN only rows received since WHEN: a duration back\n"
	 "               (90s, 15m, 2h, 3d) or 2026-11-26T03:00:00Z\n"
	 "  --limit N    at most N rows, 1..100000 (default 100)\n"
	 "\n"
	 "--json prints {\"received\": [...], \"streams_in\": [{\"origin\",\n"
	 "\"dest\", \"life\", \"confirmed_through\"}...]}, a received row "
	 "with\n"
	 "message, origin, dest, seq, life, rowid, type, key, prev_seq,\n"
	 "received_at, via,\n"
	 "result, result_name, ack_status, ack_name, confirm_need and\n"
	 "confirm_got (bits: 1 origin, 2 relay).\n"},
	{"lives", cmd_lives, lives_opts, "",
	 "this database's life and the lives of the origins it heard from",
	 "A node's database is one life of the node (docs/PROTOCOL.md,\n"
	 "\"Lives of a node\"): a re-imaged node starts a new life, and its\n"
	 "streams start afresh at every receiver and relay. Shows this\n"
	 "database's LIFE (16 hex digits; 0000000000000001 is the legacy life\n"
	 "of a database from SEMQ 0.1), then one line per origin, life and\n"
	 "stream this node knows: ORIGIN, LIFE, CURRENT (yes: its newest life\n"
	 "here), AS (receiver: the stream to this node; relay: one this node\n"
	 "relayed), DEST, MARK (receiver: the watermark; relay: the highest\n"
	 "seq relayed), ROWS (received rows kept) and SINCE (when the life\n"
	 "began here).\n"
	 "\n"
	 "--json prints {\"node\", \"life\", \"lives\": [{\"origin\",\n"
	 "\"life\", \"current\", \"as\", \"dest\", \"mark\", \"rows\",\n"
	 "\"started_at\"}...]}.\n"},
	{"lives drop", cmd_lives_drop, lives_drop_opts, "ORIGIN LIFE [--force]",
	 "forget a retired life of an origin",
	 "Forgets a life of ORIGIN this node knows (LIFE as 'lives' shows\n"
	 "it): its watermarks, its received rows and its relay record, one\n"
	 "row each per stream. Refused while it has redo entries that are not\n"
	 "finished or relay copies not delivered, and, without --force, when\n"
	 "it is the current life of one of ORIGIN's streams here (a message\n"
	 "of that life arriving later would start its stream afresh and\n"
	 "could take effect again: drop a current life only when ORIGIN's\n"
	 "database is gone for good).\n"
	 "\n"
	 "  --force  drop it even when it is a current life\n"
	 "\n"
	 "--json prints {\"origin\", \"life\", \"dropped\"}.\n"},
	{"peers", cmd_peers, peers_opts, "",
	 "the running daemon's peer connections (over its admin HTTP)",
	 "Asks the running semqd for its peer connections, over its admin\n"
	 "HTTP ([node] admin in node.ini, GET /peers): one line per\n"
	 "connection with PEER (PEER@INSTANCE for one of several instances\n"
	 "of a node id), STATE (tls, hello, ready, closing),\n"
	 "DIRECTION (dialled or accepted), ADDRESS, SINCE (how long it has\n"
	 "been open) and PENDING (bytes queued for the peer); then every\n"
	 "configured peer without a connection, STATE disconnected, with\n"
	 "NEXT_DIAL (when it is dialled next; - when it only dials in).\n"
	 "\n"
	 "Exit 1 when [node] admin is not set or the daemon does not answer.\n"
	 "--json prints the daemon's answer: {\"node\", \"now\", \"peers\":\n"
	 "[{\"peer\", \"instance\", \"state\", \"direction\", \"address\",\n"
	 "\"conn_id\", \"since\", \"ready_at\", \"pending_bytes\"}...]}, a "
	 "peer\n"
	 "without a connection with \"next_dial_at\", \"next_dial_in_ms\"\n"
	 "and \"attempts\" (times in unix ms, null when none); \"instance\"\n"
	 "is null for a node's only instance.\n"},
	{"trace", cmd_trace, trace_opts, CTL_TRACE_USAGE, CTL_TRACE_SUMMARY,
	 ctl_trace_help},
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

/* Who ran semqctl, for the operator's lines. */
static const char *who(void)
{
	const char *u = getenv("SUDO_USER");

	if (!u || !*u)
		u = getenv("USER");
	return u && *u ? u : "?";
}

static void operator_said(const struct ctl *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/*
 * The record of an operator's change: one line on semqctl's stderr,
 * "semqctl: operator USER (pid N) on DB: WHAT". semqctl changes the
 * database directly, not through the daemon, so the daemon's log cannot
 * have it; the terminal or the script that ran semqctl keeps it, and the
 * entries keep their discard_reason and updated_at.
 */
static void operator_said(const struct ctl *c, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "semqctl: operator %s (pid %ld) on %s: ", who(),
		(long)getpid(), c->db);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void print_main_help(FILE *f)
{
	const struct ctl_cmd *cmd;

	fputs("Usage: semqctl [-c node.ini] [--json] [--create] COMMAND "
	      "[ARGS]\n"
	      "\n"
	      "Administers the SEMQ node configured in node.ini, through its "
	      "database.\n"
	      "\n"
	      "Commands:\n",
	      f);
	for (cmd = ctl_cmds; cmd->name; cmd++)
		fprintf(f, "  %-18s %s\n", cmd->name, cmd->summary);
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
	const struct ctl_cmd *cmd;
	size_t n = strlen(word);

	fprintf(f,
		"Usage: semqctl [-c node.ini] [--json] %s COMMAND [ARGS]\n\n",
		word);
	for (cmd = ctl_cmds; cmd->name; cmd++) {
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
	const struct ctl_cmd *cmd;
	size_t n = strlen(word), o = 0;
	int k = 0;

	subs[0] = '\0';
	for (cmd = ctl_cmds; cmd->name; cmd++) {
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
	const struct ctl_cmd *cmd;
	const char *word = argv[*i];
	char subs[256];
	int used;

	for (cmd = ctl_cmds; cmd->name; cmd++) {
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
 * that the file is not there (and how it was chosen) or every problem
 * config_load() found. */
static int ctl_load_config(struct ctl *c)
{
	char *errs = NULL, err[SEMQ_ERRLEN + PATH_MAX];
	size_t n;
	int r;

	if (config_file_exists(c->config_path, c->config_how, err,
			       sizeof err) != SEMQ_OK) {
		fprintf(stderr, "semqctl: %s\n", err);
		return EXIT_USAGE;
	}
	r = config_load(c->config_path, &c->cfg, &errs);
	if (r == SEMQ_OK) {
		semq_db_shown(c->cfg->db, c->db, sizeof c->db);
		return EXIT_OK;
	}
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

/* Opens the node's database (migrating it; creating it only with --create)
 * into c->st. A database that is not there is exit 1, saying how to make
 * it. */
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
		.no_create = !c->create,
	};
	char err[SEMQ_ERRLEN] = "";
	int r;

	r = store_open(&o, &c->st, err, sizeof err);
	if (r == SEMQ_ERR_NOT_FOUND)
		return fail("%s (the node creates it on first start; "
			    "semqctl --create to create it now)",
			    err);
	if (r != SEMQ_OK)
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

static struct held_copy *held_add(struct status_data *d, const char *a,
				  const char *b, int relay)
{
	struct held_copy *h;

	if (d->n_held == d->cap_held) {
		size_t cap = d->cap_held ? d->cap_held * 2 : 16;
		void *v = realloc(d->held, cap * sizeof *d->held);
		if (!v) {
			d->failed = 1;
			return NULL;
		}
		d->held = v;
		d->cap_held = cap;
	}
	h = &d->held[d->n_held++];
	memset(h, 0, sizeof *h);
	snprintf(h->a, sizeof h->a, "%s", a);
	snprintf(h->b, sizeof h->b, "%s", b);
	h->relay = relay;
	return h;
}

static int status_custody_cb(void *ctx, const char *origin, const char *dest,
			     int64_t messages, int64_t bytes, int64_t oldest)
{
	struct held_copy *h = held_add(ctx, origin, dest, 1);

	if (!h)
		return 1;
	h->messages = messages;
	h->bytes = bytes;
	h->at = oldest;
	return 0;
}

static int status_waiting_cb(void *ctx, const char *dest, const char *relay,
			     int64_t n, int64_t since)
{
	struct held_copy *h = held_add(ctx, dest, relay, 0);

	if (!h)
		return 1;
	h->messages = n;
	h->at = since;
	return 0;
}

/* store_outbound_dead_at's rows. */
static int status_dead_cb(void *ctx, const char *dest, const char *relay,
			  int64_t n, int64_t since)
{
	struct status_data *d = ctx;
	struct held_copy *h;

	(void)relay;
	if (d->n_dead == d->cap_dead) {
		size_t cap = d->cap_dead ? d->cap_dead * 2 : 8;
		void *v = realloc(d->dead, cap * sizeof *d->dead);
		if (!v) {
			d->failed = 1;
			return 1;
		}
		d->dead = v;
		d->cap_dead = cap;
	}
	h = &d->dead[d->n_dead++];
	memset(h, 0, sizeof *h);
	snprintf(h->a, sizeof h->a, "%s", dest);
	h->messages = n;
	h->at = since;
	return 0;
}

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
	for (i = 0; i < d->n_outs; i++) {
		free(d->outs[i].dest);
		free(d->outs[i].note);
	}
	free(d->rows);
	free(d->dead);
	free(d->streams);
	free(d->outs);
	free(d->held);
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
			    uint64_t life, uint64_t confirmed_through)
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
	s->life = life;
	s->confirmed_through = confirmed_through;
	if ((origin && !s->origin) || (dest && !s->dest))
		goto nomem;
	return 0;
nomem:
	d->failed = 1;
	return 1;
}

static int status_out_cb(void *ctx, const struct out_stream *os)
{
	struct status_data *d = ctx;
	struct out_copy *o;
	size_t cap = next_cap(d->cap_outs);

	if (d->n_outs == d->cap_outs) {
		o = realloc(d->outs, cap * sizeof *d->outs);
		if (!o) {
			d->failed = 1;
			return 1;
		}
		d->outs = o;
		d->cap_outs = cap;
	}
	o = &d->outs[d->n_outs++];
	o->dest = dup_or_null(os->dest);
	o->note = dup_or_null(os->note);
	o->last_seq = os->last_seq;
	o->resyncs = os->resyncs;
	o->resync_at = os->resync_at;
	if (!o->dest || (os->note && !o->note)) {
		d->failed = 1;
		return 1;
	}
	return 0;
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

/* What relays hold of this node's messages, and what this relay holds,
 * with its quotas. */
static void status_print_custody(const struct ctl *c,
				 const struct status_data *d, int64_t now)
{
	const struct config *cf = c->cfg;
	int64_t m = 0, b = 0;
	char tbuf[48];
	int any = 0;
	size_t i;

	for (i = 0; i < d->n_held; i++) {
		const struct held_copy *h = &d->held[i];
		if (h->relay)
			continue;
		if (!any++)
			printf("\nheld by relays (in custody, outside the "
			       "window)\n%-20s  %-20s  %10s  %s\n",
			       "DEST", "RELAY", "MESSAGES", "SINCE");
		printf("%-20s  %-20s  %10lld  %s\n", h->a, h->b,
		       (long long)h->messages,
		       fmt_oldest(h->at, now, tbuf, sizeof tbuf));
	}
	any = 0;
	for (i = 0; i < d->n_held; i++) {
		const struct held_copy *h = &d->held[i];
		if (!h->relay)
			continue;
		if (!any++)
			printf("\ncustody (this relay holds)\n%-20s  %-20s  "
			       "%10s  %12s  %s\n",
			       "ORIGIN", "DEST", "MESSAGES", "BYTES", "OLDEST");
		printf("%-20s  %-20s  %10lld  %12lld  %s\n", h->a, h->b,
		       (long long)h->messages, (long long)h->bytes,
		       fmt_oldest(h->at, now, tbuf, sizeof tbuf));
		m += h->messages;
		b += h->bytes;
	}
	if (cf->relay && cf->store_and_forward)
		printf("%scustody quota: %lld of %u messages, %lld of %zu "
		       "bytes; per origin %u messages, %zu bytes\n",
		       any ? "" : "\n", (long long)m, cf->quota_messages,
		       (long long)b, cf->quota_bytes,
		       cf->quota_messages_per_origin,
		       cf->quota_bytes_per_origin);
}

static void status_print_text(const struct ctl *c, const struct status_data *d)
{
	int wt = 5, wo = 6, wd = 4, ws = 6, wc = 5;
	char sbuf[48], tbuf[48];
	int64_t now = now_ms();
	size_t i;

	char lb[SEMQ_LIFE_STRLEN];

	printf("node %s  life %s  db %s  schema %d\n\n", c->cfg->id,
	       semq_life_str(store_life(c->st), lb, sizeof lb), c->db,
	       store_schema_version(c->st));
	/* A database that went back in time: what the peers had seen. */
	for (i = 0; i < d->n_outs; i++)
		if (d->outs[i].resyncs)
			printf("RESYNC %s->%s: %lld time(s), last %s: %s\n",
			       c->cfg->id, d->outs[i].dest,
			       (long long)d->outs[i].resyncs,
			       fmt_oldest(d->outs[i].resync_at, now, tbuf,
					  sizeof tbuf),
			       d->outs[i].note ? d->outs[i].note : "-");
	if (!d->n_rows)
		printf("no messages\n");
	for (i = 0; i < d->n_rows; i++) {
		const struct stat_copy *r = &d->rows[i];
		wt = width(wt, semq_table_title(r->table));
		wo = width(wo, r->origin);
		wd = width(wd, r->dest);
		ws = width(ws, semq_status_name(r->table, r->status));
		snprintf(sbuf, sizeof sbuf, "%lld", (long long)r->count);
		wc = width(wc, sbuf);
	}
	if (d->n_rows)
		printf("%-*s  %-*s  %-*s  %-*s  %*s  %s\n", wt, "TABLE", wo,
		       "ORIGIN", wd, "DEST", ws, "STATUS", wc, "COUNT",
		       "OLDEST");
	for (i = 0; i < d->n_rows; i++) {
		const struct stat_copy *r = &d->rows[i];
		printf("%-*s  %-*s  %-*s  %-*s  %*lld  %s\n", wt,
		       semq_table_title(r->table), wo,
		       r->origin ? r->origin : "-", wd, r->dest ? r->dest : "-",
		       ws, semq_status_name(r->table, r->status), wc,
		       (long long)r->count,
		       fmt_oldest(r->oldest, now, tbuf, sizeof tbuf));
	}
	status_print_custody(c, d, now);
	for (i = 0; i < d->n_dead; i++) {
		if (!i)
			printf("\nconfirmed, dead at the destination (its "
			       "answer when it confirmed; 'semqctl trace' asks "
			       "it now)\n%-20s  %10s  %s\n",
			       "DEST", "MESSAGES", "FIRST");
		printf("%-20s  %10lld  %s\n", d->dead[i].a,
		       (long long)d->dead[i].messages,
		       fmt_oldest(d->dead[i].at, now, tbuf, sizeof tbuf));
	}
	if (!d->n_streams)
		return;
	wo = 6;
	wd = 4;
	for (i = 0; i < d->n_streams; i++) {
		wo = width(wo, d->streams[i].origin);
		wd = width(wd, d->streams[i].dest);
	}
	printf("\ninbound streams\n%-*s  %-*s  %-16s  %s\n", wo, "ORIGIN", wd,
	       "DEST", "LIFE", "CONFIRMED_THROUGH");
	for (i = 0; i < d->n_streams; i++)
		printf("%-*s  %-*s  %-16s  %llu\n", wo,
		       d->streams[i].origin ? d->streams[i].origin : "-", wd,
		       d->streams[i].dest ? d->streams[i].dest : "-",
		       semq_life_str(d->streams[i].life, lb, sizeof lb),
		       (unsigned long long)d->streams[i].confirmed_through);
}

/* The --json document of status (new reference, NULL when out of memory). */
static json_t *status_json(const struct ctl *c, const struct status_data *d)
{
	json_t *doc = NULL, *queues = json_array(), *streams = json_array();
	json_t *outs = json_array(), *held = json_array();
	json_t *waiting = json_array(), *dead = json_array(), *e;
	char lb[SEMQ_LIFE_STRLEN];
	size_t i;

	if (!queues || !streams || !outs || !held || !waiting || !dead)
		goto out;
	for (i = 0; i < d->n_dead; i++) {
		e = json_pack("{s:s, s:I, s:I}", "dest", d->dead[i].a,
			      "messages", (json_int_t)d->dead[i].messages,
			      "first_at", (json_int_t)d->dead[i].at);
		if (!e || json_array_append_new(dead, e))
			goto out;
	}
	for (i = 0; i < d->n_rows; i++) {
		const struct stat_copy *r = &d->rows[i];
		e = json_pack("{s:s, s:s?, s:s?, s:i, s:s, s:I, s:o}", "table",
			      r->table, "origin", r->origin, "dest", r->dest,
			      "status", r->status, "status_name",
			      semq_status_name(r->table, r->status), "count",
			      (json_int_t)r->count, "oldest",
			      r->oldest > 0 ? json_integer(r->oldest)
					    : json_null());
		if (!e || json_array_append_new(queues, e))
			goto out;
	}
	for (i = 0; i < d->n_streams; i++) {
		e = json_pack("{s:s?, s:s?, s:s, s:I}", "origin",
			      d->streams[i].origin, "dest", d->streams[i].dest,
			      "life",
			      semq_life_str(d->streams[i].life, lb, sizeof lb),
			      "confirmed_through",
			      (json_int_t)d->streams[i].confirmed_through);
		if (!e || json_array_append_new(streams, e))
			goto out;
	}
	for (i = 0; i < d->n_outs; i++) {
		const struct out_copy *o = &d->outs[i];

		e = json_pack("{s:s, s:I, s:I, s:o, s:s?}", "dest", o->dest,
			      "last_seq", (json_int_t)o->last_seq, "resyncs",
			      (json_int_t)o->resyncs, "resync_at",
			      o->resync_at ? json_integer(o->resync_at)
					   : json_null(),
			      "resync_note", o->note);
		if (!e || json_array_append_new(outs, e))
			goto out;
	}
	for (i = 0; i < d->n_held; i++) {
		const struct held_copy *h = &d->held[i];

		e = h->relay
			    ? json_pack(
				      "{s:s, s:s, s:I, s:I, s:o}", "origin",
				      h->a, "dest", h->b, "messages",
				      (json_int_t)h->messages, "bytes",
				      (json_int_t)h->bytes, "oldest_created_at",
				      h->at ? json_integer(h->at) : json_null())
			    : json_pack("{s:s, s:s, s:I, s:o}", "dest", h->a,
					"relay", h->b, "messages",
					(json_int_t)h->messages, "since",
					h->at ? json_integer(h->at)
					      : json_null());
		if (!e || json_array_append_new(h->relay ? held : waiting, e))
			goto out;
	}
	/* "o" steals the arrays, even when packing fails. */
	doc = json_pack(
		"{s:s, s:s, s:s, s:i, s:o, s:o, s:o, s:o, s:{s:o, s:o, s:{s:I, "
		"s:I, s:I, s:I}}}",
		"node", c->cfg->id, "life",
		semq_life_str(store_life(c->st), lb, sizeof lb), "db", c->db,
		"schema_version", store_schema_version(c->st), "queues", queues,
		"streams_in", streams, "streams_out", outs, "dead_at_dest",
		dead, "custody", "held", held, "waiting", waiting, "quota",
		"messages", (json_int_t)c->cfg->quota_messages, "bytes",
		(json_int_t)c->cfg->quota_bytes, "messages_per_origin",
		(json_int_t)c->cfg->quota_messages_per_origin,
		"bytes_per_origin", (json_int_t)c->cfg->quota_bytes_per_origin);
	queues = streams = outs = held = waiting = dead = NULL;
out:
	json_decref(dead);
	json_decref(queues);
	json_decref(streams);
	json_decref(outs);
	json_decref(held);
	json_decref(waiting);
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

	/* O(streams) reads, as /metrics: never a count of the queues, which
	 * can be long on a node that could not send for days. */
	r = EXIT_FAIL;
	if (store_counts(c->st, status_stat_cb, &d) != SEMQ_OK ||
	    store_streams_in(c->st, status_stream_cb, &d) != SEMQ_OK ||
	    store_streams_out(c->st, status_out_cb, &d) != SEMQ_OK ||
	    store_counts_custody(c->st, status_custody_cb, &d) != SEMQ_OK ||
	    store_counts_waiting(c->st, status_waiting_cb, &d) != SEMQ_OK ||
	    store_outbound_dead_at(c->st, status_dead_cb, &d) != SEMQ_OK) {
		fail("%s: reading the queues: %s", c->db, store_errmsg(c->st));
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
	/* A PostgreSQL database has no wake socket: its instances find new
	 * rows within poll_interval. */
	woke = !c->cfg->db_url && semq_notify(c->cfg->db) == SEMQ_OK;
	if (c->json) {
		r = print_json(json_pack("{s:s, s:s, s:I, s:b}", "origin",
					 id.origin, "dest", id.dest, "seq",
					 (json_int_t)seq, "woke_daemon", woke));
		goto out;
	}
	printf("queued %s\n", msgid_str(&id, idbuf, sizeof idbuf));
	if (!woke && !c->cfg->db_url)
		fprintf(stderr,
			"semqctl: no semqd is running on %s to wake; "
			"the message is sent when it starts\n",
			c->db);
	r = EXIT_OK;
out:
	free(q.payload);
	return r;
}

/* ---- outbound: list, show, cancel ----------------------------------------- */

#define LIST_LIMIT_DEFAULT 100
#define LIST_LIMIT_MAX 100000
#define SHOW_PAYLOAD_MAX 4096 /* bytes of the payload that show prints */
#define ERROR_COLS 40         /* characters of LAST_ERROR in a listing */
#define CELL_MAX 1024         /* bytes of one cleaned table cell */

/* The names of tb_0031.status that --status accepts, besides the numbers. */
#define out_statuses semq_out_statuses
#define result_name semq_result_name

/* --status: one of the n statuses v of `table`, by its semq_status_name() or
 * its number. */
static int parse_status(const char *table, const int *v, size_t n,
			const char *s, int *out)
{
	char num[16];
	size_t i;

	for (i = 0; i < n; i++) {
		snprintf(num, sizeof num, "%d", v[i]);
		if (!strcmp(s, semq_status_name(table, v[i])) ||
		    !strcmp(s, num)) {
			*out = v[i];
			return SEMQ_OK;
		}
	}
	return SEMQ_ERR_INVALID;
}

/* The listing filters --dest, --key, --since, --where of the command (those
 * it has) into f; the strings point into argv. 0 or a usage error. */
static int parse_filter(struct ctl *c, struct store_filter *f,
			struct semq_where *w)
{
	const char *dest = opt(c, "--dest"), *key = opt(c, "--key");
	const char *since = opt(c, "--since"), *where = opt(c, "--where");

	if (dest && !semq_id_valid(dest))
		return usage_err(c,
				 "--dest '%s' is not a node id (1-64 of "
				 "A-Za-z0-9._-)",
				 dest);
	if (key && (!*key || strlen(key) > SEMQ_KEY_MAX))
		return usage_err(c, "--key '%s' is not a key of 1..%d bytes",
				 key, SEMQ_KEY_MAX);
	if (since && semq_when_parse(since, now_ms(), 0, &f->since))
		return usage_err(c, "--since '%s' is not %s", since,
				 SEMQ_WHEN_FORMS);
	if (where && semq_where_parse(where, w))
		return usage_err(c, "--where '%s' is not %s", where,
				 SEMQ_WHERE_FORMS);
	f->dest = dest;
	f->key = key;
	f->where = where ? w : NULL;
	return EXIT_OK;
}

/* Text a terminal shows as it is: UTF-8 with no control characters but
 * tab, newline and carriage return. */
static int printable(const uint8_t *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if ((p[i] < 0x20 && p[i] != '\t' && p[i] != '\n' &&
		     p[i] != '\r') ||
		    p[i] == 0x7f)
			return 0;
	return semq_utf8_valid(p, n);
}

/*
 * A table cell from s (NULL -> "-"): control characters become spaces, bytes
 * that are not UTF-8 become '?', and after max_chars characters (0 = no
 * limit) the rest becomes "…". Returns buf (CELL_MAX bytes at least).
 */
static const char *cell(const char *s, size_t max_chars, char *buf,
			size_t bufsz)
{
	const uint8_t *p = (const uint8_t *)s;
	size_t n, k, o = 0, chars = 0;

	if (!s)
		return "-";
	n = strlen(s);
	while (n && o + 8 < bufsz) {
		if (max_chars && chars == max_chars) {
			memcpy(buf + o, "\xe2\x80\xa6", 3); /* … */
			o += 3;
			break;
		}
		k = semq_utf8_char(p, n);
		if (!k) {
			buf[o++] = '?';
			k = 1;
		} else if (k == 1 && (*p < 0x20 || *p == 0x7f)) {
			buf[o++] = ' ';
		} else {
			memcpy(buf + o, p, k);
			o += k;
		}
		p += k;
		n -= k;
		chars++;
	}
	buf[o] = '\0';
	return buf;
}

/* Columns a cell takes on a terminal: its UTF-8 characters. */
static int cols(const char *s)
{
	int n = 0;

	for (; *s; s++)
		if (((uint8_t)*s & 0xc0) != 0x80)
			n++;
	return n;
}

/* Prints s left-aligned in a column of w, then two spaces. */
static void put_cell(const char *s, int w)
{
	int pad = w - cols(s);

	printf("%s%*s  ", s, pad > 0 ? pad : 0, "");
}

/* The text of column `col` of row i of a listing (i == TABLE_HEAD: the
 * heading), in buf (CELL_MAX bytes) or static. */
#define TABLE_HEAD SIZE_MAX
#define TABLE_MAX_COLS 16
typedef const char *(*table_cell_fn)(const void *ctx, size_t i, int col,
				     int64_t now, char *buf, size_t sz);

/* An aligned table: the heading, then n rows of n_cols (<= TABLE_MAX_COLS)
 * columns; every column as wide as its widest cell, the last not padded. */
static void print_table(const void *ctx, size_t n, int n_cols, table_cell_fn fn)
{
	int w[TABLE_MAX_COLS], col, k;
	char buf[CELL_MAX];
	int64_t now = now_ms();
	size_t i;

	for (col = 0; col < n_cols; col++)
		w[col] = cols(fn(ctx, TABLE_HEAD, col, now, buf, sizeof buf));
	for (i = 0; i < n; i++)
		for (col = 0; col < n_cols; col++) {
			k = cols(fn(ctx, i, col, now, buf, sizeof buf));
			if (k > w[col])
				w[col] = k;
		}
	for (i = 0; i <= n; i++) {
		size_t row = i ? i - 1 : TABLE_HEAD;
		for (col = 0; col < n_cols - 1; col++)
			put_cell(fn(ctx, row, col, now, buf, sizeof buf),
				 w[col]);
		printf("%s\n", fn(ctx, row, n_cols - 1, now, buf, sizeof buf));
	}
}

/* "3s", "5m", "2h", "4d": how long ago `at` was. */
static const char *fmt_age(int64_t at, int64_t now, char *buf, size_t sz)
{
	int64_t age = now - at;

	if (at <= 0)
		snprintf(buf, sz, "-");
	else if (age < 60 * 1000)
		snprintf(buf, sz, "%llds",
			 (long long)(age > 0 ? age / 1000 : 0));
	else if (age < 3600 * 1000)
		snprintf(buf, sz, "%lldm", (long long)(age / 60000));
	else if (age < 86400 * 1000)
		snprintf(buf, sz, "%lldh", (long long)(age / 3600000));
	else
		snprintf(buf, sz, "%lldd", (long long)(age / 86400000));
	return buf;
}

/* "1717243200123 (2024-06-01T12:00:00.123Z)", or "-" for 0. */
static const char *fmt_time(int64_t ms, char *buf, size_t sz)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;
	char iso[32];

	if (ms <= 0)
		snprintf(buf, sz, "-");
	else if (gmtime_r(&t, &tm) &&
		 strftime(iso, sizeof iso, "%Y-%m-%dT%H:%M:%S", &tm))
		snprintf(buf, sz, "%lld (%s.%03dZ)", (long long)ms, iso,
			 (int)(ms % 1000));
	else
		snprintf(buf, sz, "%lld", (long long)ms);
	return buf;
}

/* The message an outbound command names. */
struct target {
	struct msgid id; /* origin "" until target_resolve() for a bare SEQ */
	int bare;        /* given as SEQ --dest D: origin is this node */
	char text[MSGID_STRLEN];
};

/* Copies the node id s[0..n) into out (SEMQ_ID_MAX + 1 bytes) if valid. */
static int take_id(const char *s, size_t n, char *out)
{
	if (n == 0 || n > SEMQ_ID_MAX)
		return SEMQ_ERR_INVALID;
	memcpy(out, s, n);
	out[n] = '\0';
	return semq_id_valid(out) ? SEMQ_OK : SEMQ_ERR_INVALID;
}

/* Checks the message id argument (and --dest) of show and cancel. */
static int parse_target(struct ctl *c, struct target *t)
{
	const char *dest = opt(c, "--dest"), *a, *s1, *s2;
	uint64_t seq;

	memset(t, 0, sizeof *t);
	if (c->n_pos == 0)
		return usage_err(c, "a message id ORIGIN/DEST/SEQ (or SEQ "
				    "--dest D) is required");
	if (c->n_pos > 1)
		return usage_err(c, "unexpected argument '%s'", c->pos[1]);
	a = c->pos[0];
	if (dest && !semq_id_valid(dest))
		return usage_err(c,
				 "--dest '%s' is not a node id (1-64 of "
				 "A-Za-z0-9._-)",
				 dest);
	s1 = strchr(a, '/');
	s2 = s1 ? strchr(s1 + 1, '/') : NULL;
	if (!s1) {
		if (parse_uint(a, INT64_MAX, &seq) || seq == 0)
			return usage_err(c,
					 "'%s' is not a message id "
					 "ORIGIN/DEST/SEQ nor a SEQ 1..%lld",
					 a, (long long)INT64_MAX);
		if (!dest)
			return usage_err(c,
					 "'%s' is a bare SEQ: give --dest D "
					 "too, or the full id ORIGIN/DEST/SEQ",
					 a);
		t->bare = 1;
		snprintf(t->id.dest, sizeof t->id.dest, "%s", dest);
		t->id.seq = seq;
		return EXIT_OK;
	}
	if (dest)
		return usage_err(c,
				 "--dest D goes with a bare SEQ; '%s' names "
				 "its destination already",
				 a);
	if (!s2 || strchr(s2 + 1, '/'))
		return usage_err(c, "'%s' is not a message id ORIGIN/DEST/SEQ",
				 a);
	if (take_id(a, (size_t)(s1 - a), t->id.origin))
		return usage_err(c,
				 "'%s': origin '%.*s' is not a node id (1-64 "
				 "of A-Za-z0-9._-)",
				 a, (int)(s1 - a), a);
	if (take_id(s1 + 1, (size_t)(s2 - s1 - 1), t->id.dest))
		return usage_err(c,
				 "'%s': destination '%.*s' is not a node id "
				 "(1-64 of A-Za-z0-9._-)",
				 a, (int)(s2 - s1 - 1), s1 + 1);
	if (parse_uint(s2 + 1, INT64_MAX, &seq) || seq == 0)
		return usage_err(c, "'%s': seq '%s' is not a number 1..%lld", a,
				 s2 + 1, (long long)INT64_MAX);
	t->id.seq = seq;
	msgid_str(&t->id, t->text, sizeof t->text);
	return EXIT_OK;
}

/* Loads the configuration, completes a bare SEQ with this node's id, and
 * opens the database. */
static int target_open(struct ctl *c, struct target *t, int number)
{
	int r = ctl_load_config(c), more = 1;
	unsigned n = 0;

	if (r)
		return r;
	if (t->bare)
		snprintf(t->id.origin, sizeof t->id.origin, "%s", c->cfg->id);
	msgid_str(&t->id, t->text, sizeof t->text);
	r = ctl_open_store(c);
	if (r)
		return r;
	/* A command that changes a message numbers the application's new rows
	 * first, as the daemon's next batch would (it may be stopped): their
	 * seqs are the ones the daemon would give them (migration 0007). */
	while (number && more)
		if (store_number_new(c->st, now_ms(), 4096, 1, &n, &more) !=
		    SEMQ_OK) {
			fail("%s: %s", c->db, store_errmsg(c->st));
			return EXIT_FAIL;
		}
	/* The life: this database's for this node's own rows; for a relay's
	 * copy, the one of its stream that began here last. */
	if (store_current_life(c->st, t->id.origin, t->id.dest, &t->id.life) !=
	    SEMQ_OK) {
		fail("%s: %s", c->db, store_errmsg(c->st));
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

/* ---- outbound list ---- */

/* One listed row: m without its payload (payload_len kept), row with its
 * last_error owned. */
struct list_item {
	struct msg m;
	struct out_row row;
};

struct list_data {
	struct list_item *v; /* owned; list_free */
	size_t n, cap;
	const char *dest; /* only this destination; NULL = all */
	size_t limit;
	int failed; /* out of memory in the callback */
};

static void list_free(struct list_data *d)
{
	size_t i;

	for (i = 0; i < d->n; i++)
		free((char *)d->v[i].row.last_error);
	free(d->v);
}

static int list_cb(void *ctx, const struct msg *m, const struct out_row *row)
{
	struct list_data *d = ctx;
	struct list_item *it;
	size_t cap = next_cap(d->cap);

	if (d->dest && strcmp(m->id.dest, d->dest))
		return 0;
	if (d->n == d->cap) {
		it = realloc(d->v, cap * sizeof *d->v);
		if (!it)
			goto nomem;
		d->v = it;
		d->cap = cap;
	}
	it = &d->v[d->n];
	it->m = *m;
	it->m.payload = NULL; /* borrowed from the store: not kept */
	it->row = *row;
	it->row.last_error = dup_or_null(row->last_error);
	d->n++;
	if (row->last_error && !it->row.last_error)
		goto nomem;
	return d->n >= d->limit;
nomem:
	d->failed = 1;
	return 1;
}

/* The columns of the listing; LAST_ERROR last, since it is not padded. */
enum {
	LC_ID,
	LC_TYPE,
	LC_KEY,
	LC_STATUS,
	LC_RESULT,
	LC_ATTEMPTS,
	LC_AGE,
	LC_ERROR,
	LC_N
};

/* The text of column `col` of `it` (NULL: the heading), in buf or static. */
static const char *list_col(const struct list_item *it, int col, int64_t now,
			    char *buf, size_t sz)
{
	static const char *const head[LC_N] = {
		"ID",     "TYPE",     "KEY", "STATUS",
		"RESULT", "ATTEMPTS", "AGE", "LAST_ERROR"};

	if (!it)
		return head[col];
	switch (col) {
	case LC_ID: return msgid_str(&it->m.id, buf, sz);
	case LC_TYPE:
		snprintf(buf, sz, "%lu", (unsigned long)it->m.type);
		break;
	case LC_KEY: return cell(it->m.has_key ? it->m.key : NULL, 0, buf, sz);
	case LC_STATUS: return semq_status_name("tb_0031", it->row.status);
	case LC_RESULT:
		if (it->row.result == RES_DEAD) {
			snprintf(buf, sz, "dead at %s", it->m.id.dest);
			break;
		}
		return result_name(it->row.result);
	case LC_ATTEMPTS: snprintf(buf, sz, "%d", it->row.attempts); break;
	case LC_AGE: return fmt_age(it->m.created_at, now, buf, sz);
	default: return cell(it->row.last_error, ERROR_COLS, buf, sz);
	}
	return buf;
}

static const char *list_cell(const void *ctx, size_t i, int col, int64_t now,
			     char *buf, size_t sz)
{
	const struct list_data *d = ctx;

	return list_col(i == TABLE_HEAD ? NULL : &d->v[i], col, now, buf, sz);
}

static void list_print_text(const struct list_data *d)
{
	if (!d->n) {
		printf("no outbound messages\n");
		return;
	}
	print_table(d, d->n, LC_N, list_cell);
}

static int cmd_outbound_list(struct ctl *c)
{
	struct list_data d = {0};
	struct store_filter f = {0};
	struct semq_where w;
	const char *status = opt(c, "--status"), *limit = opt(c, "--limit");
	json_t *arr = NULL, *e;
	uint64_t v = LIST_LIMIT_DEFAULT;
	int r, want = -100;
	size_t i;

	if (c->n_pos)
		return usage_err(c, "unexpected argument '%s'", c->pos[0]);
	if (status && parse_status("tb_0031", out_statuses,
				   sizeof out_statuses / sizeof out_statuses[0],
				   status, &want))
		return usage_err(c,
				 "--status '%s' is not unsent, sent, "
				 "relay-acked, held, confirmed, cancelled or "
				 "0, 4, 6, 8, 100, -2",
				 status);
	r = parse_filter(c, &f, &w);
	if (r)
		return r;
	if (limit && (parse_uint(limit, LIST_LIMIT_MAX, &v) || v == 0))
		return usage_err(c, "--limit '%s' is not a number 1..%d", limit,
				 LIST_LIMIT_MAX);
	d.limit = (size_t)v;
	f.status = want;
	f.limit = (unsigned)v;
	r = ctl_load_config(c);
	if (r)
		return r;
	r = ctl_open_store(c);
	if (r)
		return r;

	r = EXIT_FAIL;
	if (store_outbound_select(c->st, &f, list_cb, &d) != SEMQ_OK) {
		fail("%s: reading tb_0031: %s", c->db, store_errmsg(c->st));
		goto out;
	}
	if (d.failed) {
		fail("out of memory");
		goto out;
	}
	if (c->json) {
		arr = json_array();
		for (i = 0; arr && i < d.n; i++) {
			e = out_json(&d.v[i].m, &d.v[i].row);
			if (!e || json_array_append_new(arr, e)) {
				json_decref(arr);
				arr = NULL;
			}
		}
		r = print_json(arr); /* reports NULL as out of memory */
		goto out;
	}
	list_print_text(&d);
	r = EXIT_OK;
out:
	list_free(&d);
	return r;
}

/* ---- outbound show ---- */

/* A classic hex dump of p[0..n): offset, 16 bytes in hex, the ASCII. */
static void hexdump(const uint8_t *p, size_t n)
{
	size_t i, j;

	for (i = 0; i < n; i += 16) {
		printf("%08zx  ", i);
		for (j = i; j < i + 16; j++) {
			if (j < n)
				printf("%02x ", p[j]);
			else
				fputs("   ", stdout);
			if (j == i + 7)
				fputc(' ', stdout);
		}
		fputs(" |", stdout);
		for (j = i; j < i + 16 && j < n; j++)
			fputc(p[j] >= 0x20 && p[j] < 0x7f ? p[j] : '.', stdout);
		fputs("|\n", stdout);
	}
}

/* The payload: as text when a terminal can show it, else as a hex dump;
 * at most SHOW_PAYLOAD_MAX bytes, then how many more there are. */
static void show_payload(const struct msg *m)
{
	size_t n = m->payload_len, shown = n;
	const uint8_t *p = m->payload;
	int text = printable(p, n);

	printf("%-16s %zu bytes%s\n", "payload", n,
	       !n     ? ""
	       : text ? ", text:"
		      : ", binary (hex):");
	if (!n)
		return;
	if (shown > SHOW_PAYLOAD_MAX) {
		shown = SHOW_PAYLOAD_MAX;
		/* Never cut a UTF-8 character in two. */
		while (text && shown > 0 && (p[shown] & 0xc0) == 0x80)
			shown--;
	}
	if (text) {
		fwrite(p, 1, shown, stdout);
		if (p[shown - 1] != '\n')
			fputc('\n', stdout);
	} else {
		hexdump(p, shown);
	}
	if (shown < n)
		printf("\xe2\x80\xa6 %zu more bytes\n", n - shown);
}

/* "label  text" for a text of any length (cleaned as a cell, not cut). */
static void show_long_text(const char *label, const char *s)
{
	size_t sz = s ? strlen(s) + 16 : 0; /* cell() never grows the text */
	char *buf = sz ? malloc(sz) : NULL;

	if (s && !buf) /* out of memory: the raw text is better than none */
		printf("%-16s %s\n", label, s);
	else
		printf("%-16s %s\n", label, cell(s, 0, buf, sz));
	free(buf);
}

static void show_print_text(const struct msg *m, const struct out_row *row)
{
	char buf[CELL_MAX];

	printf("%-16s %s\n", "id", msgid_str(&m->id, buf, sizeof buf));
	printf("%-16s %lld\n", "rowid", (long long)row->rowid);
	printf("%-16s %lu\n", "type", (unsigned long)m->type);
	printf("%-16s %s\n", "key",
	       cell(m->has_key ? m->key : NULL, 0, buf, sizeof buf));
	printf("%-16s %llu\n", "prev_seq", (unsigned long long)m->prev_seq);
	printf("%-16s %s\n", "deliver_at",
	       fmt_time(m->deliver_at, buf, sizeof buf));
	printf("%-16s %s\n", "created_at",
	       fmt_time(m->created_at, buf, sizeof buf));
	printf("%-16s %d %s\n", "status", row->status,
	       semq_status_name("tb_0031", row->status));
	if (row->result < 0)
		printf("%-16s -\n", "result");
	else if (row->result == RES_DEAD)
		printf("%-16s %d dead at %s (its redo entry there was dead "
		       "when it confirmed; a later retry there does not come "
		       "back here: 'semqctl trace' asks %s now)\n",
		       "result", row->result, m->id.dest, m->id.dest);
	else
		printf("%-16s %d %s\n", "result", row->result,
		       result_name(row->result));
	printf("%-16s %d\n", "attempts", row->attempts);
	printf("%-16s %s\n", "next_attempt_at",
	       fmt_time(row->next_attempt_at, buf, sizeof buf));
	printf("%-16s %s\n", "sent_at",
	       fmt_time(row->sent_at, buf, sizeof buf));
	printf("%-16s %s\n", "acked_at",
	       fmt_time(row->acked_at, buf, sizeof buf));
	show_long_text("last_error", row->last_error);
	show_payload(m);
}

/* Adds "payload" (base64) and, when it is UTF-8, "payload_text" to o
 * (borrowed; *failed = 1 when out of memory). */
static void payload_json(json_t *o, const struct msg *m, int *failed)
{
	char *b64 = base64_encode(m->payload, m->payload_len);

	jset(o, "payload", b64 ? json_string(b64) : NULL, failed);
	if (semq_utf8_valid(m->payload, m->payload_len))
		jset(o, "payload_text",
		     m->payload_len ? json_stringn((const char *)m->payload,
						   m->payload_len)
				    : json_string(""),
		     failed);
	free(b64);
}

/* show --json: out_json() plus the payload in base64 and, when it is
 * UTF-8, as text (new reference, NULL when out of memory). */
static json_t *show_json(const struct msg *m, const struct out_row *row)
{
	json_t *o = out_json(m, row);
	int failed = !o;

	if (o)
		payload_json(o, m, &failed);
	if (failed) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static int cmd_outbound_show(struct ctl *c)
{
	struct target t;
	struct msg m;
	struct out_row row;
	int r, e;

	memset(&m, 0, sizeof m);
	r = parse_target(c, &t);
	if (r)
		goto out;
	r = target_open(c, &t, 0);
	if (r)
		goto out;
	e = store_outbound_get(c->st, &t.id, &m, &row);
	if (e == SEMQ_ERR_NOT_FOUND) {
		r = fail("no outbound message %s in %s", t.text, c->db);
		goto out;
	}
	if (e != SEMQ_OK) {
		r = fail("%s: %s", t.text, store_errmsg(c->st));
		goto out;
	}
	if (c->json) {
		r = print_json(show_json(&m, &row));
		goto out;
	}
	show_print_text(&m, &row);
	r = EXIT_OK;
out:
	msg_clear(&m);
	return r;
}

/* ---- outbound cancel ---- */

/* cancel --json: {"id", "cancelled", "status", ...}. */
static int cancel_json(const struct target *t, int cancelled, int status,
		       int already, int woke)
{
	return print_json(json_pack("{s:s, s:b, s:i, s:b, s:b}", "id", t->text,
				    "cancelled", cancelled, "status", status,
				    "already_cancelled", already, "woke_daemon",
				    woke));
}

static int cmd_outbound_cancel(struct ctl *c)
{
	struct target t;
	struct msg m;
	struct out_row row;
	int r, e, woke, already;

	memset(&m, 0, sizeof m);
	r = parse_target(c, &t);
	if (r)
		goto out;
	r = target_open(c, &t, 1);
	if (r)
		goto out;
	/* Read it first: a copy held for another origin is not ours to
	 * cancel, and a cancelled one needs no second cancel. */
	e = store_outbound_get(c->st, &t.id, &m, &row);
	if (e == SEMQ_OK && strcmp(m.id.origin, c->cfg->id)) {
		if (c->json)
			(void)cancel_json(&t, 0, row.status, 0, 0);
		r = fail("%s is a copy this node holds for origin %s; only "
			 "the origin can cancel it",
			 t.text, m.id.origin);
		goto out;
	}
	already = e == SEMQ_OK && row.status == SS_CANCELLED;
	if (e == SEMQ_OK)
		e = store_cancel(c->st, &t.id, now_ms());
	if (e == SEMQ_ERR_NOT_FOUND) {
		r = fail("no outbound message %s in %s", t.text, c->db);
		goto out;
	}
	if (e == SEMQ_DECLINED) {
		/* Confirmed meanwhile, or before: read the verdict. */
		msg_clear(&m);
		if (store_outbound_get(c->st, &t.id, &m, &row) != SEMQ_OK)
			row.result = -1;
		if (c->json)
			(void)cancel_json(&t, 0, SS_ACK2, 0, 0);
		r = fail("%s is already confirmed (result %s); it cannot be "
			 "cancelled",
			 t.text, result_name(row.result));
		goto out;
	}
	if (e != SEMQ_OK) {
		r = fail("cancel %s: %s", t.text, store_errmsg(c->st));
		goto out;
	}
	/* A PostgreSQL database has no wake socket: its instances find new
	 * rows within poll_interval. */
	woke = !c->cfg->db_url && semq_notify(c->cfg->db) == SEMQ_OK;
	if (c->json) {
		r = cancel_json(&t, 1, SS_CANCELLED, already, woke);
		goto out;
	}
	if (already)
		printf("%s was already cancelled\n", t.text);
	else
		printf("cancelled %s; a tombstone will be sent\n", t.text);
	if (!woke && !c->cfg->db_url)
		fprintf(stderr,
			"semqctl: no semqd is running on %s to wake; the "
			"tombstone is sent when it starts\n",
			c->db);
	r = EXIT_OK;
out:
	msg_clear(&m);
	return r;
}

static int cmd_outbound_renumber(struct ctl *c)
{
	struct target t;
	struct msgid *olds = NULL;
	uint64_t first = 0;
	unsigned n = 0;
	int r, e, woke;

	r = parse_target(c, &t);
	if (r)
		return r;
	r = target_open(c, &t, 1);
	if (r)
		return r;
	if (strcmp(t.id.origin, c->cfg->id) != 0)
		return fail("%s is a copy this node holds for origin %s; only "
			    "the origin can renumber it",
			    t.text, t.id.origin);
	e = store_renumber(c->st, &t.id, now_ms(),
			   "renumbered by the operator (semqctl outbound "
			   "renumber)",
			   &olds, &n, &first);
	free(olds);
	if (e == SEMQ_ERR_NOT_FOUND)
		return fail("no outbound message %s in %s", t.text, c->db);
	if (e == SEMQ_DECLINED)
		return fail("%s: %s; it cannot be renumbered", t.text,
			    store_errmsg(c->st));
	if (e != SEMQ_OK)
		return fail("renumber %s: %s", t.text, store_errmsg(c->st));
	woke = !c->cfg->db_url && semq_notify(c->cfg->db) == SEMQ_OK;
	if (c->json)
		return print_json(json_pack("{s:s, s:I, s:i, s:b}", "id",
					    t.text, "new_seq",
					    (json_int_t)first, "renumbered",
					    (int)n, "woke_daemon", woke));
	printf("renumbered %s to %s/%s/%llu", t.text, t.id.origin, t.id.dest,
	       (unsigned long long)first);
	if (n > 1)
		printf(" and %u later message(s) of its key after it", n - 1);
	printf("; it will be sent again\n");
	return EXIT_OK;
}

/* ---- lives ------------------------------------------------------------------ */

struct life_copy {
	char *origin, *dest;
	uint64_t life, mark;
	int relay, current;
	int64_t started_at, rows;
};

struct lives_data {
	struct life_copy *v;
	size_t n, cap;
	int failed;
};

static int lives_cb(void *ctx, const struct life_row *lr)
{
	struct lives_data *d = ctx;
	struct life_copy *x;

	if (d->n == d->cap) {
		size_t cap = next_cap(d->cap);
		x = realloc(d->v, cap * sizeof *d->v);
		if (!x) {
			d->failed = 1;
			return 1;
		}
		d->v = x;
		d->cap = cap;
	}
	x = &d->v[d->n++];
	memset(x, 0, sizeof *x);
	x->origin = strdup(lr->origin);
	x->dest = strdup(lr->dest);
	x->life = lr->life;
	x->mark = lr->mark;
	x->relay = lr->relay;
	x->started_at = lr->started_at;
	x->rows = lr->rows;
	if (!x->origin || !x->dest) {
		d->failed = 1;
		return 1;
	}
	return 0;
}

static void lives_free(struct lives_data *d)
{
	size_t i;

	for (i = 0; i < d->n; i++) {
		free(d->v[i].origin);
		free(d->v[i].dest);
	}
	free(d->v);
}

static int cmd_lives(struct ctl *c)
{
	struct lives_data d = {0};
	char lb[SEMQ_LIFE_STRLEN], tbuf[48];
	json_t *arr = NULL, *e;
	int64_t now = now_ms();
	size_t i;
	int r;

	if (c->n_pos)
		return usage_err(c, "unexpected argument '%s'", c->pos[0]);
	r = ctl_load_config(c);
	if (!r)
		r = ctl_open_store(c);
	if (r)
		return r;
	r = EXIT_FAIL;
	if (store_lives(c->st, lives_cb, &d) != SEMQ_OK) {
		fail("%s: reading the lives: %s", c->db, store_errmsg(c->st));
		goto out;
	}
	for (i = 0; i < d.n && !d.failed; i++) {
		uint64_t cur = 0;

		if (store_current_life(c->st, d.v[i].origin, d.v[i].dest,
				       &cur) != SEMQ_OK) {
			fail("%s: %s", c->db, store_errmsg(c->st));
			goto out;
		}
		d.v[i].current = cur == d.v[i].life;
	}
	if (d.failed) {
		fail("out of memory");
		goto out;
	}
	if (c->json) {
		arr = json_array();
		for (i = 0; arr && i < d.n; i++) {
			const struct life_copy *x = &d.v[i];
			char xl[SEMQ_LIFE_STRLEN];

			e = json_pack("{s:s, s:s, s:b, s:s, s:s, s:I, s:I, "
				      "s:I}",
				      "origin", x->origin, "life",
				      semq_life_str(x->life, xl, sizeof xl),
				      "current", x->current, "as",
				      x->relay ? "relay" : "receiver", "dest",
				      x->dest, "mark", (json_int_t)x->mark,
				      "rows", (json_int_t)x->rows, "started_at",
				      (json_int_t)x->started_at);
			if (!e || json_array_append_new(arr, e)) {
				json_decref(arr);
				arr = NULL;
			}
		}
		r = print_json(arr ? json_pack("{s:s, s:s, s:o}", "node",
					       c->cfg->id, "life",
					       semq_life_str(store_life(c->st),
							     lb, sizeof lb),
					       "lives", arr)
				   : NULL);
		goto out;
	}
	printf("node %s  life %s\n", c->cfg->id,
	       semq_life_str(store_life(c->st), lb, sizeof lb));
	if (!d.n) {
		printf("no lives of other nodes known here\n");
		r = EXIT_OK;
		goto out;
	}
	printf("\n%-16s  %-16s  %-7s  %-8s  %-16s  %10s  %8s  %s\n", "ORIGIN",
	       "LIFE", "CURRENT", "AS", "DEST", "MARK", "ROWS", "SINCE");
	for (i = 0; i < d.n; i++) {
		const struct life_copy *x = &d.v[i];

		printf("%-16s  %-16s  %-7s  %-8s  %-16s  %10llu  %8lld  %s\n",
		       x->origin, semq_life_str(x->life, lb, sizeof lb),
		       x->current ? "yes" : "no",
		       x->relay ? "relay" : "receiver", x->dest,
		       (unsigned long long)x->mark, (long long)x->rows,
		       x->started_at > 0 ? fmt_oldest(x->started_at, now, tbuf,
						      sizeof tbuf)
					 : "before 0.2");
	}
	r = EXIT_OK;
out:
	lives_free(&d);
	return r;
}

static int cmd_lives_drop(struct ctl *c)
{
	const char *origin, *ls;
	uint64_t life = 0;
	int r, e, force = opt(c, "--force") != NULL;

	if (c->n_pos < 2)
		return usage_err(c, "ORIGIN and LIFE are required (see "
				    "'semqctl lives')");
	if (c->n_pos > 2)
		return usage_err(c, "unexpected argument '%s'", c->pos[2]);
	origin = c->pos[0];
	ls = c->pos[1];
	if (!semq_id_valid(origin))
		return usage_err(c,
				 "'%s' is not a node id (1-64 of "
				 "A-Za-z0-9._-)",
				 origin);
	if (semq_life_parse(ls, &life))
		return usage_err(c,
				 "'%s' is not a life (1-16 hex digits, not "
				 "0, as 'semqctl lives' shows it)",
				 ls);
	r = ctl_load_config(c);
	if (!r)
		r = ctl_open_store(c);
	if (r)
		return r;
	e = store_life_drop(c->st, origin, life, force);
	if (e == SEMQ_ERR_NOT_FOUND || e == SEMQ_DECLINED || e != SEMQ_OK) {
		if (c->json)
			(void)print_json(json_pack("{s:s, s:s, s:b}", "origin",
						   origin, "life", ls,
						   "dropped", 0));
		return fail("%s", store_errmsg(c->st));
	}
	if (c->json)
		return print_json(json_pack("{s:s, s:s, s:b}", "origin", origin,
					    "life", ls, "dropped", 1));
	printf("dropped life %s of %s\n", ls, origin);
	return EXIT_OK;
}

/* ---- redo: list, show, retry, discard ------------------------------------ */

#define REASON_MAX 1000 /* bytes of a discard reason */

/* The statuses of tb_0033 that --status accepts, besides the numbers. */
#define redo_statuses semq_redo_statuses

/* "in 25s", "in 5m", "in 2h", "in 3d" until `at`, or "due" when it has
 * come. Seconds are rounded up, so a deadline still ahead is never "in 0s". */
static const char *fmt_until(int64_t at, int64_t now, char *buf, size_t sz)
{
	int64_t d = at - now;

	if (d <= 0)
		snprintf(buf, sz, "due");
	else if (d <= 60 * 1000)
		snprintf(buf, sz, "in %llds", (long long)((d + 999) / 1000));
	else if (d < 3600 * 1000)
		snprintf(buf, sz, "in %lldm", (long long)(d / 60000));
	else if (d < 86400 * 1000)
		snprintf(buf, sz, "in %lldh", (long long)(d / 3600000));
	else
		snprintf(buf, sz, "in %lldd", (long long)(d / 86400000));
	return buf;
}

/* A duration in the largest unit that divides it: "5s", "10m", "2d". */
static const char *fmt_dur(int64_t ms, char *buf, size_t sz)
{
	static const struct {
		int64_t ms;
		const char *unit;
	} u[] = {{86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}};
	size_t i;

	for (i = 0; i < sizeof u / sizeof u[0]; i++)
		if (ms > 0 && ms % u[i].ms == 0) {
			snprintf(buf, sz, "%lld%s", (long long)(ms / u[i].ms),
				 u[i].unit);
			return buf;
		}
	snprintf(buf, sz, "%lldms", (long long)ms);
	return buf;
}

/* The NEXT column: when a pending entry runs; "-" for every other status,
 * which no attempt is scheduled for. */
static const char *redo_next(const struct redo_row *row, int64_t now, char *buf,
			     size_t sz)
{
	if (row->status != RS_PENDING)
		return "-";
	return fmt_until(row->next_attempt_at, now, buf, sz);
}

/* A redo entry ID argument: 1..INT64_MAX. */
static int parse_redo_id(struct ctl *c, int64_t *id)
{
	uint64_t v;

	if (c->n_pos == 0)
		return usage_err(c, "a redo entry ID is required");
	if (c->n_pos > 1)
		return usage_err(c, "unexpected argument '%s'", c->pos[1]);
	if (parse_uint(c->pos[0], INT64_MAX, &v) || v == 0)
		return usage_err(c, "'%s' is not a redo entry ID 1..%lld",
				 c->pos[0], (long long)INT64_MAX);
	*id = (int64_t)v;
	return EXIT_OK;
}

/* One listed entry: m without its payload (payload_len kept), row with its
 * strings owned. */
struct redo_item {
	struct msg m;
	struct redo_row row;
	char behind[2 * MSGID_STRLEN + 96]; /* a waiting entry: what for */
};

struct redo_data {
	struct redo_item *v; /* owned; redo_data_free */
	size_t n, cap;
	int failed; /* out of memory in the callback */
};

static void redo_data_free(struct redo_data *d)
{
	size_t i;

	for (i = 0; i < d->n; i++) {
		free((char *)d->v[i].row.last_error);
		free((char *)d->v[i].row.discard_reason);
	}
	free(d->v);
	memset(d, 0, sizeof *d);
}

static int redo_collect_cb(void *ctx, const struct msg *m,
			   const struct redo_row *row)
{
	struct redo_data *d = ctx;
	struct redo_item *it;
	size_t cap = next_cap(d->cap);

	if (d->n == d->cap) {
		it = realloc(d->v, cap * sizeof *d->v);
		if (!it)
			goto nomem;
		d->v = it;
		d->cap = cap;
	}
	it = &d->v[d->n];
	it->m = *m;
	it->m.payload = NULL; /* borrowed from the store: not kept */
	it->row = *row;
	it->row.last_error = dup_or_null(row->last_error);
	it->row.discard_reason = dup_or_null(row->discard_reason);
	it->behind[0] = '\0';
	d->n++;
	if ((row->last_error && !it->row.last_error) ||
	    (row->discard_reason && !it->row.discard_reason))
		goto nomem;
	return 0;
nomem:
	d->failed = 1;
	return 1;
}

/* ---- redo list ---- */

/* The columns of the listing; LAST_ERROR last, since it is not padded. */
enum {
	RC_ID,
	RC_MESSAGE,
	RC_TYPE,
	RC_KEY,
	RC_STATUS,
	RC_TRIES,
	RC_LEVEL,
	RC_NEXT,
	RC_ERROR,
	RC_N
};

static const char *redo_cell(const void *ctx, size_t i, int col, int64_t now,
			     char *buf, size_t sz)
{
	static const char *const head[RC_N] = {
		"ID",    "MESSAGE", "TYPE", "KEY",       "STATUS",
		"TRIES", "LEVEL",   "NEXT", "LAST_ERROR"};
	const struct redo_data *d = ctx;
	const struct redo_item *it;

	if (i == TABLE_HEAD)
		return head[col];
	it = &d->v[i];
	switch (col) {
	case RC_ID: snprintf(buf, sz, "%lld", (long long)it->row.id); break;
	case RC_MESSAGE: return msgid_str(&it->m.id, buf, sz);
	case RC_TYPE:
		snprintf(buf, sz, "%lu", (unsigned long)it->m.type);
		break;
	case RC_KEY: return cell(it->m.has_key ? it->m.key : NULL, 0, buf, sz);
	case RC_STATUS: return semq_status_name("tb_0033", it->row.status);
	case RC_TRIES: snprintf(buf, sz, "%d", it->row.tries); break;
	case RC_LEVEL: snprintf(buf, sz, "%d", it->row.level); break;
	case RC_NEXT: return redo_next(&it->row, now, buf, sz);
	default:
		/* what a waiting entry waits for, whole; an error shortened */
		return it->behind[0]
			       ? cell(it->behind, CELL_MAX - 1, buf, sz)
			       : cell(it->row.last_error, ERROR_COLS, buf, sz);
	}
	return buf;
}

/* redo list --group-by error */
struct group_data {
	json_t *arr; /* --json: the groups */
	int64_t now;
	size_t n;
	int failed;
};

static int group_cb(void *ctx, const struct redo_group *g)
{
	struct group_data *d = ctx;
	char a[32], b[32];
	json_t *o, *dests;
	const char *p, *q;
	int failed = 0;

	d->n++;
	if (!d->arr) {
		if (d->n == 1)
			printf("%-7s %-7s %-7s %-16s %s\n", "COUNT", "OLDEST",
			       "NEWEST", "DESTS", "ERROR");
		printf("%-7lld %-7s %-7s %-16s %s\n", (long long)g->count,
		       fmt_age(g->oldest, d->now, a, sizeof a),
		       fmt_age(g->newest, d->now, b, sizeof b), g->dests,
		       g->error ? g->error : "-");
		return 0;
	}
	dests = json_array();
	for (p = g->dests; dests && *p; p = *q ? q + 1 : q) {
		q = p + strcspn(p, ",");
		if (json_array_append_new(dests,
					  json_stringn(p, (size_t)(q - p))))
			failed = 1;
	}
	o = json_object();
	failed |= !o || !dests;
	jset(o, "error", json_text(g->error), &failed);
	jset(o, "count", json_integer(g->count), &failed);
	jset(o, "oldest", json_integer(g->oldest), &failed);
	jset(o, "newest", json_integer(g->newest), &failed);
	jset(o, "dests", dests, &failed);
	if (failed || json_array_append_new(d->arr, o)) {
		d->failed = 1;
		return 1;
	}
	return 0;
}

static int redo_groups(struct ctl *c, const struct store_filter *f)
{
	struct group_data d = {NULL, now_ms(), 0, 0};

	if (c->json && !(d.arr = json_array()))
		return fail("out of memory");
	if (store_redo_groups(c->st, f, group_cb, &d) != SEMQ_OK) {
		json_decref(d.arr);
		return fail("%s: reading tb_0033: %s", c->db,
			    store_errmsg(c->st));
	}
	if (d.failed) {
		json_decref(d.arr);
		return fail("out of memory");
	}
	if (c->json)
		return print_json(json_pack("{s:o}", "groups", d.arr));
	if (!d.n)
		printf("no redo entries\n");
	return EXIT_OK;
}

static int cmd_redo_list(struct ctl *c)
{
	struct redo_data d = {0};
	const char *status = opt(c, "--status"), *limit = opt(c, "--limit");
	const char *offset = opt(c, "--offset"), *group = opt(c, "--group-by");
	struct store_filter f = {0};
	struct semq_where w;
	json_t *arr = NULL, *e;
	uint64_t v = LIST_LIMIT_DEFAULT, off = 0;
	int r, want = -100;
	size_t i;

	if (c->n_pos)
		return usage_err(c, "unexpected argument '%s'", c->pos[0]);
	if (status &&
	    parse_status("tb_0033", redo_statuses,
			 sizeof redo_statuses / sizeof redo_statuses[0], status,
			 &want))
		return usage_err(c,
				 "--status '%s' is not pending, waiting, "
				 "dead, done, discarded or 0, 1, -1, 2, -2",
				 status);
	if (limit && (parse_uint(limit, LIST_LIMIT_MAX, &v) || v == 0))
		return usage_err(c, "--limit '%s' is not a number 1..%d", limit,
				 LIST_LIMIT_MAX);
	if (offset && parse_uint(offset, UINT_MAX, &off))
		return usage_err(c, "--offset '%s' is not a number 0..%u",
				 offset, UINT_MAX);
	if (group && strcmp(group, "error"))
		return usage_err(c, "--group-by '%s': only 'error' is known",
				 group);
	r = parse_filter(c, &f, &w);
	if (r)
		return r;
	f.status = want;
	f.limit = (unsigned)v;
	f.offset = (unsigned)off;
	r = ctl_load_config(c);
	if (r)
		return r;
	r = ctl_open_store(c);
	if (r)
		return r;
	if (group)
		return redo_groups(c, &f);

	r = EXIT_FAIL;
	if (store_redo_select(c->st, &f, redo_collect_cb, &d) != SEMQ_OK) {
		fail("%s: reading tb_0033: %s", c->db, store_errmsg(c->st));
		goto out;
	}
	if (d.failed) {
		fail("out of memory");
		goto out;
	}
	if (c->json) {
		arr = json_array();
		for (i = 0; arr && i < d.n; i++) {
			e = redo_json_at(c->st, &d.v[i].m, &d.v[i].row,
					 now_ms());
			if (!e || json_array_append_new(arr, e)) {
				json_decref(arr);
				arr = NULL;
			}
		}
		r = print_json(arr); /* reports NULL as out of memory */
		goto out;
	}
	for (i = 0; i < d.n; i++) {
		struct redo_head h;

		if (d.v[i].row.status == RS_WAITING &&
		    store_redo_head(c->st, &d.v[i].m, now_ms(), &h) == SEMQ_OK)
			redo_behind_text(&d.v[i].m, &h, d.v[i].behind,
					 sizeof d.v[i].behind);
	}
	if (d.n)
		print_table(&d, d.n, RC_N, redo_cell);
	else
		printf("no redo entries\n");
	r = EXIT_OK;
out:
	redo_data_free(&d);
	return r;
}

/* ---- redo show ---- */

/* "level N", and for an entry that may still fail, what a retryable failure
 * would do next under this node's [redo] levels and max_tries. */
static void show_level(const struct ctl *c, const struct redo_row *row)
{
	const struct config *cfg = c->cfg;
	size_t n = cfg->n_redo_levels;
	size_t i = row->level < 0 ? 0 : (size_t)row->level;
	char buf[32];

	if ((row->status != RS_PENDING && row->status != RS_WAITING) || !n) {
		printf("%-16s %d\n", "level", row->level);
		return;
	}
	if ((unsigned)row->tries + 1 >= cfg->max_tries)
		printf("%-16s %d (a retryable failure would make it dead)\n",
		       "level", row->level);
	else
		printf("%-16s %d (a retryable failure would wait %s)\n",
		       "level", row->level,
		       fmt_dur(cfg->redo_levels_ms[i < n ? i : n - 1], buf,
			       sizeof buf));
}

static void redo_show_text(const struct ctl *c, const struct msg *m,
			   const struct redo_row *row)
{
	char buf[CELL_MAX], rel[32], text[2 * MSGID_STRLEN + 96];
	int64_t now = now_ms();
	struct redo_head h;

	printf("%-16s %lld\n", "id", (long long)row->id);
	printf("%-16s %s\n", "message", msgid_str(&m->id, buf, sizeof buf));
	printf("%-16s %lu\n", "type", (unsigned long)m->type);
	printf("%-16s %s\n", "key",
	       cell(m->has_key ? m->key : NULL, 0, buf, sizeof buf));
	printf("%-16s %llu\n", "prev_seq", (unsigned long long)m->prev_seq);
	printf("%-16s %s\n", "deliver_at",
	       fmt_time(m->deliver_at, buf, sizeof buf));
	printf("%-16s %s\n", "msg_created_at",
	       fmt_time(m->created_at, buf, sizeof buf));
	printf("%-16s %d %s\n", "status", row->status,
	       semq_status_name("tb_0033", row->status));
	printf("%-16s %d (max_tries %u)\n", "tries", row->tries,
	       c->cfg->max_tries);
	show_level(c, row);
	if (row->status == RS_PENDING)
		printf("%-16s %s, %s\n", "next_attempt_at",
		       fmt_time(row->next_attempt_at, buf, sizeof buf),
		       fmt_until(row->next_attempt_at, now, rel, sizeof rel));
	else
		printf("%-16s %s, not scheduled: %s\n", "next_attempt_at",
		       fmt_time(row->next_attempt_at, buf, sizeof buf),
		       row->status == RS_WAITING
			       ? "waiting behind an earlier entry of its key"
			       : semq_status_name("tb_0033", row->status));
	if (row->status == RS_WAITING &&
	    store_redo_head(c->st, m, now, &h) == SEMQ_OK)
		printf("%-16s %s\n", "behind",
		       redo_behind_text(m, &h, text, sizeof text));
	printf("%-16s %s\n", "created_at",
	       fmt_time(row->created_at, buf, sizeof buf));
	printf("%-16s %s\n", "updated_at",
	       fmt_time(row->updated_at, buf, sizeof buf));
	show_long_text("last_error", row->last_error);
	show_long_text("discard_reason", row->discard_reason);
	show_payload(m);
}

/* Reads entry `id` (m's payload owned by the caller: msg_clear). EXIT_OK,
 * or EXIT_FAIL after reporting that it is not there or why it could not be
 * read. */
static int redo_read(struct ctl *c, int64_t id, struct msg *m,
		     struct redo_row *row)
{
	int e = store_redo_get(c->st, id, m, row);

	if (e == SEMQ_OK)
		return EXIT_OK;
	if (e == SEMQ_ERR_NOT_FOUND)
		return fail("no redo entry %lld in %s", (long long)id, c->db);
	return fail("redo %lld: %s", (long long)id, store_errmsg(c->st));
}

static int cmd_redo_show(struct ctl *c)
{
	struct msg m;
	struct redo_row row;
	json_t *o;
	int64_t id = 0;
	int r, failed = 0;

	memset(&m, 0, sizeof m);
	r = parse_redo_id(c, &id);
	if (r)
		goto out;
	r = ctl_load_config(c);
	if (r)
		goto out;
	r = ctl_open_store(c);
	if (r)
		goto out;
	r = redo_read(c, id, &m, &row);
	if (r)
		goto out;
	if (c->json) {
		o = redo_json_at(c->st, &m, &row, now_ms());
		if (o)
			payload_json(o, &m, &failed);
		if (failed) {
			json_decref(o);
			o = NULL;
		}
		r = print_json(o); /* reports NULL as out of memory */
		goto out;
	}
	redo_show_text(c, &m, &row);
	r = EXIT_OK;
out:
	msg_clear(&m);
	return r;
}

/* ---- redo retry ---- */

/* Tells the operator that no daemon heard the wake-up. */
static void note_not_woken(const struct ctl *c, const char *what)
{
	if (c->cfg->db_url) /* PostgreSQL: the instances poll for work */
		return;
	fprintf(stderr,
		"semqctl: no semqd is running on %s to wake; %s when it "
		"starts\n",
		c->db, what);
}

/* retry ID --json: {"id", "message", "retried", "status", ...}. */
static int retry_json(int64_t id, const char *msgid, int retried, int status,
		      int woke)
{
	return print_json(json_pack("{s:I, s:s, s:b, s:i, s:s, s:b}", "id",
				    (json_int_t)id, "message", msgid, "retried",
				    retried, "status", status, "status_name",
				    semq_status_name("tb_0033", status),
				    "woke_daemon", woke));
}

/* One dead entry -> pending now, in one transaction with the check. */
static int redo_retry_one(struct ctl *c, int64_t id)
{
	struct msg m;
	struct redo_row row;
	char idb[MSGID_STRLEN];
	int r = EXIT_FAIL, woke;

	memset(&m, 0, sizeof m);
	if (store_begin(c->st) != SEMQ_OK) {
		r = fail("%s", store_errmsg(c->st));
		goto out;
	}
	r = redo_read(c, id, &m, &row);
	if (r)
		goto out;
	msgid_str(&m.id, idb, sizeof idb);
	if (!store_redo_verb_applies(STORE_REDO_RETRY, row.status)) {
		store_rollback(c->st);
		if (c->json)
			(void)retry_json(id, idb, 0, row.status, 0);
		r = fail("redo %lld is %s, not dead; %s", (long long)id,
			 semq_status_name("tb_0033", row.status),
			 store_redo_verb_rule(STORE_REDO_RETRY));
		goto out;
	}
	if (store_redo_retry(c->st, id, now_ms()) != SEMQ_OK ||
	    store_commit(c->st) != SEMQ_OK) {
		r = fail("retry redo %lld: %s", (long long)id,
			 store_errmsg(c->st));
		goto out;
	}
	/* A PostgreSQL database has no wake socket: its instances find new
	 * rows within poll_interval. */
	woke = !c->cfg->db_url && semq_notify(c->cfg->db) == SEMQ_OK;
	operator_said(c, "retried redo entry %lld (%s)", (long long)id, idb);
	if (c->json) {
		r = retry_json(id, idb, 1, RS_PENDING, woke);
		goto out;
	}
	printf("%s (redo %lld) will be retried now\n", idb, (long long)id);
	if (!woke)
		note_not_woken(c, "it is retried");
	r = EXIT_OK;
out:
	store_rollback(c->st); /* harmless when committed */
	msg_clear(&m);
	return r;
}

/* Every dead entry -> pending now; the entries are listed in the same
 * transaction, so the list is exactly what was retried. */
static int redo_retry_all(struct ctl *c)
{
	struct redo_data d = {0};
	char idb[MSGID_STRLEN];
	json_t *arr = NULL, *e;
	unsigned n = 0;
	int r = EXIT_FAIL, woke = 0;
	size_t i;

	if (store_begin(c->st) != SEMQ_OK ||
	    store_redo_list(c->st, RS_DEAD, UINT_MAX, redo_collect_cb, &d) !=
		    SEMQ_OK ||
	    (!d.failed &&
	     store_redo_retry_all_dead(c->st, now_ms(), &n) != SEMQ_OK) ||
	    (!d.failed && store_commit(c->st) != SEMQ_OK)) {
		fail("retry every dead redo entry: %s", store_errmsg(c->st));
		goto out;
	}
	if (d.failed) {
		fail("out of memory");
		goto out;
	}
	if (n != d.n) {
		fail("retry every dead redo entry: %u retried but %zu listed",
		     n, d.n);
		goto out;
	}
	if (n) {
		/* A PostgreSQL database has no wake socket: its instances
		 * find new rows within poll_interval. */
		woke = !c->cfg->db_url && semq_notify(c->cfg->db) == SEMQ_OK;
		operator_said(c, "retried %u dead redo entr%s (--all-dead)", n,
			      n == 1 ? "y" : "ies");
	}
	if (c->json) {
		arr = json_array();
		for (i = 0; arr && i < d.n; i++) {
			e = json_pack("{s:I, s:s}", "id",
				      (json_int_t)d.v[i].row.id, "message",
				      msgid_str(&d.v[i].m.id, idb, sizeof idb));
			if (!e || json_array_append_new(arr, e)) {
				json_decref(arr);
				arr = NULL;
			}
		}
		/* "o" steals the array, even when packing fails. */
		r = print_json(arr ? json_pack("{s:o, s:I, s:b}", "retried",
					       arr, "count", (json_int_t)n,
					       "woke_daemon", woke)
				   : NULL);
		goto out;
	}
	if (!n) {
		printf("no dead redo entries; nothing to retry\n");
		r = EXIT_OK;
		goto out;
	}
	for (i = 0; i < d.n; i++)
		printf("%s (redo %lld) will be retried now\n",
		       msgid_str(&d.v[i].m.id, idb, sizeof idb),
		       (long long)d.v[i].row.id);
	printf("%u dead entr%s will be retried now\n", n, n == 1 ? "y" : "ies");
	if (!woke)
		note_not_woken(c, "they are retried");
	r = EXIT_OK;
out:
	store_rollback(c->st); /* harmless when committed */
	redo_data_free(&d);
	return r;
}

/* ---- redo retry|discard --where ...: the bulk verbs ---- */

struct bulk_out {
	const char *verb; /* "retried", "discarded" */
	json_t *arr;      /* the entries, as they were */
	int failed;
};

static int bulk_each(void *ctx, const struct msg *m, const struct redo_row *row)
{
	struct bulk_out *b = ctx;
	char idb[MSGID_STRLEN];
	int failed = 0;
	json_t *o = json_object();

	failed = !o;
	jset(o, "id", json_integer(row->id), &failed);
	jset(o, "message", json_string(msgid_str(&m->id, idb, sizeof idb)),
	     &failed);
	jset(o, "key", m->has_key ? json_text(m->key) : json_null(), &failed);
	jset(o, "status_name",
	     json_string(semq_status_name("tb_0033", row->status)), &failed);
	jset(o, "last_error", json_text(row->last_error), &failed);
	if (failed || json_array_append_new(b->arr, o)) {
		b->failed = 1;
		return 1;
	}
	return 0;
}

static void bulk_progress(void *ctx, unsigned done, unsigned total)
{
	const struct bulk_out *b = ctx;

	fprintf(stderr, "%s %u/%u\n", b->verb, done, total);
}

static int redo_bulk(struct ctl *c, enum store_redo_verb verb,
		     const char *reason)
{
	const char *status = opt(c, "--status");
	int dry = opt(c, "--dry-run") != NULL, r, want = -100, woke = 0;
	struct bulk_out b = {verb == STORE_REDO_RETRY ? "retried" : "discarded",
			     NULL, 0};
	struct store_filter f = {0};
	struct semq_where w;
	unsigned n = 0;
	size_t i;

	if (c->n_pos)
		return usage_err(c,
				 "an ID ('%s') and --where are both given; "
				 "give one",
				 c->pos[0]);
	if (!opt(c, "--where"))
		return usage_err(c, "--where EXPR is required with --dest, "
				    "--key, --since, --status or --dry-run");
	r = parse_filter(c, &f, &w);
	if (r)
		return r;
	if (status &&
	    parse_status("tb_0033", redo_statuses,
			 sizeof redo_statuses / sizeof redo_statuses[0], status,
			 &want))
		return usage_err(c, "--status '%s' is not a status of tb_0033",
				 status);
	if (status && !store_redo_verb_applies(verb, want))
		return usage_err(c, "--status '%s': %s", status,
				 store_redo_verb_rule(verb));
	f.status = want;
	r = ctl_load_config(c);
	if (r)
		return r;
	r = ctl_open_store(c);
	if (r)
		return r;
	b.arr = json_array();
	if (!b.arr)
		return fail("out of memory");
	if (store_redo_bulk(c->st, verb, &f, reason, now_ms(), dry, 500,
			    bulk_each, dry ? NULL : bulk_progress, &b,
			    &n) != SEMQ_OK) {
		r = fail("redo %s --where %s: %s (%u done before)",
			 verb == STORE_REDO_RETRY ? "retry" : "discard",
			 opt(c, "--where"), store_errmsg(c->st), n);
		goto out;
	}
	if (b.failed) {
		r = fail("out of memory");
		goto out;
	}
	if (!dry && n) {
		woke = !c->cfg->db_url && semq_notify(c->cfg->db) == SEMQ_OK;
		/* The operator's record: the daemon's log is not semqctl's. */
		operator_said(
			c, "%s %u redo entr%s (--where %s%s%s%s%s%s%s)%s%s",
			b.verb, n, n == 1 ? "y" : "ies", opt(c, "--where"),
			f.dest ? " --dest " : "", f.dest ? f.dest : "",
			f.key ? " --key " : "", f.key ? f.key : "",
			opt(c, "--since") ? " --since " : "",
			opt(c, "--since") ? opt(c, "--since") : "",
			reason ? ": " : "", reason ? reason : "");
	}
	if (c->json) {
		r = print_json(json_pack(
			"{s:s, s:b, s:I, s:O, s:b}", "verb",
			verb == STORE_REDO_RETRY ? "retry" : "discard",
			"dry_run", dry, "count", (json_int_t)n, "entries",
			b.arr, "woke_daemon", woke));
		goto out;
	}
	for (i = 0; i < json_array_size(b.arr); i++) {
		json_t *o = json_array_get(b.arr, i);
		const char *k = json_string_value(json_object_get(o, "key"));
		const char *e =
			json_string_value(json_object_get(o, "last_error"));
		char buf[CELL_MAX];

		printf("%s%s (redo %lld, key %s): %s\n", dry ? "would be " : "",
		       b.verb,
		       (long long)json_integer_value(json_object_get(o, "id")),
		       k ? k : "-", cell(e, ERROR_COLS * 2, buf, sizeof buf));
	}
	printf("%s%u redo entr%s %s%s\n", dry ? "dry run: " : "", n,
	       n == 1 ? "y" : "ies", dry ? "would be " : "", b.verb);
	r = EXIT_OK;
out:
	json_decref(b.arr);
	return r;
}

/* Does the command have one of the bulk options? */
static int bulk_asked(const struct ctl *c)
{
	return opt(c, "--where") || opt(c, "--dest") || opt(c, "--key") ||
	       opt(c, "--since") || opt(c, "--status") || opt(c, "--dry-run");
}

static int cmd_redo_retry(struct ctl *c)
{
	int all = opt(c, "--all-dead") != NULL, r;
	int64_t id = 0;

	if (bulk_asked(c)) {
		if (all)
			return usage_err(c, "--all-dead and --where are both "
					    "given; give one");
		return redo_bulk(c, STORE_REDO_RETRY, NULL);
	}

	if (all && c->n_pos)
		return usage_err(c,
				 "--all-dead and an ID ('%s') are both given; "
				 "give one",
				 c->pos[0]);
	if (!all && !c->n_pos)
		return usage_err(c, "a redo entry ID (or --all-dead) is "
				    "required");
	if (!all) {
		r = parse_redo_id(c, &id);
		if (r)
			return r;
	}
	r = ctl_load_config(c);
	if (r)
		return r;
	r = ctl_open_store(c);
	if (r)
		return r;
	return all ? redo_retry_all(c) : redo_retry_one(c, id);
}

/* ---- redo discard ---- */

/* What discarding one entry did to the waiting entries of its key. */
struct discard_out {
	struct redo_data released; /* entries that became pending */
	size_t still_waiting;      /* entries of the key still waiting */
};

/* The waiting entries of m's key other than `id`, into w (read before the
 * discard, in its transaction). */
static int waiting_of_key(struct ctl *c, const struct msg *m, int64_t id,
			  struct redo_data *w)
{
	struct redo_data all = {0};
	size_t i;
	int r = EXIT_FAIL;

	if (store_redo_list(c->st, RS_WAITING, UINT_MAX, redo_collect_cb,
			    &all) != SEMQ_OK) {
		fail("%s: reading tb_0033: %s", c->db, store_errmsg(c->st));
		goto out;
	}
	for (i = 0; !all.failed && i < all.n; i++) {
		const struct redo_item *it = &all.v[i];
		if (it->row.id == id || !it->m.has_key ||
		    strcmp(it->m.key, m->key) ||
		    strcmp(it->m.id.origin, m->id.origin) ||
		    strcmp(it->m.id.dest, m->id.dest))
			continue;
		redo_collect_cb(w, &it->m, &it->row);
	}
	if (all.failed || w->failed) {
		fail("out of memory");
		goto out;
	}
	r = EXIT_OK;
out:
	redo_data_free(&all);
	return r;
}

/* Sorts the released entries out of `w`, re-reading each. */
static int released_of(struct ctl *c, const struct redo_data *w,
		       struct discard_out *o)
{
	struct msg m;
	struct redo_row row;
	size_t i;
	int r;

	for (i = 0; i < w->n; i++) {
		r = redo_read(c, w->v[i].row.id, &m, &row);
		if (r)
			return r;
		if (row.status == RS_PENDING)
			redo_collect_cb(&o->released, &m, &row);
		else if (row.status == RS_WAITING)
			o->still_waiting++;
		msg_clear(&m);
		if (o->released.failed)
			return fail("out of memory");
	}
	return EXIT_OK;
}

/* discard --json when it was refused: {"id", "message", "discarded":
 * false, "status", ...}. */
static int discard_refused_json(int64_t id, const char *msgid, int status,
				const char *old_reason)
{
	return print_json(json_pack(
		"{s:I, s:s, s:b, s:i, s:s, s:s?}", "id", (json_int_t)id,
		"message", msgid, "discarded", 0, "status", status,
		"status_name", semq_status_name("tb_0033", status),
		"discard_reason", old_reason));
}

static json_t *discard_json(int64_t id, const char *msgid, const char *reason,
			    const struct discard_out *o, int woke)
{
	json_t *arr = json_array(), *e;
	char idb[MSGID_STRLEN];
	size_t i;

	for (i = 0; arr && i < o->released.n; i++) {
		const struct redo_item *it = &o->released.v[i];
		e = json_pack("{s:I, s:s, s:i, s:I}", "id",
			      (json_int_t)it->row.id, "message",
			      msgid_str(&it->m.id, idb, sizeof idb), "status",
			      it->row.status, "next_attempt_at",
			      (json_int_t)it->row.next_attempt_at);
		if (!e || json_array_append_new(arr, e)) {
			json_decref(arr);
			arr = NULL;
		}
	}
	if (!arr)
		return NULL;
	/* "o" steals the array, even when packing fails. */
	return json_pack("{s:I, s:s, s:b, s:i, s:s, s:o, s:I, s:b}", "id",
			 (json_int_t)id, "message", msgid, "discarded", 1,
			 "status", RS_DISCARDED, "discard_reason", reason,
			 "released", arr, "still_waiting",
			 (json_int_t)o->still_waiting, "woke_daemon", woke);
}

static void discard_text(const struct ctl *c, int64_t id, const char *msgid,
			 const struct msg *m, const char *reason,
			 const struct discard_out *o, int woke)
{
	char buf[CELL_MAX], idb[MSGID_STRLEN], rel[32];
	char *rb = malloc(strlen(reason) + 16); /* cell() never grows it */
	int64_t now = now_ms();
	size_t i;

	printf("discarded %s (redo %lld): %s\n", msgid, (long long)id,
	       rb ? cell(reason, 0, rb, strlen(reason) + 16) : reason);
	free(rb);
	for (i = 0; i < o->released.n; i++) {
		const struct redo_item *it = &o->released.v[i];
		printf("released %s (redo %lld), the next entry of key %s: "
		       "pending, due %s\n",
		       msgid_str(&it->m.id, idb, sizeof idb),
		       (long long)it->row.id, cell(m->key, 0, buf, sizeof buf),
		       it->row.next_attempt_at <= now
			       ? "now"
			       : fmt_until(it->row.next_attempt_at, now, rel,
					   sizeof rel));
	}
	if (m->has_key && o->still_waiting)
		printf("%zu more entr%s of key %s still wait%s in key order\n",
		       o->still_waiting, o->still_waiting == 1 ? "y" : "ies",
		       cell(m->key, 0, buf, sizeof buf),
		       o->still_waiting == 1 ? "s" : "");
	else if (m->has_key && !o->released.n)
		printf("no entry of key %s was waiting behind it\n",
		       cell(m->key, 0, buf, sizeof buf));
	if (!woke && o->released.n)
		note_not_woken(c, "released entries run");
}

static int cmd_redo_discard(struct ctl *c)
{
	const char *reason = opt(c, "--reason");
	struct discard_out o;
	struct redo_data w = {0};
	struct msg m;
	struct redo_row row;
	char idb[MSGID_STRLEN];
	int64_t id = 0;
	int r, woke;

	memset(&m, 0, sizeof m);
	memset(&o, 0, sizeof o);
	if (!bulk_asked(c)) {
		r = parse_redo_id(c, &id);
		if (r)
			return r;
	}
	if (!reason)
		return usage_err(c, "--reason TEXT is required: say why it is "
				    "discarded");
	if (!*reason)
		return usage_err(c, "--reason '' is empty: say why it is "
				    "discarded");
	if (strlen(reason) > REASON_MAX)
		return usage_err(c, "--reason is %zu bytes long, at most %d",
				 strlen(reason), REASON_MAX);
	if (bulk_asked(c))
		return redo_bulk(c, STORE_REDO_DISCARD, reason);
	r = ctl_load_config(c);
	if (r)
		return r;
	r = ctl_open_store(c);
	if (r)
		return r;

	r = EXIT_FAIL;
	if (store_begin(c->st) != SEMQ_OK) {
		fail("%s", store_errmsg(c->st));
		goto out;
	}
	r = redo_read(c, id, &m, &row);
	if (r)
		goto out;
	msgid_str(&m.id, idb, sizeof idb);
	if (!store_redo_verb_applies(STORE_REDO_DISCARD, row.status)) {
		store_rollback(c->st);
		if (c->json)
			(void)discard_refused_json(id, idb, row.status,
						   row.discard_reason);
		if (row.status == RS_DONE)
			r = fail("redo %lld (%s) is done: it took effect; %s",
				 (long long)id, idb,
				 store_redo_verb_rule(STORE_REDO_DISCARD));
		else
			r = fail("redo %lld (%s) is already discarded (reason: "
				 "%s)",
				 (long long)id, idb,
				 row.discard_reason ? row.discard_reason
						    : "none recorded");
		goto out;
	}
	if (m.has_key) {
		r = waiting_of_key(c, &m, id, &w);
		if (r)
			goto out;
	}
	r = EXIT_FAIL;
	if (store_redo_discard(c->st, id, reason, now_ms()) != SEMQ_OK) {
		fail("discard redo %lld: %s", (long long)id,
		     store_errmsg(c->st));
		goto out;
	}
	r = released_of(c, &w, &o);
	if (r)
		goto out;
	if (store_commit(c->st) != SEMQ_OK) {
		r = fail("discard redo %lld: %s", (long long)id,
			 store_errmsg(c->st));
		goto out;
	}
	/* A PostgreSQL database has no wake socket: its instances find new
	 * rows within poll_interval. */
	woke = !c->cfg->db_url && semq_notify(c->cfg->db) == SEMQ_OK;
	operator_said(c, "discarded redo entry %lld (%s): %s", (long long)id,
		      idb, reason);
	if (c->json) {
		r = print_json(discard_json(id, idb, reason, &o, woke));
		goto out;
	}
	discard_text(c, id, idb, &m, reason, &o, woke);
	r = EXIT_OK;
out:
	store_rollback(c->st); /* harmless when committed */
	msg_clear(&m);
	redo_data_free(&w);
	redo_data_free(&o.released);
	return r;
}

/* ---- received list -------------------------------------------------------- */

/* One listed tb_0030 row with its strings owned. */
struct recv_item {
	struct msgid id;
	uint32_t type;
	char *key, *via; /* NULL when none */
	uint64_t prev_seq;
	int64_t received_at, rowid;
	int result, ack_status;
	unsigned need, got;
};

struct recv_data {
	struct recv_item *v; /* owned; recv_data_free */
	size_t n, cap;
	int failed; /* out of memory in the callback */
};

static void recv_data_free(struct recv_data *d)
{
	size_t i;

	for (i = 0; i < d->n; i++) {
		free(d->v[i].key);
		free(d->v[i].via);
	}
	free(d->v);
}

static int recv_collect_cb(void *ctx, const struct recv_row *r)
{
	struct recv_data *d = ctx;
	struct recv_item *it;
	size_t cap = next_cap(d->cap);

	if (d->n == d->cap) {
		it = realloc(d->v, cap * sizeof *d->v);
		if (!it)
			goto nomem;
		d->v = it;
		d->cap = cap;
	}
	it = &d->v[d->n++];
	it->id = r->id;
	it->type = r->type;
	it->key = dup_or_null(r->key);
	it->via = dup_or_null(r->via);
	it->prev_seq = r->prev_seq;
	it->received_at = r->received_at;
	it->rowid = r->rowid;
	it->result = r->result;
	it->ack_status = r->ack_status;
	it->need = r->confirm_need;
	it->got = r->confirm_got;
	if ((r->key && !it->key) || (r->via && !it->via))
		goto nomem;
	return 0;
nomem:
	d->failed = 1;
	return 1;
}

/* "acked", or "unacked (awaits origin+relay)": the 810-Responses missing. */
static const char *ack_text(const struct recv_item *it, char *buf, size_t sz)
{
	unsigned miss = it->need & ~it->got;

	if (it->ack_status == AS_OK)
		return "acked";
	if (!(miss & (CONFIRM_ORIGIN | CONFIRM_RELAY)))
		return "unacked";
	snprintf(buf, sz, "unacked (awaits %s%s%s)",
		 miss & CONFIRM_ORIGIN ? "origin" : "",
		 (miss & CONFIRM_ORIGIN) && (miss & CONFIRM_RELAY) ? "+" : "",
		 miss & CONFIRM_RELAY ? "relay" : "");
	return buf;
}

enum {
	VC_MESSAGE,
	VC_TYPE,
	VC_KEY,
	VC_RECEIVED,
	VC_VIA,
	VC_RESULT,
	VC_ACK,
	VC_N
};

static const char *recv_cell(const void *ctx, size_t i, int col, int64_t now,
			     char *buf, size_t sz)
{
	static const char *const head[VC_N] = {
		"MESSAGE", "TYPE", "KEY", "RECEIVED", "VIA", "RESULT", "ACK"};
	const struct recv_data *d = ctx;
	const struct recv_item *it;

	if (i == TABLE_HEAD)
		return head[col];
	it = &d->v[i];
	switch (col) {
	case VC_MESSAGE: return msgid_str(&it->id, buf, sz);
	case VC_TYPE: snprintf(buf, sz, "%lu", (unsigned long)it->type); break;
	case VC_KEY: return cell(it->key, 0, buf, sz);
	case VC_RECEIVED: return fmt_age(it->received_at, now, buf, sz);
	case VC_VIA: return cell(it->via, 0, buf, sz);
	case VC_RESULT: return result_name(it->result);
	default: return ack_text(it, buf, sz);
	}
	return buf;
}

static json_t *recv_json(const struct recv_item *it)
{
	json_t *o = json_object();
	char idb[MSGID_STRLEN];
	int failed = !o;

	jset(o, "message", json_string(msgid_str(&it->id, idb, sizeof idb)),
	     &failed);
	jset(o, "origin", json_string(it->id.origin), &failed);
	jset(o, "dest", json_string(it->id.dest), &failed);
	jset(o, "seq", json_integer((json_int_t)it->id.seq), &failed);
	{
		char lb[SEMQ_LIFE_STRLEN];
		jset(o, "life",
		     json_string(semq_life_str(it->id.life, lb, sizeof lb)),
		     &failed);
	}
	jset(o, "rowid", json_integer(it->rowid), &failed);
	jset(o, "type", json_integer(it->type), &failed);
	jset(o, "key", json_text(it->key), &failed);
	jset(o, "prev_seq", json_integer((json_int_t)it->prev_seq), &failed);
	jset(o, "received_at", json_integer(it->received_at), &failed);
	jset(o, "via", json_text(it->via), &failed);
	jset(o, "result", json_integer(it->result), &failed);
	jset(o, "result_name", json_string(result_name(it->result)), &failed);
	jset(o, "ack_status", json_integer(it->ack_status), &failed);
	jset(o, "ack_name",
	     json_string(semq_status_name("tb_0030", it->ack_status)), &failed);
	jset(o, "confirm_need", json_integer(it->need), &failed);
	jset(o, "confirm_got", json_integer(it->got), &failed);
	if (failed) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/* received list --json: {"received": [...], "streams_in": [...]} (new
 * reference, NULL when out of memory). */
static json_t *received_json(const struct recv_data *d,
			     const struct status_data *s, const char *origin)
{
	json_t *rows = json_array(), *streams = json_array(), *doc = NULL, *e;
	size_t i;

	if (!rows || !streams)
		goto out;
	for (i = 0; i < d->n; i++) {
		e = recv_json(&d->v[i]);
		if (!e || json_array_append_new(rows, e))
			goto out;
	}
	for (i = 0; i < s->n_streams; i++) {
		const struct stream_copy *sc = &s->streams[i];
		if (origin && strcmp_null(sc->origin, origin))
			continue;
		char lb[SEMQ_LIFE_STRLEN];

		e = json_pack("{s:s?, s:s?, s:s, s:I}", "origin", sc->origin,
			      "dest", sc->dest, "life",
			      semq_life_str(sc->life, lb, sizeof lb),
			      "confirmed_through",
			      (json_int_t)sc->confirmed_through);
		if (!e || json_array_append_new(streams, e))
			goto out;
	}
	/* "o" steals the arrays, even when packing fails. */
	doc = json_pack("{s:o, s:o}", "received", rows, "streams_in", streams);
	rows = streams = NULL;
out:
	json_decref(rows);
	json_decref(streams);
	return doc;
}

static int cmd_received_list(struct ctl *c)
{
	struct recv_data d = {0};
	struct status_data s = {0};
	const char *origin = opt(c, "--origin"), *limit = opt(c, "--limit");
	struct store_filter f = {0};
	struct semq_where w;
	uint64_t v = LIST_LIMIT_DEFAULT;
	int r, footer = 0;
	size_t i;

	if (c->n_pos)
		return usage_err(c, "unexpected argument '%s'", c->pos[0]);
	if (origin && !semq_id_valid(origin))
		return usage_err(c,
				 "--origin '%s' is not a node id (1-64 of "
				 "A-Za-z0-9._-)",
				 origin);
	if (limit && (parse_uint(limit, LIST_LIMIT_MAX, &v) || v == 0))
		return usage_err(c, "--limit '%s' is not a number 1..%d", limit,
				 LIST_LIMIT_MAX);
	r = parse_filter(c, &f, &w);
	if (r)
		return r;
	f.status = -100;
	f.limit = (unsigned)v;
	r = ctl_load_config(c);
	if (r)
		return r;
	r = ctl_open_store(c);
	if (r)
		return r;

	r = EXIT_FAIL;
	if (store_received_select(c->st, origin, &f, recv_collect_cb, &d) !=
		    SEMQ_OK ||
	    store_streams_in(c->st, status_stream_cb, &s) != SEMQ_OK) {
		fail("%s: reading tb_0030: %s", c->db, store_errmsg(c->st));
		goto out;
	}
	if (d.failed || s.failed) {
		fail("out of memory");
		goto out;
	}
	if (c->json) {
		r = print_json(received_json(&d, &s, origin));
		goto out;
	}
	if (d.n)
		print_table(&d, d.n, VC_N, recv_cell);
	else
		printf("no received messages\n");
	for (i = 0; i < s.n_streams; i++) {
		const struct stream_copy *sc = &s.streams[i];
		if (origin && strcmp_null(sc->origin, origin))
			continue;
		if (!footer++)
			fputc('\n', stdout);
		printf("stream %s/%s", sc->origin ? sc->origin : "-",
		       sc->dest ? sc->dest : "-");
		if (sc->life != SEMQ_LIFE_LEGACY) {
			char lb[SEMQ_LIFE_STRLEN];
			printf(" life %s",
			       semq_life_str(sc->life, lb, sizeof lb));
		}
		printf(": confirmed_through %llu (rows at or below it are kept "
		       "for receipt_retention)\n",
		       (unsigned long long)sc->confirmed_through);
	}
	r = EXIT_OK;
out:
	recv_data_free(&d);
	status_free(&s);
	return r;
}

/* ---- peers (the daemon's admin HTTP) -------------------------------------- */

#define ADMIN_TIMEOUT_S 5 /* the daemon answers at once or not at all */
#define ADMIN_ANSWER_MAX (8 << 20) /* bytes of an answer */

/* Writes all n bytes of p to fd; 0 or -1 (errno). */
static int write_all(int fd, const char *p, size_t n)
{
	ssize_t k;

	while (n) {
		k = write(fd, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* Connects to the daemon's admin address `where` (host:port); the socket,
 * or -1 after printing one line. */
static int admin_connect(struct ctl *c, const char *where)
{
	const struct cfg_addr *a = &c->cfg->admin;
	struct timeval tv = {ADMIN_TIMEOUT_S, 0};
	struct addrinfo hints, *ai = NULL, *p;
	char port[8];
	int fd = -1, e = ECONNREFUSED, gai;

	memset(&hints, 0, sizeof hints);
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	snprintf(port, sizeof port, "%u", a->port);
	gai = getaddrinfo(a->host, port, &hints, &ai);
	if (gai) {
		fail("%s: [node] admin %s: %s", c->config_path, where,
		     gai_strerror(gai));
		return -1;
	}
	for (p = ai; p; p = p->ai_next) {
		fd = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC,
			    p->ai_protocol);
		if (fd < 0) {
			e = errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
		if (connect(fd, p->ai_addr, p->ai_addrlen) == 0)
			break;
		e = errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	if (fd < 0)
		fail("cannot reach semqd's admin HTTP at %s ([node] admin of "
		     "%s): %s; is semqd running?",
		     where, c->config_path, strerror(e));
	return fd;
}

/*
 * GET `path` from the running daemon's admin HTTP: HTTP/1.0, so the daemon
 * closes after its answer. EXIT_OK with *status and *body (NUL-terminated,
 * caller frees); otherwise one line was printed.
 */
static int admin_get(struct ctl *c, const char *path, int *status, char **body)
{
	const struct cfg_addr *a = &c->cfg->admin;
	char where[300], req[4096], *buf = NULL, *end;
	size_t len = 0, cap = 0;
	int fd, n, r = EXIT_FAIL;
	ssize_t k;

	snprintf(where, sizeof where,
		 strchr(a->host, ':') ? "[%s]:%u" : "%s:%u", a->host, a->port);
	fd = admin_connect(c, where);
	if (fd < 0)
		return EXIT_FAIL;
	/* With [node] admin_token every read needs it: node.ini has it. */
	n = snprintf(req, sizeof req,
		     "GET %s HTTP/1.0\r\nHost: %s\r\nAccept: "
		     "application/json\r\nUser-Agent: semqctl\r\n%s%s%s\r\n",
		     path, where,
		     c->cfg->admin_token ? "Authorization: Bearer " : "",
		     c->cfg->admin_token ? c->cfg->admin_token : "",
		     c->cfg->admin_token ? "\r\n" : "");
	if (n < 0 || (size_t)n >= sizeof req) {
		fail("admin HTTP at %s: [node] admin_token is too long for a "
		     "request header",
		     where);
		goto out;
	}
	if (write_all(fd, req, (size_t)n) != 0) {
		fail("admin HTTP at %s: sending the request: %s", where,
		     strerror(errno));
		goto out;
	}
	for (;;) {
		if (cap - len < 4096) {
			char *v;
			if (cap >= ADMIN_ANSWER_MAX) {
				fail("admin HTTP at %s: the answer is over %d "
				     "bytes",
				     where, ADMIN_ANSWER_MAX);
				goto out;
			}
			v = realloc(buf, cap ? cap * 2 : 16384);
			if (!v) {
				fail("out of memory");
				goto out;
			}
			buf = v;
			cap = cap ? cap * 2 : 16384;
		}
		k = read(fd, buf + len, cap - len - 1);
		if (k == 0)
			break;
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			fail("admin HTTP at %s: %s", where,
			     errno == EAGAIN || errno == EWOULDBLOCK
				     ? "no answer within 5 s"
				     : strerror(errno));
			goto out;
		}
		len += (size_t)k;
	}
	buf[len] = '\0';
	end = strstr(buf, "\r\n\r\n");
	if (sscanf(buf, "HTTP/%*d.%*d %d", status) != 1 || !end) {
		fail("admin HTTP at %s: the answer is not HTTP", where);
		goto out;
	}
	end += 4;
	memmove(buf, end, len - (size_t)(end - buf) + 1);
	*body = buf;
	buf = NULL;
	r = EXIT_OK;
out:
	close(fd);
	free(buf);
	return r;
}

/* The columns of `peers`. */
enum {
	PC_PEER,
	PC_STATE,
	PC_DIRECTION,
	PC_ADDRESS,
	PC_SINCE,
	PC_PENDING,
	PC_NEXT_DIAL,
	PC_DOWN,
	PC_LAST_ERROR,
	PC_N
};

/*
 * Asks the running daemon for GET `path` (the command `what` needs [node]
 * admin) and parses its 200 answer: EXIT_OK with *doc (caller frees) whose
 * `field` has the JSON type `want` (JSON_ARRAY, JSON_OBJECT); else a
 * message naming the failure and its exit status.
 */
static int admin_get_json(struct ctl *c, const char *what, const char *path,
			  const char *field, json_type want, json_t **doc_out)
{
	json_t *doc = NULL, *v;
	json_error_t e;
	char *body = NULL;
	int status = 0, r;

	*doc_out = NULL;
	if (!c->cfg->admin.set)
		return fail("%s: [node] admin is not set; semqctl %s asks the "
			    "running daemon over it",
			    c->config_path, what);
	r = admin_get(c, path, &status, &body);
	if (r)
		return r;
	r = EXIT_FAIL;
	doc = json_loads(body, 0, &e);
	v = json_object_get(doc, field);
	if (status != 200) {
		const char *why =
			json_string_value(json_object_get(doc, "error"));
		fail("semqd answered GET %s with %d: %s", path, status,
		     why ? why : "(no reason given)");
	} else if (!v || json_typeof(v) != want) {
		fail("semqd's answer to GET %s is not the expected JSON%s%s",
		     path, doc ? "" : ": ", doc ? "" : e.text);
	} else {
		*doc_out = doc;
		doc = NULL;
		r = EXIT_OK;
	}
	json_decref(doc);
	free(body);
	return r;
}

static const char *peer_str(const json_t *p, const char *key)
{
	return json_string_value(json_object_get(p, key));
}

static int64_t peer_int(const json_t *p, const char *key)
{
	return (int64_t)json_integer_value(json_object_get(p, key));
}

static const char *peer_cell(const void *ctx, size_t i, int col, int64_t now,
			     char *buf, size_t sz)
{
	static const char *const head[PC_N] = {
		"PEER",    "STATE",     "DIRECTION", "ADDRESS",   "SINCE",
		"PENDING", "NEXT_DIAL", "DOWN",      "LAST_ERROR"};
	const json_t *p;

	if (i == TABLE_HEAD)
		return head[col];
	p = json_array_get((const json_t *)ctx, i);
	switch (col) {
	case PC_PEER:
		/* one of several instances of its node id: PEER@INSTANCE */
		if (peer_str(p, "peer") && peer_str(p, "instance")) {
			snprintf(buf, sz, "%s@%s", peer_str(p, "peer"),
				 peer_str(p, "instance"));
			return buf;
		}
		return cell(peer_str(p, "peer"), 0, buf, sz);
	case PC_STATE: return cell(peer_str(p, "state"), 0, buf, sz);
	case PC_DIRECTION: return cell(peer_str(p, "direction"), 0, buf, sz);
	case PC_ADDRESS: return cell(peer_str(p, "address"), 0, buf, sz);
	case PC_SINCE: return fmt_age(peer_int(p, "since"), now, buf, sz);
	case PC_PENDING:
		if (!json_is_integer(json_object_get(p, "pending_bytes")))
			return "-";
		snprintf(buf, sz, "%lld",
			 (long long)peer_int(p, "pending_bytes"));
		return buf;
	case PC_NEXT_DIAL:
		if (!peer_int(p, "next_dial_at"))
			return "-";
		return fmt_until(peer_int(p, "next_dial_at"), now, buf, sz);
	case PC_DOWN: /* a configured peer without a ready connection */
		return fmt_age(peer_int(p, "down_since"), now, buf, sz);
	default: return cell(peer_str(p, "last_error"), 60, buf, sz);
	}
}

static int cmd_peers(struct ctl *c)
{
	json_t *doc = NULL, *arr;
	int r;

	if (c->n_pos)
		return usage_err(c, "unexpected argument '%s'", c->pos[0]);
	r = ctl_load_config(c);
	if (r)
		return r;
	r = admin_get_json(c, "peers", "/peers", "peers", JSON_ARRAY, &doc);
	if (r)
		goto out;
	arr = json_object_get(doc, "peers");
	if (c->json) {
		r = print_json(doc);
		doc = NULL;
		goto out;
	}
	if (json_array_size(arr))
		print_table(arr, json_array_size(arr), PC_N, peer_cell);
	else
		printf("no peers: node %s has no connection and no [peer] "
		       "section\n",
		       c->cfg->id);
	r = EXIT_OK;
out:
	json_decref(doc);
	return r;
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

/* ---- trace (tools/ctl_trace.c) -------------------------------------------- */

static int cmd_trace(struct ctl *c)
{
	char path[1024], err[256];
	json_t *doc = NULL;
	int r;

	if (c->n_pos)
		return usage_err(c, "unexpected argument '%s'", c->pos[0]);
	if (ctl_trace_path(c->val[0], c->val[1], c->val[2], c->val[3],
			   c->val[4], now_ms(), path, sizeof path, err,
			   sizeof err))
		return usage_err(c, "%s", err);
	r = ctl_load_config(c);
	if (r)
		return r;
	r = admin_get_json(c, "trace", path, "hops", JSON_ARRAY, &doc);
	if (r)
		goto out;
	if (c->json) {
		r = print_json(doc);
		doc = NULL;
		goto out;
	}
	ctl_trace_print(stdout, doc, now_ms());
	r = EXIT_OK;
out:
	json_decref(doc);
	return r;
}
