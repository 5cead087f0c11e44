/* batchbuild.c: a columnar batch built row by row (see batchbuild.h); the
 * layout and the header are batch.c's. */
#include "core/batchbuild.h"

#include "tfos/tfos.h"

#include <stdlib.h>
#include <string.h>

/* Room for `need` elements of `elem` bytes at *p, doubling from 1024. */
static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 1024;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q)
        return TFOS_ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

void tfos__batch_build_init(tfos__batch_build *b)
{
    memset(b, 0, sizeof *b);
}

void tfos__batch_build_fini(tfos__batch_build *b)
{
    for (int i = 0; i < TFOS__BUILD_MAX_COLS; i++) {
        free(b->cols[i].vals);
        free(b->cols[i].offs);
    }
    free(b->out);
    memset(b, 0, sizeof *b);
}

int tfos__batch_build_push_fixed(tfos__build_col *c, const void *v, size_t size)
{
    if (grow((void **)&c->vals, &c->vcap, c->vlen + size, 1))
        return TFOS_ENOMEM;
    memcpy(c->vals + c->vlen, v, size);
    c->vlen += size;
    return 0;
}

int tfos__batch_build_push_var(tfos__build_col *c, uint32_t row, const char *s, size_t n)
{
    if (grow((void **)&c->vals, &c->vcap, c->vlen + n + 1, 1) ||
        grow((void **)&c->offs, &c->ocap, (size_t)row + 2, sizeof *c->offs))
        return TFOS_ENOMEM;
    if (row == 0)
        c->offs[0] = 0;
    if (n)
        memcpy(c->vals + c->vlen, s, n);
    c->vlen += n;
    c->offs[row + 1] = c->vlen;
    return 0;
}

int tfos__batch_build_finish(tfos__batch_build *b, uint32_t flags, const void **batch, size_t *len)
{
    tfos__col *desc = b->desc;
    memset(desc, 0, sizeof *desc * (size_t)b->ncols);
    for (int i = 0; i < b->ncols; i++) {
        tfos__build_col *c = &b->cols[i];
        desc[i].name = c->name;
        desc[i].name_len = (uint16_t)strlen(c->name);
        desc[i].kind = c->kind;
        desc[i].dtype = c->dtype;
        desc[i].ndim = c->ndim;
        desc[i].shape[0] = c->len;
        if (c->kind != TFOS_COL_FIXED)
            desc[i].data_len = c->vlen;
    }
    uint64_t total = tfos__batch_layout(b->nrows, (uint32_t)b->ncols, desc);
    if (!total)
        return TFOS_ETOOBIG;
    if (grow((void **)&b->out, &b->out_cap, (size_t)total, 1))
        return TFOS_ENOMEM;
    /* the padding between the regions too: no byte of an earlier batch
     * (or of the heap) goes out with this one (a memset is ~1% of a
     * parsed batch's time) */
    memset(b->out, 0, (size_t)total);
    tfos__batch_write_header(b->out, total, b->nrows, (uint32_t)b->ncols, flags, desc);
    for (int i = 0; i < b->ncols; i++) {
        tfos__build_col *c = &b->cols[i];
        if (c->vlen)
            memcpy(b->out + desc[i].data_off, c->vals, c->vlen);
        if (c->kind != TFOS_COL_FIXED)
            memcpy(b->out + desc[i].offsets_off, c->offs, 8 * ((size_t)b->nrows + 1));
        c->vlen = 0;
    }
    *batch = b->out;
    *len = (size_t)total;
    b->nrows = 0;
    return 0;
}
