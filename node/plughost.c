/* SPDX-License-Identifier: MIT */
/*
 * The plugin host: loads the shared objects named by the [plugin NAME]
 * sections, checks their ABI version, initialises them with their options and
 * routes every message to the plugin registered for its type (plughost.h,
 * include/semq/plugin.h). Everything here runs on the store thread.
 *
 * DESIGN
 *  - The host owns an array of loaded plugins in config order. A plugin is in
 *    the array only once its init has returned OK: everything in the array has
 *    a live handle, and plughost_free() calls fini then dlclose on each, in
 *    reverse order of loading.
 *  - Routing: a plugin listing the message's type explicitly wins over one
 *    registered for `*`; among plugins of the same kind the first in config
 *    order wins. A type nobody takes is RETRY, never a loss.
 *  - A plugin is an edge like the wire: what comes back from it (its return
 *    value, its err text) is checked here. The err buffer handed to it is the
 *    host's own, NUL-terminated afterwards whatever the plugin wrote, flattened
 *    to one line, and replaced by a generic text naming the plugin when empty.
 *  - Nothing of the config is kept: the name and types are copied; the
 *    options are handed to init (borrowed for that call, as the ABI says) and
 *    not needed afterwards, so the config may be freed after plughost_new().
 *  - The crash guard (plughost.h) is one page of a file mapped MAP_SHARED:
 *    a store into it is in the page cache as soon as it is made, so it is
 *    there for the next semqd even if this one is killed in the middle of a
 *    plugin call. It holds the call running now and up to GUARD_SUSPECTS
 *    messages that were running when the node died, with how many times.
 *  - The call running now is also kept under a mutex for the watchdog
 *    (plughost_stuck), which the network thread and the worker's watchdog
 *    read while the store thread is inside the call.
 */
#include "plughost.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <semq/error.h>

#include "log.h"

#define GUARD_MAGIC 0x53514742u   /* "SQGB": a slot per store worker */
#define GUARD_MAGIC_1 0x53514741u /* "SQGA": one slot (before workers) */
#define GUARD_SLOTS 64            /* [node] workers at most */
#define GUARD_SUSPECTS 32
#define GUARD_CRASHES 2 /* a message that crashed the node this often */
#define GUARD_IDLEN 160 /* "origin/dest/seq@life" */

/* The call a store worker is in (plughost.h, "The crash guard"). */
struct guard_slot {
	uint32_t busy; /* a call is running: `now` names it */
	char now[GUARD_IDLEN];
	char plugin[SEMQ_ID_MAX + 1];
	int64_t started; /* unix ms */
};

/* The mapped file. */
struct guard_page {
	uint32_t magic;
	uint32_t unused;
	struct guard_slot slot[GUARD_SLOTS];
	struct suspect {
		char id[GUARD_IDLEN];
		uint32_t crashes;
	} s[GUARD_SUSPECTS];
};

/* The layout of GUARD_MAGIC_1, read once to carry over its call. */
struct guard_page_1 {
	uint32_t magic;
	uint32_t busy;
	char now[GUARD_IDLEN];
};

/* The mapping, shared by the hosts of all store workers; the suspects are
 * read and forgiven under mu. */
struct guard {
	struct guard_page *g;
	pthread_mutex_t mu;
	int refs; /* under mu */
};

struct plugin {
	char *name; /* owned; names the plugin in apply's messages */
	int all_types;
	uint32_t *types; /* owned; unused when all_types */
	size_t n_types;
	void *dl;            /* dlopen handle, owned */
	void *handle;        /* the plugin's own state, released by its fini */
	int64_t deadline_ms; /* [plugin] deadline; 0: plughost_stuck's */
	semq_plugin_handle_fn handle_fn;
	semq_plugin_fini_fn fini_fn;         /* NULL when the plugin has none */
	uint64_t outcome[PLUGHOST_OUTCOMES]; /* calls by outcome; host's mu */
};

