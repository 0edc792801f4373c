/* SPDX-License-Identifier: MIT */
/*
 * TLS for peer links (SPEC §10): one SSL_CTX per node, used for both the links
 * it accepts and the links it dials. TLS 1.3 only, and both sides must show a
 * certificate signed by the deployment's CA. A certificate names a node by a
 * URI SAN semq://ID or else by its CN (SPEC §2); tls_cert_id() is the one
 * place that reads that name, for our own certificate at start-up and for
 * the peer's after each handshake.
 *
 * DESIGN: a peer is authenticated by the handshake alone, never by a cached
 * session. Session tickets and the server session cache are off, so every
 * link runs a full handshake with certificate verification; links live long,
 * so resumption would save nothing worth the extra states. Invariants: the
 * context never negotiates below TLS 1.3; a handshake without a verified peer
 * certificate fails (SSL_VERIFY_FAIL_IF_NO_PEER_CERT), and tls_peer_id()
 * checks the verify result again so a caller cannot mistake an unverified
 * peer for a known one. Whether the id is the one expected (the Hello's, an
 * allow list) is the caller's decision.
 *
 * Revocation: [tls] crl is loaded into the context's verify store with
 * X509_V_FLAG_CRL_CHECK (the peer's own certificate). tls_crl_reload() builds
 * a whole new store (the CA certificates of the old one plus the new CRLs)
 * and swaps it in with SSL_CTX_set_cert_store(), so a verification sees
 * either the old CRLs or the new ones, never a mix, and a file that does not
 * parse changes nothing. Every CRL must be signed by a CA of the store. A
 * stale CRL (nextUpdate passed) is still checked against: the verify
 * callback lets X509_V_ERR_CRL_HAS_EXPIRED (and NOT_YET_VALID, a clock
 * skew) through and logs an ERROR at most hourly, since refusing every
 * peer of the deployment because the CRL was not re-published in time
 * would be an outage, while a revoked certificate stays refused.
 */
#include "tls.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "log.h"

#define URI_SCHEME "semq://"

/* A stale CRL is logged at most this often (seconds). */
#define STALE_LOG_EVERY 3600

/*
 * What tls_crl_reload() knows of the CRL file, per context (SSL_CTX ex_data,
 * freed with the context). Touched only by the thread running handshakes.
 */
struct crl_state {
	int seen;  /* the file was read once (well or not) */
	dev_t dev; /* ...and looked like this then */
	ino_t ino;
	off_t size;
	struct timespec mtime;
	int64_t next_update; /* earliest nextUpdate loaded; 0 = none */
	time_t stale_logged; /* last ERROR about a stale CRL; 0 = none */
};

/* OpenSSL's text for the oldest queued error; empties the queue. */
static const char *ssl_reason(char *buf, size_t bufsz)
{
	unsigned long e = ERR_get_error();

	if (e)
		ERR_error_string_n(e, buf, bufsz);
	else
		snprintf(buf, bufsz, "unknown OpenSSL error");
	ERR_clear_error();
	return buf;
}

/* ---- the per-context CRL state --------------------------------------------- */

static int g_state_idx = -1;
static pthread_once_t g_state_once = PTHREAD_ONCE_INIT;

static void state_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx,
		       long argl, void *argp)
{
	free(ptr);
}

static void state_idx_init(void)
{
	g_state_idx = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, state_free);
}

/* ctx's CRL state, created on first use; NULL when out of memory. */
static struct crl_state *crl_state(SSL_CTX *ctx, int create)
{
	struct crl_state *st;

	pthread_once(&g_state_once, state_idx_init);
	if (g_state_idx < 0)
		return NULL;
	st = SSL_CTX_get_ex_data(ctx, g_state_idx);
	if (st || !create)
		return st;
	st = calloc(1, sizeof *st);
	if (st && !SSL_CTX_set_ex_data(ctx, g_state_idx, st)) {
		free(st);
		st = NULL;
	}
	return st;
}

/* ---- the certificate a peer presented ------------------------------------ */

/* The presented leaf, kept on the SSL by verify_cb (an X509 reference) so
 * that a failed handshake's line can name it: OpenSSL drops it then. */
