/* SPDX-License-Identifier: MIT */
/* Allocation helpers for jobs, route snapshots, admin requests and outputs,
 * and the choice of a stream's hop among the instances of a peer (job.h). */
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
	c->cfg = r ? r->cfg : NULL;
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

static uint64_t fnv1a(uint64_t h, const char *s, int with_nul)
{
	const unsigned char *p = (const unsigned char *)s;

	for (; *p; p++) {
		h ^= *p;
		h *= 1099511628211ULL;
	}
	if (with_nul) /* a separator: ("ab","c") and ("a","bc") differ */
		h *= 1099511628211ULL;
	return h;
}

uint64_t routes_score(const char *origin, const char *dest,
		      const char *instance)
{
	uint64_t h = 14695981039346656037ULL; /* FNV-1a 64 offset basis */

	h = fnv1a(h, origin, 1);
	h = fnv1a(h, dest, 1);
	h = fnv1a(h, instance, 0);
	/* splitmix64's finaliser: FNV's low bits alone spread poorly */
	h ^= h >> 30;
	h *= 0xbf58476d1ce4e5b9ULL;
	h ^= h >> 27;
	h *= 0x94d049bb133111ebULL;
	h ^= h >> 31;
	return h;
}

const struct route_hop *routes_pick(const struct routes *r, const char *peer,
				    const char *origin, const char *dest)
{
	const struct route_hop *best = NULL;
	uint64_t best_score = 0;
	size_t i;

	if (!r)
		return NULL;
	for (i = 0; i < r->n_hops; i++) {
		const struct route_hop *h = &r->hops[i];
		uint64_t sc;
		int cmp;

		if (strcmp(h->peer, peer) != 0)
			continue;
		if (!best) {
			best = h;
			best_score = routes_score(origin, dest, h->instance);
			continue;
		}
		cmp = strcmp(h->instance, best->instance);
		if (cmp == 0)
			continue; /* the same pair twice: the first listed */
		sc = routes_score(origin, dest, h->instance);
		if (sc > best_score || (sc == best_score && cmp < 0)) {
			best = h;
			best_score = sc;
		}
	}
	return best;
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
