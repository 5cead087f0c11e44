/* wire.c: frame headers, key=value payloads, data frames (core/link.c moves them). */
#include "core/wire.h"

#include "tfos/tfos.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t magic[4] = {'T', 'F', 'O', 'S'};

int tfos__wire_header(const uint8_t *b, size_t n, uint32_t max, tfos__frame *f, const char **why)
{
    const char *w = NULL;
    int rc = 0;
    if (n < TFOS_WIRE_HEADER)
        return TFOS_EAGAIN;
    uint32_t len = (uint32_t)b[8] << 24 | (uint32_t)b[9] << 16 | (uint32_t)b[10] << 8 | b[11];
    if (memcmp(b, magic, 4) != 0) {
        w = "bad magic (not a tfos peer)";
        rc = TFOS_EPROTO;
    } else if (b[4] != TFOS_PROTOCOL_VERSION) {
        w = "unsupported protocol version";
        rc = TFOS_EPROTO;
    } else if (!tfos__wire_type_known(b[5])) {
        w = "unknown message type";
        rc = TFOS_EPROTO;
    } else if (b[6] || b[7]) {
        w = "reserved header bits set";
        rc = TFOS_EPROTO;
    } else if (len > max) {
        w = "frame larger than the limit";
        rc = TFOS_ETOOBIG;
    }
    if (rc) {
        if (why)
            *why = w;
        return rc;
    }
    f->type = b[5];
    f->len = len;
    f->payload = (const char *)b + TFOS_WIRE_HEADER;
    return 0;
}

#define DATA_HEAD 10 /* a data frame's id (8) and meta length (2) */

static uint64_t get_be64(const uint8_t *b)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | b[i];
    return v;
}

int tfos__wire_payload(tfos__frame *f, const char **why)
{
    if (!tfos__wire_is_data(f->type)) {
        f->id = 0;
        f->meta = f->payload;
        f->meta_len = f->len;
        f->body = NULL;
        f->body_len = 0;
        return tfos__kv_validate(f->payload, f->len, why);
    }
    const uint8_t *p = (const uint8_t *)f->payload;
    uint32_t ml = f->len >= DATA_HEAD ? (uint32_t)p[8] << 8 | p[9] : 0;
    if (f->len < DATA_HEAD || ml > f->len - DATA_HEAD) {
        if (why)
            *why = "data frame shorter than its id and meta";
        return TFOS_EPROTO;
    }
    f->id = get_be64(p);
    f->meta = f->payload + DATA_HEAD;
    f->meta_len = ml;
    f->body = f->meta + ml;
    f->body_len = f->len - DATA_HEAD - ml;
    return tfos__kv_validate(f->meta, ml, why);
}

static int key_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '.';
}

int tfos__kv_validate(const char *p, size_t n, const char **why)
{
    size_t i = 0;
    while (i < n) {
        size_t k = i;
        while (k < n && key_char(p[k]))
            k++;
        if (k == i || k >= n || p[k] != '=') {
            if (why)
                *why = "payload line without key=value";
            return TFOS_EPROTO;
        }
        size_t v = k + 1;
        while (v < n && p[v] != '\n' && p[v] != '\0')
            v++;
        if (v >= n || p[v] != '\n') {
            if (why)
                *why = v >= n ? "payload line not terminated" : "NUL byte in payload";
            return TFOS_EPROTO;
        }
        i = v + 1;
    }
    return 0;
}

int tfos__kv_next(const char *p, size_t n, size_t *pos, const char **key, size_t *klen,
                  const char **val, size_t *vlen)
{
    size_t i = *pos;
    if (i >= n)
        return TFOS_EEND;
    const char *eq = memchr(p + i, '=', n - i);
    const char *nl = eq ? memchr(eq, '\n', n - (size_t)(eq - p)) : NULL;
    if (!eq || !nl)
        return TFOS_EEND;
    *key = p + i;
    *klen = (size_t)(eq - (p + i));
    *val = eq + 1;
    *vlen = (size_t)(nl - eq - 1);
    *pos = (size_t)(nl - p) + 1;
    return 0;
}

static int kv_find(const char *p, size_t n, const char *key, const char **val, size_t *vlen)
{
    size_t pos = 0, klen, kl = strlen(key);
    const char *k;
    while (tfos__kv_next(p, n, &pos, &k, &klen, val, vlen) == 0)
        if (klen == kl && memcmp(k, key, kl) == 0)
            return 0;
    return TFOS_EINVAL;
}

int tfos__kv_str(const char *p, size_t n, const char *key, char *out, size_t outlen)
{
    const char *v;
    size_t vl;
    if (kv_find(p, n, key, &v, &vl))
        return TFOS_EINVAL;
    if (vl >= outlen)
        return TFOS_ETOOBIG;
    memcpy(out, v, vl);
    out[vl] = '\0';
    return 0;
}

