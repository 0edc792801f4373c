/* SPDX-License-Identifier: MIT */
/*
 * TLS for peer links: TLS 1.3 only, mutual authentication against the
 * deployment's CA. A node's id is the CN of its certificate, or a URI SAN of
 * the form semq://ID (which wins when both are present).
 */
#ifndef SEMQ_TLS_H
#define SEMQ_TLS_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/ssl.h>

#include "types.h"

/*
 * A context for both directions: our certificate and key, peers verified
 * against `ca`, TLS 1.3 only, a peer certificate required. Checks that the
 * key matches the certificate and that the certificate's id is `node_id`.
 * `crl` (NULL or "" for none) is a PEM file of one or more CRLs: a peer whose
 * certificate one of them revokes fails the handshake ("certificate
 * revoked"). Caller frees with SSL_CTX_free. NULL on failure with err naming
 * the file.
 */
SSL_CTX *tls_ctx_new(const char *cert, const char *key, const char *ca,
		     const char *crl, const char *node_id, char *err,
		     size_t errsz);

/*
 * Re-reads the CRL file `crl_path` into ctx's verify store when `force` is
 * set or when the file's mtime or size changed since the last load (for
 * SIGHUP and a periodic poll on the network thread). The store's CRLs are
 * replaced as a whole: a file that cannot be read or parsed leaves the CRLs
 * in place and fills err with the file name and OpenSSL's reason. Every
 * certificate verified after a successful reload is checked against the new
 * CRLs. SEMQ_OK when reloaded, with err holding a one-line summary for an
 * INFO line ("FILE: CRL reloaded: 1 CRL(s), 2 revoked certificate(s)");
 * SEMQ_DECLINED when unchanged and not forced, or crl_path is NULL or "";
 * SEMQ_ERR_IO (cannot stat or open) or SEMQ_ERR_INVALID (not a CRL of the
 * CA) with err filled: log it, the old CRLs stay. The same file with the
 * same error is not retried until it changes or a reload is forced. A stale CRL (nextUpdate
 * passed) is loaded and checked against all the same, and logged as an ERROR
 * (here, and at most hourly by the handshakes that meet it). Call it from the
 * thread that runs the handshakes (the network thread).
 */
int tls_crl_reload(SSL_CTX *ctx, const char *crl_path, int force, char *err,
		   size_t errsz);

/*
 * Verifies the peer certificate of an established link again, against its
 * context's store as it is now: after a tls_crl_reload() that revoked it, a
 * link made before fails (for closing the links of a peer revoked while
 * connected). SEMQ_OK when it still verifies; SEMQ_DECLINED with err naming
 * the reason ("certificate revoked") when it does not; SEMQ_ERR_INVALID when
 * ssl has no peer certificate.
 */
int tls_peer_recheck(SSL *ssl, char *err, size_t errsz);

/*
 * The earliest nextUpdate of the CRLs loaded in ctx, in unix seconds: when
 * it has passed, the CRL is stale (still checked against, logged as an
 * ERROR: see docs/CONFIG.md). 0 when no CRL is loaded or none has a
 * nextUpdate.
 */
int64_t tls_crl_next_update(SSL_CTX *ctx);

/*
 * Checks this node's own certificate in ctx as a peer would at `now` (unix
 * seconds): within its validity dates, signed by a CA of [tls] ca, not
 * revoked by the loaded CRLs. The paths only name the files in err. SEMQ_OK,
 * or SEMQ_ERR_CONFIG with one line in err naming the file and what to do.
 */
int tls_check_own(SSL_CTX *ctx, int64_t now, const char *cert, const char *ca,
		  const char *crl, char *err, size_t errsz);

/*
 * This node's certificate's notAfter in unix seconds (for the metric
 * semq_tls_cert_expiry_timestamp_seconds); 0 when ctx has no certificate or its
 * notAfter cannot be read.
 */
int64_t tls_cert_not_after(SSL_CTX *ctx);
/* The earliest notAfter of the CA certificates the context trusts, unix s;
 * 0 when there is none. */
int64_t tls_ca_not_after(SSL_CTX *ctx);

/* The id in a certificate: URI SAN semq://ID, else CN; validated as a node
 * id. SEMQ_ERR_INVALID when it has none. */
int tls_cert_id(X509 *cert, char out[SEMQ_ID_MAX + 1]);

/* The certificate the peer presented, verified or not (a failed
 * verification keeps it for this): for naming it in a refusal line. NULL
 * when it presented none. Borrowed from ssl. */
X509 *tls_presented_cert(SSL *ssl);

/* The verified peer's id after the handshake. SEMQ_ERR_INVALID when the
 * peer presented no verified certificate or it carries no valid id. */
int tls_peer_id(SSL *ssl, char out[SEMQ_ID_MAX + 1], char *err, size_t errsz);

#endif