static int g_leaf_idx = -1;
static pthread_once_t g_leaf_once = PTHREAD_ONCE_INIT;

static void leaf_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx,
		      long argl, void *argp)
{
	X509_free(ptr);
}

static void leaf_idx_init(void)
{
	g_leaf_idx = SSL_get_ex_new_index(0, NULL, NULL, NULL, leaf_free);
}

static void leaf_keep(X509_STORE_CTX *sc)
{
	SSL *ssl = X509_STORE_CTX_get_ex_data(
		sc, SSL_get_ex_data_X509_STORE_CTX_idx());
	X509 *leaf = X509_STORE_CTX_get0_cert(sc);

	pthread_once(&g_leaf_once, leaf_idx_init);
	if (!ssl || !leaf || g_leaf_idx < 0 ||
	    SSL_get_ex_data(ssl, g_leaf_idx) || !X509_up_ref(leaf))
		return;
	if (!SSL_set_ex_data(ssl, g_leaf_idx, leaf))
		X509_free(leaf);
}

X509 *tls_presented_cert(SSL *ssl)
{
	X509 *x = SSL_get0_peer_certificate(ssl);

	if (x)
		return x;
	pthread_once(&g_leaf_once, leaf_idx_init);
	return g_leaf_idx < 0 ? NULL : SSL_get_ex_data(ssl, g_leaf_idx);
}

/* An ASN1_TIME as unix seconds; 0 when absent or unreadable. */
static int64_t asn1_unix(const ASN1_TIME *t)
{
	struct tm tm;

	if (!t || ASN1_TIME_to_tm(t, &tm) != 1)
		return 0;
	return (int64_t)timegm(&tm);
}

/* "2026-11-22 13:52:20 UTC" */
static const char *unix_text(int64_t t, char *buf, size_t bufsz)
{
	time_t tt = (time_t)t;
	struct tm tm;

	if (!gmtime_r(&tt, &tm) ||
	    strftime(buf, bufsz, "%Y-%m-%d %H:%M:%S UTC", &tm) == 0)
		snprintf(buf, bufsz, "%lld", (long long)t);
	return buf;
}

/* The one-line text of an X509 name (issuer of a CRL, subject of a CA). */
static const char *name_text(const X509_NAME *name, char *buf, size_t bufsz)
{
	if (!name || !X509_NAME_oneline(name, buf, (int)bufsz))
		snprintf(buf, bufsz, "(no name)");
	return buf;
}

/*
 * The verify callback of every context: lets a stale CRL through (see the
 * DESIGN note above) and says so in the log, hourly at most per context.
 * The result of every other check is OpenSSL's.
 */
static int verify_cb(int ok, X509_STORE_CTX *sc)
{
	int e = X509_STORE_CTX_get_error(sc);
	SSL *ssl;
	struct crl_state *st = NULL;
	char when[64], issuer[256];
	X509_CRL *crl;
	time_t now;

	if (!ok)
		leaf_keep(sc);
	if (ok || (e != X509_V_ERR_CRL_HAS_EXPIRED &&
		   e != X509_V_ERR_CRL_NOT_YET_VALID))
		return ok;
	X509_STORE_CTX_set_error(sc, X509_V_OK);
	ssl = X509_STORE_CTX_get_ex_data(sc,
					 SSL_get_ex_data_X509_STORE_CTX_idx());
	if (ssl)
		st = crl_state(SSL_get_SSL_CTX(ssl), 0);
	now = time(NULL);
	if (!st ||
	    (st->stale_logged && now - st->stale_logged < STALE_LOG_EVERY))
		return 1;
	st->stale_logged = now;
	crl = X509_STORE_CTX_get0_current_crl(sc);
	if (e == X509_V_ERR_CRL_HAS_EXPIRED)
		log_error(
			"tls",
			"the CRL of %s is stale (next update was due %s): "
			"still refusing the certificates it revokes, but "
			"revocations since are unknown: publish a new CRL "
			"to [tls] crl",
			name_text(crl ? X509_CRL_get_issuer(crl) : NULL, issuer,
				  sizeof issuer),
			unix_text(asn1_unix(crl ? X509_CRL_get0_nextUpdate(crl)
						: NULL),
				  when, sizeof when));
	else
		log_error(
			"tls",
			"the CRL of %s is not valid yet (issued %s): check "
			"the clocks of this machine and of the CA; it is "
			"checked against all the same",
			name_text(crl ? X509_CRL_get_issuer(crl) : NULL, issuer,
				  sizeof issuer),
			unix_text(asn1_unix(crl ? X509_CRL_get0_lastUpdate(crl)
						: NULL),
				  when, sizeof when));
	return 1;
}

