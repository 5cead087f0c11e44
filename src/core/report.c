/* report.c: the progress report's text form (see report.h). */
#include "core/report.h"

#include "tfos/tfos.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int name_char(char c, int first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
           (!first && ((c >= '0' && c <= '9') || c == '.'));
}

int tfos__report_name_ok(const char *name, size_t len)
{
    if (!name || len < 1 || len > TFOS__REPORT_MAX_NAME)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!name_char(name[i], i == 0))
            return 0;
    return 1;
}

static int count_pairs(const char *buf, size_t len)
{
    int n = 0;
    for (size_t i = 0; i < len; i++)
        n += buf[i] == '=';
    return n;
}

int tfos__report_add(char *buf, size_t cap, size_t *len, const char *name, size_t name_len, double value)
{
    if (!tfos__report_name_ok(name, name_len) || count_pairs(buf, *len) >= TFOS__REPORT_MAX_PAIRS)
        return TFOS_EINVAL;
    char num[40];
    if (isnan(value))
        snprintf(num, sizeof num, "nan");
    else if (isinf(value))
        snprintf(num, sizeof num, value > 0 ? "inf" : "-inf");
    else
        snprintf(num, sizeof num, "%.10g", value);
    size_t need = (*len ? 1 : 0) + name_len + 1 + strlen(num);
    if (*len + need + 1 > cap)
        return TFOS_ETOOBIG;
    char *p = buf + *len;
    if (*len)
        *p++ = ' ';
    memcpy(p, name, name_len);
    p += name_len;
    *p++ = '=';
    strcpy(p, num);
    *len += need;
    return 0;
}

/* Walks the pairs; calls emit (when given) with each. */
static int walk(const char *text, const char **why, FILE *f)
{
    const char *p = text;
    int n = 0;
    if (!*p)
        return 0;
    for (;;) {
        const char *eq = strchr(p, '=');
        const char *sp = strchr(p, ' ');
        if (!eq || (sp && sp < eq) || !tfos__report_name_ok(p, (size_t)(eq - p))) {
            *why = "a pair is not name=number with a name of [A-Za-z_][A-Za-z0-9_.]{0,31}";
            return TFOS_EPROTO;
        }
        if (++n > TFOS__REPORT_MAX_PAIRS) {
            *why = "more than 16 pairs";
            return TFOS_EPROTO;
        }
        const char *v = eq + 1;
        char *end;
        double d = strtod(v, &end);
        if (end == v || *v == ' ' || (*end && *end != ' ') || !strncmp(v, "0x", 2) || !strncmp(v, "0X", 2)) {
            *why = "a value is not a number";
            return TFOS_EPROTO;
        }
        if (f) {
            fprintf(f, "%s\"%.*s\": ", n > 1 ? ", " : "", (int)(eq - p), p);
            if (isnan(d))
                fputs("\"nan\"", f);
            else if (isinf(d))
                fputs(d > 0 ? "\"inf\"" : "\"-inf\"", f);
            else
                fprintf(f, "%.10g", d);
        }
        if (!*end)
            return 0;
        p = end + 1;
        if (!*p) {
            *why = "a trailing space";
            return TFOS_EPROTO;
        }
    }
}

int tfos__report_check(const char *text, const char **why)
{
    const char *w = NULL;
    int rc = text ? walk(text, &w, NULL) : TFOS_EPROTO;
    if (why)
        *why = text ? w : "no text";
    return rc;
}

void tfos__report_json(FILE *f, const char *text)
{
    const char *why;
    if (!text || tfos__report_check(text, &why)) {
        fputs("null", f);
        return;
    }
    fputc('{', f);
    walk(text, &why, f);
    fputc('}', f);
}
