/* json_test.c: tests of the JSON string writer (src/core/json.c): whatever
 * bytes a string holds, the literal written is valid JSON. */
#include "core/json.h"

#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* tfos__json_str(s) as a malloc'd string. */
static char *lit(const char *s)
{
    return check_capture(tfos__json_str, s);
}

#define CHECK_LIT(in, want)      \
    do {                         \
        char *got_ = lit(in);    \
        CHECK_STR(got_, want);   \
        free(got_);              \
    } while (0)

/* A strict, independent check that t is one JSON string literal: quotes at
 * both ends, only known escapes, no raw control bytes, and every non-ASCII
 * byte part of a well-formed UTF-8 sequence (decoded by hand). */
static int valid_json_literal(const char *t)
{
    const unsigned char *s = (const unsigned char *)t;
    size_t n = strlen(t);
    if (n < 2 || s[0] != '"' || s[n - 1] != '"')
        return 0;
    for (size_t i = 1; i < n - 1;) {
        unsigned c = s[i];
        if (c == '"' || c < 0x20)
            return 0;
        if (c == '\\') {
            if (i + 1 >= n - 1)
                return 0;
            unsigned e = s[i + 1];
            if (e == 'u') {
                if (i + 6 > n - 1)
                    return 0;
                for (int k = 2; k < 6; k++)
                    if (!strchr("0123456789abcdefABCDEF", s[i + k]))
                        return 0;
                i += 6;
            } else if (strchr("\"\\/bfnrt", (int)e) && e) {
                i += 2;
            } else {
                return 0;
            }
            continue;
        }
        if (c < 0x80) {
            i++;
            continue;
        }
        int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
        if (!len || i + (size_t)len > n - 1)
            return 0;
        unsigned long cp = c & (0x7F >> len);
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        unsigned long min = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += (size_t)len;
    }
    return 1;
}

static void test_ascii_and_escapes(void)
{
    CHECK_LIT("", "\"\"");
    CHECK_LIT("plain /tmp/x", "\"plain /tmp/x\"");
    CHECK_LIT("a\"b\\c", "\"a\\\"b\\\\c\"");
    CHECK_LIT("l1\nl2\r\tend", "\"l1\\u000al2\\u000d\\u0009end\"");
    CHECK_LIT("\x01\x1f\x7f", "\"\\u0001\\u001f\\u007f\"");
}

static void test_valid_utf8_kept(void)
{
    CHECK_LIT("caf\xc3\xa9", "\"caf\xc3\xa9\"");                 /* é, 2 bytes */
    CHECK_LIT("\xe2\x82\xac", "\"\xe2\x82\xac\"");                /* €, 3 bytes */
    CHECK_LIT("\xf0\x9f\x98\x80", "\"\xf0\x9f\x98\x80\"");        /* U+1F600, 4 */
    CHECK_LIT("\xef\xbf\xbd", "\"\xef\xbf\xbd\"");                /* U+FFFD itself */
    CHECK_LIT("\xf4\x8f\xbf\xbf", "\"\xf4\x8f\xbf\xbf\"");        /* U+10FFFF */
}

static void test_invalid_bytes_replaced(void)
{
    CHECK_LIT("caf\xe9", "\"caf\\ufffd\"");                       /* latin-1 é */
    CHECK_LIT("caf\xe9/x", "\"caf\\ufffd/x\"");
    CHECK_LIT("\x80", "\"\\ufffd\"");                             /* stray continuation */
    CHECK_LIT("\xc3", "\"\\ufffd\"");                             /* truncated at end */
    CHECK_LIT("\xc3(", "\"\\ufffd(\"");                           /* truncated mid-string */
    CHECK_LIT("\xc0\xaf", "\"\\ufffd\\ufffd\"");                  /* overlong '/' */
    CHECK_LIT("\xe0\x80\xaf", "\"\\ufffd\\ufffd\\ufffd\"");       /* overlong 3-byte */
    CHECK_LIT("\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\"");       /* surrogate U+D800 */
    CHECK_LIT("\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\""); /* > U+10FFFF */
    CHECK_LIT("\xff\xfe", "\"\\ufffd\\ufffd\"");
    CHECK_LIT("\xe2\x82", "\"\\ufffd\\ufffd\"");                  /* truncated 3-byte */
}

/* Random byte strings: the literal is always valid JSON. */
static void test_fuzz_always_valid(void)
{
    unsigned long long st = 0x9e3779b97f4a7c15ULL;
    char in[64];
    for (int round = 0; round < 200000; round++) {
        int len = (int)(check_rand(&st) % (sizeof in - 1));
        for (int i = 0; i < len; i++) {
            unsigned char b = (unsigned char)(check_rand(&st) & 0xFF);
            in[i] = (char)(b ? b : 'x');
        }
        in[len] = 0;
        char *out = lit(in);
        if (!valid_json_literal(out)) {
            fprintf(stderr, "invalid JSON literal for round %d\n", round);
            CHECK(0);
        }
        free(out);
    }
}

int main(void)
{
    RUN(test_ascii_and_escapes);
    RUN(test_valid_utf8_kept);
    RUN(test_invalid_bytes_replaced);
    RUN(test_fuzz_always_valid);
    return 0;
}
