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
 */
#include "plughost.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <semq/error.h>

struct plugin {
	char *name; /* owned; names the plugin in apply's messages */
	int all_types;
	uint32_t *types; /* owned; unused when all_types */
	size_t n_types;
	void *dl;     /* dlopen handle, owned */
	void *handle; /* the plugin's own state, released by its fini */
	semq_plugin_handle_fn handle_fn;
	semq_plugin_fini_fn fini_fn; /* NULL when the plugin has none */
};

struct plughost {
	struct plugin *v; /* owned; n used of cap */
	size_t n, cap;
};

__attribute__((format(printf, 3, 4))) static void errf(char *err, size_t errsz,
						       const char *fmt, ...)
{
	va_list ap;

	if (!err || errsz == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errsz, fmt, ap);
	va_end(ap);
}

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
	return calloc(1, sizeof(struct plughost));
}

void plughost_free(struct plughost *h)
{
	size_t i;

	if (!h)
		return;
	for (i = h->n; i > 0; i--)
		plugin_release(&h->v[i - 1]);
	free(h->v);
	free(h);
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
		       size_t n_opts, const char *node_id,
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
		errf(err, errsz, "plugin%s%s: no name", where ? " at " : "",
		     where ? where : "");
		r = SEMQ_ERR_INVALID;
		goto out;
	}
	plugin_label(label, sizeof label, name, where);
	if (!path || !path[0]) {
		errf(err, errsz, "%s: no path", label);
		r = SEMQ_ERR_INVALID;
		goto out;
	}
	if (!all_types && n_types == 0) {
		errf(err, errsz, "%s: no types (give * or a list of types)",
		     label);
		r = SEMQ_ERR_CONFIG;
		goto out;
	}
	if (n_types > 0 && !types) {
		errf(err, errsz, "%s: %zu types but no list", label, n_types);
		r = SEMQ_ERR_INVALID;
		goto out;
	}
	if (n_opts > 0 && !opts) {
		errf(err, errsz, "%s: %zu options but no list", label, n_opts);
		r = SEMQ_ERR_INVALID;
		goto out;
	}
	for (i = 0; i < h->n; i++) {
		if (strcmp(h->v[i].name, name) == 0) {
			errf(err, errsz, "%s: a plugin of that name is loaded",
			     label);
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
		errf(err, errsz, "%s: out of memory", label);
		r = SEMQ_ERR_NOMEM;
		goto out;
	}
	if (h->n == h->cap) {
		size_t cap = h->cap ? 2 * h->cap : 4;
		struct plugin *v = realloc(h->v, cap * sizeof *v);

		if (!v) {
			errf(err, errsz, "%s: out of memory", label);
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
		errf(err, errsz, "%s: cannot load '%s': %s", label, path,
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
		errf(err, errsz,
		     "%s: '%s' lacks the required symbol "
		     "semq_plugin_abi_version (not a SEMQ plugin?)",
		     label, path);
		r = SEMQ_ERR_NOT_FOUND;
		goto out;
	}
	abi = abi_fn();
	if (abi != SEMQ_PLUGIN_ABI_VERSION) {
		errf(err, errsz,
		     "%s: '%s' was built for ABI %d, this semqd speaks %d; "
		     "rebuild the plugin",
		     label, path, abi, SEMQ_PLUGIN_ABI_VERSION);
		r = SEMQ_ERR_VERSION;
		goto out;
	}
	init_fn = (semq_plugin_init_fn)dlsym(p.dl, "semq_plugin_init");
	if (!init_fn) {
		errf(err, errsz,
		     "%s: '%s' lacks the required symbol semq_plugin_init",
		     label, path);
		r = SEMQ_ERR_NOT_FOUND;
		goto out;
	}
	p.handle_fn = (semq_plugin_handle_fn)dlsym(p.dl, "semq_plugin_handle");
	if (!p.handle_fn) {
		errf(err, errsz,
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
		errf(err, errsz, "%s: init failed: %s", label,
		     perr[0] ? perr : "the plugin gave no reason");
		/* No handle to finalise: init did not succeed. */
		p.fini_fn = NULL;
		r = SEMQ_ERR_PLUGIN;
		goto out;
	}

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
		errf(err, errsz, "plughost_add: no host");
		return SEMQ_ERR_INVALID;
	}
	return plugin_load(h, name, path, NULL, !types || n_types == 0, types,
			   n_types, opts, n_opts, node_id, tx, err, errsz);
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
		errf(err, errsz,
		     "plughost_new: no config or no result pointer");
		r = SEMQ_ERR_INVALID;
		goto out;
	}
	h = plughost_empty();
	if (!h) {
		errf(err, errsz, "plughost_new: out of memory");
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
				cp->n_options, c->id, tx, err, errsz);
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

int plughost_handles(const struct plughost *h, uint32_t type)
{
	return route(h, type) != NULL;
}

int plughost_apply(void *host, const struct msg *m, unsigned tries,
		   const struct semq_plugin_tx *tx, char *err, size_t errsz)
{
	const struct plughost *h = host;
	struct plugin *p;
	struct semq_plugin_msg pm;
	char perr[SEMQ_ERRLEN];
	int rc;

	if (err && errsz > 0)
		err[0] = '\0';
	if (!m) {
		/* A bug in the caller; do not lose anything over it. */
		errf(err, errsz, "plughost_apply: no message");
		return SEMQ_PLUGIN_RETRY;
	}
	p = route(h, m->type);
	if (!p) {
		errf(err, errsz, "no plugin handles type %u",
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

	memset(perr, 0, sizeof perr);
	rc = p->handle_fn(p->handle, &pm, tx, perr, sizeof perr);
	err_tidy(perr, sizeof perr);
	switch (rc) {
	case SEMQ_PLUGIN_OK: break;
	case SEMQ_PLUGIN_RETRY:
	case SEMQ_PLUGIN_PERMANENT:
		if (perr[0])
			errf(err, errsz, "%s", perr);
		else
			errf(err, errsz,
			     "plugin '%s' failed (%s) without "
			     "saying why",
			     p->name,
			     rc == SEMQ_PLUGIN_RETRY ? "RETRY" : "PERMANENT");
		break;
	default:
		errf(err, errsz,
		     "plugin '%s' returned %d, which is not OK, RETRY or "
		     "PERMANENT; treated as PERMANENT%s%s",
		     p->name, rc, perr[0] ? ": " : "", perr);
		rc = SEMQ_PLUGIN_PERMANENT;
		break;
	}
	return rc;
}
