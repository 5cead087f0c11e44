/* json.h: writing JSON text (the status documents the coordinator and the
 * launcher serve). */
#ifndef TFOS_CORE_JSON_H
#define TFOS_CORE_JSON_H
#include <stdio.h>

/* Write s as a JSON string literal (quotes, escapes for '"', '\\' and control
 * characters; other bytes, UTF-8 included, as they are). */
void tfos__json_str(FILE *f, const char *s);

#endif
