/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of node/tls.c: reading a node id out of a certificate, building
 * the context (and the one-line errors that name the culprit file), and real
 * TLS handshakes between two SSL objects in this process over a socketpair,
 * both driven non-blocking by one loop. The certificates come from
 * tools/mkcerts.sh, run once into a temporary directory: A, B and C from the
 * deployment CA, M from another CA, E expired. The CRLs are made here
 * (write_crl), signed by either CA, with nextUpdate where a test wants it;
 * revocation: a revoked certificate refused both ways, tls_crl_reload()
 * (unchanged, forced, changed, broken files), a stale CRL, tls_check_own()
 * and tls_cert_not_after().
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "tls.h"

#define MKCERTS SEMQ_SOURCE_DIR "/tools/mkcerts.sh"

/* The certificates, made by group_setup. Half of PATH_MAX, so that DIR/name
 * always fits a PATH_MAX buffer. */
static char g_dir[PATH_MAX / 2];

/* DIR/name into buf (PATH_MAX bytes). */
static const char *path(char *buf, const char *name)
{
	snprintf(buf, PATH_MAX, "%s/%s", g_dir, name);
	return buf;
}

/* Runs `mkcerts.sh [opt1 [opt2]] DIR id`, stdout (and stderr when quiet)
 * to /dev/null; its exit status. */
static int mkcerts_run(int quiet, const char *opt1, const char *opt2,
		       const char *id)
{
	const char *argv[8];
	int n = 0, st;
	pid_t pid;

	argv[n++] = "bash";
	argv[n++] = MKCERTS;
	if (opt1)
		argv[n++] = opt1;
	if (opt2)
		argv[n++] = opt2;
	argv[n++] = g_dir;
	argv[n++] = id;
	argv[n] = NULL;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		int devnull = open("/dev/null", O_WRONLY);
		if (devnull >= 0) {
			dup2(devnull, STDOUT_FILENO);
			if (quiet)
				dup2(devnull, STDERR_FILENO);
		}
		execvp("bash", (char *const *)argv);
		_exit(127);
	}
	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int mkcerts(const char *opt1, const char *opt2, const char *id)
{
	return mkcerts_run(0, opt1, opt2, id);
}

static int group_setup(void **state)
{
	const char *tmp = getenv("TMPDIR");

	int n = snprintf(g_dir, sizeof g_dir, "%s/test_tls.XXXXXX",
			 tmp && *tmp ? tmp : "/tmp");

	if (n < 0 || (size_t)n >= sizeof g_dir) {
		fprintf(stderr, "TMPDIR too long\n");
		return -1;
	}
	if (!mkdtemp(g_dir)) {
		fprintf(stderr, "mkdtemp %s: %s\n", g_dir, strerror(errno));
		return -1;
	}
	if (mkcerts(NULL, NULL, "A") != 0 || mkcerts(NULL, NULL, "B") != 0 ||
	    mkcerts(NULL, NULL, "C") != 0 ||
	    mkcerts("--ca-name", "other", "M") != 0 ||
	    mkcerts("--expired", NULL, "E") != 0) {
		fprintf(stderr, "%s failed\n", MKCERTS);
		return -1;
	}
	return 0;
}

static int group_teardown(void **state)
{
	DIR *d = opendir(g_dir);
	struct dirent *de;
	char p[PATH_MAX];

	if (d) {
		while ((de = readdir(d)) != NULL) {
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
				unlink(path(p, de->d_name));
		}
		closedir(d);
	}
	return rmdir(g_dir) == 0 ? 0 : -1;
}

/* ---- tls_cert_id on certificates built in memory -------------------------- */

static X509 *cert_new(void)
{
	X509 *x = X509_new();

	assert_non_null(x);
	assert_int_equal(X509_set_version(x, X509_VERSION_3), 1);
	return x;
}

/* Adds a CN of `len` raw bytes of ASN.1 string type `type`. */
static void add_cn(X509 *x, int type, const char *cn, int len)
{
	assert_int_equal(X509_NAME_add_entry_by_NID(
				 X509_get_subject_name(x), NID_commonName, type,
				 (const unsigned char *)cn, len, -1, 0),
			 1);
}

/* Adds a SAN extension: n URIs of the given lengths, plus one DNS name. */
static void add_san(X509 *x, int n, const char *const uri[], const int len[])
{
	GENERAL_NAMES *names = sk_GENERAL_NAME_new_null();
	GENERAL_NAME *gn;
	ASN1_IA5STRING *s;
	int i;

	assert_non_null(names);
	for (i = 0; i <= n; i++) {
		gn = GENERAL_NAME_new();
		s = ASN1_IA5STRING_new();
		assert_non_null(gn);
		assert_non_null(s);
		if (i < n)
			assert_int_equal(ASN1_STRING_set(s, uri[i], len[i]), 1);
		else
			assert_int_equal(ASN1_STRING_set(s, "node.example", -1),
					 1);
		GENERAL_NAME_set0_value(gn, i < n ? GEN_URI : GEN_DNS, s);
		assert_true(sk_GENERAL_NAME_push(names, gn) > 0);
	}
	assert_int_equal(X509_add1_ext_i2d(x, NID_subject_alt_name, names, 0,
					   X509V3_ADD_DEFAULT),
			 1);
	GENERAL_NAMES_free(names);
}

/* The id of a certificate with an optional UTF8 CN and up to two URIs. */
static int id_of(const char *cn, int cnlen, int n, const char *u0, int l0,
		 const char *u1, int l1, char out[SEMQ_ID_MAX + 1])
{
	const char *uri[2] = {u0, u1};
	const int len[2] = {l0, l1};
	X509 *x = cert_new();
	int r;

	if (cn)
		add_cn(x, V_ASN1_UTF8STRING, cn, cnlen);
	if (n)
		add_san(x, n, uri, len);
	r = tls_cert_id(x, out);
	X509_free(x);
	return r;
}

static void test_cert_id_san_wins_over_cn(void **state)
{
	char id[SEMQ_ID_MAX + 1];

	assert_int_equal(id_of("X", 1, 1, "semq://Y", 8, NULL, 0, id), SEMQ_OK);
	assert_string_equal(id, "Y");
	/* An unrelated URI comes first: the semq one is still found. */
	assert_int_equal(id_of("X", 1, 2, "https://x.example/", 18,
			       "semq://P-1.eu_2", 15, id),
			 SEMQ_OK);
	assert_string_equal(id, "P-1.eu_2");
	/* The scheme is case-insensitive, the id is taken as written. */
	assert_int_equal(id_of("X", 1, 1, "SEMQ://Zz", 9, NULL, 0, id),
			 SEMQ_OK);
	assert_string_equal(id, "Zz");
	/* The same id twice is not ambiguous. */
	assert_int_equal(id_of(NULL, 0, 2, "semq://Q", 8, "semq://Q", 8, id),
			 SEMQ_OK);
	assert_string_equal(id, "Q");
}

