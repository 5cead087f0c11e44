/* json.h: writing JSON text (the status documents the coordinator and the
 * launcher serve). */
#ifndef TFOS_CORE_JSON_H
#define TFOS_CORE_JSON_H
#include <stdio.h>

/* Write s as a JSON string literal: always valid JSON whatever the bytes.
 * '"', '\\' and control characters are escaped, well-formed UTF-8 is copied
 * as it is, and each byte that is not part of well-formed UTF-8 becomes
 * U+FFFD (written "\ufffd"). */
void tfos__json_str(FILE *f, const char *s);

/* Length of the well-formed UTF-8 sequence at s (1..4), or 0 when the bytes
 * there are not one (RFC 3629: no overlong form, surrogate or code point
 * past U+10FFFF). Reads no further than a byte that ends the sequence, so a
 * NUL-terminated s is never read past its NUL. */
int tfos__utf8_len(const unsigned char *s);

#endif