struct plughost {
	struct plugin *v; /* owned; n used of cap */
	size_t n, cap;
	struct guard *guard; /* shared; NULL: no guard */
	unsigned slot;       /* this host's slot in it */
	pthread_mutex_t mu;  /* the call running now, for the watchdog */
	int busy;
	int64_t started;
	int64_t deadline_ms; /* the running plugin's; 0: the caller's */
	uint64_t calls;      /* calls begun, the running one's number */
	char busy_id[GUARD_IDLEN], busy_plugin[SEMQ_ID_MAX + 1];
	char busy_origin[SEMQ_ID_MAX + 1];
};

/* Makes a plugin's err text safe to show: terminated, one line. */
static void err_tidy(char *buf, size_t bufsz)
{
	size_t i;

	buf[bufsz - 1] = '\0';
	for (i = 0; buf[i]; i++) {
		unsigned char ch = (unsigned char)buf[i];

		if (ch < 0x20 || ch == 0x7f)
			buf[i] = ' ';
	}
	while (i > 0 && buf[i - 1] == ' ')
		buf[--i] = '\0';
}

static void plugin_release(struct plugin *p)
{
	if (p->fini_fn)
		p->fini_fn(p->handle);
	if (p->dl)
		dlclose(p->dl);
	free(p->name);
	free(p->types);
	memset(p, 0, sizeof *p);
}

struct plughost *plughost_empty(void)
{
	struct plughost *h = calloc(1, sizeof(struct plughost));

	if (h)
		pthread_mutex_init(&h->mu, NULL);
	return h;
}

static void guard_drop(struct guard *gd)
{
	int last;

	if (!gd)
		return;
	pthread_mutex_lock(&gd->mu);
	last = --gd->refs == 0;
	pthread_mutex_unlock(&gd->mu);
	if (!last)
		return;
	munmap(gd->g, sizeof *gd->g);
	pthread_mutex_destroy(&gd->mu);
	free(gd);
}

void plughost_free(struct plughost *h)
{
	size_t i;

	if (!h)
		return;
	for (i = h->n; i > 0; i--)
		plugin_release(&h->v[i - 1]);
	free(h->v);
	guard_drop(h->guard);
	pthread_mutex_destroy(&h->mu);
	free(h);
}

static int64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* "R1/S1/7@0123456789abcdef": a message, its life included. */
static void guard_id(const struct msg *m, char *buf, size_t sz)
{
	char idb[MSGID_STRLEN], lb[SEMQ_LIFE_STRLEN];

	snprintf(buf, sz, "%s@%s", msgid_str(&m->id, idb, sizeof idb),
		 semq_life_str(m->id.life, lb, sizeof lb));
}

static struct suspect *suspect_of(struct guard_page *g, const char *id)
{
	size_t i;

	for (i = 0; i < GUARD_SUSPECTS; i++)
		if (g->s[i].crashes && !strcmp(g->s[i].id, id))
			return &g->s[i];
	return NULL;
}

/* The last semqd died inside the call `id` of `plugin`: one more crash. */
static void count_crash(struct guard_page *g, const char *id,
			const char *plugin)
{
	struct suspect *s = suspect_of(g, id);
	size_t i;

	for (i = 0; !s && i < GUARD_SUSPECTS; i++)
		if (!g->s[i].crashes)
			s = &g->s[i];
	if (!s) /* full: the oldest entry goes */
		s = &g->s[0];
	if (!s->crashes)
		snprintf(s->id, sizeof s->id, "%s", id);
	s->crashes++;
	log_msg(LOG_ERROR, "plughost", NULL, NULL,
		"semqd stopped while plugin '%.64s' was handling %s "
		"(crash %u of %d): %s",
		plugin, s->id, s->crashes, GUARD_CRASHES,
		s->crashes >= GUARD_CRASHES
			? "it is not handed to a plugin again; it goes "
			  "dead in the redo queue"
			: "it is tried once more");
}