static void test_cert_id_cn_when_no_semq_san(void **state)
{
	char id[SEMQ_ID_MAX + 1];
	char max[SEMQ_ID_MAX + 1];

	assert_int_equal(id_of("S1", 2, 0, NULL, 0, NULL, 0, id), SEMQ_OK);
	assert_string_equal(id, "S1");
	/* SAN present but with no semq:// URI (another URI, a DNS name). */
	assert_int_equal(
		id_of("R7", 2, 1, "https://semq.example/R9", 23, NULL, 0, id),
		SEMQ_OK);
	assert_string_equal(id, "R7");
	/* "semq:/" without the second slash is not our scheme. */
	assert_int_equal(id_of("R8", 2, 1, "semq:/R9", 8, NULL, 0, id),
			 SEMQ_OK);
	assert_string_equal(id, "R8");
	/* 64 characters is the longest id. */
	memset(max, 'a', SEMQ_ID_MAX);
	max[SEMQ_ID_MAX] = '\0';
	assert_int_equal(id_of(max, SEMQ_ID_MAX, 0, NULL, 0, NULL, 0, id),
			 SEMQ_OK);
	assert_string_equal(id, max);
}

static void test_cert_id_cn_bmpstring(void **state)
{
	/* "AB" as a BMPString (UCS-2 big endian): read as text, not bytes. */
	static const char bmp[] = {0, 'A', 0, 'B'};
	char id[SEMQ_ID_MAX + 1];
	X509 *x = cert_new();

	add_cn(x, V_ASN1_BMPSTRING, bmp, (int)sizeof bmp);
	assert_int_equal(tls_cert_id(x, id), SEMQ_OK);
	assert_string_equal(id, "AB");
	X509_free(x);
}

static void test_cert_id_rejects(void **state)
{
	char id[SEMQ_ID_MAX + 1];
	char big[SEMQ_ID_MAX + 2];
	X509 *x;

	memset(big, 'a', sizeof big - 1);
	big[sizeof big - 1] = '\0';

	assert_int_equal(tls_cert_id(NULL, id), SEMQ_ERR_INVALID);
	assert_string_equal(id, "");
	/* Neither CN nor SAN. */
	assert_int_equal(id_of(NULL, 0, 0, NULL, 0, NULL, 0, id),
			 SEMQ_ERR_INVALID);
	/* Only a non-semq URI and no CN. */
	assert_int_equal(id_of(NULL, 0, 1, "https://a/", 10, NULL, 0, id),
			 SEMQ_ERR_INVALID);
	/* Embedded NUL: "A\0B" must not be read as "A". */
	assert_int_equal(id_of("A\0B", 3, 0, NULL, 0, NULL, 0, id),
			 SEMQ_ERR_INVALID);
	assert_string_equal(id, "");
	assert_int_equal(id_of("A", 1, 1, "semq://A\0B", 10, NULL, 0, id),
			 SEMQ_ERR_INVALID);
	/* A broken semq:// SAN is refused, not skipped for the CN. */
	assert_int_equal(id_of("A", 1, 1, "semq://a/b", 10, NULL, 0, id),
			 SEMQ_ERR_INVALID);
	assert_int_equal(id_of("A", 1, 1, "semq://", 7, NULL, 0, id),
			 SEMQ_ERR_INVALID);
	/* Two semq:// SANs naming different nodes. */
	assert_int_equal(id_of(NULL, 0, 2, "semq://A", 8, "semq://B", 8, id),
			 SEMQ_ERR_INVALID);
	/* Not the id alphabet, too long, empty. */
	assert_int_equal(id_of("S 1", 3, 0, NULL, 0, NULL, 0, id),
			 SEMQ_ERR_INVALID);
	assert_int_equal(id_of(big, (int)strlen(big), 0, NULL, 0, NULL, 0, id),
			 SEMQ_ERR_INVALID);
	assert_int_equal(id_of("", 0, 0, NULL, 0, NULL, 0, id),
			 SEMQ_ERR_INVALID);
	/* Two CNs are ambiguous. */
	x = cert_new();
	add_cn(x, V_ASN1_UTF8STRING, "A", 1);
	add_cn(x, V_ASN1_UTF8STRING, "B", 1);
	assert_int_equal(tls_cert_id(x, id), SEMQ_ERR_INVALID);
	X509_free(x);
}

static void test_cert_id_from_mkcerts(void **state)
{
	char p[PATH_MAX], id[SEMQ_ID_MAX + 1];
	FILE *f = fopen(path(p, "A.crt"), "r");
	X509 *x;

	assert_non_null(f);
	x = PEM_read_X509(f, NULL, NULL, NULL);
	fclose(f);
	assert_non_null(x);
	assert_int_equal(tls_cert_id(x, id), SEMQ_OK);
	assert_string_equal(id, "A");
	X509_free(x);
}

static void test_mkcerts_usage_errors(void **state)
{
	char p[PATH_MAX];

	/* Bad ids, an id that would overwrite the CA, an unknown option. */
	assert_int_equal(mkcerts_run(1, NULL, NULL, "a/b"), 2);
	assert_int_equal(mkcerts_run(1, NULL, NULL, ".."), 2);
	assert_int_equal(mkcerts_run(1, NULL, NULL, "ca"), 2);
	assert_int_equal(mkcerts_run(1, "--ca-name", "other", "other-ca"), 2);
	assert_int_equal(mkcerts_run(1, "--bogus", NULL, "X"), 2);
	assert_int_equal(access(path(p, "X.crt"), F_OK), -1);
	assert_int_equal(access(path(p, "a"), F_OK), -1);
}

/* ---- tls_ctx_new ----------------------------------------------------------- */

/* tls_ctx_new on DIR/cert, DIR/key, DIR/ca; NULL expected, err returned. */
static void ctx_fails(const char *cert, const char *key, const char *ca,
		      const char *node_id, char *err, size_t errsz)
{
	char c[PATH_MAX], k[PATH_MAX], a[PATH_MAX];
	SSL_CTX *ctx;

	err[0] = '\0';
	ctx = tls_ctx_new(path(c, cert), path(k, key), path(a, ca), NULL,
			  node_id, err, errsz);
	assert_null(ctx);
	assert_true(err[0] != '\0');
	assert_null(strchr(err, '\n'));
	assert_int_equal(ERR_peek_error(), 0); /* the queue is left empty */
}

/* err begins with "DIR/file: ". */
static void assert_names(const char *err, const char *file)
{
	char p[PATH_MAX + 2];

	snprintf(p, sizeof p, "%s/%s: ", g_dir, file);
	if (strncmp(err, p, strlen(p)) != 0)
		fail_msg("'%s' does not start with '%s'", err, p);
}

static void test_ctx_ok(void **state)
{
	char c[PATH_MAX], k[PATH_MAX], a[PATH_MAX], err[SEMQ_ERRLEN] = "";
	SSL_CTX *ctx =
		tls_ctx_new(path(c, "A.crt"), path(k, "A.key"),
			    path(a, "ca.crt"), NULL, "A", err, sizeof err);

	assert_non_null(ctx);
	assert_string_equal(err, "");
	assert_int_equal(SSL_CTX_get_min_proto_version(ctx), TLS1_3_VERSION);
	assert_int_equal(SSL_CTX_get_max_proto_version(ctx), TLS1_3_VERSION);
	assert_int_equal(SSL_CTX_get_verify_mode(ctx),
			 SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT);
	SSL_CTX_free(ctx);
}

