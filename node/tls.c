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
 */
#include "tls.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <openssl/err.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#define URI_SCHEME "semq://"

static void fail(char *err, size_t errsz, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void fail(char *err, size_t errsz, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errsz)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errsz, fmt, ap);
	va_end(ap);
}

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
		fail(err, errsz, "tls_peer_id: no output buffer");
		return SEMQ_ERR_INVALID;
	}
	out[0] = '\0';
	if (!ssl) {
		fail(err, errsz, "tls_peer_id: no TLS connection");
		return SEMQ_ERR_INVALID;
	}
	if (!SSL_is_init_finished(ssl)) {
		fail(err, errsz, "peer: TLS handshake not finished");
		return SEMQ_ERR_INVALID;
	}
	peer = SSL_get0_peer_certificate(ssl);
	if (!peer) {
		fail(err, errsz, "peer: presented no certificate");
		return SEMQ_ERR_INVALID;
	}
	v = SSL_get_verify_result(ssl);
	if (v != X509_V_OK) {
		fail(err, errsz, "peer: certificate not verified: %s",
		     X509_verify_cert_error_string(v));
		return SEMQ_ERR_INVALID;
	}
	if (tls_cert_id(peer, out) != SEMQ_OK) {
		fail(err, errsz,
		     "peer: certificate names no node id (URI SAN semq://ID "
		     "or CN of 1-64 A-Za-z0-9._-)");
		return SEMQ_ERR_INVALID;
	}
	return SEMQ_OK;
}

SSL_CTX *tls_ctx_new(const char *cert, const char *key, const char *ca,
		     const char *node_id, char *err, size_t errsz)
{
	SSL_CTX *ctx = NULL; /* owned until handed to the caller */
	SSL_CTX *ret = NULL;
	X509 *own; /* borrowed from ctx */
	char id[SEMQ_ID_MAX + 1];
	char why[256];

	if (!cert || !*cert || !key || !*key || !ca || !*ca) {
		fail(err, errsz,
		     "[tls] cert, key and ca: all three are required");
		goto out;
	}
	if (!semq_id_valid(node_id)) {
		fail(err, errsz, "[node] id '%s': not a node id (1-64 of %s)",
		     node_id ? node_id : "(null)", "A-Za-z0-9._-");
		goto out;
	}
	ERR_clear_error(); /* so the first queued error is ours */

	ctx = SSL_CTX_new(TLS_method());
	if (!ctx) {
		fail(err, errsz, "tls: cannot create a context: %s",
		     ssl_reason(why, sizeof why));
		goto out;
	}
	if (!SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) ||
	    !SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION)) {
		fail(err, errsz, "tls: cannot restrict to TLS 1.3: %s",
		     ssl_reason(why, sizeof why));
		goto out;
	}
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_TICKET);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	if (!SSL_CTX_set_num_tickets(ctx, 0)) {
		fail(err, errsz, "tls: cannot turn off session resumption: %s",
		     ssl_reason(why, sizeof why));
		goto out;
	}

	if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
		fail(err, errsz, "%s: cannot load certificate: %s", cert,
		     ssl_reason(why, sizeof why));
		goto out;
	}
	/* Fails with "key values mismatch" when the key is not the cert's. */
	if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
		fail(err, errsz, "%s: cannot use private key: %s", key,
		     ssl_reason(why, sizeof why));
		goto out;
	}
	if (SSL_CTX_check_private_key(ctx) != 1) {
		fail(err, errsz, "%s: private key does not match %s: %s", key,
		     cert, ssl_reason(why, sizeof why));
		goto out;
	}
	if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1) {
		fail(err, errsz, "%s: cannot load CA certificates: %s", ca,
		     ssl_reason(why, sizeof why));
		goto out;
	}
	SSL_CTX_set_verify(
		ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);

	own = SSL_CTX_get0_certificate(ctx);
	if (tls_cert_id(own, id) != SEMQ_OK) {
		fail(err, errsz,
		     "%s: certificate names no node id (URI SAN semq://ID "
		     "or CN of 1-64 A-Za-z0-9._-)",
		     cert);
		goto out;
	}
	if (strcmp(id, node_id) != 0) {
		fail(err, errsz,
		     "%s: certificate is for '%s', but [node] id is '%s'", cert,
		     id, node_id);
		goto out;
	}
	ret = ctx;
	ctx = NULL;
out:
	SSL_CTX_free(ctx);
	ERR_clear_error();
	return ret;
}
