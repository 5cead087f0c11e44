/* input_npy.c: the .npy reader of `tfos run --input` (NumPy format v1-v3,
 * C order, little-endian numbers or bool; see input.h), behind
 * tfos__input_npy_ops. The file is read front to back (it may be a FIFO):
 * the header, parsed as the dict literal it is, then the rows, straight into
 * the data region of a one-column batch, a chunk at a time: the reader's own
 * buffer (npy_next), or the caller's (npy_fill: a ring reservation, so the
 * rows are copied once, from the file into the ring). The rows of a regular
 * file are copied out of a mapping of it, not read(): memcpy from the page
 * cache ran at 1.3-1.7x the kernel's copy into a ring in cache (see
 * docs/BENCHMARKS.md); a file cut short under the mapping is reported, as a
 * short read would be, not a SIGBUS (tfos__map_copy). */
#include "core/batch.h"
#include "core/log.h"
#include "feed/input.h"
#include "feed/input_ops.h"
#include "platform/fs.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The mapped pages already copied are dropped from the mapping every this
 * many bytes (the page cache keeps them; the page tables do not grow with
 * the file). */
#define UNMAP_BEHIND ((uint64_t)64 << 20)

typedef struct npy_reader {
    char path[1024];
    tfos__input_src *src;
    uint64_t total, row_bytes, rows; /* rows in the file, bytes a row, rows returned */
    int dtype, ndim;
    uint32_t shape[TFOS_BATCH_MAX_DIMS];
    uint8_t *out; /* the batch */
    size_t out_cap;
    const uint8_t *map; /* NULL, or the whole file mapped (map_rows) */
    size_t map_len;
    uint64_t data_off, dropped; /* where the rows start in it; bytes of it dropped behind the copies */
} npy_reader;

/* A read error as a return code (err names the file and `what`). */
static int read_failed(const npy_reader *in, const char *what, char *err, size_t errlen)
{
    if (in->src->error == ECANCELED)
        return tfos__errf(err, errlen, TFOS_ESTOPPED, "%s: stopped while reading %s", in->path, what);
    return tfos__errf(err, errlen, TFOS_ESYS, "%s: reading %s: %s", in->path, what, strerror(in->src->error));
}

/* Read n bytes; *got: how many came before the end of the file. 0 (also at
 * the end: compare *got), or the read error. */
static int read_full(npy_reader *in, void *buf, size_t n, size_t *got, const char *what, char *err, size_t errlen)
{
    *got = 0;
    while (*got < n) {
        ssize_t r = tfos__input_read(in->src, (uint8_t *)buf + *got, n - *got);
        if (r < 0)
            return read_failed(in, what, err, errlen);
        if (r == 0)
            break;
        *got += (size_t)r;
    }
    return 0;
}

/* ---- the header: a Python dict literal, read as numpy writes it -----------
 * {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), } : exactly these
 * three keys, each once (numpy's reader takes the last of a repeated key,
 * and refuses other keys; a repeated key is refused here, so a file never
 * reads differently here than in numpy). */

typedef struct hdr {
    const char *p, *end;
} hdr;

static void hdr_ws(hdr *h)
{
    while (h->p < h->end && (*h->p == ' ' || *h->p == '\t' || *h->p == '\n' || *h->p == '\r'))
        h->p++;
}

static int hdr_char(hdr *h, char c)
{
    hdr_ws(h);
    if (h->p < h->end && *h->p == c) {
        h->p++;
        return 1;
    }
    return 0;
}

/* A quoted string without escapes into out (cap bytes); 0 if there is none
 * or it does not fit. */
static int hdr_string(hdr *h, char *out, size_t cap)
{
    hdr_ws(h);
    if (h->p >= h->end || (*h->p != '\'' && *h->p != '"'))
        return 0;
    char q = *h->p++;
    size_t n = 0;
    while (h->p < h->end && *h->p != q) {
        if (*h->p == '\\' || n + 1 >= cap)
            return 0;
        out[n++] = *h->p++;
    }
    if (h->p >= h->end)
        return 0;
    h->p++;
    out[n] = 0;
    return 1;
}

