/* jsonl_read.c: how fast the JSON-lines reader (src/feed/input*.c) turns a
 * file into columnar batches, through the same calls the feeder makes
 * (tfos__input_open / tfos__input_next).
 *
 *   build/jsonl_read [ROWS] [DIR]     default 500000 rows, in /tmp
 *
 * Writes two files of ROWS rows each into DIR, one of arrays
 * ([int, float, float, "str"]) and one of objects with the same four
 * fields, reads each 3 times in batches of 4096 rows with the reader's fast
 * path and 3 times with jansson alone (tfos__jsonl_fast = 0: what the
 * reader was before it), interleaved, and prints each one's best run's
 * rows/s and MB/s (MB = 10^6 bytes of the file), and fast / jansson. The
 * files are removed at the end. Not a test: nothing is asserted but that
 * the reads succeed. */
#include "feed/input.h"
#include "tfos/tfos.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

extern int tfos__jsonl_fast; /* src/feed/input_jsonl.c */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ROWS rows of one shape into path; returns the file's size. */
static long write_rows(const char *path, long rows, int objects)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    unsigned long long x = 88172645463325252ull;
    for (long i = 0; i < rows; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        double a = (double)(x % 1000003) / 1000003.0, b = (double)(x % 7919) * 1.25e-3;
        if (objects)
            fprintf(f, "{\"id\": %ld, \"x\": %.17g, \"y\": %.6g, \"label\": \"row %ld of the bench \\u00e9\"}\n",
                    i, a, b, i);
        else
            fprintf(f, "[%ld, %.17g, %.6g, \"row %ld of the bench \\u00e9\"]\n", i, a, b, i);
    }
    long size = ftell(f);
    fclose(f);
    return size;
}

/* Read the whole file once; seconds taken. */
static double read_once(const char *path, long want_rows)
{
    char err[512];
    tfos__input *in;
    double t0 = now_s();
    int rc = tfos__input_open(&in, path, TFOS_FMT_JSONL, -1, err, sizeof err);
    if (rc) {
        fprintf(stderr, "open: %s\n", err);
        exit(1);
    }
    const void *batch;
    size_t len;
    uint64_t first;
    long rows = 0;
    while ((rc = tfos__input_next(in, 4096, &batch, &len, &first, err, sizeof err)) == 0) {
        uint32_t n;
        memcpy(&n, (const char *)batch + 4, 4);
        rows += n;
    }
    double t = now_s() - t0;
    tfos__input_close(in);
    if (rc != TFOS_EEND || rows != want_rows) {
        fprintf(stderr, "read: rc %d, %ld rows of %ld: %s\n", rc, rows, want_rows, err);
        exit(1);
    }
    return t;
}

int main(int argc, char **argv)
{
    long rows = argc > 1 ? atol(argv[1]) : 500000;
    const char *dir = argc > 2 ? argv[2] : "/tmp";
    static const char *const shapes[] = {"arrays", "objects"};
    for (int s = 0; s < 2; s++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/tfos-bench-%d-%s.jsonl", dir, (int)getpid(), shapes[s]);
        long size = write_rows(path, rows, s);
        double best[2] = {1e30, 1e30}; /* [0] jansson alone, [1] the fast path */
        for (int k = 0; k < 6; k++) {
            tfos__jsonl_fast = k % 2;
            double t = read_once(path, rows);
            if (t < best[k % 2])
                best[k % 2] = t;
        }
        tfos__jsonl_fast = 1;
        unlink(path);
        static const char *const paths[] = {"jansson", "fast"};
        for (int f = 1; f >= 0; f--)
            printf("jsonl_%s_%s_rows_per_s: %.0f\njsonl_%s_%s_mb_per_s: %.1f\n", shapes[s], paths[f],
                   (double)rows / best[f], shapes[s], paths[f], (double)size / 1e6 / best[f]);
        printf("jsonl_%s_rows: %ld\njsonl_%s_mb: %.1f\njsonl_%s_fast_over_jansson: %.2f\n", shapes[s], rows,
               shapes[s], (double)size / 1e6, shapes[s], best[0] / best[1]);
    }
    return 0;
}
