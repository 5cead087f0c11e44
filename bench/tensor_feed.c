/* tensor_feed.c: the consumer side of bench/tensor_feed.py.
 *
 *   tensor_feed                 under `tfos run --input big.npy`: read the
 *                               node's feed to its end, summing every 8-byte
 *                               word of every batch (a trainer reads all of
 *                               its data once), and print
 *                               "rows R bytes B seconds S sum X" (S from the
 *                               first batch to the end of the feed)
 *   tensor_feed memcpy MB N     the ceiling: the best of N memcpy calls of an
 *                               MB MiB buffer into another, "gb_per_s G"
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tfos/feed.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int memcpy_rate(size_t mb, int rounds)
{
    size_t n = mb << 20;
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b)
        return 1;
    memset(a, 1, n);
    memset(b, 2, n); /* both mapped and touched before the clock */
    double best = 0;
    for (int i = 0; i < rounds; i++) {
        double t0 = now_s();
        memcpy(b, a, n);
        double dt = now_s() - t0;
        if (b[n - 1] != 1)
            return 1;
        if (dt > 0 && (double)n / dt > best)
            best = (double)n / dt;
        b[n - 1] = 2;
    }
    printf("gb_per_s %.3f\n", best / 1e9);
    free(a);
    free(b);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "memcpy"))
        return memcpy_rate((size_t)atol(argv[2]), atoi(argv[3]));
    tfos_feed *f;
    int rc = tfos_feed_open(&f);
    if (rc) {
        fprintf(stderr, "tensor_feed: no feed (%s): run me under tfos run --input\n", tfos_strerror(rc));
        return 2;
    }
    tfos_feed_batch b;
    unsigned long long rows = 0, bytes = 0;
    uint64_t sum = 0;
    double t0 = 0;
    while ((rc = tfos_feed_next(f, &b, 120000)) == 0) {
        if (!t0)
            t0 = now_s();
        for (uint32_t c = 0; c < b.ncols; c++) {
            const tfos_feed_column *col = &b.columns[c];
            const unsigned char *p = col->data;
            size_t words = col->data_len / 8;
            for (size_t i = 0; i < words; i++) {
                uint64_t w;
                memcpy(&w, p + 8 * i, 8);
                sum += w;
            }
            bytes += col->data_len;
        }
        rows += b.nrows;
    }
    double dt = now_s() - t0;
    if (rc != TFOS_EEND) {
        fprintf(stderr, "tensor_feed: the feed failed: %s\n", tfos_strerror(rc));
        return 1;
    }
    printf("rows %llu bytes %llu seconds %.4f sum %llu\n", rows, bytes, dt, (unsigned long long)sum);
    tfos_feed_close(f);
    return 0;
}
