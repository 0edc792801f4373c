/* SPDX-License-Identifier: MIT */
/* Helpers for the plain types of types.h. */
#include "types.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void msg_clear(struct msg *m)
{
	if (!m)
		return;
	free(m->payload);
	memset(m, 0, sizeof *m);
}

const char *msgid_str(const struct msgid *id, char *buf, size_t bufsz)
{
	snprintf(buf, bufsz, "%s/%s/%llu", id->origin, id->dest,
		 (unsigned long long)id->seq);
	return buf;
}