int plughost_guard_open(struct plughost *h, const char *path, char *err,
			size_t errsz)
{
	struct guard_page *g;
	struct guard *gd;
	struct stat sb;
	size_t i;
	int fd;

	if (!h || !path || h->guard)
		return SEMQ_ERR_INVALID;
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		semq_errf(err, errsz, "%s: %s", path, strerror(errno));
		return SEMQ_ERR_IO;
	}
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) ||
	    sb.st_uid != geteuid() ||
	    ((size_t)sb.st_size < sizeof *g &&
	     ftruncate(fd, (off_t)sizeof *g) != 0)) {
		semq_errf(err, errsz,
			  "%s: not a regular file of this user, or %s", path,
			  strerror(errno));
		close(fd);
		return SEMQ_ERR_IO;
	}
	g = mmap(NULL, sizeof *g, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (g == MAP_FAILED) {
		semq_errf(err, errsz, "%s: mmap: %s", path, strerror(errno));
		return SEMQ_ERR_IO;
	}
	gd = calloc(1, sizeof *gd);
	if (!gd) {
		munmap(g, sizeof *g);
		semq_errf(err, errsz, "out of memory");
		return SEMQ_ERR_NOMEM;
	}
	if (g->magic != GUARD_MAGIC) {
		struct guard_page_1 old;

		memcpy(&old, g, sizeof old);
		memset(g, 0, sizeof *g);
		g->magic = GUARD_MAGIC;
		if (old.magic == GUARD_MAGIC_1 && old.busy) {
			old.now[sizeof old.now - 1] = '\0';
			count_crash(g, old.now, "?");
		}
	}
	for (i = 0; i < GUARD_SLOTS; i++) {
		struct guard_slot *sl = &g->slot[i];

		if (!sl->busy)
			continue;
		sl->now[sizeof sl->now - 1] = '\0';
		sl->plugin[sizeof sl->plugin - 1] = '\0';
		count_crash(g, sl->now, sl->plugin);
		sl->busy = 0;
	}
	gd->g = g;
	gd->refs = 1;
	pthread_mutex_init(&gd->mu, NULL);
	h->guard = gd;
	h->slot = 0;
	return SEMQ_OK;
}

int plughost_guard_share(struct plughost *h, struct plughost *from,
			 unsigned slot)
{
	if (!h || !from || h->guard || slot >= GUARD_SLOTS)
		return SEMQ_ERR_INVALID;
	if (!from->guard)
		return SEMQ_OK;
	pthread_mutex_lock(&from->guard->mu);
	from->guard->refs++;
	pthread_mutex_unlock(&from->guard->mu);
	h->guard = from->guard;
	h->slot = slot;
	return SEMQ_OK;
}

int plughost_stuck(struct plughost *h, int64_t now, int64_t timeout_ms,
		   char *what, size_t whatsz)
{
	struct plughost_call c;

	if (!plughost_running(h, &c))
		return 0;
	if (c.deadline_ms)
		timeout_ms = c.deadline_ms;
	if (now - c.started <= timeout_ms)
		return 0;
	if (what && whatsz)
		snprintf(what, whatsz,
			 "plugin '%s' has been handling %s for %" PRId64 " ms",
			 c.plugin, c.msg, now - c.started);
	return 1;
}

int plughost_running(struct plughost *h, struct plughost_call *c)
{
	int busy;

	memset(c, 0, sizeof *c);
	if (!h)
		return 0;
	pthread_mutex_lock(&h->mu);
	busy = h->busy;
	if (busy) {
		c->serial = h->calls;
		c->started = h->started;
		c->deadline_ms = h->deadline_ms;
		snprintf(c->plugin, sizeof c->plugin, "%s", h->busy_plugin);
		snprintf(c->msg, sizeof c->msg, "%s", h->busy_id);
		snprintf(c->origin, sizeof c->origin, "%s", h->busy_origin);
	}
	pthread_mutex_unlock(&h->mu);
	return busy;
}

