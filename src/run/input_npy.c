/* input_npy.c: the .npy reader of `tfos run --input` (NumPy format v1-v3,
 * C order, little-endian numbers or bool; see input.h), behind
 * tfos__input_npy_ops. The array's rows are read straight into the data
 * region of a one-column batch, a chunk at a time. */
#include "core/batch.h"
#include "core/log.h"
#include "run/input.h"
#include "run/input_ops.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct npy_reader {
    char path[1024];
    int fd;
    uint64_t total, row_bytes, rows; /* rows in the file, bytes a row, rows returned */
    int dtype, ndim;
    uint32_t shape[TFOS_BATCH_MAX_DIMS];
    uint8_t *out; /* the batch */
    size_t out_cap;
} npy_reader;

/* Read and check the header; leaves fd at the first row. */
static int read_header(npy_reader *in, char *err, size_t errlen)
{
    uint8_t head[12];
    ssize_t r = pread(in->fd, head, 10, 0);
    if (r != 10 || memcmp(head, "\x93NUMPY", 6))
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: not a .npy file (bad magic)", in->path);
    int major = head[6];
    size_t hl, off;
    if (major == 1) {
        hl = head[8] | (size_t)head[9] << 8;
        off = 10;
    } else if (major == 2 || major == 3) {
        if (pread(in->fd, head, 12, 0) != 12)
            return tfos__errf(err, errlen, TFOS_EPROTO, "%s: truncated header", in->path);
        hl = head[8] | (size_t)head[9] << 8 | (size_t)head[10] << 16 | (size_t)head[11] << 24;
        off = 12;
    } else {
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: .npy format version %d is not supported", in->path, major);
    }
    if (hl > 65536)
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: header of %zu bytes", in->path, hl);
    char hdr[65537];
    if (pread(in->fd, hdr, hl, (off_t)off) != (ssize_t)hl)
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: truncated header", in->path);
    hdr[hl] = 0;
    const char *d = strstr(hdr, "'descr'");
    const char *fo = strstr(hdr, "'fortran_order'");
    const char *sh = strstr(hdr, "'shape'");
    if (!d || !fo || !sh)
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: header lacks descr, fortran_order or shape", in->path);
    char descr[16] = "";
    if (sscanf(d, "'descr' : '%15[^']'", descr) != 1 && sscanf(d, "'descr': '%15[^']'", descr) != 1)
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: unreadable descr", in->path);
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
    const char *fv = strchr(fo + 15, ':');
    while (fv && (*fv == ':' || *fv == ' '))
        fv++;
    if (!fv || strncmp(fv, "False", 5))
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: Fortran-order arrays are not supported (save with C order)",
                    in->path);
    const char *paren = strchr(sh, '(');
    if (!paren)
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: unreadable shape", in->path);
    uint64_t dims[TFOS_BATCH_MAX_DIMS + 1];
    int nd = 0;
    const char *p = paren + 1;
    while (*p && *p != ')') {
        while (*p == ' ' || *p == ',')
            p++;
        if (*p == ')')
            break;
        char *end;
        unsigned long long v = strtoull(p, &end, 10);
        if (end == p || nd > TFOS_BATCH_MAX_DIMS)
            return tfos__errf(err, errlen, TFOS_EPROTO, "%s: unreadable shape", in->path);
        dims[nd++] = v;
        p = end;
    }
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
    if (lseek(in->fd, (off_t)(off + hl), SEEK_SET) < 0)
        return TFOS_ESYS;
    return 0;
}

static int npy_next(void *state, uint32_t max_rows, const void **batch, size_t *len, uint32_t *nrows, char *err,
                    size_t errlen)
{
    npy_reader *in = state;
    uint64_t left = in->total - in->rows;
    if (left == 0)
        return TFOS_EEND;
    uint32_t n = left < max_rows ? (uint32_t)left : max_rows;
    tfos__col col;
    memset(&col, 0, sizeof col);
    col.name = "";
    col.kind = TFOS_COL_FIXED;
    col.dtype = (uint8_t)in->dtype;
    col.ndim = (uint8_t)in->ndim;
    memcpy(col.shape, in->shape, sizeof col.shape);
    uint64_t total = tfos__batch_layout(n, 1, &col);
    if (!total)
        return tfos__errf(err, errlen, TFOS_ETOOBIG, "%s: rows too large", in->path);
    if (total > in->out_cap) {
        uint8_t *nb = realloc(in->out, (size_t)total);
        if (!nb)
            return TFOS_ENOMEM;
        in->out = nb;
        in->out_cap = (size_t)total;
    }
    tfos__batch_write_header(in->out, total, n, 1, in->ndim ? 0 : TFOS_BATCH_FLAT_ROWS, &col);
    size_t want = (size_t)col.data_len, got = 0;
    while (got < want) {
        ssize_t r = read(in->fd, in->out + col.data_off + got, want - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return tfos__errf(err, errlen, TFOS_ESYS, "%s: %s", in->path, strerror(errno));
        if (r == 0)
            return tfos__errf(err, errlen, TFOS_EPROTO, "%s: truncated: the header promises %llu rows, the data ends in "
                        "row %llu", in->path, (unsigned long long)in->total,
                        (unsigned long long)(in->rows + got / in->row_bytes));
        got += (size_t)r;
    }
    *batch = in->out;
    *len = total;
    in->rows += n;
    *nrows = n;
    return 0;
}

static int npy_open(void **state, int fd, const char *path, int csv_header, char *err, size_t errlen)
{
    (void)csv_header;
    npy_reader *in = calloc(1, sizeof *in);
    if (!in) {
        close(fd);
        return TFOS_ENOMEM;
    }
    snprintf(in->path, sizeof in->path, "%s", path);
    in->fd = fd;
    int rc = read_header(in, err, errlen);
    if (rc) {
        close(fd);
        free(in);
        return rc;
    }
    *state = in;
    return 0;
}

static uint64_t npy_progress(const void *state)
{
    off_t pos = lseek(((const npy_reader *)state)->fd, 0, SEEK_CUR);
    return pos > 0 ? (uint64_t)pos : 0;
}

static int64_t npy_rows(const void *state)
{
    return (int64_t)((const npy_reader *)state)->total;
}

static void npy_close(void *state)
{
    npy_reader *in = state;
    close(in->fd);
    free(in->out);
    free(in);
}

const struct tfos__input_ops tfos__input_npy_ops = {
    .open = npy_open,
    .next = npy_next,
    .progress = npy_progress,
    .rows = npy_rows,
    .close = npy_close,
};