/* Copies `len` bytes of a name into out as a C string when they are a node
 * id: no embedded NUL, at most SEMQ_ID_MAX, the id alphabet. */
static int take_id(const unsigned char *p, size_t len,
		   char out[SEMQ_ID_MAX + 1])
{
	char id[SEMQ_ID_MAX + 1];

	if (!p || len == 0 || len > SEMQ_ID_MAX || memchr(p, '\0', len))
		return SEMQ_ERR_INVALID;
	memcpy(id, p, len);
	id[len] = '\0';
	if (!semq_id_valid(id))
		return SEMQ_ERR_INVALID;
	memcpy(out, id, len + 1);
	return SEMQ_OK;
}

/*
 * The id in the URI SANs: SEMQ_OK with out filled, SEMQ_DECLINED when there
 * is no semq:// URI, SEMQ_ERR_INVALID when one is not a node id or two name
 * different ids (a certificate must not be read two ways).
 */
static int san_id(X509 *cert, char out[SEMQ_ID_MAX + 1])
{
	int r = SEMQ_DECLINED;
	GENERAL_NAMES *names;
	const size_t slen = strlen(URI_SCHEME);
	char id[SEMQ_ID_MAX + 1];
	int i;

	/* Owned here: freed with GENERAL_NAMES_free. */
	names = X509_get_ext_d2i(cert, NID_subject_alt_name, NULL, NULL);
	if (!names)
		return SEMQ_DECLINED;
	for (i = 0; i < sk_GENERAL_NAME_num(names); i++) {
		const GENERAL_NAME *gn = sk_GENERAL_NAME_value(names, i);
		const unsigned char *p;
		int len;

		if (gn->type != GEN_URI)
			continue;
		p = ASN1_STRING_get0_data(gn->d.uniformResourceIdentifier);
		len = ASN1_STRING_length(gn->d.uniformResourceIdentifier);
		/* The scheme is case-insensitive (RFC 3986 §3.1). */
		if (!p || len < 0 || (size_t)len < slen ||
		    strncasecmp((const char *)p, URI_SCHEME, slen) != 0)
			continue;
		if (take_id(p + slen, (size_t)len - slen, id) != SEMQ_OK) {
			r = SEMQ_ERR_INVALID;
			goto out;
		}
		if (r == SEMQ_OK && strcmp(out, id) != 0) {
			r = SEMQ_ERR_INVALID;
			goto out;
		}
		memcpy(out, id, sizeof id);
		r = SEMQ_OK;
	}
out:
	GENERAL_NAMES_free(names);
	return r;
}

/* The id in the subject's one CN. More than one CN is ambiguous: refused. */
static int cn_id(X509 *cert, char out[SEMQ_ID_MAX + 1])
{
	int r = SEMQ_ERR_INVALID;
	const X509_NAME *subj = X509_get_subject_name(cert);
	const X509_NAME_ENTRY *ent;
	unsigned char *utf8 = NULL; /* owned: OPENSSL_free */
	int at, len;

	if (!subj)
		goto out;
	at = X509_NAME_get_index_by_NID(subj, NID_commonName, -1);
	if (at < 0 || X509_NAME_get_index_by_NID(subj, NID_commonName, at) >= 0)
		goto out;
	ent = X509_NAME_get_entry(subj, at);
	len = ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(ent));
	if (len < 0)
		goto out;
	r = take_id(utf8, (size_t)len, out);
out:
	OPENSSL_free(utf8);
	return r;
}