/* A call begins (p and m set) or ends (NULL): the guard page and the
 * watchdog's view. */
static void call_mark(struct plughost *h, const char *id,
		      const struct plugin *p, const struct msg *m)
{
	int64_t now = p ? wall_ms() : 0;
	struct guard_slot *sl;

	pthread_mutex_lock(&h->mu);
	h->busy = p != NULL;
	h->started = now;
	if (p) {
		h->calls++;
		h->deadline_ms = p->deadline_ms;
		snprintf(h->busy_id, sizeof h->busy_id, "%s", id);
		snprintf(h->busy_plugin, sizeof h->busy_plugin, "%s", p->name);
		snprintf(h->busy_origin, sizeof h->busy_origin, "%s",
			 m->id.origin);
	}
	pthread_mutex_unlock(&h->mu);
	if (!h->guard)
		return;
	sl = &h->guard->g->slot[h->slot];
	if (p) {
		snprintf(sl->now, sizeof sl->now, "%s", id);
		snprintf(sl->plugin, sizeof sl->plugin, "%s", p->name);
		sl->started = now;
	}
	__atomic_store_n(&sl->busy, (uint32_t)(p != NULL), __ATOMIC_SEQ_CST);
}

/* "plugin 'journal' (node.ini:20)" or "plugin 'journal'", for messages. */
static void plugin_label(char *buf, size_t bufsz, const char *name,
			 const char *where)
{
	if (where)
		snprintf(buf, bufsz, "plugin '%s' (%s)", name, where);
	else
		snprintf(buf, bufsz, "plugin '%s'", name);
}

/*
 * Loads, checks and initialises one plugin and appends it to h. `where` names
 * its config line or is NULL. On failure h is as it was and nothing of the
 * plugin stays loaded.
 */
