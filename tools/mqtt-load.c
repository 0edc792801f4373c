/* SPDX-License-Identifier: MIT */
/*
 * mqtt-load — the MQTT side of `tools/semq-bench --compare mosquitto`: one
 * publisher and one subscriber (libmosquitto, QoS 2) through brokers that
 * semq-bench started.
 *
 *   mqtt-load --pub HOST:PORT --sub HOST:PORT [--messages N] [--size B]
 *             [--inflight K] [--idle S] [--topic T] [--progress]
 *
 * The subscriber connects to --sub and subscribes to T/# at QoS 2; the
 * publisher connects to --pub. Warm-up messages go to T/warm until one
 * arrives at the subscriber (the whole path, bridges included, is up), then
 * N messages of B bytes go to T/data at QoS 2 with at most K (default 20)
 * unfinished at a time (published and not yet completed by PUBCOMP). Each
 * payload starts with its sequence number 0..N-1 (8 bytes, big-endian); the
 * subscriber counts distinct, duplicate and out-of-order numbers. The run
 * ends when every message is completed and received, or when neither count
 * has moved for --idle seconds (default 10): what never arrived is lost.
 *
 * One JSON object goes to stdout: the counts, lost = N - received, times in
 * seconds from the first measured publish (last completion, first and last
 * reception), rate = received / last reception, and this process's CPU
 * seconds. Usage errors exit 2 with one line naming the argument; a broker
 * that cannot be reached or a path that delivers no warm-up message in 30 s
 * exits 1. --progress writes "progress COMPLETED RECEIVED SECONDS" to stderr
 * about once a second during the measured run.
 *
 * DESIGN
 *  - Each client runs its own libmosquitto network thread
 *    (mosquitto_loop_start); the main thread publishes and waits. The
 *    counters are shared under one mutex, with one condition variable that
 *    every callback signals.
 *  - The in-flight bound is ours (a wait before each publish) as well as
 *    libmosquitto's (max_inflight_messages_set), so the library never queues
 *    more than K messages and memory stays flat for any N.
 */

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <mosquitto.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define MAX_MESSAGES 100000000L
#define MAX_SIZE (16L * 1024 * 1024)
#define SEQ_BYTES 8
#define WARMUP_S 30.0
#define KEEPALIVE_S 60

struct load {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	/* Subscriber. */
	bool subscribed;
	long warm_received;
	long received; /* distinct sequence numbers */
	long duplicates;
	long out_of_order;
	long invalid; /* on T/data with a number outside 0..N-1 */
	long max_seen;
	uint8_t *seen; /* N flags */
	double first_recv, last_recv;
	/* Publisher. */
	bool pub_connected;
	long completed; /* on_publish calls, warm-ups included */
	double last_complete;
	/* Either client. */
	char conn_error[200]; /* "" = none */
	/* Set once before the measured phase. */
	long warm_sent;
	long n;
	double t0;
	const char *sub_topic;
	const char *data_topic;
	const char *warm_topic;
};

static double mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void abs_deadline(struct timespec *ts, double from_now)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	long ns = ts->tv_nsec + (long)((from_now - (long)from_now) * 1e9);
	ts->tv_sec += (time_t)from_now + ns / 1000000000L;
	ts->tv_nsec = ns % 1000000000L;
}

/* Waits on the condition variable for up to s seconds (mu held). */
static void wait_s(struct load *L, double s)
{
	struct timespec ts;
	abs_deadline(&ts, s);
	pthread_cond_timedwait(&L->cv, &L->mu, &ts);
}

/* The first error of either client, for main to report (mu not held). */
static void fail(struct load *L, const char *who, const char *what)
{
	pthread_mutex_lock(&L->mu);
	if (!*L->conn_error)
		snprintf(L->conn_error, sizeof L->conn_error, "%s: %s", who,
			 what);
	pthread_cond_broadcast(&L->cv);
	pthread_mutex_unlock(&L->mu);
}

static void on_sub_connect(struct mosquitto *m, void *obj, int rc)
{
	struct load *L = obj;
	if (rc != 0) {
		fail(L, "subscriber", mosquitto_connack_string(rc));
		return;
	}
	rc = mosquitto_subscribe(m, NULL, L->sub_topic, 2);
	if (rc != MOSQ_ERR_SUCCESS)
		fail(L, "subscribe", mosquitto_strerror(rc));
}

static void on_subscribe(struct mosquitto *m, void *obj, int mid, int n,
			 const int *granted)
{
	struct load *L = obj;
	(void)m;
	(void)mid;
	if (n != 1 || granted[0] != 2) {
		fail(L, "subscribe", "QoS 2 not granted");
		return;
	}
	pthread_mutex_lock(&L->mu);
	L->subscribed = true;
	pthread_cond_broadcast(&L->cv);
	pthread_mutex_unlock(&L->mu);
}

