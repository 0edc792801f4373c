/* SPDX-License-Identifier: MIT */
/*
 * Finds the embedded dashboard files (see webui.h). The table is generated
 * from web/ by cmake/embed_files.cmake; the lookup compares names only, so
 * no request path ever reaches the file system.
 */
#include "webui.h"

#include <string.h>

#define UI_PREFIX "/ui/"

const struct webui_file *webui_find(const char *path)
{
	const char *name;
	size_t i;

	if (!path)
		return NULL;
	if (!strcmp(path, "/"))
		name = "index.html";
	else if (!strncmp(path, UI_PREFIX, strlen(UI_PREFIX)))
		name = path + strlen(UI_PREFIX);
	else
		return NULL;
	if (!name[0] || strchr(name, '/'))
		return NULL;
	for (i = 0; i < webui_n_files; i++)
		if (!strcmp(webui_files[i].path, name))
			return &webui_files[i];
	return NULL;
}