static int plugin_load(struct plughost *h, const char *name, const char *path,
		       const char *where, int all_types, const uint32_t *types,
		       size_t n_types, const struct semq_plugin_option *opts,
		       size_t n_opts, int64_t deadline_ms, const char *node_id,
		       const struct semq_plugin_tx *tx, char *err, size_t errsz)
{
	int r = SEMQ_ERR_INTERNAL;
	struct plugin p;
	char label[SEMQ_ID_MAX + 512];
	char perr[SEMQ_ERRLEN];
	semq_plugin_abi_version_fn abi_fn;
	semq_plugin_init_fn init_fn;
	struct semq_plugin_init_args args;
	const char *dle;
	size_t i;
	int abi, rc;

	memset(&p, 0, sizeof p);
	if (!name || !name[0]) {
		semq_errf(err, errsz, "plugin%s%s: no name",
			  where ? " at " : "", where ? where : "");
		r = SEMQ_ERR_INVALID;
		goto out;
	}
	plugin_label(label, sizeof label, name, where);
	if (!path || !path[0]) {
		semq_errf(err, errsz, "%s: no path", label);
		r = SEMQ_ERR_INVALID;
		goto out;
	}
	if (!all_types && n_types == 0) {
		semq_errf(err, errsz,
			  "%s: no types (give * or a list of types)", label);
		r = SEMQ_ERR_CONFIG;
		goto out;
	}
	if (n_types > 0 && !types) {
		semq_errf(err, errsz, "%s: %zu types but no list", label,
			  n_types);
		r = SEMQ_ERR_INVALID;
		goto out;
	}
	if (n_opts > 0 && !opts) {
		semq_errf(err, errsz, "%s: %zu options but no list", label,
			  n_opts);
		r = SEMQ_ERR_INVALID;
		goto out;
	}
	for (i = 0; i < h->n; i++) {
		if (strcmp(h->v[i].name, name) == 0) {
			semq_errf(err, errsz,
				  "%s: a plugin of that name is loaded", label);
			r = SEMQ_ERR_CONFIG;
			goto out;
		}
	}

	p.name = strdup(name);
	p.all_types = all_types;
	if (!all_types) {
		p.types = malloc(n_types * sizeof *p.types);
		if (p.types)
			memcpy(p.types, types, n_types * sizeof *p.types);
		p.n_types = n_types;
	}
	if (!p.name || (!all_types && !p.types)) {
		semq_errf(err, errsz, "%s: out of memory", label);
		r = SEMQ_ERR_NOMEM;
		goto out;
	}
	if (h->n == h->cap) {
		size_t cap = h->cap ? 2 * h->cap : 4;
		struct plugin *v = realloc(h->v, cap * sizeof *v);

		if (!v) {
			semq_errf(err, errsz, "%s: out of memory", label);
			r = SEMQ_ERR_NOMEM;
			goto out;
		}
		h->v = v;
		h->cap = cap;
	}

	dlerror();
	p.dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!p.dl) {
		dle = dlerror();
		semq_errf(err, errsz, "%s: cannot load '%s': %s", label, path,
			  dle ? dle : "unknown dlopen error");
		r = (strchr(path, '/') && access(path, F_OK) != 0 &&
		     errno == ENOENT)
			    ? SEMQ_ERR_NOT_FOUND
			    : SEMQ_ERR_PLUGIN;
		goto out;
	}

	abi_fn = (semq_plugin_abi_version_fn)dlsym(p.dl,
						   "semq_plugin_abi_version");
	if (!abi_fn) {
		semq_errf(err, errsz,
			  "%s: '%s' lacks the required symbol "
			  "semq_plugin_abi_version (not a SEMQ plugin?)",
			  label, path);
		r = SEMQ_ERR_NOT_FOUND;
		goto out;
	}
	abi = abi_fn();
	if (abi != SEMQ_PLUGIN_ABI_VERSION) {
		semq_errf(
			err, errsz,
			"%s: '%s' was built for ABI %d, this semqd speaks %d; "
			"rebuild the plugin",
			label, path, abi, SEMQ_PLUGIN_ABI_VERSION);
		r = SEMQ_ERR_VERSION;
		goto out;
	}
	init_fn = (semq_plugin_init_fn)dlsym(p.dl, "semq_plugin_init");
	if (!init_fn) {
		semq_errf(err, errsz,
			  "%s: '%s' lacks the required symbol semq_plugin_init",
			  label, path);
		r = SEMQ_ERR_NOT_FOUND;
		goto out;
	}
	p.handle_fn = (semq_plugin_handle_fn)dlsym(p.dl, "semq_plugin_handle");
	if (!p.handle_fn) {
		semq_errf(
			err, errsz,
			"%s: '%s' lacks the required symbol semq_plugin_handle",
			label, path);
		r = SEMQ_ERR_NOT_FOUND;
		goto out;
	}
	/* Optional: a missing fini just means nothing to release. */
	p.fini_fn = (semq_plugin_fini_fn)dlsym(p.dl, "semq_plugin_fini");

	memset(&args, 0, sizeof args);
	args.abi_version = SEMQ_PLUGIN_ABI_VERSION;
	args.name = p.name;
	args.node_id = node_id ? node_id : "";
	args.options = n_opts ? opts : NULL;
	args.n_options = n_opts;
	args.tx = tx;
	memset(perr, 0, sizeof perr);
	p.handle = NULL;
	rc = init_fn(&args, &p.handle, perr, sizeof perr);
	if (rc != SEMQ_PLUGIN_OK) {
		err_tidy(perr, sizeof perr);
		semq_errf(err, errsz, "%s: init failed: %s", label,
			  perr[0] ? perr : "the plugin gave no reason");
		/* No handle to finalise: init did not succeed. */
		p.fini_fn = NULL;
		r = SEMQ_ERR_PLUGIN;
		goto out;
	}

	p.deadline_ms = deadline_ms;
	h->v[h->n++] = p;
	memset(&p, 0, sizeof p);
	r = SEMQ_OK;
out:
	plugin_release(&p);
	return r;
}

