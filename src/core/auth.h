/* auth.h: per-cluster authentication. The launcher (or driver) makes a random
 * secret and hands it to its agents out of band (environment). The accepting
 * side of every link (core/link.h: the coordinator, an agent's feed socket,
 * tfos serve's front end) greets each connection with a fresh nonce; the
 * peer answers with HMAC-SHA256(key, nonce), the key being its role's (the
 * cluster secret, or a local serve client's HTTP token). No key crosses the
 * network. */
#ifndef TFOS_CORE_AUTH_H
#define TFOS_CORE_AUTH_H
#include <stddef.h>

#define TFOS_HEX_SECRET_LEN 64 /* 32 random bytes as hex */
#define TFOS_MAC_HEX_LEN 64

/* Fill out with 2*nbytes hex characters of cryptographic randomness plus NUL
 * (out must hold 2*nbytes+1). */
int tfos__random_hex(char *out, size_t nbytes);
/* out (65 bytes): hex HMAC-SHA256 keyed by secret over nonce. */
int tfos__auth_mac(const char *secret, const char *nonce, char out[TFOS_MAC_HEX_LEN + 1]);
/* 0 when mac is right for (secret, nonce), TFOS_EAUTH otherwise.
 * Constant-time in the mac's contents. */
int tfos__auth_check(const char *secret, const char *nonce, const char *mac);

#endif
