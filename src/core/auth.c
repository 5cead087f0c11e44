/* auth.c: HMAC-SHA256 challenge/response and secrets from the kernel's CSPRNG. */
#include "core/auth.h"

#include "core/sha256.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

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
    size_t got = 0;
    while (got < nbytes) {
        ssize_t r = getrandom(buf + got, nbytes - got, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return TFOS_ESYS;
        got += (size_t)r;
    }
    to_hex(buf, nbytes, out);
    return 0;
}

int tfos__auth_mac(const char *secret, const char *nonce, char out[TFOS_MAC_HEX_LEN + 1])
{
    unsigned char md[32];
    if (!secret || !*secret || !nonce)
        return TFOS_EINVAL;
    tfos__hmac_sha256(secret, strlen(secret), nonce, strlen(nonce), md);
    to_hex(md, sizeof md, out);
    return 0;
}

int tfos__auth_check(const char *secret, const char *nonce, const char *mac)
{
    char want[TFOS_MAC_HEX_LEN + 1];
    if (!mac || strlen(mac) != TFOS_MAC_HEX_LEN)
        return TFOS_EAUTH;
    if (tfos__auth_mac(secret, nonce, want))
        return TFOS_EAUTH;
    /* constant time in the contents: no early exit on the first difference */
    unsigned char diff = 0;
    for (size_t i = 0; i < TFOS_MAC_HEX_LEN; i++)
        diff |= (unsigned char)(want[i] ^ mac[i]);
    return diff == 0 ? 0 : TFOS_EAUTH;
}
