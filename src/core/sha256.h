/* sha256.h: SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), the only
 * cryptography tfos needs (cluster authentication). Small and dependency-free
 * so the node agent stays a few hundred KiB. */
#ifndef TFOS_CORE_SHA256_H
#define TFOS_CORE_SHA256_H
#include <stddef.h>
#include <stdint.h>

typedef struct tfos__sha256 {
    uint32_t h[8];
    uint64_t len; /* bytes hashed so far */
    uint8_t buf[64];
    size_t fill;
} tfos__sha256;

void tfos__sha256_init(tfos__sha256 *s);
void tfos__sha256_update(tfos__sha256 *s, const void *data, size_t n);
void tfos__sha256_final(tfos__sha256 *s, uint8_t out[32]);

/* out = HMAC-SHA256(key, msg) */
void tfos__hmac_sha256(const void *key, size_t keylen, const void *msg, size_t msglen, uint8_t out[32]);

#endif
