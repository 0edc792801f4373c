/* SPDX-License-Identifier: MIT */
/*
 * faultproxy — a TCP relay that breaks links on purpose, for the multi-node
 * integration tests (tests/integration/semqtest.py starts it between two
 * semqd nodes).
 *
 *   faultproxy --listen HOST:PORT --to HOST:PORT [--cut-min S] [--cut-max S]
 *              [--stall-prob P] [--rst-prob P] [--cut-bytes N] [--seed N]
 *              [--control PORT]
 *
 * Every connection accepted on --listen is relayed byte for byte to --to (it
 * knows nothing of TLS). At random intervals drawn uniformly from
 * [cut-min, cut-max] seconds a fault event hits every open link: with
 * probability --stall-prob the link is stalled (nothing read or forwarded in
 * either direction for 0.1-1 s), otherwise it is cut: both sockets closed at
 * once, with data still in the proxy's buffers dropped, and with probability
 * --rst-prob as a TCP RST (SO_LINGER 0) instead of a FIN. --cut-min 0 turns
 * fault events off. The PRNG is seeded by --seed (default: time and pid) and
 * the seed is printed, so a failing run can be replayed.
 *
 * --cut-bytes N (default 0: off) cuts a link, whatever the timer does, once
 * it has relayed exactly N bytes from the client to upstream: the faults are
 * then fixed by what is sent, not by how fast. A transfer that needs the
 * proxy to carry B bytes from its clients meets at least ceil(B / N) - 1
 * cuts (each link but the last carries at most N bytes), on any machine.
 *
 * Control interface on 127.0.0.1:--control, one command per line, each
 * answered with one line:
 *   pause   cut every link and close new connections at once until resume
 *   resume  relay again
 *   cut     cut every open link now
 *   hold    stop relaying on every link (they stay open; new ones too) until
 *           release: what a node sent stays on the way, for certain
 *   release relay again what was held
 *   stats   "conns=N cuts=N bytes=N": connections relayed since start, links
 *           cut, bytes relayed (both directions)
 *   open    "open=N": links open now
 * Anything else answers "error unknown command '...'".
 *
 * When ready, one line goes to stdout (then flushed):
 *   faultproxy: listen ADDR to ADDR control ADDR seed N
 * with the actual ports, so a port of 0 may be given and read back. Events
 * are logged to stderr. SIGTERM/SIGINT end it cleanly (exit 0). Usage errors
 * exit 2 with one line naming the argument; runtime failures exit 1.
 *
 * DESIGN
 *  - A link is two bufferevents, `cli` (accepted) and `up` (dialled), and two
 *    directions cli->up and up->cli. Bytes move from a source's input to the
 *    sink's output in the read callback; the proxy holds at most RELAY_HIGH
 *    bytes (plus one read) per direction: when a sink's output reaches
 *    RELAY_HIGH, reading from the source stops, and it resumes from the
 *    sink's write callback once the output has drained to RELAY_HIGH / 2
 *    (the sink's write low watermark).
 *  - Half-close is relayed: EOF from a source is forwarded as shutdown(SHUT_WR)
 *    on the sink once the sink's output is flushed; the other direction keeps
 *    flowing. A link ends when both directions have been shut (a clean end),
 *    or at once on a socket error or a cut.
 *  - Reading from a source is enabled iff the link is not stalled, the proxy
 *    is not holding, the source has not hit EOF, and its sink is below
 *    RELAY_HIGH (dir_update_read()).
 *  - Every link and control connection is on a list owned by the proxy, and
 *    everything is freed before exit, so a run is clean under ASan/LSan.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>

#define RELAY_HIGH (256 * 1024) /* bytes buffered per direction */
#define CTL_LINE_MAX 256        /* a longer control line closes the conn */
#define STALL_MIN_MS 100
#define STALL_MAX_MS 1000

struct proxy;
struct link;

/* One direction of a link: bytes read from src are written to dst. */
struct dir {
	struct link *l;
	struct bufferevent *src, *dst; /* borrowed from the link */
	int eof;                       /* src reached EOF */
	int shut;                      /* EOF forwarded: dst write side shut */
};