int tls_cert_id(X509 *cert, char out[SEMQ_ID_MAX + 1])
{
	int r;

	if (!out)
		return SEMQ_ERR_INVALID;
	out[0] = '\0';
	if (!cert)
		return SEMQ_ERR_INVALID;
	r = san_id(cert, out);
	if (r == SEMQ_DECLINED)
		r = cn_id(cert, out);
	if (r != SEMQ_OK) {
		out[0] = '\0';
		return SEMQ_ERR_INVALID;
	}
	return SEMQ_OK;
}

int tls_peer_id(SSL *ssl, char out[SEMQ_ID_MAX + 1], char *err, size_t errsz)
{
	X509 *peer; /* borrowed from ssl */
	long v;

	if (!out) {
		semq_errf(err, errsz, "tls_peer_id: no output buffer");
		return SEMQ_ERR_INVALID;
	}
	out[0] = '\0';
	if (!ssl) {
		semq_errf(err, errsz, "tls_peer_id: no TLS connection");
		return SEMQ_ERR_INVALID;
	}
	if (!SSL_is_init_finished(ssl)) {
		semq_errf(err, errsz, "peer: TLS handshake not finished");
		return SEMQ_ERR_INVALID;
	}
	peer = SSL_get0_peer_certificate(ssl);
	if (!peer) {
		semq_errf(err, errsz, "peer: presented no certificate");
		return SEMQ_ERR_INVALID;
	}
	v = SSL_get_verify_result(ssl);
	if (v != X509_V_OK) {
		semq_errf(err, errsz, "peer: certificate not verified: %s",
			  X509_verify_cert_error_string(v));
		return SEMQ_ERR_INVALID;
	}
	if (tls_cert_id(peer, out) != SEMQ_OK) {
		semq_errf(
			err, errsz,
			"peer: certificate names no node id (URI SAN semq://ID "
			"or CN of 1-64 A-Za-z0-9._-)");
		return SEMQ_ERR_INVALID;
	}
	return SEMQ_OK;
}

/* ---- revocation lists -------------------------------------------------------- */

/*
 * Every CRL in the PEM file f (named path in errors), at least one. Caller
 * frees the stack with sk_X509_CRL_pop_free(.., X509_CRL_free). NULL with
 * err filled.
 */
static STACK_OF(X509_CRL) *
	crl_read(FILE *f, const char *path, char *err, size_t errsz)
{
	STACK_OF(X509_CRL) *crls = NULL, *ret = NULL;
	BIO *bio = NULL;
	X509_CRL *crl;
	unsigned long e;
	char why[256];

	ERR_clear_error();
	bio = BIO_new_fp(f, BIO_NOCLOSE);
	crls = sk_X509_CRL_new_null();
	if (!bio || !crls) {
		semq_errf(err, errsz, "%s: cannot read the CRL: %s", path,
			  ssl_reason(why, sizeof why));
		goto out;
	}
	while ((crl = PEM_read_bio_X509_CRL(bio, NULL, NULL, NULL)) != NULL) {
		if (!sk_X509_CRL_push(crls, crl)) {
			X509_CRL_free(crl);
			semq_errf(err, errsz, "%s: out of memory", path);
			goto out;
		}
	}
	/* The loop ends at the end of the file (no start line) or at a bad
	 * block: only the first is fine, and only after one CRL at least. */
	e = ERR_peek_last_error();
	if (ERR_GET_LIB(e) != ERR_LIB_PEM ||
	    ERR_GET_REASON(e) != PEM_R_NO_START_LINE) {
		semq_errf(err, errsz, "%s: not a valid PEM CRL: %s", path,
			  ssl_reason(why, sizeof why));
		goto out;
	}
	if (sk_X509_CRL_num(crls) == 0) {
		semq_errf(err, errsz,
			  "%s: no CRL in it (PEM \"-----BEGIN X509 CRL-----\" "
			  "expected; make one with openssl ca -gencrl)",
			  path);
		goto out;
	}
	ret = crls;
	crls = NULL;
out:
	ERR_clear_error();
	sk_X509_CRL_pop_free(crls, X509_CRL_free);
	BIO_free(bio);
	return ret;
}

/* 1 when a CA certificate in store has crl's issuer name and a key that
 * verifies crl's signature. */
