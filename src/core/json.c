/* json.c: JSON string literals. */
#include "core/json.h"

/* 0 for a stray continuation byte, a truncated sequence, an overlong form, a
 * UTF-16 surrogate (U+D800..U+DFFF) or a code point past U+10FFFF (RFC 3629,
 * Unicode table 3-7). */
int tfos__utf8_len(const unsigned char *s)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    if (c < 0xC2)
        return 0;                 /* continuation byte, or overlong 2-byte lead */
    if (c < 0xE0)
        return (s[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c < 0xF0) {
        unsigned char lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        if (s[1] < lo || s[1] > hi)
            return 0;
        return (s[2] & 0xC0) == 0x80 ? 3 : 0;
    }
    if (c < 0xF5) {
        unsigned char lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        if (s[1] < lo || s[1] > hi)
            return 0;
        if ((s[2] & 0xC0) != 0x80)
            return 0;
        return (s[3] & 0xC0) == 0x80 ? 4 : 0;
    }
    return 0;
}

/* The output is always valid JSON (RFC 8259) whatever bytes s holds: paths
 * and messages come from the command line, the file system and programs and
 * need not be UTF-8 (e.g. `--log-dir $'caf\xe9'`).  Well-formed UTF-8 is
 * copied as it is; every byte that does not start a well-formed sequence
 * becomes one U+FFFD REPLACEMENT CHARACTER, written as the ASCII escape
 * "\ufffd" (we chose this over a latin-1 reading: a reader cannot tell the
 * latter from real text, U+FFFD says plainly that the byte was lost).  '"'
 * and '\\' are escaped, and so are all control characters (below 0x20 and DEL)
 * as \u00XX. */
void tfos__json_str(FILE *f, const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    fputc('"', f);
    while (*s) {
        unsigned char ch = *s;
        int n = tfos__utf8_len(s);
        if (n == 0) {
            fputs("\\ufffd", f);
            s++;
            continue;
        }
        if (n > 1) {
            fwrite(s, 1, (size_t)n, f);
            s += n;
            continue;
        }
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7f)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
        s++;
    }
    fputc('"', f);
}