struct link {
	struct proxy *p;
	uint64_t id;
	struct bufferevent *cli, *up; /* owned; close the socket on free */
	int up_connected;
	int stalled;
	uint64_t up_bytes;     /* relayed client -> upstream (--cut-bytes) */
	struct event *unstall; /* owned; timer ending a stall */
	struct dir d[2];       /* [0] cli->up, [1] up->cli */
	struct link *prev, *next;
};

struct ctl_conn {
	struct proxy *p;
	struct bufferevent *bev; /* owned */
	struct ctl_conn *prev, *next;
};

struct proxy {
	struct event_base *base;
	struct evconnlistener *lis, *ctl_lis; /* owned; ctl_lis may be NULL */
	struct event *fault_timer;      /* owned; NULL when cut-min is 0 */
	struct event *sigterm, *sigint; /* owned */
	struct sockaddr_storage to;
	int to_len;
	double cut_min, cut_max, stall_prob, rst_prob;
	uint64_t cut_bytes; /* 0, or cut a link after this many bytes up */
	uint64_t rng;
	int paused;
	int holding; /* control "hold": nothing is read until "release" */
	uint64_t next_id;
	uint64_t n_conns, n_cuts, n_bytes, n_open;
	struct link *links;    /* all open links (owned) */
	struct ctl_conn *ctls; /* all control connections (owned) */
	struct timespec t0;
};

/* ---- small helpers ------------------------------------------------------- */

__attribute__((format(printf, 2, 3))) static void logf_(const struct proxy *p,
							const char *fmt, ...)
{
	struct timespec t;
	double s = 0;
	va_list ap;

	if (p && clock_gettime(CLOCK_MONOTONIC, &t) == 0)
		s = (double)(t.tv_sec - p->t0.tv_sec) +
		    (double)(t.tv_nsec - p->t0.tv_nsec) / 1e9;
	fprintf(stderr, "faultproxy [%9.3f] ", s);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));

	z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
	return z ^ (z >> 31);
}

/* A uniform double in [0, 1). */
static double rnd_unit(struct proxy *p)
{
	return (double)(splitmix64(&p->rng) >> 11) * 0x1.0p-53;
}

static struct timeval tv_of_seconds(double s)
{
	struct timeval tv;

	if (s < 0)
		s = 0;
	tv.tv_sec = (time_t)s;
	tv.tv_usec = (suseconds_t)((s - (double)tv.tv_sec) * 1e6);
	return tv;
}

/* ---- links --------------------------------------------------------------- */

static void relay_readcb(struct bufferevent *bev, void *ctx);
static void relay_writecb(struct bufferevent *bev, void *ctx);
static void relay_eventcb(struct bufferevent *bev, short what, void *ctx);

/*
 * Frees the link and closes both sockets; with rst, as a TCP RST. Data still
 * in the proxy's buffers is dropped. The link must not be used afterwards.
 */
static void link_free(struct link *l, int rst)
{
	struct proxy *p = l->p;
	struct linger lg = {.l_onoff = 1, .l_linger = 0};
	struct bufferevent *bevs[2] = {l->cli, l->up};

	for (int i = 0; i < 2; i++) {
		evutil_socket_t fd;

		if (!bevs[i])
			continue;
		fd = bufferevent_getfd(bevs[i]);
		if (rst && fd >= 0)
			(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg,
					 sizeof(lg));
		bufferevent_free(bevs[i]);
	}
	if (l->unstall)
		event_free(l->unstall);
	if (l->prev)
		l->prev->next = l->next;
	else
		p->links = l->next;
	if (l->next)
		l->next->prev = l->prev;
	p->n_open--;
	free(l);
}

static void link_cut(struct link *l, const char *why)
{
	struct proxy *p = l->p;
	int rst = rnd_unit(p) < p->rst_prob;

	logf_(p, "link %" PRIu64 ": cut (%s, %s)", l->id, why,
	      rst ? "rst" : "fin");
	p->n_cuts++;
	link_free(l, rst);
}

static void cut_all(struct proxy *p, const char *why)
{
	while (p->links)
		link_cut(p->links, why);
}

/* Reading from d->src is on iff nothing holds it back (see DESIGN). */
static void dir_update_read(struct dir *d)
{
	struct link *l = d->l;
	int on = !l->stalled && !l->p->holding && !d->eof &&
		 evbuffer_get_length(bufferevent_get_output(d->dst)) <
			 RELAY_HIGH;

	if (on)
		bufferevent_enable(d->src, EV_READ);
	else
		bufferevent_disable(d->src, EV_READ);
}