static int crl_signed_by_store(X509_STORE *store, X509_CRL *crl)
{
	X509_STORE_CTX *sc = X509_STORE_CTX_new();
	STACK_OF(X509) *cas = NULL;
	int i, ok = 0;

	if (!sc || !X509_STORE_CTX_init(sc, store, NULL, NULL))
		goto out;
	cas = X509_STORE_CTX_get1_certs(sc, X509_CRL_get_issuer(crl));
	for (i = 0; !ok && i < sk_X509_num(cas); i++) {
		EVP_PKEY *pk = X509_get0_pubkey(sk_X509_value(cas, i));

		ok = pk && X509_CRL_verify(crl, pk) == 1;
	}
out:
	sk_X509_pop_free(cas, X509_free);
	X509_STORE_CTX_free(sc);
	ERR_clear_error();
	return ok;
}

/*
 * A new verify store: the CA certificates of `old` and the CRLs `crls`,
 * checked for the peer's certificate. Caller frees with X509_STORE_free.
 */
static X509_STORE *store_with_crls(X509_STORE *old, STACK_OF(X509_CRL) * crls)
{
	X509_STORE *st = X509_STORE_new();
	X509_STORE *ret = NULL;
	STACK_OF(X509_OBJECT) * objs; /* borrowed from old */
	int i;

	if (!st || !X509_STORE_set1_param(st, X509_STORE_get0_param(old)))
		goto out;
	objs = X509_STORE_get0_objects(old);
	for (i = 0; i < sk_X509_OBJECT_num(objs); i++) {
		X509 *ca = X509_OBJECT_get0_X509(sk_X509_OBJECT_value(objs, i));

		if (ca && !X509_STORE_add_cert(st, ca))
			goto out;
	}
	for (i = 0; i < sk_X509_CRL_num(crls); i++)
		if (!X509_STORE_add_crl(st, sk_X509_CRL_value(crls, i)))
			goto out;
	if (!X509_STORE_set_flags(st, X509_V_FLAG_CRL_CHECK))
		goto out;
	ret = st;
	st = NULL;
out:
	X509_STORE_free(st);
	return ret;
}

static int same_file(const struct crl_state *st, const struct stat *sb)
{
	return st->seen && st->dev == sb->st_dev && st->ino == sb->st_ino &&
	       st->size == sb->st_size &&
	       st->mtime.tv_sec == sb->st_mtim.tv_sec &&
	       st->mtime.tv_nsec == sb->st_mtim.tv_nsec;
}