static int hdr_word(hdr *h, const char *w)
{
    hdr_ws(h);
    size_t n = strlen(w);
    if ((size_t)(h->end - h->p) >= n && !memcmp(h->p, w, n)) {
        h->p += n;
        return 1;
    }
    return 0;
}

/* (d0, d1, ...) with an optional trailing comma: *nd dims into dims. */
static int hdr_shape(hdr *h, uint64_t *dims, int max, int *nd)
{
    *nd = 0;
    if (!hdr_char(h, '('))
        return 0;
    for (;;) {
        if (hdr_char(h, ')'))
            return 1;
        hdr_ws(h);
        if (h->p >= h->end || *h->p < '0' || *h->p > '9' || *nd >= max)
            return 0;
        uint64_t v = 0;
        while (h->p < h->end && *h->p >= '0' && *h->p <= '9') {
            if (v > (UINT64_MAX - 9) / 10)
                return 0;
            v = v * 10 + (uint64_t)(*h->p++ - '0');
        }
        if (h->p < h->end && *h->p == 'L') /* Python 2's long */
            h->p++;
        dims[(*nd)++] = v;
        if (hdr_char(h, ','))
            continue;
        if (!hdr_char(h, ')'))
            return 0;
        return 1;
    }
}

/* Read and check the header; leaves the src at the first row. */
static int read_header(npy_reader *in, char *err, size_t errlen)
{
    uint8_t head[12];
    size_t got;
    int rc = read_full(in, head, 10, &got, "the header", err, errlen);
    if (rc)
        return rc;
    if (got != 10 || memcmp(head, "\x93NUMPY", 6))
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: not a .npy file (bad magic)", in->path);
    int major = head[6];
    size_t hl;
    if (major == 1) {
        hl = head[8] | (size_t)head[9] << 8;
    } else if (major == 2 || major == 3) {
        if ((rc = read_full(in, head + 10, 2, &got, "the header", err, errlen)))
            return rc;
        if (got != 2)
            return tfos__errf(err, errlen, TFOS_EPROTO, "%s: truncated header", in->path);
        hl = head[8] | (size_t)head[9] << 8 | (size_t)head[10] << 16 | (size_t)head[11] << 24;
    } else {
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: .npy format version %d is not supported", in->path, major);
    }
    if (hl > 65536)
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: header of %zu bytes", in->path, hl);
    char text[65537];
    if ((rc = read_full(in, text, hl, &got, "the header", err, errlen)))
        return rc;
    if (got != hl)
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: truncated header", in->path);
    text[hl] = 0;

    hdr h = {text, text + hl};
    char descr[16] = "";
    int fortran = -1, nd = -1, seen[3] = {0, 0, 0};
    uint64_t dims[TFOS_BATCH_MAX_DIMS + 1];
    if (!hdr_char(&h, '{'))
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: unreadable header (not a dict)", in->path);
    while (!hdr_char(&h, '}')) {
        char key[32];
        if (!hdr_string(&h, key, sizeof key) || !hdr_char(&h, ':'))
            return tfos__errf(err, errlen, TFOS_EPROTO, "%s: unreadable header (byte %td)", in->path, h.p - text);
        int k = !strcmp(key, "descr") ? 0 : !strcmp(key, "fortran_order") ? 1 : !strcmp(key, "shape") ? 2 : -1;
        if (k < 0)
            return tfos__errf(err, errlen, TFOS_EPROTO, "%s: unexpected key '%s' in the header (numpy writes descr, "
                              "fortran_order and shape)", in->path, key);
        if (seen[k]++)
            return tfos__errf(err, errlen, TFOS_EPROTO, "%s: the header has key '%s' twice", in->path, key);
        int ok;
        if (k == 0) {
            hdr_ws(&h);
            if (h.p < h.end && *h.p == '[')
                return tfos__errf(err, errlen, TFOS_EPROTO, "%s: structured dtypes are not supported (little-endian "
                                  "numbers or bool)", in->path);
            ok = hdr_string(&h, descr, sizeof descr);
        } else if (k == 1) {
            ok = hdr_word(&h, "True") ? (fortran = 1) : hdr_word(&h, "False") ? (fortran = 0, 1) : 0;
        } else {
            ok = hdr_shape(&h, dims, TFOS_BATCH_MAX_DIMS + 1, &nd);
        }
        if (!ok)
            return tfos__errf(err, errlen, TFOS_EPROTO, "%s: unreadable %s in the header", in->path, key);
        if (!hdr_char(&h, ',')) {
            if (!hdr_char(&h, '}'))
                return tfos__errf(err, errlen, TFOS_EPROTO, "%s: unreadable header (byte %td)", in->path,
                                  h.p - text);
            break;
        }
    }
    hdr_ws(&h);
    if (h.p != h.end)
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: text after the header's dict", in->path);
    if (!seen[0] || !seen[1] || !seen[2])
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: header lacks descr, fortran_order or shape", in->path);
    static const struct {
        const char *descr;
        int dt;
    } map[] = {{"<f4", TFOS_DT_F32}, {"<f8", TFOS_DT_F64}, {"<i8", TFOS_DT_I64}, {"<i4", TFOS_DT_I32},
               {"<i2", TFOS_DT_I16}, {"|i1", TFOS_DT_I8},  {"<u8", TFOS_DT_U64}, {"<u4", TFOS_DT_U32},
               {"<u2", TFOS_DT_U16}, {"|u1", TFOS_DT_U8},  {"|b1", TFOS_DT_BOOL}};
    in->dtype = 0;
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (!strcmp(descr, map[i].descr))
            in->dtype = map[i].dt;
    if (!in->dtype)
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: dtype '%s' is not supported (little-endian numbers or bool)",
                    in->path, descr);
    if (fortran)
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: Fortran-order arrays are not supported (save with C order)",
                    in->path);
    if (nd == 0)
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: a 0-d array has no rows", in->path);
    in->total = dims[0];
    in->ndim = nd - 1;
    uint64_t per = tfos__dtype_size(in->dtype);
    for (int i = 1; i < nd; i++) {
        if (!dims[i] || dims[i] > UINT32_MAX || per > ((uint64_t)1 << 40) / dims[i])
            return tfos__errf(err, errlen, TFOS_EPROTO, "%s: bad shape", in->path);
        in->shape[i - 1] = (uint32_t)dims[i];
        per *= dims[i];
    }
    in->row_bytes = per;
    return 0;
}