/* Moves what src has read to dst's output; client -> upstream, no more
 * than what is left of --cut-bytes (the rest stays in src's input, dropped
 * by the cut that link_spent() then makes). */
static void dir_move(struct dir *d)
{
	struct link *l = d->l;
	struct evbuffer *in = bufferevent_get_input(d->src);
	size_t n = evbuffer_get_length(in);

	if (d == &l->d[0] && l->p->cut_bytes) {
		uint64_t left = l->p->cut_bytes - l->up_bytes;

		if ((uint64_t)n > left)
			n = (size_t)left;
		l->up_bytes += n;
	}
	if (n) {
		l->p->n_bytes += n;
		evbuffer_remove_buffer(in, bufferevent_get_output(d->dst), n);
	}
}

/* With --cut-bytes, cuts the link once it has relayed its N bytes up;
 * returns 1 when it did (the link has then been freed). */
static int link_spent(struct link *l)
{
	if (!l->p->cut_bytes || l->up_bytes < l->p->cut_bytes)
		return 0;
	link_cut(l, "bytes");
	return 1;
}

/* dir_move(), then backpressure. */
static void dir_pump(struct dir *d)
{
	dir_move(d);
	dir_update_read(d);
}

/*
 * After src's EOF, shuts dst's write side once its output is flushed (and,
 * for the upstream socket, once it is connected). Returns 1 when the link
 * ended because both directions are now shut; it has then been freed.
 */
static int dir_maybe_shut(struct dir *d)
{
	struct link *l = d->l;

	if (!d->eof || d->shut)
		return 0;
	if (d->dst == l->up && !l->up_connected)
		return 0;
	if (evbuffer_get_length(bufferevent_get_output(d->dst)) != 0)
		return 0;
	(void)shutdown(bufferevent_getfd(d->dst), SHUT_WR);
	d->shut = 1;
	logf_(l->p, "link %" PRIu64 ": %s closed its side, forwarded", l->id,
	      d->src == l->cli ? "client" : "upstream");
	if (l->d[0].shut && l->d[1].shut) {
		logf_(l->p, "link %" PRIu64 ": closed by both ends", l->id);
		link_free(l, 0);
		return 1;
	}
	return 0;
}

static struct dir *dir_from_src(struct link *l, struct bufferevent *bev)
{
	return bev == l->cli ? &l->d[0] : &l->d[1];
}

static void relay_readcb(struct bufferevent *bev, void *ctx)
{
	dir_pump(dir_from_src(ctx, bev));
	(void)link_spent(ctx);
}

/* bev's output fell to its low watermark: the direction into it may resume,
 * or its pending EOF may now be forwarded. */
static void relay_writecb(struct bufferevent *bev, void *ctx)
{
	struct link *l = ctx;
	struct dir *in = bev == l->cli ? &l->d[1] : &l->d[0];

	if (dir_maybe_shut(in))
		return;
	dir_update_read(in);
}

static void relay_eventcb(struct bufferevent *bev, short what, void *ctx)
{
	struct link *l = ctx;
	struct dir *d = dir_from_src(l, bev);
	const char *side = bev == l->cli ? "client" : "upstream";

	if (what & BEV_EVENT_CONNECTED) {
		l->up_connected = 1;
		/* an EOF from the client may be waiting for the connect */
		(void)dir_maybe_shut(&l->d[0]);
		return;
	}
	if (what & BEV_EVENT_EOF) {
		/* forward what was read before the EOF, then the EOF */
		dir_move(d);
		if (link_spent(l))
			return;
		d->eof = 1;
		bufferevent_disable(bev, EV_READ);
		(void)dir_maybe_shut(d);
		return;
	}
	if (what & (BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)) {
		int err = EVUTIL_SOCKET_ERROR();

		logf_(l->p, "link %" PRIu64 ": %s %s: %s; closing", l->id, side,
		      bev == l->up && !l->up_connected ? "connect failed"
						       : "error",
		      evutil_socket_error_to_string(err));
		link_free(l, 0);
	}
}