int tfos__plain_name(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '.' ||
              *s == '-' || *s == ':' || *s == '_'))
            return 0;
    return 1;
}

size_t tfos__utf8_cut(const char *s, size_t len, size_t max)
{
    if (len <= max)
        return len;
    size_t n = max;
    /* back up over continuation bytes (10xxxxxx) to the start of the
     * character that does not fit, then drop it */
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--;
    return n;
}

int tfos__kv_int(const char *p, size_t n, const char *key, long long lo, long long hi, long long *out)
{
    char buf[32], *end;
    if (tfos__kv_str(p, n, key, buf, sizeof buf))
        return TFOS_EINVAL;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno || end == buf || *end || v < lo || v > hi)
        return TFOS_EINVAL;
    *out = v;
    return 0;
}

static void msg_reserve(tfos__msg *m, size_t extra)
{
    if (m->err)
        return;
    if (m->len + extra <= m->cap)
        return;
    size_t cap = m->cap ? m->cap : 256;
    while (cap < m->len + extra)
        cap *= 2;
    char *b = realloc(m->buf, cap);
    if (!b) {
        m->err = TFOS_ENOMEM;
        return;
    }
    m->buf = b;
    m->cap = cap;
}

void tfos__msg_begin(tfos__msg *m, int type)
{
    memset(m, 0, sizeof *m);
    msg_reserve(m, TFOS_WIRE_HEADER);
    if (m->err)
        return;
    memcpy(m->buf, magic, 4);
    m->buf[4] = TFOS_PROTOCOL_VERSION;
    m->buf[5] = (char)type;
    m->buf[6] = m->buf[7] = 0;
    m->len = TFOS_WIRE_HEADER;
}

void tfos__msg_begin_data(tfos__msg *m, int type, uint64_t id)
{
    tfos__msg_begin(m, type);
    msg_reserve(m, DATA_HEAD);
    if (m->err)
        return;
    for (int i = 0; i < 8; i++)
        m->buf[m->len + i] = (char)(id >> (56 - 8 * i));
    m->buf[m->len + 8] = m->buf[m->len + 9] = 0;
    m->len += DATA_HEAD;
}

void tfos__msg_add(tfos__msg *m, const char *key, const char *fmt, ...)
{
    va_list ap;
    size_t kl = strlen(key);
    va_start(ap, fmt);
    int vl = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (vl < 0) {
        m->err = TFOS_EINVAL;
        return;
    }
    msg_reserve(m, kl + (size_t)vl + 3);
    if (m->err)
        return;
    memcpy(m->buf + m->len, key, kl);
    m->len += kl;
    m->buf[m->len++] = '=';
    va_start(ap, fmt);
    vsnprintf(m->buf + m->len, (size_t)vl + 1, fmt, ap);
    va_end(ap);
    for (int i = 0; i < vl; i++)
        if (m->buf[m->len + i] == '\n' || m->buf[m->len + i] == '\0')
            m->buf[m->len + i] = ' ';
    m->len += (size_t)vl;
    m->buf[m->len++] = '\n';
}

int tfos__msg_end(tfos__msg *m)
{
    if (m->err)
        return m->err;
    size_t pl = m->len - TFOS_WIRE_HEADER;
    if (pl > TFOS_WIRE_MAX_PAYLOAD)
        return m->err = TFOS_ETOOBIG;
    m->buf[8] = (char)(pl >> 24);
    m->buf[9] = (char)(pl >> 16);
    m->buf[10] = (char)(pl >> 8);
    m->buf[11] = (char)pl;
    return 0;
}

int tfos__msg_end_data(tfos__msg *m, uint64_t body_len)
{
    if (m->err)
        return m->err;
    size_t ml = m->len - TFOS_WIRE_HEADER - DATA_HEAD;
    uint64_t pl = (uint64_t)(m->len - TFOS_WIRE_HEADER) + body_len;
    if (ml > 0xffff || pl > UINT32_MAX)
        return m->err = TFOS_ETOOBIG;
    m->buf[TFOS_WIRE_HEADER + 8] = (char)(ml >> 8);
    m->buf[TFOS_WIRE_HEADER + 9] = (char)ml;
    m->buf[8] = (char)(pl >> 24);
    m->buf[9] = (char)(pl >> 16);
    m->buf[10] = (char)(pl >> 8);
    m->buf[11] = (char)pl;
    return 0;
}

void tfos__msg_fini(tfos__msg *m)
{
    free(m->buf);
    memset(m, 0, sizeof *m);
}