int plughost_add(struct plughost *h, const char *name, const char *path,
		 const uint32_t *types, size_t n_types,
		 const struct semq_plugin_option *opts, size_t n_opts,
		 const char *node_id, const struct semq_plugin_tx *tx,
		 char *err, size_t errsz)
{
	if (!h) {
		semq_errf(err, errsz, "plughost_add: no host");
		return SEMQ_ERR_INVALID;
	}
	return plugin_load(h, name, path, NULL, !types || n_types == 0, types,
			   n_types, opts, n_opts, 0, node_id, tx, err, errsz);
}

int plughost_new(const struct config *c, const struct semq_plugin_tx *tx,
		 struct plughost **out, char *err, size_t errsz)
{
	int r = SEMQ_ERR_INTERNAL;
	struct plughost *h = NULL;
	char where[4096];
	size_t i;

	if (out)
		*out = NULL;
	if (!c || !out || (c->n_plugins > 0 && !c->plugins)) {
		semq_errf(err, errsz,
			  "plughost_new: no config or no result pointer");
		r = SEMQ_ERR_INVALID;
		goto out;
	}
	h = plughost_empty();
	if (!h) {
		semq_errf(err, errsz, "plughost_new: out of memory");
		r = SEMQ_ERR_NOMEM;
		goto out;
	}
	for (i = 0; i < c->n_plugins; i++) {
		const struct cfg_plugin *cp = &c->plugins[i];
		const char *w = NULL;

		if (cp->line > 0 && c->file)
			snprintf(where, sizeof where, "%s:%d", c->file,
				 cp->line);
		else if (cp->line > 0)
			snprintf(where, sizeof where, "line %d", cp->line);
		if (cp->line > 0)
			w = where;
		r = plugin_load(h, cp->name, cp->path, w, cp->all_types,
				cp->types, cp->n_types, cp->options,
				cp->n_options,
				cp->deadline_ms ? cp->deadline_ms
						: c->plugin_timeout_ms,
				c->id, tx, err, errsz);
		if (r != SEMQ_OK)
			goto out;
	}
	*out = h;
	h = NULL;
	r = SEMQ_OK;
out:
	plughost_free(h);
	return r;
}

/* The plugin for `type`, or NULL: a specific listing first, then `*`. */
static struct plugin *route(const struct plughost *h, uint32_t type)
{
	size_t i, j;

	if (!h)
		return NULL;
	for (i = 0; i < h->n; i++) {
		const struct plugin *p = &h->v[i];

		if (p->all_types)
			continue;
		for (j = 0; j < p->n_types; j++)
			if (p->types[j] == type)
				return &h->v[i];
	}
	for (i = 0; i < h->n; i++)
		if (h->v[i].all_types)
			return &h->v[i];
	return NULL;
}

/* One more call of p with outcome k (enum plughost_outcome). */
static void count_outcome(struct plughost *h, struct plugin *p, int k)
{
	pthread_mutex_lock(&h->mu);
	p->outcome[k]++;
	pthread_mutex_unlock(&h->mu);
}

int plughost_handles(const struct plughost *h, uint32_t type)
{
	return route(h, type) != NULL;
}