int tls_crl_reload(SSL_CTX *ctx, const char *crl_path, int force, char *err,
		   size_t errsz)
{
	int r = SEMQ_ERR_INVALID;
	struct crl_state *st;
	STACK_OF(X509_CRL) *crls = NULL; /* owned */
	X509_STORE *store = NULL;        /* owned until given to ctx */
	FILE *f = NULL;
	struct stat sb;
	int64_t next = 0;
	int i, n, revoked = 0;
	char when[64], issuer[256];

	if (!crl_path || !*crl_path)
		return SEMQ_DECLINED;
	if (!ctx) {
		semq_errf(err, errsz, "tls_crl_reload: no context");
		return SEMQ_ERR_INVALID;
	}
	st = crl_state(ctx, 1);
	if (!st) {
		semq_errf(err, errsz, "%s: out of memory", crl_path);
		return SEMQ_ERR_NOMEM;
	}
	/* Read through the descriptor that was stat'ed: the state describes
	 * what was read even when the file is replaced meanwhile. */
	f = fopen(crl_path, "r");
	if (!f || fstat(fileno(f), &sb) != 0) {
		semq_errf(err, errsz, "%s: cannot read the CRL: %s", crl_path,
			  strerror(errno));
		r = SEMQ_ERR_IO;
		goto out;
	}
	if (!force && same_file(st, &sb)) {
		r = SEMQ_DECLINED;
		goto out;
	}
	st->seen = 1;
	st->dev = sb.st_dev;
	st->ino = sb.st_ino;
	st->size = sb.st_size;
	st->mtime = sb.st_mtim;

	crls = crl_read(f, crl_path, err, errsz);
	if (!crls)
		goto out;
	for (i = 0; i < sk_X509_CRL_num(crls); i++) {
		X509_CRL *crl = sk_X509_CRL_value(crls, i);
		int64_t nu = asn1_unix(X509_CRL_get0_nextUpdate(crl));

		if (!crl_signed_by_store(SSL_CTX_get_cert_store(ctx), crl)) {
			semq_errf(err, errsz,
				  "%s: the CRL of %s is not signed by a CA of "
				  "[tls] "
				  "ca: use the CRL that CA issued",
				  crl_path,
				  name_text(X509_CRL_get_issuer(crl), issuer,
					    sizeof issuer));
			goto out;
		}
		n = sk_X509_REVOKED_num(X509_CRL_get_REVOKED(crl));
		revoked += n > 0 ? n : 0; /* -1: none listed */
		if (nu && (!next || nu < next))
			next = nu;
	}
	store = store_with_crls(SSL_CTX_get_cert_store(ctx), crls);
	if (!store) {
		semq_errf(err, errsz, "%s: cannot build the verify store: %s",
			  crl_path, ssl_reason(when, sizeof when));
		goto out;
	}
	SSL_CTX_set_cert_store(ctx, store); /* frees the old one */
	store = NULL;
	st->next_update = next;
	st->stale_logged = 0;
	semq_errf(err, errsz,
		  "%s: CRL loaded: %d CRL(s), %d revoked certificate(s)",
		  crl_path, sk_X509_CRL_num(crls), revoked);
	if (next && next < (int64_t)time(NULL)) {
		st->stale_logged = time(NULL);
		log_error("tls",
			  "%s: stale CRL (next update was due %s): still "
			  "refusing the certificates it revokes, but "
			  "revocations since are unknown: publish a new CRL",
			  crl_path, unix_text(next, when, sizeof when));
	}
	r = SEMQ_OK;
out:
	X509_STORE_free(store);
	sk_X509_CRL_pop_free(crls, X509_CRL_free);
	if (f)
		fclose(f);
	ERR_clear_error();
	return r;
}

int64_t tls_crl_next_update(SSL_CTX *ctx)
{
	struct crl_state *st = ctx ? crl_state(ctx, 0) : NULL;

	return st ? st->next_update : 0;
}

int64_t tls_cert_not_after(SSL_CTX *ctx)
{
	X509 *own = ctx ? SSL_CTX_get0_certificate(ctx) : NULL;

	return own ? asn1_unix(X509_get0_notAfter(own)) : 0;
}

int64_t tls_ca_not_after(SSL_CTX *ctx)
{
	X509_STORE *st = ctx ? SSL_CTX_get_cert_store(ctx) : NULL;
	STACK_OF(X509_OBJECT) * objs;
	int64_t first = 0;
	int i;

	if (!st)
		return 0;
	if (!X509_STORE_lock(st))
		return 0;
	objs = X509_STORE_get0_objects(st);
	for (i = 0; objs && i < sk_X509_OBJECT_num(objs); i++) {
		X509 *x = X509_OBJECT_get0_X509(sk_X509_OBJECT_value(objs, i));
		int64_t t = x ? asn1_unix(X509_get0_notAfter(x)) : 0;

		if (t > 0 && (!first || t < first))
			first = t;
	}
	X509_STORE_unlock(st);
	return first;
}

/* As verify_cb for a verification outside a handshake: a stale CRL is
 * checked against, without a log line (the load logged it). */
static int check_cb(int ok, X509_STORE_CTX *sc)
{
	int e = X509_STORE_CTX_get_error(sc);

	if (!ok && (e == X509_V_ERR_CRL_HAS_EXPIRED ||
		    e == X509_V_ERR_CRL_NOT_YET_VALID)) {
		X509_STORE_CTX_set_error(sc, X509_V_OK);
		return 1;
	}
	return ok;
}