static void on_message(struct mosquitto *m, void *obj,
		       const struct mosquitto_message *msg)
{
	struct load *L = obj;
	(void)m;
	double t = mono_s();
	pthread_mutex_lock(&L->mu);
	if (strcmp(msg->topic, L->warm_topic) == 0) {
		L->warm_received++;
	} else if (strcmp(msg->topic, L->data_topic) != 0 ||
		   msg->payloadlen < SEQ_BYTES || L->seen == NULL) {
		L->invalid++;
	} else {
		const uint8_t *p = msg->payload;
		uint64_t seq = 0;
		for (int i = 0; i < SEQ_BYTES; i++)
			seq = seq << 8 | p[i];
		if (seq >= (uint64_t)L->n) {
			L->invalid++;
		} else if (L->seen[seq]) {
			L->duplicates++;
		} else {
			L->seen[seq] = 1;
			if ((long)seq < L->max_seen)
				L->out_of_order++;
			else
				L->max_seen = (long)seq;
			if (L->received++ == 0)
				L->first_recv = t - L->t0;
			L->last_recv = t - L->t0;
		}
	}
	pthread_cond_broadcast(&L->cv);
	pthread_mutex_unlock(&L->mu);
}

static void on_pub_connect(struct mosquitto *m, void *obj, int rc)
{
	struct load *L = obj;
	(void)m;
	if (rc != 0) {
		fail(L, "publisher", mosquitto_connack_string(rc));
		return;
	}
	pthread_mutex_lock(&L->mu);
	L->pub_connected = true;
	pthread_cond_broadcast(&L->cv);
	pthread_mutex_unlock(&L->mu);
}

static void on_publish(struct mosquitto *m, void *obj, int mid)
{
	struct load *L = obj;
	(void)m;
	(void)mid;
	double t = mono_s();
	pthread_mutex_lock(&L->mu);
	L->completed++;
	L->last_complete = t - L->t0;
	pthread_cond_broadcast(&L->cv);
	pthread_mutex_unlock(&L->mu);
}

static int usage(const char *msg, const char *arg)
{
	fprintf(stderr, "mqtt-load: %s%s%s\n", msg, arg ? " " : "",
		arg ? arg : "");
	fprintf(stderr, "usage: mqtt-load --pub HOST:PORT --sub HOST:PORT "
			"[--messages N] [--size B] [--inflight K] [--idle S] "
			"[--topic T] [--progress]\n");
	return 2;
}