int plughost_apply(void *host, const struct msg *m, unsigned tries,
		   const struct semq_plugin_tx *tx, char *err, size_t errsz)
{
	struct plughost *h = host;
	struct plugin *p;
	struct semq_plugin_msg pm;
	struct suspect *s = NULL;
	char perr[SEMQ_ERRLEN], gid[GUARD_IDLEN];
	unsigned crashes = 0;
	int64_t t0;
	int rc;

	if (err && errsz > 0)
		err[0] = '\0';
	if (!m) {
		/* A bug in the caller; do not lose anything over it. */
		semq_errf(err, errsz, "plughost_apply: no message");
		return SEMQ_PLUGIN_RETRY;
	}
	p = route(h, m->type);
	if (!p) {
		semq_errf(err, errsz, "no plugin handles type %u",
			  (unsigned)m->type);
		return SEMQ_PLUGIN_RETRY;
	}

	memset(&pm, 0, sizeof pm); /* reserved fields are zero */
	pm.origin = m->id.origin;
	pm.dest = m->id.dest;
	pm.seq = m->id.seq;
	pm.type = m->type;
	pm.key = m->has_key ? m->key : NULL;
	pm.prev_seq = m->prev_seq;
	pm.deliver_at = m->deliver_at;
	pm.created_at = m->created_at;
	pm.payload = m->payload;
	pm.payload_len = m->payload_len;
	pm.tries = tries;

	guard_id(m, gid, sizeof gid);
	if (h->guard) {
		pthread_mutex_lock(&h->guard->mu);
		s = suspect_of(h->guard->g, gid);
		crashes = s ? s->crashes : 0;
		pthread_mutex_unlock(&h->guard->mu);
	}
	if (crashes >= GUARD_CRASHES) {
		count_outcome(h, p, PLUGHOST_CRASH);
		semq_errf(err, errsz,
			  "crashed the node %u times (plugin '%s'): not handed "
			  "to "
			  "it again",
			  crashes, p->name);
		return SEMQ_PLUGIN_PERMANENT;
	}
	memset(perr, 0, sizeof perr);
	call_mark(h, gid, p, m);
	t0 = wall_ms();
	rc = p->handle_fn(p->handle, &pm, tx, perr, sizeof perr);
	call_mark(h, NULL, NULL, NULL);
	if (p->deadline_ms && wall_ms() - t0 > p->deadline_ms)
		count_outcome(h, p, PLUGHOST_DEADLINE);
	if (crashes) { /* it returned: forgiven */
		pthread_mutex_lock(&h->guard->mu);
		s = suspect_of(h->guard->g, gid);
		if (s)
			memset(s, 0, sizeof *s);
		pthread_mutex_unlock(&h->guard->mu);
	}
	err_tidy(perr, sizeof perr);
	switch (rc) {
	case SEMQ_PLUGIN_OK: break;
	case SEMQ_PLUGIN_RETRY:
	case SEMQ_PLUGIN_PERMANENT:
		if (perr[0])
			semq_errf(err, errsz, "%s", perr);
		else
			semq_errf(err, errsz,
				  "plugin '%s' failed (%s) without "
				  "saying why",
				  p->name,
				  rc == SEMQ_PLUGIN_RETRY ? "RETRY"
							  : "PERMANENT");
		break;
	default:
		semq_errf(err, errsz,
			  "plugin '%s' returned %d, which is not OK, RETRY or "
			  "PERMANENT; treated as PERMANENT%s%s",
			  p->name, rc, perr[0] ? ": " : "", perr);
		rc = SEMQ_PLUGIN_PERMANENT;
		break;
	}
	count_outcome(h, p,
		      rc == SEMQ_PLUGIN_OK      ? PLUGHOST_OK
		      : rc == SEMQ_PLUGIN_RETRY ? PLUGHOST_RETRY
						: PLUGHOST_PERMANENT);
	return rc;
}

size_t plughost_count(const struct plughost *h)
{
	return h ? h->n : 0;
}

const char *plughost_name(const struct plughost *h, size_t i)
{
	return h && i < h->n ? h->v[i].name : NULL;
}

void plughost_outcomes(struct plughost *h, size_t i,
		       uint64_t out[PLUGHOST_OUTCOMES])
{
	size_t k;

	if (!h || i >= h->n)
		return;
	pthread_mutex_lock(&h->mu);
	for (k = 0; k < PLUGHOST_OUTCOMES; k++)
		out[k] += h->v[i].outcome[k];
	pthread_mutex_unlock(&h->mu);
}

const char *plughost_outcome_text(int k)
{
	static const char *const names[PLUGHOST_OUTCOMES] = {
		"ok", "retry", "permanent", "crash", "deadline"};

	return k >= 0 && k < PLUGHOST_OUTCOMES ? names[k] : "?";
}