/* The one column of a batch of n rows, and the batch's bytes (0: too large). */
static uint64_t npy_layout(const npy_reader *in, uint32_t n, tfos__col *col)
{
    memset(col, 0, sizeof *col);
    col->name = "";
    col->kind = TFOS_COL_FIXED;
    col->dtype = (uint8_t)in->dtype;
    col->ndim = (uint8_t)in->ndim;
    memcpy(col->shape, in->shape, sizeof col->shape);
    return tfos__batch_layout(n, 1, col);
}

static int npy_next_size(void *state, uint32_t max_rows, uint32_t *nrows, size_t *len)
{
    npy_reader *in = state;
    uint64_t left = in->total - in->rows;
    if (left == 0)
        return TFOS_EEND;
    *nrows = left < max_rows ? (uint32_t)left : max_rows;
    tfos__col col;
    uint64_t total = npy_layout(in, *nrows, &col);
    if (!total)
        return TFOS_ETOOBIG;
    *len = (size_t)total;
    return 0;
}

/* Map a regular file that holds every row its header promises (a shorter
 * one is read, so the read says where it ends; so is a FIFO). Nothing is
 * lost when the mapping fails: the rows are then read. */
static void map_rows(npy_reader *in)
{
    struct stat sb;
    uint64_t start = in->src->consumed;
    if (in->src->stream || !in->total || !in->row_bytes || in->total > (UINT64_MAX - start) / in->row_bytes ||
        fstat(in->src->fd, &sb) || (uint64_t)sb.st_size < start + in->total * in->row_bytes)
        return;
    void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, in->src->fd, 0);
    if (m == MAP_FAILED)
        return;
    madvise(m, (size_t)sb.st_size, MADV_SEQUENTIAL);
    in->map = m;
    in->map_len = (size_t)sb.st_size;
    in->data_off = start;
}

