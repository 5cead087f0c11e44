/* batch_test.c: columnar batch layout, header, validation, a mutation fuzz
 * of the decoder (it reads what other processes wrote), and the row-by-row
 * builder (core/batchbuild.h). */
#include "check.h"
#include "core/batch.h"
#include "core/batchbuild.h"
#include "tfos/tfos.h"

#include <stdint.h>
#include <stdlib.h>

/* Build a batch: 5 rows of (f32[2][3], str, i64, bytes). */
static uint8_t *build(uint64_t *total_out)
{
    tfos__col cols[4];
    memset(cols, 0, sizeof cols);
    cols[0] = (tfos__col){.name = "img", .name_len = 3, .kind = TFOS_COL_FIXED, .dtype = TFOS_DT_F32, .ndim = 2,
                          .shape = {2, 3}};
    cols[1] = (tfos__col){.name = "label", .name_len = 5, .kind = TFOS_COL_STR, .data_len = 16};
    cols[2] = (tfos__col){.name = "", .name_len = 0, .kind = TFOS_COL_FIXED, .dtype = TFOS_DT_I64};
    cols[3] = (tfos__col){.name = "raw", .name_len = 3, .kind = TFOS_COL_BYTES, .data_len = 0};
    uint64_t total = tfos__batch_layout(5, 4, cols);
    CHECK(total > 0 && total % 64 == 0);
    uint8_t *b = calloc(1, total);
    tfos__batch_write_header(b, total, 5, 4, 0, cols);
    float *img = (float *)(void *)(b + cols[0].data_off);
    for (int i = 0; i < 30; i++)
        img[i] = (float)i;
    const char *labels[] = {"zero", "one", "two", "three", "f"};
    uint64_t pos = 0;
    for (int r = 0; r < 5; r++) {
        size_t l = strlen(labels[r]);
        memcpy(b + cols[1].data_off + pos, labels[r], l);
        pos += l;
        memcpy(b + cols[1].offsets_off + 8 * (r + 1), &pos, 8);
        int64_t v = r * 100;
        memcpy(b + cols[2].data_off + 8 * r, &v, 8);
    }
    CHECK_EQ(pos, 16);
    *total_out = total;
    return b;
}

static void round_trip(void)
{
    uint64_t total;
    uint8_t *b = build(&total);
    tfos__col st[8];
    tfos__batch_view v;
    char err[128];
    CHECK_EQ(tfos__batch_ncols(b, total), 4);
    CHECK_EQ(tfos__batch_open(b, total, &v, st, 8, err, sizeof err), 0);
    CHECK_EQ(v.nrows, 5);
    CHECK_EQ(v.ncols, 4);
    CHECK(v.cols[0].name_len == 3 && !memcmp(v.cols[0].name, "img", 3));
    CHECK_EQ(v.cols[0].data_len, 5 * 6 * 4);
    CHECK_EQ(((float *)(void *)(b + v.cols[0].data_off))[29], 29);
    CHECK_EQ(v.cols[1].kind, TFOS_COL_STR);
    uint64_t o3, o4;
    memcpy(&o3, b + v.cols[1].offsets_off + 24, 8);
    memcpy(&o4, b + v.cols[1].offsets_off + 32, 8);
    CHECK(!memcmp(b + v.cols[1].data_off + o3, "three", o4 - o3));
    CHECK_EQ(v.cols[2].name_len, 0);
    CHECK_EQ(v.cols[3].data_len, 0);
    CHECK_STR(tfos__dtype_numpy(TFOS_DT_F32), "<f4");
    CHECK_EQ(tfos__dtype_size(TFOS_DT_BOOL), 1);
    CHECK(tfos__dtype_numpy(99) == NULL);
    free(b);
}

static void rejects(void)
{
    uint64_t total;
    uint8_t *b = build(&total);
    tfos__col st[8];
    tfos__batch_view v;
    char err[128];
    CHECK_EQ(tfos__batch_open(b, total - 64, &v, st, 8, err, sizeof err), TFOS_EPROTO); /* length */
    CHECK(strstr(err, "bytes"));
    CHECK_EQ(tfos__batch_open(b, total, &v, st, 2, err, sizeof err), TFOS_EPROTO);      /* storage */
    uint8_t *c = malloc(total);
    struct {
        size_t at;
        uint8_t val;
        const char *why;
    } cases[] = {
        {0, 'X', "magic"},
        {12, 7, "flags"},
        {32 + 1, 99, "dtype"},                 /* column 0 dtype */
        {32 + 2, 9, "dimensions"},             /* column 0 ndim */
        {32 + 8, 0, "shape"},                  /* column 0 shape[0] = 0 */
        {32 + 40, 1, "misaligned"},            /* column 0 data_off */
        {32 + 47, 0x7f, "outside"},            /* column 0 data_off huge */
        {32 + 80 + 0, 7, "kind"},              /* column 1 kind */
        {32 + 80 + 56 + 7, 0x10, "offsets"},   /* column 1 offsets_off far away */
        {32 + 80 + 64 + 6, 0x10, "name"},      /* column 1 name_off far away */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        memcpy(c, b, total);
        c[cases[i].at] = cases[i].val;
        err[0] = 0;
        CHECK_EQ(tfos__batch_open(c, total, &v, st, 8, err, sizeof err), TFOS_EPROTO);
        if (!strstr(err, cases[i].why)) {
            fprintf(stderr, "case %zu: '%s' lacks '%s'\n", i, err, cases[i].why);
            exit(1);
        }
    }
    /* a var offset out of order */
    memcpy(c, b, total);
    tfos__batch_open(b, total, &v, st, 8, err, sizeof err);
    uint64_t bad = 1000;
    memcpy(c + st[1].offsets_off + 16, &bad, 8);
    CHECK_EQ(tfos__batch_open(c, total, &v, st, 8, err, sizeof err), TFOS_EPROTO);
    CHECK(strstr(err, "row 1"));
    /* layouts that cannot exist */
    tfos__col big = {.kind = TFOS_COL_FIXED, .dtype = TFOS_DT_F64, .ndim = 2, .shape = {1u << 30, 1u << 30}};
    CHECK_EQ(tfos__batch_layout(10, 1, &big), 0);
    tfos__col none = {.kind = 9};
    CHECK_EQ(tfos__batch_layout(1, 1, &none), 0);
    CHECK_EQ(tfos__batch_layout(1, 0, &none), 0);
    free(c);
    free(b);
}