static void test_ctx_id_mismatch(void **state)
{
	char err[SEMQ_ERRLEN], want[PATH_MAX + 64];

	ctx_fails("A.crt", "A.key", "ca.crt", "S1", err, sizeof err);
	snprintf(want, sizeof want,
		 "%s/A.crt: certificate is for 'A', but [node] id is 'S1'",
		 g_dir);
	assert_string_equal(err, want);
}

static void test_ctx_key_missing(void **state)
{
	char err[SEMQ_ERRLEN];

	ctx_fails("A.crt", "nokey.key", "ca.crt", "A", err, sizeof err);
	assert_names(err, "nokey.key");
	assert_non_null(strstr(err, "No such file or directory"));
}

static void test_ctx_key_mismatch(void **state)
{
	char err[SEMQ_ERRLEN];

	ctx_fails("A.crt", "B.key", "ca.crt", "A", err, sizeof err);
	assert_names(err, "B.key");
	assert_non_null(strstr(err, "key values mismatch"));
	assert_non_null(strstr(err, "does not match the certificate"));
	assert_non_null(strstr(err, "A.crt"));
}

static void test_ctx_cert_and_ca_errors(void **state)
{
	char err[SEMQ_ERRLEN];

	ctx_fails("nocert.crt", "A.key", "ca.crt", "A", err, sizeof err);
	assert_names(err, "nocert.crt");
	assert_non_null(strstr(err, "No such file or directory"));
	/* A key where the certificate should be. */
	ctx_fails("A.key", "A.key", "ca.crt", "A", err, sizeof err);
	assert_names(err, "A.key");
	ctx_fails("A.crt", "A.key", "noca.crt", "A", err, sizeof err);
	assert_names(err, "noca.crt");
	/* A file without a certificate in it as the CA. */
	ctx_fails("A.crt", "A.key", "A.key", "A", err, sizeof err);
	assert_names(err, "A.key");
	assert_non_null(strstr(err, "CA"));
}

/* Writes DIR/name.key and a self-signed DIR/name.crt with a UTF8 CN `cn`
 * and, unless NULL, the URI SAN `uri`. */
static void write_cert(const char *name, const char *cn, const char *uri)
{
	char p[PATH_MAX], n[64];
	EVP_PKEY *pk = EVP_EC_gen("P-256");
	X509 *x = cert_new();
	FILE *f;

	assert_non_null(pk);
	add_cn(x, V_ASN1_UTF8STRING, cn, (int)strlen(cn));
	if (uri) {
		const char *u[1] = {uri};
		const int l[1] = {(int)strlen(uri)};

		add_san(x, 1, u, l);
	}
	assert_int_equal(X509_set_issuer_name(x, X509_get_subject_name(x)), 1);
	assert_int_equal(ASN1_INTEGER_set(X509_get_serialNumber(x), 7), 1);
	assert_non_null(X509_gmtime_adj(X509_getm_notBefore(x), 0));
	assert_non_null(X509_gmtime_adj(X509_getm_notAfter(x), 86400));
	assert_int_equal(X509_set_pubkey(x, pk), 1);
	assert_true(X509_sign(x, pk, EVP_sha256()) > 0);

	snprintf(n, sizeof n, "%s.key", name);
	f = fopen(path(p, n), "w");
	assert_non_null(f);
	assert_int_equal(PEM_write_PrivateKey(f, pk, NULL, NULL, 0, NULL, NULL),
			 1);
	fclose(f);
	snprintf(n, sizeof n, "%s.crt", name);
	f = fopen(path(p, n), "w");
	assert_non_null(f);
	assert_int_equal(PEM_write_X509(f, x), 1);
	fclose(f);
	X509_free(x);
	EVP_PKEY_free(pk);
}

static void test_ctx_san_wins_over_cn(void **state)
{
	char c[PATH_MAX], k[PATH_MAX], a[PATH_MAX], err[SEMQ_ERRLEN];
	char want[PATH_MAX + 64];
	SSL_CTX *ctx;

	write_cert("XY", "X", "semq://Y");
	ctx = tls_ctx_new(path(c, "XY.crt"), path(k, "XY.key"),
			  path(a, "ca.crt"), NULL, "Y", err, sizeof err);
	assert_non_null(ctx);
	SSL_CTX_free(ctx);
	ctx_fails("XY.crt", "XY.key", "ca.crt", "X", err, sizeof err);
	snprintf(want, sizeof want,
		 "%s/XY.crt: certificate is for 'Y', but [node] id is 'X'",
		 g_dir);
	assert_string_equal(err, want);
}

static void test_ctx_cert_without_id(void **state)
{
	char err[SEMQ_ERRLEN], want[PATH_MAX + 128];

	write_cert("noid", "not an id", NULL);
	ctx_fails("noid.crt", "noid.key", "ca.crt", "A", err, sizeof err);
	snprintf(want, sizeof want,
		 "%s/noid.crt: certificate names no node id (URI SAN "
		 "semq://ID or CN of 1-64 A-Za-z0-9._-)",
		 g_dir);
	assert_string_equal(err, want);
}

static void test_ctx_bad_arguments(void **state)
{
	char c[PATH_MAX], k[PATH_MAX], a[PATH_MAX], err[SEMQ_ERRLEN];

	path(c, "A.crt");
	path(k, "A.key");
	path(a, "ca.crt");
	assert_null(tls_ctx_new(c, k, a, NULL, "a/b", err, sizeof err));
	assert_string_equal(err, "[node] id 'a/b': not a node id (1-64 of "
				 "A-Za-z0-9._-)");
	assert_null(tls_ctx_new(c, k, a, NULL, NULL, err, sizeof err));
	assert_non_null(strstr(err, "[node] id"));
	assert_null(tls_ctx_new(c, NULL, a, NULL, "A", err, sizeof err));
	assert_non_null(strstr(err, "key"));
	assert_null(tls_ctx_new(c, k, "", NULL, "A", err, sizeof err));
	assert_non_null(strstr(err, "ca"));
	/* No err buffer: still a clean failure. */
	assert_null(tls_ctx_new(c, k, a, NULL, "B", NULL, 0));
}

/* ---- real handshakes over a socketpair ------------------------------------ */

struct side {
	SSL *ssl;
	int done;            /* 1 handshake complete, -1 failed, 0 going on */
	unsigned long error; /* the first OpenSSL error when it failed */
};

struct link {
	int fd[2]; /* [0] the client's end, [1] the server's */
	struct side c, s;
};

static SSL_CTX *node_ctx(const char *id, const char *ca)
{
	char c[PATH_MAX], k[PATH_MAX], a[PATH_MAX], n[64], err[SEMQ_ERRLEN];
	SSL_CTX *ctx;

	snprintf(n, sizeof n, "%s.crt", id);
	path(c, n);
	snprintf(n, sizeof n, "%s.key", id);
	path(k, n);
	ctx = tls_ctx_new(c, k, path(a, ca), NULL, id, err, sizeof err);
	if (!ctx)
		fail_msg("tls_ctx_new %s: %s", id, err);
	return ctx;
}

/* A client context not made by tls_ctx_new: trusts ca.crt, verifies the
 * server, and uses `id`'s certificate unless id is NULL. */
