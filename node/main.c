/* SPDX-License-Identifier: MIT */
/*
 * semqd — the SEMQ node. Reads node.ini, opens (and migrates) the database,
 * loads the plugins, then runs two threads: the network thread (this one,
 * net.c) and the store thread (worker.c). SIGTERM/SIGINT: stop accepting,
 * finish the open batch, say goodbye to peers, exit 0.
 *
 * Exit codes: 0 ok, 1 runtime failure, 2 usage or configuration error;
 * also with --check (0: the configuration is fine). The configuration is
 * -c FILE, else $SEMQ_CONFIG, else /etc/semq/node.ini (config_pick_path),
 * as for semqctl.
 *
 * Every file semqd creates (the SQLite database, its WAL and SHM, the log)
 * is its owner's only: the umask is 077 from the first line of main(). A
 * database that must be shared with an application running as another user
 * is created beforehand with the mode wanted; SQLite gives its WAL and SHM
 * the database's mode.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <event2/thread.h>
#include <sqlite3.h>

#include "config.h"
#include "log.h"
#include "net.h"
#include "sdnotify.h"
#include "tls.h"
#include "types.h"
#include "worker.h"

/* --check warns about a certificate that expires within this long. */
#define CERT_EXPIRY_WARN_S (30 * 86400)

static void usage(FILE *f)
{
	fprintf(f, "Usage: semqd [-c node.ini] [--check]\n"
		   "\n"
		   "The SEMQ node: carries documents between nodes over mutual "
		   "TLS, "
		   "exactly\n"
		   "once and in order, and applies them with its plugins.\n"
		   "\n"
		   "Options:\n"
		   "  -c, --config FILE  the node's configuration; default "
		   "$SEMQ_CONFIG, else\n"
		   "                     " SEMQ_CONFIG_DEFAULT "\n"
		   "  -t, --check        check the configuration, the "
		   "certificates, the database\n"
		   "                     and the plugins, then exit\n"
		   "  -h, --help         this text\n"
		   "  -V, --version      print the version\n"
		   "\n"
		   "Exit status: 0 ok (with --check: the configuration is "
		   "fine), 1 "
		   "runtime\n"
		   "failure (e.g. the database cannot be opened), 2 usage or "
		   "configuration error\n"
		   "(FILE:LINE: message).\n");
}

/* --config-reference=man: semq.ini(5), dated $SOURCE_DATE_EPOCH (a
 * reproducible build) or today. */
static void describe_man(void)
{
	const char *sde = getenv("SOURCE_DATE_EPOCH");
	time_t t = sde && *sde ? (time_t)strtoll(sde, NULL, 10) : time(NULL);
	char date[32] = "";
	struct tm tm;

	if (gmtime_r(&t, &tm))
		strftime(date, sizeof date, "%Y-%m-%d", &tm);
	config_describe_man(stdout, SEMQ_VERSION, date);
}

/*
 * --check: this node's certificate as its peers will see it. Refused (one
 * line naming the file and what to do, SEMQ_ERR_CONFIG) when the key does
 * not match it, when it is expired or not valid yet, not signed by [tls] ca
 * or revoked by [tls] crl; a warning when it expires within 30 days. A node
 * without a listener or peers needs no TLS and is not checked.
 */
static int check_tls(const struct config *c)
{
	SSL_CTX *ctx = NULL; /* owned */
	char err[1024] = "", when[64];
	int64_t now = (int64_t)time(NULL), not_after;
	int r;

	if (!c->listen.set && !c->n_peers)
		return SEMQ_OK;
	ctx = tls_ctx_new(c->tls_cert, c->tls_key, c->tls_ca, c->tls_crl, c->id,
			  err, sizeof err);
	if (!ctx) {
		log_error("main", "%s", err);
		r = SEMQ_ERR_CONFIG;
		goto out;
	}
	r = tls_check_own(ctx, now, c->tls_cert, c->tls_ca, c->tls_crl, err,
			  sizeof err);
	if (r != SEMQ_OK) {
		log_error("main", "%s", err);
		goto out;
	}
	not_after = tls_cert_not_after(ctx);
	if (not_after && not_after - now < CERT_EXPIRY_WARN_S) {
		time_t t = (time_t)not_after;
		struct tm tm;

		if (!gmtime_r(&t, &tm) ||
		    !strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm))
			snprintf(when, sizeof when, "%lld",
				 (long long)not_after);
		log_warn("main",
			 "%s: certificate expires on %s, in %lld day(s): make "
			 "a new one for this node before then",
			 c->tls_cert, when,
			 (long long)((not_after - now) / 86400));
	}
out:
	SSL_CTX_free(ctx);
	return r;
}

/* "host:port", "[v6]:port" */
static void addr_shown(const struct cfg_addr *a, char *buf, size_t sz)
{
	snprintf(buf, sz, strchr(a->host, ':') ? "[%s]:%u" : "%s:%u", a->host,
		 (unsigned)a->port);
}

/*
 * The start line: what an operator checks first (version, node, role, the
 * database, the addresses it listens on), and the same for systemd's
 * READY=1 with its STATUS=, written into status.
 */
