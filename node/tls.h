/* SPDX-License-Identifier: MIT */
/*
 * TLS for peer links: TLS 1.3 only, mutual authentication against the
 * deployment's CA. A node's id is the CN of its certificate, or a URI SAN of
 * the form semq://ID (which wins when both are present).
 */
#ifndef SEMQ_TLS_H
#define SEMQ_TLS_H

#include <stddef.h>

#include <openssl/ssl.h>

#include "types.h"

/*
 * A context for both directions: our certificate and key, peers verified
 * against `ca`, TLS 1.3 only, a peer certificate required. Checks that the
 * key matches the certificate and that the certificate's id is `node_id`.
 * Caller frees with SSL_CTX_free. NULL on failure with err naming the file.
 */
SSL_CTX *tls_ctx_new(const char *cert, const char *key, const char *ca,
		     const char *node_id, char *err, size_t errsz);

/* The id in a certificate: URI SAN semq://ID, else CN; validated as a node
 * id. SEMQ_ERR_INVALID when it has none. */
int tls_cert_id(X509 *cert, char out[SEMQ_ID_MAX + 1]);

/* The verified peer's id after the handshake. SEMQ_ERR_INVALID when the
 * peer presented no verified certificate or it carries no valid id. */
int tls_peer_id(SSL *ssl, char out[SEMQ_ID_MAX + 1], char *err, size_t errsz);

#endif