static SSL_CTX *plain_client_ctx(const char *id)
{
	char p[PATH_MAX], n[64];
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());

	assert_non_null(ctx);
	assert_int_equal(
		SSL_CTX_load_verify_locations(ctx, path(p, "ca.crt"), NULL), 1);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	if (id) {
		snprintf(n, sizeof n, "%s.crt", id);
		assert_int_equal(
			SSL_CTX_use_certificate_chain_file(ctx, path(p, n)), 1);
		snprintf(n, sizeof n, "%s.key", id);
		assert_int_equal(SSL_CTX_use_PrivateKey_file(ctx, path(p, n),
							     SSL_FILETYPE_PEM),
				 1);
	}
	return ctx;
}

static void side_step(struct side *sd)
{
	int rc, e;

	if (sd->done)
		return;
	ERR_clear_error();
	rc = SSL_do_handshake(sd->ssl);
	if (rc == 1) {
		sd->done = 1;
		return;
	}
	e = SSL_get_error(sd->ssl, rc);
	if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
		return;
	sd->done = -1;
	sd->error = ERR_peek_error();
	ERR_clear_error();
}

static void link_open(struct link *l, SSL_CTX *cctx, SSL_CTX *sctx)
{
	memset(l, 0, sizeof *l);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, l->fd), 0);
	assert_int_equal(fcntl(l->fd[0], F_SETFL, O_NONBLOCK), 0);
	assert_int_equal(fcntl(l->fd[1], F_SETFL, O_NONBLOCK), 0);
	l->c.ssl = cctx ? SSL_new(cctx) : NULL;
	l->s.ssl = SSL_new(sctx);
	assert_non_null(l->s.ssl);
	assert_int_equal(SSL_set_fd(l->s.ssl, l->fd[1]), 1);
	SSL_set_accept_state(l->s.ssl);
	if (cctx) {
		assert_non_null(l->c.ssl);
		assert_int_equal(SSL_set_fd(l->c.ssl, l->fd[0]), 1);
		SSL_set_connect_state(l->c.ssl);
	} else {
		l->c.done = -1; /* no TLS client: the test writes raw bytes */
	}
}

/* Drives both sides until neither can move (bounded: a stall ends it too). */
static void link_handshake(struct link *l)
{
	int round;

	for (round = 0; round < 200 && (!l->c.done || !l->s.done); round++) {
		if (l->c.ssl)
			side_step(&l->c);
		side_step(&l->s);
	}
}

static void link_close(struct link *l)
{
	SSL_free(l->c.ssl);
	SSL_free(l->s.ssl);
	close(l->fd[0]);
	close(l->fd[1]);
}

/* One handshake of client ctx against server ctx. */
static void handshake(struct link *l, SSL_CTX *cctx, SSL_CTX *sctx)
{
	link_open(l, cctx, sctx);
	link_handshake(l);
}

static void assert_reason(unsigned long e, int reason)
{
	if (ERR_GET_REASON(e) != reason) {
		char buf[256];

		ERR_error_string_n(e, buf, sizeof buf);
		fail_msg("OpenSSL error %s, want reason %d", buf, reason);
	}
}

/* The server refused the client: no peer id on its side. */
static void assert_server_refused(struct link *l)
{
	char id[SEMQ_ID_MAX + 1], err[SEMQ_ERRLEN];

	assert_int_equal(l->s.done, -1);
	assert_int_equal(tls_peer_id(l->s.ssl, id, err, sizeof err),
			 SEMQ_ERR_INVALID);
	assert_string_equal(id, "");
}

/*
 * After the server refused it, the client gets no link either. In TLS 1.3 a
 * client finishes its handshake before the server has checked the client's
 * certificate, so it may think it is done: its first read then meets the
 * server's alert, never application data.
 */
static void assert_client_cut_off(struct link *l)
{
	char buf[16];
	int rc;

	assert_int_not_equal(l->c.done, 0);
	if (l->c.done == 1) {
		rc = SSL_read(l->c.ssl, buf, sizeof buf);
		assert_true(rc <= 0);
		assert_int_equal(SSL_get_error(l->c.ssl, rc), SSL_ERROR_SSL);
		ERR_clear_error();
	}
}

static void test_hs_mutual_ok(void **state)
{
	SSL_CTX *a = node_ctx("A", "ca.crt"), *b = node_ctx("B", "ca.crt");
	char id[SEMQ_ID_MAX + 1], err[SEMQ_ERRLEN], buf[16];
	struct link l;

	handshake(&l, a, b);
	assert_int_equal(l.c.done, 1);
	assert_int_equal(l.s.done, 1);
	assert_int_equal(SSL_version(l.c.ssl), TLS1_3_VERSION);
	assert_int_equal(tls_peer_id(l.c.ssl, id, err, sizeof err), SEMQ_OK);
	assert_string_equal(id, "B");
	assert_int_equal(tls_peer_id(l.s.ssl, id, err, sizeof err), SEMQ_OK);
	assert_string_equal(id, "A");
	/* The link carries data both ways. */
	assert_int_equal(SSL_write(l.c.ssl, "ping", 4), 4);
	assert_int_equal(SSL_read(l.s.ssl, buf, sizeof buf), 4);
	assert_memory_equal(buf, "ping", 4);
	assert_int_equal(SSL_write(l.s.ssl, "pong", 4), 4);
	assert_int_equal(SSL_read(l.c.ssl, buf, sizeof buf), 4);
	assert_memory_equal(buf, "pong", 4);
	link_close(&l);
	SSL_CTX_free(a);
	SSL_CTX_free(b);
}

static void test_hs_peer_id_before_handshake(void **state)
{
	SSL_CTX *a = node_ctx("A", "ca.crt");
	SSL *ssl = SSL_new(a);
	char id[SEMQ_ID_MAX + 1] = "junk", err[SEMQ_ERRLEN];

	assert_non_null(ssl);
	assert_int_equal(tls_peer_id(ssl, id, err, sizeof err),
			 SEMQ_ERR_INVALID);
	assert_string_equal(id, "");
	assert_string_equal(err, "peer: TLS handshake not finished");
	assert_int_equal(tls_peer_id(NULL, id, err, sizeof err),
			 SEMQ_ERR_INVALID);
	SSL_free(ssl);
	SSL_CTX_free(a);
}

static void test_hs_other_ca_refused(void **state)
{
	/* M trusts our CA, so only the side checking M can refuse. */
	SSL_CTX *m = node_ctx("M", "ca.crt");
	SSL_CTX *a = node_ctx("A", "ca.crt"), *b = node_ctx("B", "ca.crt");
	struct link l;

	/* M dials B: B refuses M's certificate. */
	handshake(&l, m, b);
	assert_server_refused(&l);
	assert_reason(l.s.error, SSL_R_CERTIFICATE_VERIFY_FAILED);
	assert_int_equal(SSL_get_verify_result(l.s.ssl),
			 X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY);
	assert_client_cut_off(&l);
	link_close(&l);

	/* A dials M: A refuses M's certificate. */
	handshake(&l, a, m);
	assert_int_equal(l.c.done, -1);
	assert_reason(l.c.error, SSL_R_CERTIFICATE_VERIFY_FAILED);
	assert_int_equal(SSL_get_verify_result(l.c.ssl),
			 X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY);
	assert_int_not_equal(l.s.done, 1);
	link_close(&l);

	SSL_CTX_free(m);
	SSL_CTX_free(a);
	SSL_CTX_free(b);
}

static int accept_anything(int ok, X509_STORE_CTX *store)
{
	return 1;
}

