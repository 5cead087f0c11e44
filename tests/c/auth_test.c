/* auth_test.c: SHA-256 (FIPS 180-4 examples) and HMAC-SHA256 (RFC 4231 test
 * cases) vectors, and the challenge/response helpers. */
#include "check.h"
#include "core/auth.h"
#include "core/sha256.h"
#include "tfos/tfos.h"

static void hex(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
}

static void sha256_vectors(void)
{
    static const struct {
        const char *msg;
        const char *digest;
    } v[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        tfos__sha256 s;
        uint8_t d[32];
        char h[65];
        tfos__sha256_init(&s);
        tfos__sha256_update(&s, v[i].msg, strlen(v[i].msg));
        tfos__sha256_final(&s, d);
        hex(d, 32, h);
        CHECK_STR(h, v[i].digest);
    }
    /* one million 'a', fed in uneven pieces */
    tfos__sha256 s;
    uint8_t d[32], chunk[997];
    char h[65];
    memset(chunk, 'a', sizeof chunk);
    tfos__sha256_init(&s);
    size_t left = 1000000;
    while (left) {
        size_t n = left < sizeof chunk ? left : sizeof chunk;
        tfos__sha256_update(&s, chunk, n);
        left -= n;
    }
    tfos__sha256_final(&s, d);
    hex(d, 32, h);
    CHECK_STR(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

static void hmac_rfc4231(void)
{
    uint8_t key1[20], key3[20], data3[50], key6[131], out[32];
    char h[65];
    memset(key1, 0x0b, sizeof key1);
    tfos__hmac_sha256(key1, sizeof key1, "Hi There", 8, out);
    hex(out, 32, h);
    CHECK_STR(h, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    tfos__hmac_sha256("Jefe", 4, "what do ya want for nothing?", 28, out);
    hex(out, 32, h);
    CHECK_STR(h, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    memset(key3, 0xaa, sizeof key3);
    memset(data3, 0xdd, sizeof data3);
    tfos__hmac_sha256(key3, sizeof key3, data3, sizeof data3, out);
    hex(out, 32, h);
    CHECK_STR(h, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
    memset(key6, 0xaa, sizeof key6); /* key longer than the block */
    const char *m6 = "Test Using Larger Than Block-Size Key - Hash Key First";
    tfos__hmac_sha256(key6, sizeof key6, m6, strlen(m6), out);
    hex(out, 32, h);
    CHECK_STR(h, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

static void challenge_response(void)
{
    char secret[65], nonce[33], mac[65];
    CHECK_EQ(tfos__random_hex(secret, 32), 0);
    CHECK_EQ(strlen(secret), 64);
    CHECK_EQ(tfos__random_hex(nonce, 16), 0);
    CHECK_EQ(tfos__auth_mac(secret, nonce, mac), 0);
    CHECK_EQ(tfos__auth_check(secret, nonce, mac), 0);
    mac[10] ^= 1;
    CHECK_EQ(tfos__auth_check(secret, nonce, mac), TFOS_EAUTH);
    CHECK_EQ(tfos__auth_check(secret, nonce, "short"), TFOS_EAUTH);
    CHECK_EQ(tfos__auth_check(secret, nonce, NULL), TFOS_EAUTH);
    char other[33];
    CHECK_EQ(tfos__random_hex(other, 16), 0);
    CHECK(strcmp(other, nonce) != 0);
    CHECK_EQ(tfos__auth_mac("", nonce, mac), TFOS_EINVAL);
}

int main(void)
{
    RUN(sha256_vectors);
    RUN(hmac_rfc4231);
    RUN(challenge_response);
    return 0;
}
