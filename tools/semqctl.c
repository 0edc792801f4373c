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
#include "ctl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <semq/error.h>
#include <semq/semq.h>

#include "config.h"
#include "ctl_trace.h"

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
