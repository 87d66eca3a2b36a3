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
/* Macros Swift cannot import get static inline wrappers here (added by the Auth package). */
#endif
