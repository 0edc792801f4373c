/* SPDX-License-Identifier: MIT */
/* Allocation helpers for jobs, route snapshots, admin requests and outputs
 * (job.h). */
#include "job.h"

#include <stdlib.h>
#include <string.h>

#include "codec.h"

struct job *job_new(int kind)
{
	struct job *j = calloc(1, sizeof *j);

	if (j)
		j->kind = kind;
	return j;
}

void job_free(struct job *j)
{
	if (!j)
		return;
	codec_frame_free(j->frame);
	routes_free(j->routes);
	admin_req_free(j->admin);
	free(j);
}

void admin_req_free(struct admin_req *q)
{
	if (!q)
		return;
	free(q->method);
	free(q->path);
	free(q->query);
	free(q->body);
	free(q);
}

void routes_free(struct routes *r)
{
	if (!r)
		return;
	free(r->hops);
	free(r);
}

struct routes *routes_copy(const struct routes *r)
{
	struct routes *c = calloc(1, sizeof *c);

	if (!c)
		return NULL;
	if (r && r->n_hops) {
		c->hops = calloc(r->n_hops, sizeof *c->hops);
		if (!c->hops) {
			free(c);
			return NULL;
		}
		memcpy(c->hops, r->hops, r->n_hops * sizeof *c->hops);
		c->n_hops = r->n_hops;
	}
	return c;
}

void out_free_list(struct out *o)
{
	while (o) {
		struct out *next = o->next;
		free(o->bytes);
		free(o);
		o = next;
	}
}