static bool parse_long(const char *s, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

/* HOST:PORT into host (static storage of the caller) and port. */
static bool parse_addr(const char *s, char *host, size_t hostsz, int *port)
{
	const char *c = strrchr(s, ':');
	long p;
	if (c == NULL || c == s || (size_t)(c - s) >= hostsz ||
	    !parse_long(c + 1, 1, 65535, &p))
		return false;
	memcpy(host, s, (size_t)(c - s));
	host[c - s] = '\0';
	*port = (int)p;
	return true;
}

static struct mosquitto *client(const char *role, struct load *L)
{
	char id[64];
	snprintf(id, sizeof id, "mqtt-load-%s-%ld", role, (long)getpid());
	struct mosquitto *m = mosquitto_new(id, true, L);
	if (m == NULL)
		return NULL;
	mosquitto_int_option(m, MOSQ_OPT_TCP_NODELAY, 1);
	return m;
}

int main(int argc, char **argv)
{
	char pub_host[256] = "", sub_host[256] = "";
	int pub_port = 0, sub_port = 0;
	long n = 1000, size = 1024, inflight = 20, idle_l = 10;
	const char *topic = "semq-bench";
	bool progress = false;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			printf("usage: mqtt-load --pub HOST:PORT --sub "
			       "HOST:PORT "
			       "[--messages N] [--size B] [--inflight K] "
			       "[--idle S] [--topic T] [--progress]\n");
			return 0;
		}
		if (strcmp(a, "--progress") == 0) {
			progress = true;
			continue;
		}
		if (v == NULL)
			return usage("missing value after", a);
		i++;
		if (strcmp(a, "--pub") == 0) {
			if (!parse_addr(v, pub_host, sizeof pub_host,
					&pub_port))
				return usage("--pub: use HOST:PORT, not", v);
		} else if (strcmp(a, "--sub") == 0) {
			if (!parse_addr(v, sub_host, sizeof sub_host,
					&sub_port))
				return usage("--sub: use HOST:PORT, not", v);
		} else if (strcmp(a, "--messages") == 0) {
			if (!parse_long(v, 1, MAX_MESSAGES, &n))
				return usage(
					"--messages: use 1..100000000, not", v);
		} else if (strcmp(a, "--size") == 0) {
			if (!parse_long(v, SEQ_BYTES, MAX_SIZE, &size))
				return usage("--size: use 8..16777216 (the "
					     "first 8 bytes carry the number), "
					     "not",
					     v);
		} else if (strcmp(a, "--inflight") == 0) {
			if (!parse_long(v, 1, 65535, &inflight))
				return usage("--inflight: use 1..65535, not",
					     v);
		} else if (strcmp(a, "--idle") == 0) {
			if (!parse_long(v, 1, 3600, &idle_l))
				return usage("--idle: use 1..3600 seconds, not",
					     v);
		} else if (strcmp(a, "--topic") == 0) {
			if (!*v || strlen(v) > 200 || strpbrk(v, "#+") != NULL)
				return usage("--topic: use 1..200 characters "
					     "without # or +, not",
					     v);
			topic = v;
		} else {
			return usage("unknown argument", a);
		}
	}
	if (!*pub_host)
		return usage("missing", "--pub HOST:PORT");
	if (!*sub_host)
		return usage("missing", "--sub HOST:PORT");

	int r = 1;
	const double idle = (double)idle_l;
	char sub_topic[256], data_topic[256], warm_topic[256];
	snprintf(sub_topic, sizeof sub_topic, "%s/#", topic);
	snprintf(data_topic, sizeof data_topic, "%s/data", topic);
	snprintf(warm_topic, sizeof warm_topic, "%s/warm", topic);
	struct load L = {.n = n,
			 .max_seen = -1,
			 .sub_topic = sub_topic,
			 .data_topic = data_topic,
			 .warm_topic = warm_topic};
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_mutex_init(&L.mu, NULL);
	pthread_cond_init(&L.cv, &ca);
	pthread_condattr_destroy(&ca);
	struct mosquitto *sub = NULL, *pub = NULL;
	bool sub_loop = false, pub_loop = false;
	uint8_t *buf = calloc(1, (size_t)size);
	L.seen = calloc(1, (size_t)n);
	if (buf == NULL || L.seen == NULL) {
		fprintf(stderr, "mqtt-load: out of memory\n");
		goto out;
	}
	for (long i = SEQ_BYTES; i < size; i++)
		buf[i] = (uint8_t)('a' + i % 26);

	mosquitto_lib_init();
	sub = client("sub", &L);
	pub = client("pub", &L);
	if (sub == NULL || pub == NULL) {
		fprintf(stderr, "mqtt-load: mosquitto_new failed\n");
		goto out;
	}
	mosquitto_connect_callback_set(sub, on_sub_connect);
	mosquitto_subscribe_callback_set(sub, on_subscribe);
	mosquitto_message_callback_set(sub, on_message);
	mosquitto_connect_callback_set(pub, on_pub_connect);
	mosquitto_publish_callback_set(pub, on_publish);
	mosquitto_max_inflight_messages_set(pub, (unsigned)inflight);

	int rc = mosquitto_connect(sub, sub_host, sub_port, KEEPALIVE_S);
	if (rc != MOSQ_ERR_SUCCESS) {
		fprintf(stderr, "mqtt-load: --sub %s:%d: %s\n", sub_host,
			sub_port, mosquitto_strerror(rc));
		goto out;
	}
	if ((rc = mosquitto_loop_start(sub)) != MOSQ_ERR_SUCCESS) {
		fprintf(stderr, "mqtt-load: subscriber thread: %s\n",
			mosquitto_strerror(rc));
		goto out;
	}
	sub_loop = true;
	rc = mosquitto_connect(pub, pub_host, pub_port, KEEPALIVE_S);
	if (rc != MOSQ_ERR_SUCCESS) {
		fprintf(stderr, "mqtt-load: --pub %s:%d: %s\n", pub_host,
			pub_port, mosquitto_strerror(rc));
		goto out;
	}
	if ((rc = mosquitto_loop_start(pub)) != MOSQ_ERR_SUCCESS) {
		fprintf(stderr, "mqtt-load: publisher thread: %s\n",
			mosquitto_strerror(rc));
		goto out;
	}
	pub_loop = true;

	/* Warm-up: until one message has crossed the whole path and every
	 * warm-up publish is complete. */
	double deadline = mono_s() + WARMUP_S, next_warm = 0;
	pthread_mutex_lock(&L.mu);
	while (!*L.conn_error &&
	       (L.warm_received == 0 || L.completed < L.warm_sent)) {
		double t = mono_s();
		if (t > deadline)
			break;
		if (L.subscribed && L.pub_connected && L.warm_received == 0 &&
		    t >= next_warm) {
			rc = mosquitto_publish(pub, NULL, warm_topic, 1, "w", 2,
					       false);
			if (rc != MOSQ_ERR_SUCCESS) {
				snprintf(L.conn_error, sizeof L.conn_error,
					 "warm-up publish: %s",
					 mosquitto_strerror(rc));
				break;
			}
			L.warm_sent++;
			next_warm = t + 0.1;
		}
		wait_s(&L, 0.05);
	}
	bool warm = L.warm_received > 0 && L.completed >= L.warm_sent;
	char cerr[sizeof L.conn_error];
	memcpy(cerr, L.conn_error, sizeof cerr);
	pthread_mutex_unlock(&L.mu);
	if (*cerr) {
		fprintf(stderr, "mqtt-load: %s\n", cerr);
		goto out;
	}
	if (!warm) {
		fprintf(stderr,
			"mqtt-load: no warm-up message from --pub %s:%d "
			"reached "
			"the subscriber at --sub %s:%d in %.0f s\n",
			pub_host, pub_port, sub_host, sub_port, WARMUP_S);
		goto out;
	}

	/* The measured run. */
	long published = 0, done_mark = 0, recv_mark = 0;
	bool stalled = false;
	char error[200] = "";
	pthread_mutex_lock(&L.mu);
	L.t0 = mono_s();
	double last_move = L.t0, last_progress = L.t0;
	const long base = L.completed;
	while (!stalled) {
		long done = L.completed - base;
		double t = mono_s();
		if (done != done_mark || L.received != recv_mark) {
			done_mark = done;
			recv_mark = L.received;
			last_move = t;
		}
		if (published < n && published - done < inflight && !*error) {
			uint64_t seq = (uint64_t)published;
			for (int i = SEQ_BYTES - 1; i >= 0; i--, seq >>= 8)
				buf[i] = (uint8_t)(seq & 0xff);
			pthread_mutex_unlock(&L.mu);
			rc = mosquitto_publish(pub, NULL, data_topic, (int)size,
					       buf, 2, false);
			pthread_mutex_lock(&L.mu);
			if (rc != MOSQ_ERR_SUCCESS)
				snprintf(error, sizeof error,
					 "publish of message %ld: %s",
					 published, mosquitto_strerror(rc));
			else
				published++;
			continue;
		}
		if ((published == n || *error) && done >= published &&
		    L.received >= n)
			break;
		if (progress && t - last_progress >= 1.0) {
			fprintf(stderr, "progress %ld %ld %.1f\n", done,
				L.received, t - L.t0);
			last_progress = t;
		}
		if (t - last_move > idle) {
			stalled = true;
			break;
		}
		wait_s(&L, 0.5);
	}
	long completed = L.completed - base;
	pthread_mutex_unlock(&L.mu);

	mosquitto_disconnect(pub);
	mosquitto_disconnect(sub);
	mosquitto_loop_stop(pub, false);
	mosquitto_loop_stop(sub, false);
	pub_loop = sub_loop = false;

	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	double cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
		     (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
	pthread_mutex_lock(&L.mu);
	printf("{\"messages\": %ld, \"size\": %ld, \"inflight\": %ld, "
	       "\"published\": %ld, \"completed\": %ld, \"received\": %ld, "
	       "\"lost\": %ld, \"duplicates\": %ld, \"out_of_order\": %ld, "
	       "\"invalid\": %ld, \"stalled\": %s, \"idle_s\": %ld, "
	       "\"last_complete_s\": %.6f, \"first_received_s\": %.6f, "
	       "\"last_received_s\": %.6f, \"rate\": %.1f, \"cpu_s\": %.3f, "
	       "\"error\": ",
	       n, size, inflight, published, completed, L.received,
	       n - L.received, L.duplicates, L.out_of_order, L.invalid,
	       stalled ? "true" : "false", idle_l, L.last_complete,
	       L.first_recv, L.last_recv,
	       L.last_recv > 0 ? (double)L.received / L.last_recv : 0.0, cpu);
	pthread_mutex_unlock(&L.mu);
	if (*error)
		printf("\"%s\"}\n", error); /* mosquitto_strerror: no quotes */
	else
		printf("null}\n");
	fflush(stdout);
	r = 0;
out:
	if (pub_loop) {
		mosquitto_disconnect(pub);
		mosquitto_loop_stop(pub, false);
	}
	if (sub_loop) {
		mosquitto_disconnect(sub);
		mosquitto_loop_stop(sub, false);
	}
	mosquitto_destroy(pub);
	mosquitto_destroy(sub);
	mosquitto_lib_cleanup();
	free(L.seen);
	free(buf);
	pthread_cond_destroy(&L.cv);
	pthread_mutex_destroy(&L.mu);
	return r;
}
