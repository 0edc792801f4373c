/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for node.ini (node/config.c): the input is written to a
 * file in a private temporary directory and read with config_load, as semqd
 * and semqctl do; a config that loads is also given to config_check_daemon.
 *
 * DESIGN (what is checked beyond "no crash, no leak, no UB")
 *  - A refused config comes with its problems, each on a line that starts
 *    with "FILE:" (the path given) and no config; a loaded config comes
 *    with no problems.
 *  - A loaded config keeps the promises of config.h and the checks of the
 *    key table: a valid node id, a database path, max_frame at least
 *    max_payload + 4 KiB, reconnect_min <= reconnect_max, idle_timeout >
 *    ping_interval, window / batch_max / max_tries >= 1, at least one redo
 *    level and none negative, peers with valid ids other than the node's
 *    own, routes whose `via` is a configured peer, and plugins with a path.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <semq/error.h>
#include <semq/semq.h>

#include "config.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_FRAME_SLACK 4096

static char tmpdir[4096]; /* the private directory; removed at exit */
static char ini[4200];    /* tmpdir/node.ini */

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "fuzz_config: invariant broken: %s%s%s\n", what,
		detail ? ": " : "", detail ? detail : "");
	abort();
}

static void cleanup(void)
{
	unlink(ini);
	rmdir(tmpdir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *t = getenv("TMPDIR");

	(void)argc;
	(void)argv;
	snprintf(tmpdir, sizeof tmpdir, "%s/semq-fuzz-config-XXXXXX",
		 t && *t ? t : "/tmp");
	if (!mkdtemp(tmpdir)) {
		perror("fuzz_config: mkdtemp");
		exit(1);
	}
	snprintf(ini, sizeof ini, "%s/node.ini", tmpdir);
	atexit(cleanup);
	return 0;
}

/* Every line of errs starts with "INI:". */
static void check_problems(const char *errs)
{
	size_t plen = strlen(ini);
	const char *line = errs;

	if (!errs || !*errs)
		die("a refused config has no problem lines", NULL);
	while (*line) {
		const char *nl = strchr(line, '\n');
		if (strncmp(line, ini, plen) != 0 || line[plen] != ':')
			die("a problem line does not start with the file",
			    line);
		if (!nl)
			break;
		line = nl + 1;
	}
}

static void check_config(const struct config *c)
{
	size_t i;

	if (!semq_id_valid(c->id))
		die("the node id is not a node id", c->id);
	if (!c->db || !*c->db)
		die("no database path", NULL);
	if (c->max_frame < c->max_payload + MAX_FRAME_SLACK)
		die("max_frame < max_payload + 4KiB", NULL);
	if (c->reconnect_min_ms > c->reconnect_max_ms)
		die("reconnect_min > reconnect_max", NULL);
	if (c->idle_timeout_ms <= c->ping_interval_ms)
		die("idle_timeout <= ping_interval", NULL);
	if (c->window < 1 || c->batch_max < 1 || c->max_tries < 1)
		die("window, batch_max or max_tries is 0", NULL);
	if (c->n_redo_levels < 1 || !c->redo_levels_ms)
		die("no redo level", NULL);
	for (i = 0; i < c->n_redo_levels; i++)
		if (c->redo_levels_ms[i] < 0)
			die("a negative redo level", NULL);
	if (c->synchronous < 0 || c->synchronous > 3)
		die("synchronous out of range", NULL);
	if (c->log_level < CFG_LOG_ERROR || c->log_level > CFG_LOG_DEBUG)
		die("log_level out of range", NULL);
	for (i = 0; i < c->n_peers; i++) {
		if (!semq_id_valid(c->peers[i].name))
			die("a peer name is not a node id", c->peers[i].name);
		if (strcmp(c->peers[i].name, c->id) == 0)
			die("a peer has the node's own id", c->id);
		if (config_peer(c, c->peers[i].name) != &c->peers[i])
			die("two peers of one name", c->peers[i].name);
	}
	for (i = 0; i < c->n_routes; i++) {
		if (!config_peer(c, c->routes[i].via))
			die("a route through no peer", c->routes[i].via);
		if (strcmp(c->routes[i].dest, c->id) == 0)
			die("a route to the node itself", c->id);
	}
	for (i = 0; i < c->n_plugins; i++) {
		if (!c->plugins[i].path || !*c->plugins[i].path)
			die("a plugin without a path", c->plugins[i].name);
		if (c->plugins[i].n_types && !c->plugins[i].types)
			die("a plugin with types but no list",
			    c->plugins[i].name);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct config *c = NULL;
	char *errs = NULL, *derrs = NULL;
	FILE *f;
	int r;

	f = fopen(ini, "wb");
	if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) {
		perror("fuzz_config: writing the config");
		abort();
	}
	r = config_load(ini, &c, &errs);
	if (r == SEMQ_OK) {
		if (!c)
			die("config_load: OK without a config", NULL);
		if (errs)
			die("config_load: OK with problems", errs);
		check_config(c);
		r = config_check_daemon(c, &derrs);
		if (r != SEMQ_OK)
			check_problems(derrs);
	} else {
		if (c)
			die("config_load failed but returned a config", NULL);
		if (r != SEMQ_ERR_CONFIG && r != SEMQ_ERR_IO)
			die("config_load: unexpected code", semq_strerror(r));
		check_problems(errs);
	}
	free(derrs);
	free(errs);
	config_free(c);
	return 0;
}