static unsigned long long rng = 0x2545F4914F6CDD1Dull;
#define next_rand() check_rand(&rng)

static void fuzz(void)
{
    uint64_t total;
    uint8_t *b = build(&total);
    uint8_t *c = malloc(total);
    tfos__col st[8];
    tfos__batch_view v;
    char err[128];
    int ok = 0, bad = 0;
    for (int iter = 0; iter < 200000; iter++) {
        memcpy(c, b, total);
        size_t n = total;
        int muts = 1 + (int)(next_rand() % 3);
        for (int m = 0; m < muts; m++) {
            size_t at = next_rand() % (32 + 4 * 80 + 32); /* the header and table are what matters */
            if (next_rand() % 8 == 0)
                n = next_rand() % total;
            else
                c[at] = (uint8_t)next_rand();
        }
        if (tfos__batch_open(c, n, &v, st, 8, err, sizeof err) == 0) {
            ok++;
            /* every range it accepted must be inside the buffer: touch them */
            volatile uint8_t sink = 0;
            for (uint32_t i = 0; i < v.ncols; i++) {
                if (v.cols[i].data_len)
                    sink ^= c[v.cols[i].data_off + v.cols[i].data_len - 1];
                if (v.cols[i].name_len)
                    sink ^= (uint8_t)v.cols[i].name[v.cols[i].name_len - 1];
            }
            (void)sink;
        } else {
            bad++;
        }
    }
    CHECK(ok > 0 && bad > 0);
    free(c);
    free(b);
}

/* The builder: rows of (i64, f64[2], str) in two batches; the second reuses
 * the buffers and starts its offsets at 0 again. */
static void builder(void)
{
    static tfos__batch_build b; /* large: not on the stack */
    tfos__batch_build_init(&b);
    b.ncols = 3;
    snprintf(b.cols[0].name, sizeof b.cols[0].name, "id");
    b.cols[0].kind = TFOS_COL_FIXED;
    b.cols[0].dtype = TFOS_DT_I64;
    b.cols[1].kind = TFOS_COL_FIXED;
    b.cols[1].dtype = TFOS_DT_F64;
    b.cols[1].ndim = 1;
    b.cols[1].len = 2;
    b.cols[2].kind = TFOS_COL_STR;
    for (int batch = 0; batch < 2; batch++) {
        uint32_t rows = batch ? 1 : 3;
        for (uint32_t r = 0; r < rows; r++) {
            int64_t id = 10 * batch + r;
            double xy[2] = {(double)r, 0.5};
            char s[16];
            int n = snprintf(s, sizeof s, "row%lld", (long long)id);
            CHECK_EQ(tfos__batch_build_push_fixed(&b.cols[0], &id, 8), 0);
            CHECK_EQ(tfos__batch_build_push_fixed(&b.cols[1], &xy[0], 8), 0);
            CHECK_EQ(tfos__batch_build_push_fixed(&b.cols[1], &xy[1], 8), 0);
            CHECK_EQ(tfos__batch_build_push_var(&b.cols[2], r, s, (size_t)n), 0);
            b.nrows++;
        }
        const void *buf;
        size_t len;
        CHECK_EQ(tfos__batch_build_finish(&b, TFOS_BATCH_LIST_ROWS, &buf, &len), 0);
        CHECK_EQ(b.nrows, 0);
        tfos__batch_view v;
        tfos__col st[4];
        char err[200];
        CHECK_EQ(tfos__batch_open(buf, len, &v, st, 4, err, sizeof err), 0);
        CHECK(v.nrows == rows && v.ncols == 3 && v.flags == TFOS_BATCH_LIST_ROWS);
        CHECK(v.cols[0].name_len == 2 && !memcmp(v.cols[0].name, "id", 2) && v.cols[1].name_len == 0);
        CHECK(v.cols[1].ndim == 1 && v.cols[1].shape[0] == 2 && v.cols[2].kind == TFOS_COL_STR);
        const uint8_t *base = buf;
        int64_t last_id;
        memcpy(&last_id, base + v.cols[0].data_off + 8 * (rows - 1), 8);
        CHECK_EQ(last_id, 10 * batch + rows - 1);
        double y;
        memcpy(&y, base + v.cols[1].data_off + 16 * (rows - 1) + 8, 8);
        CHECK(y == 0.5);
        uint64_t o0, o1;
        memcpy(&o0, base + v.cols[2].offsets_off, 8);
        memcpy(&o1, base + v.cols[2].offsets_off + 8 * rows, 8);
        CHECK_EQ(o0, 0);
        CHECK_EQ(o1, batch ? 5 : 12); /* "row10"; "row0row1row2" */
        CHECK(!memcmp(base + v.cols[2].data_off, batch ? "row10" : "row0", batch ? 5 : 4));
    }
    tfos__batch_build_fini(&b);
}

int main(void)
{
    RUN(round_trip);
    RUN(rejects);
    RUN(fuzz);
    RUN(builder);
    return 0;
}