int tls_peer_recheck(SSL *ssl, char *err, size_t errsz)
{
	int r = SEMQ_ERR_INVALID;
	X509 *peer = ssl ? SSL_get0_peer_certificate(ssl) : NULL; /* borrowed */
	X509_STORE_CTX *sc = NULL;
	char why[256];
	int e;

	if (!peer) {
		semq_errf(err, errsz, "peer: presented no certificate");
		goto out;
	}
	sc = X509_STORE_CTX_new();
	if (!sc ||
	    !X509_STORE_CTX_init(sc,
				 SSL_CTX_get_cert_store(SSL_get_SSL_CTX(ssl)),
				 peer, SSL_get_peer_cert_chain(ssl)) ||
	    !X509_STORE_CTX_set_default(
		    sc, SSL_is_server(ssl) ? "ssl_client" : "ssl_server")) {
		semq_errf(err, errsz, "peer: cannot check the certificate: %s",
			  ssl_reason(why, sizeof why));
		goto out;
	}
	X509_STORE_CTX_set_verify_cb(sc, check_cb);
	if (X509_verify_cert(sc) == 1) {
		r = SEMQ_OK;
		goto out;
	}
	e = X509_STORE_CTX_get_error(sc);
	semq_errf(err, errsz, "peer: certificate no longer verifies: %s",
		  X509_verify_cert_error_string(e));
	r = SEMQ_DECLINED;
out:
	X509_STORE_CTX_free(sc);
	ERR_clear_error();
	return r;
}

int tls_check_own(SSL_CTX *ctx, int64_t now, const char *cert, const char *ca,
		  const char *crl, char *err, size_t errsz)
{
	int r = SEMQ_ERR_CONFIG;
	X509 *own = ctx ? SSL_CTX_get0_certificate(ctx) : NULL; /* borrowed */
	STACK_OF(X509) *chain = NULL;                           /* borrowed */
	X509_STORE_CTX *sc = NULL;
	char when[64];
	int e;

	if (!own) {
		semq_errf(err, errsz, "%s: no certificate loaded", cert);
		goto out;
	}
	SSL_CTX_get0_chain_certs(ctx, &chain);
	sc = X509_STORE_CTX_new();
	if (!sc ||
	    !X509_STORE_CTX_init(sc, SSL_CTX_get_cert_store(ctx), own, chain)) {
		semq_errf(err, errsz, "%s: cannot check the certificate: %s",
			  cert, ssl_reason(when, sizeof when));
		goto out;
	}
	X509_VERIFY_PARAM_set_time(X509_STORE_CTX_get0_param(sc), (time_t)now);
	X509_STORE_CTX_set_verify_cb(sc, check_cb);
	if (X509_verify_cert(sc) == 1) {
		r = SEMQ_OK;
		goto out;
	}
	e = X509_STORE_CTX_get_error(sc);
	switch (e) {
	case X509_V_ERR_CERT_HAS_EXPIRED:
		semq_errf(err, errsz,
			  "%s: certificate expired on %s: peers refuse it; "
			  "make a "
			  "new certificate for this node (tools/mkcerts.sh or "
			  "the "
			  "deployment's CA) and point [tls] cert and key to it",
			  cert,
			  unix_text(asn1_unix(X509_get0_notAfter(own)), when,
				    sizeof when));
		break;
	case X509_V_ERR_CERT_NOT_YET_VALID:
		semq_errf(err, errsz,
			  "%s: certificate is not valid before %s: check this "
			  "machine's clock, or use a certificate valid now",
			  cert,
			  unix_text(asn1_unix(X509_get0_notBefore(own)), when,
				    sizeof when));
		break;
	case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
	case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
	case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
	case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
	case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
	case X509_V_ERR_CERT_SIGNATURE_FAILURE:
		semq_errf(
			err, errsz,
			"%s: certificate is not signed by the CA in %s (%s): "
			"peers refuse it; use a certificate that CA issued, or "
			"set [tls] ca to the CA of the deployment",
			cert, ca, X509_verify_cert_error_string(e));
		break;
	case X509_V_ERR_CERT_REVOKED:
		semq_errf(err, errsz,
			  "%s: certificate is revoked by %s: peers refuse it; "
			  "make "
			  "a new certificate for this node and point [tls] "
			  "cert and "
			  "key to it",
			  cert, crl && *crl ? crl : "a CRL");
		break;
	case X509_V_ERR_UNABLE_TO_GET_CRL:
		semq_errf(err, errsz,
			  "%s: %s holds no CRL of the CA that signed %s: add "
			  "that "
			  "CA's CRL to it",
			  crl && *crl ? crl : "[tls] crl",
			  crl && *crl ? crl : "", cert);
		break;
	default:
		semq_errf(err, errsz,
			  "%s: certificate does not verify against %s: %s",
			  cert, ca, X509_verify_cert_error_string(e));
		break;
	}
out:
	X509_STORE_CTX_free(sc);
	ERR_clear_error();
	return r;
}

