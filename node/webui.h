/* SPDX-License-Identifier: MIT */
/*
 * The web dashboard of the admin HTTP (SPEC §8): the files of web/ (one
 * HTML page, its script and its style sheet), embedded in the daemon at
 * build time by cmake/embed_files.cmake, so semqd serves them from memory
 * and never reads the file system to answer a request. admin.c answers
 * GET / with web/index.html and GET /ui/NAME with web/NAME.
 */
#ifndef SEMQ_WEBUI_H
#define SEMQ_WEBUI_H

#include <stddef.h>

struct webui_file {
	const char *path;           /* name under web/, e.g. "app.js" */
	const char *content_type;   /* the Content-Type header's value */
	const unsigned char *bytes; /* the file, len bytes (NUL follows) */
	size_t len;
};

/* The table the build generates (webui_files.c), sorted by path. */
extern const struct webui_file webui_files[];
extern const size_t webui_n_files;

/*
 * The embedded file a request path names: "/" is index.html, "/ui/NAME" is
 * NAME. NULL for any other path, an unknown NAME and a NAME with a '/'
 * (there are no directories). path may be NULL. The result is static data:
 * never freed.
 */
const struct webui_file *webui_find(const char *path);

#endif