static void unstall_cb(evutil_socket_t fd, short what, void *ctx)
{
	struct link *l = ctx;

	l->stalled = 0;
	logf_(l->p, "link %" PRIu64 ": stall over", l->id);
	/* bytes read just before the stall may still wait in an input */
	dir_pump(&l->d[0]);
	if (link_spent(l))
		return;
	dir_pump(&l->d[1]);
}

static void link_stall(struct link *l)
{
	struct proxy *p = l->p;
	double s =
		(STALL_MIN_MS + rnd_unit(p) * (STALL_MAX_MS - STALL_MIN_MS)) /
		1000.0;
	struct timeval tv = tv_of_seconds(s);

	logf_(p, "link %" PRIu64 ": stall %.3f s", l->id, s);
	l->stalled = 1;
	dir_update_read(&l->d[0]);
	dir_update_read(&l->d[1]);
	evtimer_add(l->unstall, &tv);
}

/* Closes an accepted socket at once with RST (paused, or out of memory). */
static void refuse_fd(evutil_socket_t fd)
{
	struct linger lg = {.l_onoff = 1, .l_linger = 0};

	(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	evutil_closesocket(fd);
}

static void accept_cb(struct evconnlistener *lis, evutil_socket_t fd,
		      struct sockaddr *sa, int salen, void *ctx)
{
	struct proxy *p = ctx;
	struct link *l = NULL;
	const int opts = BEV_OPT_CLOSE_ON_FREE;

	if (p->paused) {
		logf_(p, "paused: refusing a connection");
		refuse_fd(fd);
		return;
	}
	l = calloc(1, sizeof(*l));
	if (!l) {
		logf_(p, "out of memory: refusing a connection");
		refuse_fd(fd);
		return;
	}
	l->p = p;
	l->id = ++p->next_id;
	l->cli = bufferevent_socket_new(p->base, fd, opts);
	if (!l->cli)
		evutil_closesocket(fd); /* not owned by a bufferevent yet */
	l->up = bufferevent_socket_new(p->base, -1, opts);
	l->unstall = evtimer_new(p->base, unstall_cb, l);
	/* on the list first, so link_free can take it off whatever happens */
	l->next = p->links;
	if (p->links)
		p->links->prev = l;
	p->links = l;
	p->n_open++;
	if (!l->cli || !l->up || !l->unstall) {
		logf_(p, "out of memory: dropping a connection");
		link_free(l, 1);
		return;
	}
	for (int i = 0; i < 2; i++) {
		l->d[i].l = l;
		l->d[i].src = i == 0 ? l->cli : l->up;
		l->d[i].dst = i == 0 ? l->up : l->cli;
		bufferevent_setcb(l->d[i].src, relay_readcb, relay_writecb,
				  relay_eventcb, l);
		bufferevent_setwatermark(l->d[i].src, EV_READ, 0, RELAY_HIGH);
		bufferevent_setwatermark(l->d[i].src, EV_WRITE, RELAY_HIGH / 2,
					 0);
	}
	p->n_conns++;
	logf_(p, "link %" PRIu64 ": accepted", l->id);
	if (bufferevent_socket_connect(l->up, (struct sockaddr *)&p->to,
				       p->to_len) < 0) {
		logf_(p, "link %" PRIu64 ": connect failed at once", l->id);
		link_free(l, 0);
		return;
	}
	bufferevent_enable(l->cli, EV_READ | EV_WRITE);
	bufferevent_enable(l->up, EV_READ | EV_WRITE);
}

/* ---- fault events -------------------------------------------------------- */

static void fault_schedule(struct proxy *p)
{
	double s = p->cut_min + rnd_unit(p) * (p->cut_max - p->cut_min);
	struct timeval tv = tv_of_seconds(s);

	evtimer_add(p->fault_timer, &tv);
}

static void fault_cb(evutil_socket_t fd, short what, void *ctx)
{
	struct proxy *p = ctx;
	struct link *l = p->links, *next;

	for (; l; l = next) {
		next = l->next;
		if (rnd_unit(p) < p->stall_prob) {
			if (!l->stalled)
				link_stall(l);
		} else {
			link_cut(l, "random");
		}
	}
	fault_schedule(p);
}

/* ---- control interface --------------------------------------------------- */

static void ctl_free(struct ctl_conn *c)
{
	struct proxy *p = c->p;

	bufferevent_free(c->bev);
	if (c->prev)
		c->prev->next = c->next;
	else
		p->ctls = c->next;
	if (c->next)
		c->next->prev = c->prev;
	free(c);
}

static void ctl_command(struct ctl_conn *c, const char *cmd)
{
	struct proxy *p = c->p;
	struct evbuffer *out = bufferevent_get_output(c->bev);

	if (!strcmp(cmd, "pause")) {
		p->paused = 1;
		logf_(p, "control: pause");
		cut_all(p, "pause");
		evbuffer_add_printf(out, "ok\n");
	} else if (!strcmp(cmd, "resume")) {
		p->paused = 0;
		logf_(p, "control: resume");
		evbuffer_add_printf(out, "ok\n");
	} else if (!strcmp(cmd, "hold") || !strcmp(cmd, "release")) {
		struct link *l;

		p->holding = !strcmp(cmd, "hold");
		logf_(p, "control: %s", cmd);
		for (l = p->links; l; l = l->next) {
			if (p->holding) {
				dir_update_read(&l->d[0]);
				dir_update_read(&l->d[1]);
			} else {
				dir_pump(&l->d[0]);
				dir_pump(&l->d[1]);
			}
		}
		/* a release may have spent a link's --cut-bytes */
		for (l = p->links; l;) {
			struct link *next = l->next;

			(void)link_spent(l);
			l = next;
		}
		evbuffer_add_printf(out, "ok\n");
	} else if (!strcmp(cmd, "cut")) {
		logf_(p, "control: cut");
		cut_all(p, "control");
		evbuffer_add_printf(out, "ok\n");
	} else if (!strcmp(cmd, "stats")) {
		evbuffer_add_printf(out,
				    "conns=%" PRIu64 " cuts=%" PRIu64
				    " bytes=%" PRIu64 "\n",
				    p->n_conns, p->n_cuts, p->n_bytes);
	} else if (!strcmp(cmd, "open")) {
		evbuffer_add_printf(out, "open=%" PRIu64 "\n", p->n_open);
	} else {
		/* the command is printed only when printable (it is ours to
		 * echo back, not to trust) */
		int printable = 1;

		for (const char *s = cmd; *s; s++)
			if ((unsigned char)*s < 0x20 ||
			    (unsigned char)*s > 0x7e)
				printable = 0;
		evbuffer_add_printf(out, "error unknown command '%s'\n",
				    printable ? cmd : "?");
	}
}

static void ctl_readcb(struct bufferevent *bev, void *ctx)
{
	struct ctl_conn *c = ctx;
	struct evbuffer *in = bufferevent_get_input(bev);
	char *line;

	while ((line = evbuffer_readln(in, NULL, EVBUFFER_EOL_CRLF))) {
		int too_long = strlen(line) > CTL_LINE_MAX;

		if (!too_long)
			ctl_command(c, line);
		free(line);
		if (too_long)
			goto bad;
	}
	if (evbuffer_get_length(in) > CTL_LINE_MAX)
		goto bad;
	return;
bad:
	logf_(c->p, "control: line longer than %d bytes; closing",
	      CTL_LINE_MAX);
	ctl_free(c);
}

/* The client closed its side: the connection ends once the replies are out. */
static void ctl_drained_cb(struct bufferevent *bev, void *ctx)
{
	ctl_free(ctx);
}

static void ctl_eventcb(struct bufferevent *bev, short what, void *ctx)
{
	if ((what & BEV_EVENT_EOF) &&
	    evbuffer_get_length(bufferevent_get_output(bev)) > 0) {
		bufferevent_disable(bev, EV_READ);
		bufferevent_setcb(bev, NULL, ctl_drained_cb, ctl_eventcb, ctx);
		return;
	}
	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT))
		ctl_free(ctx);
}