SSL_CTX *tls_ctx_new(const char *cert, const char *key, const char *ca,
		     const char *crl, const char *node_id, char *err,
		     size_t errsz)
{
	SSL_CTX *ctx = NULL; /* owned until handed to the caller */
	SSL_CTX *ret = NULL;
	X509 *own; /* borrowed from ctx */
	char id[SEMQ_ID_MAX + 1];
	char why[256];

	if (!cert || !*cert || !key || !*key || !ca || !*ca) {
		semq_errf(err, errsz,
			  "[tls] cert, key and ca: all three are required");
		goto out;
	}
	if (!semq_id_valid(node_id)) {
		semq_errf(err, errsz,
			  "[node] id '%s': not a node id (1-64 of %s)",
			  node_id ? node_id : "(null)", "A-Za-z0-9._-");
		goto out;
	}
	ERR_clear_error(); /* so the first queued error is ours */

	ctx = SSL_CTX_new(TLS_method());
	if (!ctx) {
		semq_errf(err, errsz, "tls: cannot create a context: %s",
			  ssl_reason(why, sizeof why));
		goto out;
	}
	if (!SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) ||
	    !SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION)) {
		semq_errf(err, errsz, "tls: cannot restrict to TLS 1.3: %s",
			  ssl_reason(why, sizeof why));
		goto out;
	}
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_TICKET);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	if (!SSL_CTX_set_num_tickets(ctx, 0)) {
		semq_errf(err, errsz,
			  "tls: cannot turn off session resumption: %s",
			  ssl_reason(why, sizeof why));
		goto out;
	}

	if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
		semq_errf(err, errsz, "%s: cannot load certificate: %s", cert,
			  ssl_reason(why, sizeof why));
		goto out;
	}
	/* Fails with "key values mismatch" when the key is not the cert's. */
	if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
		unsigned long e = ERR_peek_error();

		if (ERR_GET_LIB(e) == ERR_LIB_X509 &&
		    ERR_GET_REASON(e) == X509_R_KEY_VALUES_MISMATCH)
			semq_errf(
				err, errsz,
				"%s: private key does not match the "
				"certificate "
				"%s (%s): use the key the certificate was made "
				"for, or make a new certificate for this key",
				key, cert, ssl_reason(why, sizeof why));
		else
			semq_errf(err, errsz, "%s: cannot use private key: %s",
				  key, ssl_reason(why, sizeof why));
		goto out;
	}
	if (SSL_CTX_check_private_key(ctx) != 1) {
		semq_errf(err, errsz, "%s: private key does not match %s: %s",
			  key, cert, ssl_reason(why, sizeof why));
		goto out;
	}
	if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1) {
		semq_errf(err, errsz, "%s: cannot load CA certificates: %s", ca,
			  ssl_reason(why, sizeof why));
		goto out;
	}
	SSL_CTX_set_verify(ctx,
			   SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
			   verify_cb);
	if (crl && *crl) {
		if (tls_crl_reload(ctx, crl, 1, err, errsz) != SEMQ_OK)
			goto out;
		log_info("tls", "%s", err);
		if (err && errsz)
			err[0] = '\0';
	}

	own = SSL_CTX_get0_certificate(ctx);
	if (tls_cert_id(own, id) != SEMQ_OK) {
		semq_errf(err, errsz,
			  "%s: certificate names no node id (URI SAN semq://ID "
			  "or CN of 1-64 A-Za-z0-9._-)",
			  cert);
		goto out;
	}
	if (strcmp(id, node_id) != 0) {
		semq_errf(err, errsz,
			  "%s: certificate is for '%s', but [node] id is '%s'",
			  cert, id, node_id);
		goto out;
	}
	ret = ctx;
	ctx = NULL;
out:
	SSL_CTX_free(ctx);
	ERR_clear_error();
	return ret;
}