static void test_hs_peer_id_needs_verified_cert(void **state)
{
	/* A caller that overrides verification on one SSL still gets no id
	 * from tls_peer_id for a certificate that did not verify. */
	static const char unverified[] = "peer: certificate not verified: ";
	SSL_CTX *a = node_ctx("A", "ca.crt"), *m = node_ctx("M", "ca.crt");
	char id[SEMQ_ID_MAX + 1], err[SEMQ_ERRLEN];
	struct link l;

	link_open(&l, a, m);
	SSL_set_verify(l.c.ssl, SSL_VERIFY_PEER, accept_anything);
	link_handshake(&l);
	assert_int_equal(l.c.done, 1);
	assert_int_equal(l.s.done, 1);
	assert_int_equal(tls_peer_id(l.c.ssl, id, err, sizeof err),
			 SEMQ_ERR_INVALID);
	assert_string_equal(id, "");
	assert_true(strncmp(err, unverified, sizeof unverified - 1) == 0);
	assert_int_not_equal(SSL_get_verify_result(l.c.ssl), X509_V_OK);
	/* The other direction verified and is fine. */
	assert_int_equal(tls_peer_id(l.s.ssl, id, err, sizeof err), SEMQ_OK);
	assert_string_equal(id, "A");
	link_close(&l);
	SSL_CTX_free(a);
	SSL_CTX_free(m);
}

static void test_hs_no_client_cert_refused(void **state)
{
	SSL_CTX *c = plain_client_ctx(NULL), *a = node_ctx("A", "ca.crt");
	struct link l;

	handshake(&l, c, a);
	assert_server_refused(&l);
	assert_reason(l.s.error, SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE);
	assert_client_cut_off(&l);
	link_close(&l);
	SSL_CTX_free(c);
	SSL_CTX_free(a);
}

static void test_hs_expired_refused(void **state)
{
	SSL_CTX *e = node_ctx("E", "ca.crt"), *a = node_ctx("A", "ca.crt");
	struct link l;

	handshake(&l, e, a);
	assert_server_refused(&l);
	assert_reason(l.s.error, SSL_R_CERTIFICATE_VERIFY_FAILED);
	assert_int_equal(SSL_get_verify_result(l.s.ssl),
			 X509_V_ERR_CERT_HAS_EXPIRED);
	link_close(&l);

	handshake(&l, a, e);
	assert_int_equal(l.c.done, -1);
	assert_int_equal(SSL_get_verify_result(l.c.ssl),
			 X509_V_ERR_CERT_HAS_EXPIRED);
	assert_int_not_equal(l.s.done, 1);
	link_close(&l);
	SSL_CTX_free(e);
	SSL_CTX_free(a);
}

static void test_hs_tls12_refused(void **state)
{
	SSL_CTX *c = plain_client_ctx("A"), *b = node_ctx("B", "ca.crt");
	struct link l;

	assert_int_equal(SSL_CTX_set_max_proto_version(c, TLS1_2_VERSION), 1);
	handshake(&l, c, b);
	assert_server_refused(&l);
	assert_reason(l.s.error, SSL_R_UNSUPPORTED_PROTOCOL);
	assert_int_equal(l.c.done, -1);
	link_close(&l);
	SSL_CTX_free(c);
	SSL_CTX_free(b);
}

static void test_hs_plaintext_refused(void **state)
{
	static const char junk[] = "HELLO S1 1 relay\r\n\r\n";
	SSL_CTX *b = node_ctx("B", "ca.crt");
	char err[SEMQ_ERRLEN], id[SEMQ_ID_MAX + 1];
	struct link l;

	link_open(&l, NULL, b);
	assert_int_equal(write(l.fd[0], junk, sizeof junk - 1),
			 (ssize_t)(sizeof junk - 1));
	link_handshake(&l);
	assert_server_refused(&l);
	assert_int_equal(tls_peer_id(l.s.ssl, id, err, sizeof err),
			 SEMQ_ERR_INVALID);
	assert_string_equal(err, "peer: TLS handshake not finished");
	link_close(&l);
	SSL_CTX_free(b);
}

/* ---- revocation -------------------------------------------------------------- */

static X509 *read_cert(const char *name)
{
	char p[PATH_MAX];
	FILE *f = fopen(path(p, name), "r");
	X509 *x;

	assert_non_null(f);
	x = PEM_read_X509(f, NULL, NULL, NULL);
	fclose(f);
	assert_non_null(x);
	return x;
}

/*
 * Writes DIR/name: a CRL of the CA DIR/ca_base.crt (+ .key) revoking the
 * certificates DIR/ID.crt of the NULL-terminated `ids`, its nextUpdate
 * `next_s` seconds from now (negative: stale). Through a temporary file and
 * rename(2) unless in_place, which rewrites the same inode.
 */
static void write_crl_ex(const char *name, const char *ca_base, long next_s,
			 const char *const ids[], int in_place)
{
	char p[PATH_MAX], tmp[PATH_MAX + 8], n[64];
	X509_CRL *crl = X509_CRL_new();
	X509 *ca;
	EVP_PKEY *key;
	FILE *f;
	int i;

	assert_non_null(crl);
	snprintf(n, sizeof n, "%s.crt", ca_base);
	ca = read_cert(n);
	snprintf(n, sizeof n, "%s.key", ca_base);
	f = fopen(path(p, n), "r");
	assert_non_null(f);
	key = PEM_read_PrivateKey(f, NULL, NULL, NULL);
	fclose(f);
	assert_non_null(key);

	assert_int_equal(X509_CRL_set_version(crl, X509_CRL_VERSION_2), 1);
	assert_int_equal(
		X509_CRL_set_issuer_name(crl, X509_get_subject_name(ca)), 1);
	{
		ASN1_TIME *last = X509_gmtime_adj(
			NULL, next_s < 0 ? next_s - 86400 : -3600);
		ASN1_TIME *next = X509_gmtime_adj(NULL, next_s);

		assert_non_null(last);
		assert_non_null(next);
		assert_int_equal(X509_CRL_set1_lastUpdate(crl, last), 1);
		assert_int_equal(X509_CRL_set1_nextUpdate(crl, next), 1);
		ASN1_TIME_free(last);
		ASN1_TIME_free(next);
	}
	for (i = 0; ids && ids[i]; i++) {
		X509_REVOKED *rv = X509_REVOKED_new();
		ASN1_TIME *when = X509_gmtime_adj(NULL, -60);
		X509 *x;

		snprintf(n, sizeof n, "%s.crt", ids[i]);
		x = read_cert(n);
		assert_non_null(rv);
		assert_non_null(when);
		assert_int_equal(X509_REVOKED_set_serialNumber(
					 rv, X509_get_serialNumber(x)),
				 1);
		assert_int_equal(X509_REVOKED_set_revocationDate(rv, when), 1);
		assert_int_equal(X509_CRL_add0_revoked(crl, rv), 1);
		ASN1_TIME_free(when);
		X509_free(x);
	}
	assert_int_equal(X509_CRL_sort(crl), 1);
	assert_true(X509_CRL_sign(crl, key, EVP_sha256()) > 0);

	path(p, name);
	snprintf(tmp, sizeof tmp, "%s.tmp", p);
	f = fopen(in_place ? p : tmp, "w");
	assert_non_null(f);
	assert_int_equal(PEM_write_X509_CRL(f, crl), 1);
	assert_int_equal(fclose(f), 0);
	if (!in_place)
		assert_int_equal(rename(tmp, p), 0);
	X509_CRL_free(crl);
	X509_free(ca);
	EVP_PKEY_free(key);
}

