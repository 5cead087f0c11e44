/* feed_sum.c: a C program that reads its tfos feed and sums every numeric
 * column: the smallest possible "C/C++ trainer".
 *
 *   build/tfos run --workers 2 --input data.npy -- build/feed_sum
 */
#include <stdio.h>
#include <string.h>

#include "tfos/feed.h"

static double value(const tfos_feed_column *c, size_t i)
{
    const char *d = c->dtype;
    const unsigned char *p = (const unsigned char *)c->data + i * c->itemsize;
    if (!strcmp(d, "<f4")) { float v; memcpy(&v, p, 4); return v; }
    if (!strcmp(d, "<f8")) { double v; memcpy(&v, p, 8); return v; }
    if (!strcmp(d, "<i8")) { long long v; memcpy(&v, p, 8); return (double)v; }
    if (!strcmp(d, "<i4")) { int v; memcpy(&v, p, 4); return v; }
    if (!strcmp(d, "|u1") || !strcmp(d, "|b1")) return *p;
    return 0;
}

int main(void)
{
    tfos_feed *f;
    int rc = tfos_feed_open(&f);
    if (rc) {
        fprintf(stderr, "feed_sum: no feed (%s): run me under `tfos run --input ...`\n", tfos_strerror(rc));
        return 2;
    }
    tfos_feed_batch b;
    unsigned long long rows = 0, batches = 0;
    double sum = 0;
    while ((rc = tfos_feed_next(f, &b, 60000)) == 0) {
        for (uint32_t c = 0; c < b.ncols; c++) {
            const tfos_feed_column *col = &b.columns[c];
            if (col->kind != TFOS_FEED_FIXED)
                continue;
            size_t n = col->data_len / col->itemsize;
            for (size_t i = 0; i < n; i++)
                sum += value(col, i);
        }
        rows += b.nrows;
        batches++;
    }
    if (rc != TFOS_EEND) {
        fprintf(stderr, "feed_sum: the feed failed: %s\n", tfos_strerror(rc));
        return 1;
    }
    printf("rows %llu batches %llu sum %.1f aborted %llu\n", rows, batches, sum,
           (unsigned long long)tfos_feed_aborted(f));
    tfos_feed_close(f);
    return 0;
}