static void ctl_accept_cb(struct evconnlistener *lis, evutil_socket_t fd,
			  struct sockaddr *sa, int salen, void *ctx)
{
	struct proxy *p = ctx;
	struct ctl_conn *c = calloc(1, sizeof(*c));

	if (!c) {
		refuse_fd(fd);
		return;
	}
	c->p = p;
	c->bev = bufferevent_socket_new(p->base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (!c->bev) {
		evutil_closesocket(fd);
		free(c);
		return;
	}
	c->next = p->ctls;
	if (p->ctls)
		p->ctls->prev = c;
	p->ctls = c;
	bufferevent_setcb(c->bev, ctl_readcb, NULL, ctl_eventcb, c);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
}

/* ---- setup --------------------------------------------------------------- */

static void signal_cb(evutil_socket_t sig, short what, void *ctx)
{
	struct proxy *p = ctx;

	logf_(p, "signal %d: exiting", (int)sig);
	event_base_loopbreak(p->base);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: faultproxy --listen HOST:PORT --to HOST:PORT "
		"[--cut-min S] [--cut-max S]\n"
		"                  [--stall-prob P] [--rst-prob P] "
		"[--cut-bytes N] [--seed N]\n"
		"                  [--control PORT]\n"
		"  --cut-min/--cut-max  seconds between fault events "
		"(default 0.5, 2.0; --cut-min 0: none)\n"
		"  --stall-prob P       share of links stalled 0.1-1 s instead "
		"of cut (default 0)\n"
		"  --rst-prob P         share of cuts sent as TCP RST "
		"(default 0.5)\n"
		"  --cut-bytes N        cut a link once it has relayed N bytes "
		"client -> upstream\n"
		"                       (default 0: never)\n"
		"  --seed N             PRNG seed (default: time and pid; "
		"printed)\n"
		"  --control PORT       command port on 127.0.0.1: pause, "
		"resume, cut, stats, open\n");
}