/* Copy the next `want` bytes of rows out of the mapping into out. */
static int copy_mapped(npy_reader *in, uint8_t *out, size_t want, char *err, size_t errlen)
{
    uint64_t at = in->data_off + in->rows * in->row_bytes;
    if (tfos__map_copy(out, in->map + at, want, in->map, in->map_len)) {
        struct stat sb;
        long long size = fstat(in->src->fd, &sb) ? -1 : (long long)sb.st_size;
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: the file shrank to %lld bytes while its rows were read "
                          "(row %llu of %llu was cut off)", in->path, size,
                          (unsigned long long)(size < (long long)in->data_off ? 0 :
                                               ((uint64_t)size - in->data_off) / in->row_bytes),
                          (unsigned long long)in->total);
    }
    in->src->consumed += want;
    uint64_t done = (at + want) & ~(uint64_t)(sysconf(_SC_PAGESIZE) - 1);
    if (done - in->dropped >= UNMAP_BEHIND) {
        madvise((void *)(in->map + in->dropped), (size_t)(done - in->dropped), MADV_DONTNEED);
        in->dropped = done;
    }
    return 0;
}

/* Write the batch of the next n rows into buf (len bytes, its layout's):
 * the header, then the rows read from the file straight into place. */
static int npy_fill(void *state, uint32_t n, void *buf, size_t len, char *err, size_t errlen)
{
    npy_reader *in = state;
    tfos__col col;
    uint64_t total = npy_layout(in, n, &col);
    if (!total || total != len || n > in->total - in->rows)
        return tfos__errf(err, errlen, TFOS_EINVAL, "%s: a batch of %u rows is not %zu bytes", in->path, n, len);
    uint8_t *out = buf;
    tfos__batch_write_header(out, total, n, 1, in->ndim ? 0 : TFOS_BATCH_FLAT_ROWS, &col);
    size_t want = (size_t)col.data_len, got;
    if (in->map) {
        int rc = copy_mapped(in, out + col.data_off, want, err, errlen);
        if (rc == 0)
            in->rows += n;
        return rc;
    }
    int rc = read_full(in, out + col.data_off, want, &got, "the rows", err, errlen);
    if (rc)
        return rc;
    if (got < want)
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: truncated: the header promises %llu rows, the data ends in "
                    "row %llu", in->path, (unsigned long long)in->total,
                    (unsigned long long)(in->rows + got / in->row_bytes));
    in->rows += n;
    return 0;
}

static int npy_next(void *state, uint32_t max_rows, const void **batch, size_t *len, uint32_t *nrows, char *err,
                    size_t errlen)
{
    npy_reader *in = state;
    uint32_t n;
    size_t total;
    int rc = npy_next_size(in, max_rows, &n, &total);
    if (rc == TFOS_ETOOBIG)
        return tfos__errf(err, errlen, TFOS_ETOOBIG, "%s: rows too large", in->path);
    if (rc)
        return rc;
    if (total > in->out_cap) {
        uint8_t *nb = realloc(in->out, total);
        if (!nb)
            return TFOS_ENOMEM;
        in->out = nb;
        in->out_cap = total;
    }
    if ((rc = npy_fill(in, n, in->out, total, err, errlen)))
        return rc;
    *batch = in->out;
    *len = total;
    *nrows = n;
    return 0;
}

static int npy_open(void **state, tfos__input_src *src, const char *path, const tfos__input_opts *o, char *err,
                    size_t errlen)
{
    (void)o;
    npy_reader *in = calloc(1, sizeof *in);
    if (!in)
        return TFOS_ENOMEM;
    snprintf(in->path, sizeof in->path, "%s", path);
    in->src = src;
    int rc = read_header(in, err, errlen);
    if (rc) {
        free(in);
        return rc;
    }
    map_rows(in);
    *state = in;
    return 0;
}

static int64_t npy_rows(const void *state)
{
    return (int64_t)((const npy_reader *)state)->total;
}

static void npy_close(void *state)
{
    npy_reader *in = state;
    if (in->map)
        munmap((void *)in->map, in->map_len);
    free(in->out);
    free(in);
}

const struct tfos__input_ops tfos__input_npy_ops = {
    .open = npy_open,
    .next = npy_next,
    .next_size = npy_next_size,
    .fill = npy_fill,
    .rows = npy_rows,
    .close = npy_close,
};