static void start_line(const struct config *c, const char *db_shown,
		       char *status, size_t statussz)
{
	char listen[300] = "none", admin[300] = "none";
	const char *role = c->relay        ? "relay"
			   : c->listen.set ? "server"
					   : "edge";

	if (c->listen.set)
		addr_shown(&c->listen, listen, sizeof listen);
	if (c->admin.set)
		addr_shown(&c->admin, admin, sizeof admin);
	log_msg(LOG_INFO, "main", NULL, NULL,
		"semqd %s: node %s%s%s, role %s, db %s %s, listen %s, admin "
		"%s, %zu peer(s), %zu plugin(s)",
		SEMQ_VERSION, c->id, c->instance[0] ? " instance " : "",
		c->instance, role, c->db_url ? "postgresql" : "sqlite",
		db_shown, listen, admin, c->n_peers, c->n_plugins);
	snprintf(status, statussz,
		 "READY=1\nSTATUS=node %s (%s) listening on %s, admin %s",
		 c->id, role, listen, admin);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"config", required_argument, NULL, 'c'},
		{"check", no_argument, NULL, 't'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		/* Not in usage(): the node.ini reference, for docs/CONFIG.md;
		 * =man: as the manual page semq.ini(5), in roff. */
		{"config-reference", optional_argument, NULL, 'R'},
		{NULL, 0, NULL, 0}};
	const char *path = NULL, *how = NULL;
	char err[1024] = "", *errs = NULL, db_shown[512], status[1024];
	struct config *c = NULL;
	struct worker *w = NULL;
	struct net *n = NULL;
	int check = 0, opt, r, rc = 1;

	umask(077); /* see the head of this file */
	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":c:thV", opts, NULL)) != -1) {
		switch (opt) {
		case 'c': path = optarg; break;
		case 't': check = 1; break;
		case 'h': usage(stdout); return 0;
		case 'V': printf("semqd %s\n", SEMQ_VERSION); return 0;
		case 'R':
			if (!optarg) {
				config_describe(stdout);
				return 0;
			}
			if (strcmp(optarg, "man") != 0) {
				fprintf(stderr,
					"semqd: --config-reference=%s: only "
					"'man' (try --help)\n",
					optarg);
				return 2;
			}
			describe_man();
			return 0;
		case ':':
			fprintf(stderr, "semqd: %s needs an argument\n",
				argv[optind - 1]);
			return 2;
		default:
			fprintf(stderr,
				"semqd: unknown option '%s' (try --help)\n",
				argv[optind - 1]);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr,
			"semqd: unexpected argument '%s' (try --help)\n",
			argv[optind]);
		return 2;
	}
	path = config_pick_path(path, &how);
	if (config_file_exists(path, how, err, sizeof err) != SEMQ_OK) {
		fprintf(stderr, "semqd: %s\n", err);
		return 2;
	}

	r = config_load(path, &c, &errs);
	if (r == SEMQ_OK)
		r = config_check_daemon(c, &errs);
	if (r != SEMQ_OK) {
		fprintf(stderr, "%s",
			errs ? errs : "semqd: bad configuration\n");
		if (errs && errs[0] && errs[strlen(errs) - 1] != '\n')
			fputc('\n', stderr);
		free(errs);
		config_free(c);
		return 2;
	}
	log_set_level(c->log_level);
	if (c->log_file && log_open(c->log_file) != SEMQ_OK) {
		fprintf(stderr, "%s: [node] log_file: cannot open '%s'\n", path,
			c->log_file);
		config_free(c);
		return 2;
	}
	/* --check reports on the terminal; the log file only had to open. */
	if (check && c->log_file)
		log_open(NULL);

	signal(SIGPIPE, SIG_IGN);
	evthread_use_pthreads();
	/* Every connection is used by one thread at a time (NOMUTEX): SQLite's
	 * global memory-statistics mutex, taken in every allocation, only
	 * costs (4-8 % of a node's CPU measured). Must precede any use. */
	sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);

	if (check && check_tls(c) != SEMQ_OK) {
		rc = 2;
		goto out;
	}
	r = net_new(c, &n, err, sizeof err);
	if (r != SEMQ_OK) {
		log_error("main", "%s", err);
		rc = r == SEMQ_ERR_CONFIG ? 2 : 1;
		goto out;
	}
	r = worker_new(c, net_deliver, n, NULL, NULL, &w, err, sizeof err);
	if (r != SEMQ_OK) {
		log_error("main", "%s", err);
		rc = r == SEMQ_ERR_CONFIG || r == SEMQ_ERR_PLUGIN ? 2 : 1;
		goto out;
	}
	if (check) {
		printf("%s: configuration, certificates, database and plugins "
		       "are fine\n",
		       path);
		rc = 0;
		goto out;
	}
	net_attach_worker(n, w);
	if (worker_start(w) != SEMQ_OK) {
		log_error("main", "cannot start the store thread");
		goto out;
	}
	semq_db_shown(c->db, db_shown, sizeof db_shown);
	start_line(c, db_shown, status, sizeof status);
	/* systemd (Type=notify): listening, the store open, peers next */
	if (sdnotify_send(status) == SEMQ_ERR_IO)
		log_warn("main", "cannot notify systemd at NOTIFY_SOCKET '%s'",
			 getenv("NOTIFY_SOCKET"));
	net_run(n);
	/* Stop order: no new input (the loop stopped), the store thread
	 * finishes its open batch and everything queued, then the last
	 * answers are written and peers are told we are going. */
	worker_stop(w);
	net_drain(n);
	log_info("main", "stopped cleanly");
	rc = 0;
out:
	worker_free(w);
	net_free(n);
	config_free(c);
	return rc;
}
