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

#endif