__attribute__((format(printf, 1, 2))) static int usage_err(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "faultproxy: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	return 2;
}

static int parse_double(const char *name, const char *v, double lo, double hi,
			double *out)
{
	char *end = NULL;
	double d;

	errno = 0;
	d = strtod(v, &end);
	if (errno || end == v || *end || !(d >= lo && d <= hi))
		return usage_err("%s '%s' is not a number between %g and %g",
				 name, v, lo, hi);
	*out = d;
	return 0;
}

static int parse_u64(const char *name, const char *v, uint64_t max,
		     uint64_t *out)
{
	char *end = NULL;
	unsigned long long u;

	errno = 0;
	if (*v < '0' || *v > '9')
		return usage_err("%s '%s' is not an unsigned integer", name, v);
	u = strtoull(v, &end, 10);
	if (errno || *end || u > max)
		return usage_err("%s '%s' is not an integer between 0 and "
				 "%" PRIu64,
				 name, v, max);
	*out = u;
	return 0;
}

/* "A.B.C.D:PORT" or "[V6]:PORT", numeric only; PORT 0 only if !need_port
 * (listen on a port the kernel picks). */
static int parse_addr(const char *name, const char *v, int need_port,
		      struct sockaddr_storage *ss, int *len)
{
	char host[INET6_ADDRSTRLEN + 2];
	const char *colon = strrchr(v, ':');
	size_t hlen = colon ? (size_t)(colon - v) : 0;
	char *end = NULL;
	unsigned long port;

	memset(ss, 0, sizeof(*ss));
	if (!colon || hlen == 0 || hlen >= sizeof(host) || colon[1] < '0' ||
	    colon[1] > '9')
		goto bad;
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	if (errno || *end || port > 65535)
		goto bad;
	if (need_port && port == 0)
		return usage_err("%s '%s' needs a port between 1 and 65535",
				 name, v);
	memcpy(host, v, hlen);
	host[hlen] = '\0';
	if (host[0] == '[' && host[hlen - 1] == ']') {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

		host[hlen - 1] = '\0';
		if (inet_pton(AF_INET6, host + 1, &s6->sin6_addr) != 1)
			goto bad;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		*len = (int)sizeof(*s6);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)ss;

		if (inet_pton(AF_INET, host, &s4->sin_addr) != 1)
			goto bad;
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
		*len = (int)sizeof(*s4);
	}
	return 0;
bad:
	return usage_err("%s '%s' is not a numeric HOST:PORT address", name, v);
}

struct opts {
	struct sockaddr_storage listen;
	int listen_len;
	int have_listen, have_to, have_control;
	uint64_t seed;
	int have_seed;
	uint64_t control_port;
};

