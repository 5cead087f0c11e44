/* auth.c: HMAC-SHA256 challenge/response with OpenSSL's libcrypto. */
#include "core/auth.h"

#include "tfos/tfos.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <string.h>

static void to_hex(const unsigned char *b, size_t n, char *out)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[2 * n] = '\0';
}

int tfos__random_hex(char *out, size_t nbytes)
{
    unsigned char buf[64];
    if (nbytes > sizeof buf)
        return TFOS_EINVAL;
    if (RAND_bytes(buf, (int)nbytes) != 1)
        return TFOS_ESYS;
    to_hex(buf, nbytes, out);
    return 0;
}

int tfos__auth_mac(const char *secret, const char *nonce, char out[TFOS_MAC_HEX_LEN + 1])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (!secret || !*secret || !nonce)
        return TFOS_EINVAL;
    if (!HMAC(EVP_sha256(), secret, (int)strlen(secret), (const unsigned char *)nonce, strlen(nonce), md, &mdlen) ||
        mdlen != 32)
        return TFOS_ESYS;
    to_hex(md, mdlen, out);
    return 0;
}

int tfos__auth_check(const char *secret, const char *nonce, const char *mac)
{
    char want[TFOS_MAC_HEX_LEN + 1];
    if (!mac || strlen(mac) != TFOS_MAC_HEX_LEN)
        return TFOS_EAUTH;
    if (tfos__auth_mac(secret, nonce, want))
        return TFOS_EAUTH;
    return CRYPTO_memcmp(want, mac, TFOS_MAC_HEX_LEN) == 0 ? 0 : TFOS_EAUTH;
}
