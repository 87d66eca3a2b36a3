#ifndef PEERSYNC_COPENSSL_SHIM_H
#define PEERSYNC_COPENSSL_SHIM_H
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/pem.h>
#include <openssl/pkcs12.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/bn.h>
#include <openssl/asn1.h>

/* Macros Swift cannot import get static inline wrappers here (used only by PeerSyncAuth). */

/* SSL_CTX / SSL control macros */
static inline long peersync_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version) {
    return SSL_CTX_set_min_proto_version(ctx, version);
}
static inline long peersync_SSL_CTX_set_max_proto_version(SSL_CTX *ctx, int version) {
    return SSL_CTX_set_max_proto_version(ctx, version);
}
static inline long peersync_SSL_CTX_set_session_cache_off(SSL_CTX *ctx) {
    return SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
}
static inline long peersync_SSL_set_tlsext_host_name(SSL *ssl, const char *name) {
    return SSL_set_tlsext_host_name(ssl, name);
}
static inline uint64_t peersync_ssl_default_options(void) {
    return SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION | SSL_OP_CIPHER_SERVER_PREFERENCE
         | SSL_OP_NO_TICKET;
}

/* Error queue */
static inline int peersync_ERR_GET_REASON(unsigned long e) { return ERR_GET_REASON(e); }
static inline int peersync_ERR_GET_LIB(unsigned long e) { return ERR_GET_LIB(e); }

/* Memory */
static inline void peersync_OPENSSL_free(void *p) { OPENSSL_free(p); }

/* X509_NAME printing: RFC 2253 with UTF-8 kept as is */
static inline unsigned long peersync_XN_FLAG_RFC2253_UTF8(void) {
    return XN_FLAG_RFC2253 & ~ASN1_STRFLGS_ESC_MSB;
}

/* STACK_OF(X509) */
static inline STACK_OF(X509) *peersync_sk_X509_new_null(void) { return sk_X509_new_null(); }
/* Pushes x, taking a new reference; returns 0 on failure. */
static inline int peersync_sk_X509_push_ref(STACK_OF(X509) *sk, X509 *x) {
    if (X509_up_ref(x) != 1) return 0;
    if (sk_X509_push(sk, x) <= 0) { X509_free(x); return 0; }
    return 1;
}
static inline int peersync_sk_X509_num(const STACK_OF(X509) *sk) { return sk == NULL ? 0 : sk_X509_num(sk); }
static inline X509 *peersync_sk_X509_value(const STACK_OF(X509) *sk, int i) { return sk_X509_value(sk, i); }
static inline void peersync_sk_X509_pop_free(STACK_OF(X509) *sk) { sk_X509_pop_free(sk, X509_free); }

/* GENERAL_NAMES (subjectAltName) */
static inline int peersync_sk_GENERAL_NAME_num(const GENERAL_NAMES *names) {
    return names == NULL ? 0 : sk_GENERAL_NAME_num(names);
}
static inline const GENERAL_NAME *peersync_sk_GENERAL_NAME_value(const GENERAL_NAMES *names, int i) {
    return sk_GENERAL_NAME_value(names, i);
}
static inline int peersync_GENERAL_NAME_type(const GENERAL_NAME *name) { return name->type; }
/* The IA5String / OCTET STRING payload of a DNS, email, URI or IP name; NULL for other kinds. */
static inline const ASN1_STRING *peersync_GENERAL_NAME_string(const GENERAL_NAME *name) {
    switch (name->type) {
    case GEN_DNS: return name->d.dNSName;
    case GEN_EMAIL: return name->d.rfc822Name;
    case GEN_URI: return name->d.uniformResourceIdentifier;
    case GEN_IPADD: return name->d.iPAddress;
    default: return NULL;
    }
}
static inline void *peersync_X509_get_subject_alt_names(X509 *x) {
    return X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
}
static inline void peersync_GENERAL_NAMES_free(void *names) { GENERAL_NAMES_free((GENERAL_NAMES *)names); }

/* X509V3 extension context: zero-initialised, no config database. */
static inline X509_EXTENSION *peersync_X509V3_ext(X509 *issuer, X509 *subject, int nid, const char *value) {
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, subject, NULL, NULL, 0);
    return X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
}

#endif