static void write_crl(const char *name, const char *ca_base, long next_s,
		      const char *const ids[])
{
	write_crl_ex(name, ca_base, next_s, ids, 0);
}

/* DIR/name with these bytes. */
static void write_file(const char *name, const char *text)
{
	char p[PATH_MAX];
	FILE *f = fopen(path(p, name), "w");

	assert_non_null(f);
	assert_int_equal(fputs(text, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
}

/* id's context with DIR/crl as its CRL. */
static SSL_CTX *crl_ctx(const char *id, const char *crl)
{
	char c[PATH_MAX], k[PATH_MAX], a[PATH_MAX], r[PATH_MAX], n[64];
	char err[SEMQ_ERRLEN];
	SSL_CTX *ctx;

	snprintf(n, sizeof n, "%s.crt", id);
	path(c, n);
	snprintf(n, sizeof n, "%s.key", id);
	path(k, n);
	ctx = tls_ctx_new(c, k, path(a, "ca.crt"), path(r, crl), id, err,
			  sizeof err);
	if (!ctx)
		fail_msg("tls_ctx_new %s with %s: %s", id, crl, err);
	assert_string_equal(err, "");
	return ctx;
}

/* tls_crl_reload on DIR/crl: its result, err in err. */
static int reload(SSL_CTX *ctx, const char *crl, int force, char *err,
		  size_t errsz)
{
	char p[PATH_MAX];

	err[0] = '\0';
	return tls_crl_reload(ctx, path(p, crl), force, err, errsz);
}

/* The server (srv, with a CRL) refuses the client cli as revoked. */
static void assert_revoked_refused(SSL_CTX *cli, SSL_CTX *srv)
{
	struct link l;

	handshake(&l, cli, srv);
	assert_server_refused(&l);
	assert_reason(l.s.error, SSL_R_CERTIFICATE_VERIFY_FAILED);
	assert_int_equal(SSL_get_verify_result(l.s.ssl),
			 X509_V_ERR_CERT_REVOKED);
	assert_string_equal(
		X509_verify_cert_error_string(SSL_get_verify_result(l.s.ssl)),
		"certificate revoked");
	assert_client_cut_off(&l);
	link_close(&l);
}

/* cli and srv shake hands and both know the other. */
static void assert_accepted(SSL_CTX *cli, SSL_CTX *srv)
{
	char id[SEMQ_ID_MAX + 1], err[SEMQ_ERRLEN];
	struct link l;

	handshake(&l, cli, srv);
	assert_int_equal(l.c.done, 1);
	assert_int_equal(l.s.done, 1);
	assert_int_equal(tls_peer_id(l.s.ssl, id, err, sizeof err), SEMQ_OK);
	assert_int_equal(tls_peer_id(l.c.ssl, id, err, sizeof err), SEMQ_OK);
	link_close(&l);
}

static void test_crl_revoked_refused_both_ways(void **state)
{
	static const char *const revoke_b[] = {"B", NULL};
	SSL_CTX *a, *b = node_ctx("B", "ca.crt"), *c = node_ctx("C", "ca.crt");
	struct link l;

	write_crl("revb.crl", "ca", 86400, revoke_b);
	a = crl_ctx("A", "revb.crl");
	/* B dials A: A refuses B's certificate as revoked. */
	assert_revoked_refused(b, a);
	/* A dials B: A refuses the server's certificate as revoked. */
	handshake(&l, a, b);
	assert_int_equal(l.c.done, -1);
	assert_reason(l.c.error, SSL_R_CERTIFICATE_VERIFY_FAILED);
	assert_int_equal(SSL_get_verify_result(l.c.ssl),
			 X509_V_ERR_CERT_REVOKED);
	assert_int_not_equal(l.s.done, 1);
	link_close(&l);
	/* C, not revoked, both ways. */
	assert_accepted(c, a);
	assert_accepted(a, c);
	SSL_CTX_free(a);
	SSL_CTX_free(b);
	SSL_CTX_free(c);
}

static void test_crl_reload_unchanged_and_forced(void **state)
{
	static const char *const revoke_b[] = {"B", NULL};
	SSL_CTX *a, *b = node_ctx("B", "ca.crt");
	char err[SEMQ_ERRLEN], p[PATH_MAX], want[PATH_MAX + 80];

	write_crl("same.crl", "ca", 86400, revoke_b);
	a = crl_ctx("A", "same.crl");
	/* Unchanged since tls_ctx_new read it: not read again. */
	assert_int_equal(reload(a, "same.crl", 0, err, sizeof err),
			 SEMQ_DECLINED);
	assert_int_equal(reload(a, "same.crl", 0, err, sizeof err),
			 SEMQ_DECLINED);
	/* Forced (SIGHUP): read again, and says what it loaded. */
	assert_int_equal(reload(a, "same.crl", 1, err, sizeof err), SEMQ_OK);
	snprintf(want, sizeof want,
		 "%s: CRL loaded: 1 CRL(s), 1 revoked certificate(s)",
		 path(p, "same.crl"));
	assert_string_equal(err, want);
	assert_revoked_refused(b, a);
	/* Nothing to load without a path. */
	assert_int_equal(tls_crl_reload(a, NULL, 1, err, sizeof err),
			 SEMQ_DECLINED);
	assert_int_equal(tls_crl_reload(a, "", 1, err, sizeof err),
			 SEMQ_DECLINED);
	assert_int_equal(ERR_peek_error(), 0);
	SSL_CTX_free(a);
	SSL_CTX_free(b);
}

static void test_crl_reload_changed(void **state)
{
	static const char *const revoke_b[] = {"B", NULL};
	static const char *const revoke_bc[] = {"B", "C", NULL};
	SSL_CTX *a, *b = node_ctx("B", "ca.crt"), *c = node_ctx("C", "ca.crt");
	char err[SEMQ_ERRLEN];

	write_crl("chg.crl", "ca", 86400, NULL);
	a = crl_ctx("A", "chg.crl");
	assert_int_equal(reload(a, "chg.crl", 1, err, sizeof err), SEMQ_OK);
	assert_non_null(strstr(err, ": 1 CRL(s), 0 revoked certificate(s)"));
	assert_accepted(b, a);
	/* Replaced by rename (a new inode): picked up without force. */
	write_crl("chg.crl", "ca", 86400, revoke_b);
	assert_int_equal(reload(a, "chg.crl", 0, err, sizeof err), SEMQ_OK);
	assert_non_null(strstr(err, "1 revoked certificate(s)"));
	assert_revoked_refused(b, a);
	assert_accepted(c, a);
	assert_int_equal(reload(a, "chg.crl", 0, err, sizeof err),
			 SEMQ_DECLINED);
	/* Rewritten in place (same inode, another size and mtime). */
	write_crl_ex("chg.crl", "ca", 86400, revoke_bc, 1);
	assert_int_equal(reload(a, "chg.crl", 0, err, sizeof err), SEMQ_OK);
	assert_non_null(strstr(err, "2 revoked certificate(s)"));
	assert_revoked_refused(c, a);
	/* And back to nothing revoked: the old CRLs are gone, not added to. */
	write_crl("chg.crl", "ca", 86400, NULL);
	assert_int_equal(reload(a, "chg.crl", 0, err, sizeof err), SEMQ_OK);
	assert_accepted(b, a);
	assert_accepted(c, a);
	SSL_CTX_free(a);
	SSL_CTX_free(b);
	SSL_CTX_free(c);
}

static void test_peer_recheck_after_reload(void **state)
{
	static const char *const revoke_b[] = {"B", NULL};
	SSL_CTX *a, *b = node_ctx("B", "ca.crt"), *c = node_ctx("C", "ca.crt");
	char err[SEMQ_ERRLEN];
	struct link lb, lc, la;

	write_crl("live.crl", "ca", 86400, NULL);
	a = crl_ctx("A", "live.crl");
	handshake(&lb, b, a); /* B dialled A */
	handshake(&lc, c, a); /* C dialled A */
	handshake(&la, a, b); /* A dialled B */
	assert_int_equal(lb.s.done, 1);
	assert_int_equal(lc.s.done, 1);
	assert_int_equal(la.c.done, 1);
	assert_int_equal(tls_peer_recheck(lb.s.ssl, err, sizeof err), SEMQ_OK);
	assert_int_equal(tls_peer_recheck(la.c.ssl, err, sizeof err), SEMQ_OK);

	/* B is revoked while its links are up: A's side of both fails the
	 * check now, C's does not. */
	write_crl("live.crl", "ca", 86400, revoke_b);
	assert_int_equal(reload(a, "live.crl", 0, err, sizeof err), SEMQ_OK);
	assert_int_equal(tls_peer_recheck(lb.s.ssl, err, sizeof err),
			 SEMQ_DECLINED);
	assert_string_equal(err, "peer: certificate no longer verifies: "
				 "certificate revoked");
	assert_int_equal(tls_peer_recheck(la.c.ssl, err, sizeof err),
			 SEMQ_DECLINED);
	assert_int_equal(tls_peer_recheck(lc.s.ssl, err, sizeof err), SEMQ_OK);
	/* No peer certificate: nothing to check. */
	assert_int_equal(tls_peer_recheck(NULL, err, sizeof err),
			 SEMQ_ERR_INVALID);
	assert_int_equal(ERR_peek_error(), 0);
	link_close(&lb);
	link_close(&lc);
	link_close(&la);
	SSL_CTX_free(a);
	SSL_CTX_free(b);
	SSL_CTX_free(c);
}

/* Reloading DIR/crl, now broken, fails with err naming it and `why`. */
static void assert_reload_fails(SSL_CTX *ctx, const char *crl, int want_r,
				const char *why)
{
	char err[SEMQ_ERRLEN];

	assert_int_equal(reload(ctx, crl, 1, err, sizeof err), want_r);
	assert_names(err, crl);
	if (!strstr(err, why))
		fail_msg("'%s' does not say '%s'", err, why);
	assert_null(strchr(err, '\n'));
	assert_int_equal(ERR_peek_error(), 0);
}

static void test_crl_reload_broken_keeps_old(void **state)
{
	static const char *const revoke_b[] = {"B", NULL};
	SSL_CTX *a, *b = node_ctx("B", "ca.crt"), *c = node_ctx("C", "ca.crt");
	char err[SEMQ_ERRLEN], p[PATH_MAX];
	int64_t next;
	FILE *f;
	long len;
	char *pem;

	write_crl("brk.crl", "ca", 86400, revoke_b);
	a = crl_ctx("A", "brk.crl");
	next = tls_crl_next_update(a);
	assert_true(next > (int64_t)time(NULL));

	/* Truncated in the middle of the base64 of its only CRL. */
	f = fopen(path(p, "brk.crl"), "r");
	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	len = ftell(f);
	assert_true(len > 100);
	rewind(f);
	pem = calloc(1, (size_t)len + 1);
	assert_non_null(pem);
	assert_int_equal(fread(pem, 1, (size_t)len, f), (size_t)len);
	fclose(f);
	pem[len / 2] = '\0';
	write_file("brk.crl", pem);
	assert_reload_fails(a, "brk.crl", SEMQ_ERR_INVALID,
			    "not a valid PEM CRL");
	assert_revoked_refused(b, a);
	/* The broken file is not read again every poll, only when it changes
	 * or a reload is forced. */
	assert_int_equal(reload(a, "brk.crl", 0, err, sizeof err),
			 SEMQ_DECLINED);

	/* Corrupt base64 (a whole PEM block of junk). */
	write_file("brk.crl", "-----BEGIN X509 CRL-----\nnot*base64\n"
			      "-----END X509 CRL-----\n");
	assert_reload_fails(a, "brk.crl", SEMQ_ERR_INVALID,
			    "not a valid PEM CRL");
	/* No CRL at all: empty, or a certificate. */
	write_file("brk.crl", "");
	assert_reload_fails(a, "brk.crl", SEMQ_ERR_INVALID, "no CRL in it");
	f = fopen(path(p, "brk.crl"), "w");
	assert_non_null(f);
	{
		X509 *x = read_cert("C.crt");

		assert_int_equal(PEM_write_X509(f, x), 1);
		X509_free(x);
	}
	fclose(f);
	assert_reload_fails(a, "brk.crl", SEMQ_ERR_INVALID, "no CRL in it");
	/* A CRL of another CA. */
	write_crl("brk.crl", "other-ca", 86400, NULL);
	assert_reload_fails(a, "brk.crl", SEMQ_ERR_INVALID,
			    "is not signed by a CA of [tls] ca");
	/* Gone. */
	assert_int_equal(unlink(path(p, "brk.crl")), 0);
	assert_reload_fails(a, "brk.crl", SEMQ_ERR_IO, "No such file");

	/* Through all that, the first CRL stayed in force. */
	assert_revoked_refused(b, a);
	assert_accepted(c, a);
	assert_int_equal(tls_crl_next_update(a), next);

	/* A good file again is taken. */
	write_crl("brk.crl", "ca", 86400, NULL);
	assert_int_equal(reload(a, "brk.crl", 0, err, sizeof err), SEMQ_OK);
	assert_accepted(b, a);
	free(pem);
	SSL_CTX_free(a);
	SSL_CTX_free(b);
	SSL_CTX_free(c);
}

static void test_crl_errors_at_start(void **state)
{
	char c[PATH_MAX], k[PATH_MAX], a[PATH_MAX], r[PATH_MAX];
	char err[SEMQ_ERRLEN];

	path(c, "A.crt");
	path(k, "A.key");
	path(a, "ca.crt");
	assert_null(tls_ctx_new(c, k, a, path(r, "nocrl.crl"), "A", err,
				sizeof err));
	assert_names(err, "nocrl.crl");
	assert_non_null(strstr(err, "No such file"));
	write_file("junk.crl", "junk\n");
	assert_null(tls_ctx_new(c, k, a, path(r, "junk.crl"), "A", err,
				sizeof err));
	assert_names(err, "junk.crl");
	assert_non_null(strstr(err, "no CRL in it"));
	write_crl("oth.crl", "other-ca", 86400, NULL);
	assert_null(
		tls_ctx_new(c, k, a, path(r, "oth.crl"), "A", err, sizeof err));
	assert_names(err, "oth.crl");
	assert_non_null(strstr(err, "not signed by a CA of [tls] ca"));
	assert_int_equal(ERR_peek_error(), 0);
}

static void test_crl_stale_still_checked(void **state)
{
	static const char *const revoke_b[] = {"B", NULL};
	SSL_CTX *a, *b = node_ctx("B", "ca.crt"), *c = node_ctx("C", "ca.crt");
	int64_t now = (int64_t)time(NULL);

	/* Due a day ago: loaded (and logged as an ERROR), still in force. */
	write_crl("stale.crl", "ca", -86400, revoke_b);
	a = crl_ctx("A", "stale.crl");
	assert_true(tls_crl_next_update(a) < now - 86000);
	assert_true(tls_crl_next_update(a) > now - 87000);
	assert_revoked_refused(b, a);
	assert_accepted(c, a);
	assert_accepted(a, c);
	SSL_CTX_free(a);
	SSL_CTX_free(b);
	SSL_CTX_free(c);
}

static void test_cert_not_after(void **state)
{
	SSL_CTX *a = node_ctx("A", "ca.crt"), *e = node_ctx("E", "ca.crt");
	int64_t now = (int64_t)time(NULL), na = tls_cert_not_after(a);
	X509 *x = read_cert("A.crt");
	int day, sec;

	/* mkcerts: 825 days from when it ran, a few seconds ago. */
	assert_true(na > now + 824 * 86400LL);
	assert_true(na <= now + 825 * 86400LL);
	/* The same instant as the certificate's notAfter. */
	assert_int_equal(
		ASN1_TIME_diff(&day, &sec, NULL, X509_get0_notAfter(x)), 1);
	assert_true(llabs((long long)day * 86400 + sec - (na - now)) <= 2);
	/* Expired yesterday. */
	assert_true(tls_cert_not_after(e) < now);
	assert_true(tls_cert_not_after(e) > now - 2 * 86400);
	assert_int_equal(tls_cert_not_after(NULL), 0);
	X509_free(x);
	SSL_CTX_free(a);
	SSL_CTX_free(e);
}

/* A certificate's notBefore in unix seconds. */
static int64_t asn1_before(X509 *x)
{
	struct tm tm;

	assert_int_equal(ASN1_TIME_to_tm(X509_get0_notBefore(x), &tm), 1);
	return (int64_t)timegm(&tm);
}

/* tls_check_own(ctx) at `now` fails with err naming `file` and saying why. */
static void assert_own_refused(SSL_CTX *ctx, int64_t now, const char *cert,
			       const char *crl, const char *why)
{
	char c[PATH_MAX], a[PATH_MAX], r[PATH_MAX], err[SEMQ_ERRLEN];

	assert_int_equal(
		tls_check_own(ctx, now, path(c, cert), path(a, "ca.crt"),
			      crl ? path(r, crl) : NULL, err, sizeof err),
		SEMQ_ERR_CONFIG);
	assert_names(err, cert);
	if (!strstr(err, why))
		fail_msg("'%s' does not say '%s'", err, why);
	assert_null(strchr(err, '\n'));
	assert_int_equal(ERR_peek_error(), 0);
}

static void test_check_own(void **state)
{
	static const char *const revoke_b[] = {"B", NULL};
	SSL_CTX *a = node_ctx("A", "ca.crt"), *e = node_ctx("E", "ca.crt");
	SSL_CTX *m = node_ctx("M", "ca.crt"), *b, *bs;
	int64_t now = (int64_t)time(NULL);
	X509 *x = read_cert("A.crt");
	char c[PATH_MAX], err[SEMQ_ERRLEN];

	assert_int_equal(
		tls_check_own(a, now, "A.crt", "ca.crt", NULL, err, sizeof err),
		SEMQ_OK);
	assert_own_refused(e, now, "E.crt", NULL, "certificate expired on ");
	assert_own_refused(m, now, "M.crt", NULL, "not signed by the CA in ");
	/* Time is injected: before A was made, it is not valid yet. */
	assert_own_refused(a, asn1_before(x) - 86400, "A.crt", NULL,
			   "not valid before ");
	/* Revoked by our own CRL; a stale CRL revokes all the same. */
	write_crl("own.crl", "ca", 86400, revoke_b);
	b = crl_ctx("B", "own.crl");
	assert_own_refused(b, now, "B.crt", "own.crl",
			   "certificate is revoked by ");
	write_crl("own2.crl", "ca", -3600, revoke_b);
	bs = crl_ctx("B", "own2.crl");
	assert_own_refused(bs, now, "B.crt", "own2.crl", "revoked by ");
	/* A CRL that does not revoke it. */
	write_crl("own.crl", "ca", 86400, NULL);
	assert_int_equal(
		tls_crl_reload(b, path(c, "own.crl"), 0, err, sizeof err),
		SEMQ_OK);
	assert_int_equal(tls_check_own(b, now, "B.crt", "ca.crt", "own.crl",
				       err, sizeof err),
			 SEMQ_OK);
	X509_free(x);
	SSL_CTX_free(a);
	SSL_CTX_free(e);
	SSL_CTX_free(m);
	SSL_CTX_free(b);
	SSL_CTX_free(bs);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cert_id_san_wins_over_cn),
		cmocka_unit_test(test_cert_id_cn_when_no_semq_san),
		cmocka_unit_test(test_cert_id_cn_bmpstring),
		cmocka_unit_test(test_cert_id_rejects),
		cmocka_unit_test(test_cert_id_from_mkcerts),
		cmocka_unit_test(test_mkcerts_usage_errors),
		cmocka_unit_test(test_ctx_ok),
		cmocka_unit_test(test_ctx_id_mismatch),
		cmocka_unit_test(test_ctx_key_missing),
		cmocka_unit_test(test_ctx_key_mismatch),
		cmocka_unit_test(test_ctx_cert_and_ca_errors),
		cmocka_unit_test(test_ctx_san_wins_over_cn),
		cmocka_unit_test(test_ctx_cert_without_id),
		cmocka_unit_test(test_ctx_bad_arguments),
		cmocka_unit_test(test_hs_mutual_ok),
		cmocka_unit_test(test_hs_peer_id_before_handshake),
		cmocka_unit_test(test_hs_other_ca_refused),
		cmocka_unit_test(test_hs_peer_id_needs_verified_cert),
		cmocka_unit_test(test_hs_no_client_cert_refused),
		cmocka_unit_test(test_hs_expired_refused),
		cmocka_unit_test(test_hs_tls12_refused),
		cmocka_unit_test(test_hs_plaintext_refused),
		cmocka_unit_test(test_crl_revoked_refused_both_ways),
		cmocka_unit_test(test_crl_reload_unchanged_and_forced),
		cmocka_unit_test(test_crl_reload_changed),
		cmocka_unit_test(test_crl_reload_broken_keeps_old),
		cmocka_unit_test(test_peer_recheck_after_reload),
		cmocka_unit_test(test_crl_errors_at_start),
		cmocka_unit_test(test_crl_stale_still_checked),
		cmocka_unit_test(test_cert_not_after),
		cmocka_unit_test(test_check_own),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
