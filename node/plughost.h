/* SPDX-License-Identifier: MIT */
/*
 * The plugin host: loads the shared objects of the [plugin NAME] sections
 * (include/semq/plugin.h), checks their ABI version, initialises them with
 * their options, and routes each message to the plugin registered for its
 * type. One host per store worker (worker.c): each initialises its own
 * handle of every plugin and is only ever called from its worker's thread;
 * hosts of different workers run in parallel.
 */
#ifndef SEMQ_PLUGHOST_H
#define SEMQ_PLUGHOST_H

#include <stddef.h>
#include <stdint.h>

#include <semq/plugin.h>

#include "config.h"
#include "types.h"

struct plughost;

/*
 * Loads and initialises every plugin of `c` (borrowed; its plugin options are
 * copied). `tx` is the database handed to each plugin's init (borrowed for the
 * call). On failure err names the plugin, its config line and the cause
 * (missing file, missing symbol, wrong ABI version, init refused), every
 * plugin loaded so far is finalised, and *out is NULL.
 */
int plughost_new(const struct config *c, const struct semq_plugin_tx *tx,
		 struct plughost **out, char *err, size_t errsz);

/* Loads one plugin by hand (tests, tools): name, path, types (NULL/0 = all). */
int plughost_add(struct plughost *h, const char *name, const char *path,
		 const uint32_t *types, size_t n_types,
		 const struct semq_plugin_option *opts, size_t n_opts,
		 const char *node_id, const struct semq_plugin_tx *tx,
		 char *err, size_t errsz);

/* An empty host (no plugins): plughost_add() fills it. */
struct plughost *plughost_empty(void);

/* Finalises and unloads every plugin. Accepts NULL. */
void plughost_free(struct plughost *h);

/* Is any plugin registered for `type`? */
int plughost_handles(const struct plughost *h, uint32_t type);

/*
 * Applies `m` with the plugin registered for its type (the first one in
 * config order; a specific type wins over `*`). Returns a semq_plugin_result;
 * a message whose type no plugin takes is RETRY with err saying so (it waits
 * in the redo queue until an operator installs a plugin or discards it).
 * Matches the store_apply_fn signature: pass the host as ctx.
 */
int plughost_apply(void *host, const struct msg *m, unsigned tries,
		   const struct semq_plugin_tx *tx, char *err, size_t errsz);

/*
 * The crash guard: before each plugin call the message's id goes into a
 * small file mapped shared (`path`; written to memory, no fsync: it only has
 * to survive the process, not the machine), and is cleared when the call
 * returns. Opening it after semqd died inside a call counts one crash for
 * that message; a message that took the node down twice is not handed to a
 * plugin again but fails PERMANENT with "crashed the node twice", so that it
 * lands dead in tb_0033 instead of crash-looping the node. A message whose
 * call returns is forgiven. Without a guard (not opened, or the file could
 * not be made: err says why, the caller logs it) every call goes through.
 */
int plughost_guard_open(struct plughost *h, const char *path, char *err,
			size_t errsz);
/* The store workers' hosts share the guard of the first one: each writes
 * its call into slot `slot` (< 64) of the same file, and the crashes a start
 * finds are counted once, whichever worker the message goes to next. */
int plughost_guard_share(struct plughost *h, struct plughost *from,
			 unsigned slot);

/* The call a host is in, for the watchdog (any thread). */
struct plughost_call {
	uint64_t serial;     /* the host's count of calls: tells calls apart */
	int64_t started;     /* unix ms */
	int64_t deadline_ms; /* the plugin's [plugin] deadline (0: none) */
	char plugin[SEMQ_ID_MAX + 1];
	char msg[160];                /* "R1/S1/7@life" */
	char origin[SEMQ_ID_MAX + 1]; /* its stream's origin */
};
/* Is a call running? Then 1 and *c describes it; else 0. */
int plughost_running(struct plughost *h, struct plughost_call *c);

/*
 * Is a plugin call running for longer than its plugin's deadline (else
 * timeout_ms) at `now` (unix ms)?
 * Then 1, and `what` says which plugin, which message and since when. Safe
 * from any thread.
 */
int plughost_stuck(struct plughost *h, int64_t now, int64_t timeout_ms,
		   char *what, size_t whatsz);

/*
 * Outcomes of plughost_apply per plugin, for /metrics (any thread): what a
 * call returned (ok, retry, permanent: an invalid code counts as
 * permanent), a message not handed to it because it crashed the node
 * (crash), and, besides its outcome, a call that returned after its
 * deadline (deadline).
 */
enum plughost_outcome {
	PLUGHOST_OK,
	PLUGHOST_RETRY,
	PLUGHOST_PERMANENT,
	PLUGHOST_CRASH,
	PLUGHOST_DEADLINE,
	PLUGHOST_OUTCOMES
};
const char *plughost_outcome_text(int k);        /* "ok", "retry", ... */
size_t plughost_count(const struct plughost *h); /* plugins loaded */
/* The name of plugin i (config order; borrowed while h lives), or NULL. */
const char *plughost_name(const struct plughost *h, size_t i);
/* Adds plugin i's counts by outcome to out. */
void plughost_outcomes(struct plughost *h, size_t i,
		       uint64_t out[PLUGHOST_OUTCOMES]);

#endif