/* Fills p and o from argv; returns 0, or the exit code (2 for usage, -1 for
 * --help). */
static int parse_args(int argc, char **argv, struct proxy *p, struct opts *o)
{
	p->cut_min = 0.5;
	p->cut_max = 2.0;
	p->stall_prob = 0;
	p->rst_prob = 0.5;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v;
		int r = 0;

		if (!strcmp(a, "-h") || !strcmp(a, "--help"))
			return -1;
		if (strcmp(a, "--listen") && strcmp(a, "--to") &&
		    strcmp(a, "--cut-min") && strcmp(a, "--cut-max") &&
		    strcmp(a, "--stall-prob") && strcmp(a, "--rst-prob") &&
		    strcmp(a, "--cut-bytes") && strcmp(a, "--seed") &&
		    strcmp(a, "--control"))
			return usage_err("unknown argument '%s' (try --help)",
					 a);
		if (i + 1 >= argc)
			return usage_err("%s needs a value", a);
		v = argv[++i];
		if (!strcmp(a, "--listen")) {
			r = parse_addr(a, v, 0, &o->listen, &o->listen_len);
			o->have_listen = 1;
		} else if (!strcmp(a, "--to")) {
			r = parse_addr(a, v, 1, &p->to, &p->to_len);
			o->have_to = 1;
		} else if (!strcmp(a, "--cut-min")) {
			r = parse_double(a, v, 0, 86400, &p->cut_min);
		} else if (!strcmp(a, "--cut-max")) {
			r = parse_double(a, v, 0, 86400, &p->cut_max);
		} else if (!strcmp(a, "--stall-prob")) {
			r = parse_double(a, v, 0, 1, &p->stall_prob);
		} else if (!strcmp(a, "--rst-prob")) {
			r = parse_double(a, v, 0, 1, &p->rst_prob);
		} else if (!strcmp(a, "--cut-bytes")) {
			r = parse_u64(a, v, UINT64_MAX, &p->cut_bytes);
		} else if (!strcmp(a, "--seed")) {
			r = parse_u64(a, v, UINT64_MAX, &o->seed);
			o->have_seed = 1;
		} else {
			r = parse_u64(a, v, 65535, &o->control_port);
			o->have_control = 1;
		}
		if (r)
			return r;
	}
	if (!o->have_listen)
		return usage_err("--listen HOST:PORT is required");
	if (!o->have_to)
		return usage_err("--to HOST:PORT is required");
	if (p->cut_min > 0 && p->cut_max < p->cut_min)
		return usage_err("--cut-max %g is below --cut-min %g",
				 p->cut_max, p->cut_min);
	if (p->cut_min == 0 && p->stall_prob > 0)
		return usage_err("--stall-prob needs fault events: --cut-min "
				 "is 0");
	return 0;
}

static int local_addr(evutil_socket_t fd, char *buf, size_t bufsz)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	char host[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;

	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return -1;
	if (ss.ss_family == AF_INET) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;

		evutil_inet_ntop(AF_INET, &s4->sin_addr, host, sizeof(host));
		port = ntohs(s4->sin_port);
		snprintf(buf, bufsz, "%s:%u", host, port);
	} else {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

		evutil_inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof(host));
		port = ntohs(s6->sin6_port);
		snprintf(buf, bufsz, "[%s]:%u", host, port);
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct proxy p;
	struct opts o;
	int r = 1;
	char lis_s[64] = "", to_s[64] = "?", ctl_s[64] = "none";
	const unsigned lflags = LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE |
				LEV_OPT_CLOSE_ON_EXEC;

	memset(&p, 0, sizeof(p));
	memset(&o, 0, sizeof(o));
	clock_gettime(CLOCK_MONOTONIC, &p.t0);
	r = parse_args(argc, argv, &p, &o);
	if (r == -1) {
		usage(stdout);
		return 0;
	}
	if (r)
		return r;
	r = 1;
	if (!o.have_seed) {
		struct timespec t;

		clock_gettime(CLOCK_REALTIME, &t);
		o.seed = (uint64_t)t.tv_sec * 1000000007u ^
			 (uint64_t)t.tv_nsec ^ ((uint64_t)getpid() << 32);
	}
	p.rng = o.seed;
	signal(SIGPIPE, SIG_IGN);

	p.base = event_base_new();
	if (!p.base) {
		fprintf(stderr, "faultproxy: cannot create an event base\n");
		goto out;
	}
	p.lis = evconnlistener_new_bind(p.base, accept_cb, &p, lflags, -1,
					(struct sockaddr *)&o.listen,
					o.listen_len);
	if (!p.lis) {
		fprintf(stderr, "faultproxy: --listen: cannot listen: %s\n",
			strerror(errno));
		goto out;
	}
	if (o.have_control) {
		struct sockaddr_in c;

		memset(&c, 0, sizeof(c));
		c.sin_family = AF_INET;
		c.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		c.sin_port = htons((uint16_t)o.control_port);
		p.ctl_lis = evconnlistener_new_bind(
			p.base, ctl_accept_cb, &p, lflags, -1,
			(struct sockaddr *)&c, sizeof(c));
		if (!p.ctl_lis) {
			fprintf(stderr,
				"faultproxy: --control %" PRIu64
				": cannot listen: %s\n",
				o.control_port, strerror(errno));
			goto out;
		}
		local_addr(evconnlistener_get_fd(p.ctl_lis), ctl_s,
			   sizeof(ctl_s));
	}
	p.sigterm = evsignal_new(p.base, SIGTERM, signal_cb, &p);
	p.sigint = evsignal_new(p.base, SIGINT, signal_cb, &p);
	if (!p.sigterm || !p.sigint || evsignal_add(p.sigterm, NULL) < 0 ||
	    evsignal_add(p.sigint, NULL) < 0) {
		fprintf(stderr, "faultproxy: cannot catch signals\n");
		goto out;
	}
	if (p.cut_min > 0) {
		p.fault_timer = evtimer_new(p.base, fault_cb, &p);
		if (!p.fault_timer) {
			fprintf(stderr, "faultproxy: out of memory\n");
			goto out;
		}
		fault_schedule(&p);
	}
	local_addr(evconnlistener_get_fd(p.lis), lis_s, sizeof(lis_s));
	{
		char host[INET6_ADDRSTRLEN] = "?";
		const struct sockaddr_in *s4 = (const void *)&p.to;
		const struct sockaddr_in6 *s6 = (const void *)&p.to;

		if (p.to.ss_family == AF_INET) {
			evutil_inet_ntop(AF_INET, &s4->sin_addr, host,
					 sizeof(host));
			snprintf(to_s, sizeof(to_s), "%s:%u", host,
				 ntohs(s4->sin_port));
		} else {
			evutil_inet_ntop(AF_INET6, &s6->sin6_addr, host,
					 sizeof(host));
			snprintf(to_s, sizeof(to_s), "[%s]:%u", host,
				 ntohs(s6->sin6_port));
		}
	}
	printf("faultproxy: listen %s to %s control %s seed %" PRIu64 "\n",
	       lis_s, to_s, ctl_s, o.seed);
	fflush(stdout);
	if (p.cut_bytes)
		logf_(&p, "cutting each link after %" PRIu64 " bytes up",
		      p.cut_bytes);
	if (p.cut_min > 0)
		logf_(&p,
		      "relaying %s -> %s, faults every %g-%g s (stall %g, "
		      "rst %g), seed %" PRIu64,
		      lis_s, to_s, p.cut_min, p.cut_max, p.stall_prob,
		      p.rst_prob, o.seed);
	else
		logf_(&p, "relaying %s -> %s, no random faults, seed %" PRIu64,
		      lis_s, to_s, o.seed);

	if (event_base_dispatch(p.base) < 0) {
		fprintf(stderr, "faultproxy: event loop failed\n");
		goto out;
	}
	r = 0;
out:
	while (p.links)
		link_free(p.links, 0);
	while (p.ctls)
		ctl_free(p.ctls);
	if (p.fault_timer)
		event_free(p.fault_timer);
	if (p.sigterm)
		event_free(p.sigterm);
	if (p.sigint)
		event_free(p.sigint);
	if (p.ctl_lis)
		evconnlistener_free(p.ctl_lis);
	if (p.lis)
		evconnlistener_free(p.lis);
	if (p.base)
		event_base_free(p.base);
	libevent_global_shutdown();
	return r;
}
