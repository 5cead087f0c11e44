/* reader_test.c: CSV, JSON-lines and .npy files to columnar batches. Files
 * are written under a mkdtemp directory (removed at the end); values are
 * checked exactly by decoding the batches with the codec. Ends with a
 * mutation fuzz of each parser over small inputs (every batch a reader hands
 * out must be a valid batch; no input may crash it). */
#include "check.h"
#include "core/codec.h"
#include "core/reader.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[64];
static char files[256][128];
static int nfiles;

static const char *write_file(const char *name, const void *data, size_t len)
{
    CHECK(nfiles < 256);
    char *path = files[nfiles++];
    snprintf(path, 128, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f);
    CHECK_EQ(fwrite(data, 1, len, f), len);
    CHECK_EQ(fclose(f), 0);
    return path;
}

static const char *write_str(const char *name, const char *text)
{
    return write_file(name, text, strlen(text));
}

/* ---- decoding helpers ------------------------------------------------------ */

typedef struct got {
    tfos__tcb_view v;
    tfos__tcb_col c[16];
    uint64_t first;
    int rc;
    char err[1024];
} got;

/* Next batch of r into g (validated by the decoder). Returns the rc. */
static int next(tfos__reader *r, got *g)
{
    const void *b;
    size_t len;
    g->err[0] = '\0';
    g->rc = tfos__reader_next(r, &b, &len, &g->first, g->err, sizeof g->err);
    if (g->rc)
        return g->rc;
    char why[200];
    CHECK_EQ(((uintptr_t)b) % 64, 0);
    if (tfos__tcb_open(b, len, &g->v, why, sizeof why)) {
        fprintf(stderr, "reader made a bad batch: %s\n", why);
        exit(1);
    }
    for (uint32_t i = 0; i < g->v.ncols && i < 16; i++)
        CHECK_EQ(tfos__tcb_column(&g->v, i, &g->c[i]), 0);
    return 0;
}

static tfos__reader *open_file(const char *path, const tfos__reader_opts *o)
{
    tfos__reader *r = NULL;
    char err[512];
    int rc = tfos__reader_open(&r, path, o, err, sizeof err);
    if (rc) {
        fprintf(stderr, "open %s: %d %s\n", path, rc, err);
        exit(1);
    }
    return r;
}

static int64_t i64_at(const got *g, int col, size_t idx)
{
    int64_t x;
    CHECK(g->c[col].kind == TFOS_TCB_FIXED && g->c[col].dtype == TFOS_TCB_I64);
    CHECK(idx * 8 < g->c[col].data_len);
    memcpy(&x, (const uint8_t *)tfos__tcb_col_data(&g->v, &g->c[col]) + idx * 8, 8);
    return x;
}

static double f64_at(const got *g, int col, size_t idx)
{
    double x;
    CHECK(g->c[col].kind == TFOS_TCB_FIXED && g->c[col].dtype == TFOS_TCB_F64);
    CHECK(idx * 8 < g->c[col].data_len);
    memcpy(&x, (const uint8_t *)tfos__tcb_col_data(&g->v, &g->c[col]) + idx * 8, 8);
    return x;
}

static float f32_at(const got *g, int col, size_t idx)
{
    float x;
    CHECK(g->c[col].dtype == TFOS_TCB_F32);
    memcpy(&x, (const uint8_t *)tfos__tcb_col_data(&g->v, &g->c[col]) + idx * 4, 4);
    return x;
}

static int var_is(const got *g, int col, uint32_t row, const char *s, size_t n)
{
    const uint8_t *p;
    size_t len;
    CHECK_EQ(tfos__tcb_var(&g->v, &g->c[col], row, &p, &len), 0);
    return len == n && !memcmp(p, s, n);
}

#define CHECK_VAR(g, col, row, s) CHECK(var_is(g, col, row, s, sizeof(s) - 1))

static int name_is(const got *g, int col, const char *s)
{
    return g->c[col].name_len == strlen(s) && !memcmp(g->c[col].name, s, g->c[col].name_len);
}

/* Expect an error whose message holds each of the given strings. */
static void check_err(const got *g, int rc, const char *a, const char *b, const char *c)
{
    if (g->rc != rc || (a && !strstr(g->err, a)) || (b && !strstr(g->err, b)) || (c && !strstr(g->err, c))) {
        fprintf(stderr, "expected rc %d with [%s] [%s] [%s], got %d \"%s\"\n", rc, a ? a : "", b ? b : "",
                c ? c : "", g->rc, g->err);
        exit(1);
    }
}

/* Open `text` as file `name`, expect the first batch to fail with rc. */
static void expect_fail(const char *name, const char *text, const tfos__reader_opts *o, int rc, const char *a,
                        const char *b, const char *c)
{
    tfos__reader *r = open_file(write_str(name, text), o);
    got g;
    while (next(r, &g) == 0)
        ;
    check_err(&g, rc, a, b, c);
    CHECK(strstr(g.err, name)); /* names the file */
    got g2;
    CHECK_EQ(next(r, &g2), rc); /* sticky */
    CHECK_STR(g2.err, g.err);
    tfos__reader_close(r);
}

/* ---- CSV --------------------------------------------------------------------- */

static void csv_header_types(void)
{
    tfos__reader *r = open_file(write_str("a.csv", "a,b,c\n1,2.5,x\n-3, 4 ,\"y,z\"\n"), NULL);
    got g;
    CHECK_EQ(next(r, &g), 0);
    CHECK_EQ(g.first, 0);
    CHECK_EQ(g.v.nrows, 2);
    CHECK_EQ(g.v.ncols, 3);
    CHECK_EQ(g.v.flags, 0);
    CHECK(name_is(&g, 0, "a") && name_is(&g, 1, "b") && name_is(&g, 2, "c"));
    CHECK_EQ(i64_at(&g, 0, 0), 1);
    CHECK_EQ(i64_at(&g, 0, 1), -3);
    CHECK(f64_at(&g, 1, 0) == 2.5 && f64_at(&g, 1, 1) == 4.0);
    CHECK_EQ(g.c[2].kind, TFOS_TCB_STR);
    CHECK_VAR(&g, 2, 0, "x");
    CHECK_VAR(&g, 2, 1, "y,z");
    CHECK_EQ(next(r, &g), TFOS_EEND);
    CHECK_EQ(next(r, &g), TFOS_EEND);
    tfos__reader_close(r);

    /* 64-bit limits: the largest negative fits, one past the largest does not. */
    r = open_file(write_str("lim.csv", "-9223372036854775808,9223372036854775808,1e3,nan,-inf\n"), NULL);
    CHECK_EQ(next(r, &g), 0);
    CHECK_EQ(i64_at(&g, 0, 0), INT64_MIN);
    CHECK(f64_at(&g, 1, 0) == 9223372036854775808.0);
    CHECK(f64_at(&g, 2, 0) == 1000.0);
    CHECK(isnan(f64_at(&g, 3, 0)));
    CHECK(isinf(f64_at(&g, 4, 0)) && f64_at(&g, 4, 0) < 0);
    tfos__reader_close(r);
}

static void csv_quotes_crlf(void)
{
    const char *text = "id,text\r\n"
                       "1,\"he said \"\"hi\"\"\"\r\n"
                       "2,\"multi\r\nline, with comma\"\r\n"
                       "3,plain\"quote\r\n"
                       "4,\"\"\r\n"
                       "5,\r\n"
                       "6,a\rb\r\n";
    tfos__reader *r = open_file(write_str("q.csv", text), NULL);
    got g;
    CHECK_EQ(next(r, &g), 0);
    CHECK_EQ(g.v.nrows, 6);
    CHECK(name_is(&g, 1, "text"));
    CHECK_EQ(i64_at(&g, 0, 5), 6);
    CHECK_VAR(&g, 1, 0, "he said \"hi\"");
    CHECK_VAR(&g, 1, 1, "multi\r\nline, with comma");
    CHECK_VAR(&g, 1, 2, "plain\"quote");
    CHECK_VAR(&g, 1, 3, "");
    CHECK_VAR(&g, 1, 4, "");
    CHECK_VAR(&g, 1, 5, "a\rb");
    CHECK_EQ(next(r, &g), TFOS_EEND);
    tfos__reader_close(r);

    /* Lines are physical: the record on lines 2-4 moves the count by 3. */
    expect_fail("ml.csv", "id,text\n1,\"a\nb\nc\"\nz,w\n", NULL, TFOS_EPROTO, "line 5", "column 1 (\"id\")",
                "\"z\" is not an integer");
}

static void csv_headers(void)
{
    tfos__reader_opts o = {.csv_header = TFOS_CSV_HEADER_NO};
    got g;
    /* No header: all rows are data, columns unnamed. */
    tfos__reader *r = open_file(write_str("nh.csv", "1,2\n3,4\n"), &o);
    CHECK_EQ(next(r, &g), 0);
    CHECK_EQ(g.v.nrows, 2);
    CHECK(name_is(&g, 0, ""));
    CHECK_EQ(i64_at(&g, 1, 1), 4);
    tfos__reader_close(r);
    /* AUTO: numbers on the first line: no header. */
    r = open_file(write_str("auto1.csv", "1,2\n3,4\n"), NULL);
    CHECK_EQ(next(r, &g), 0);
    CHECK_EQ(g.v.nrows, 2);
    tfos__reader_close(r);
    /* AUTO: strings only: no header. */
    r = open_file(write_str("auto2.csv", "a,b\nc,d\n"), NULL);
    CHECK_EQ(next(r, &g), 0);
    CHECK_EQ(g.v.nrows, 2);
    CHECK_VAR(&g, 0, 0, "a");
    tfos__reader_close(r);
    /* AUTO: a single record: data. */
    r = open_file(write_str("auto3.csv", "a,b\n"), NULL);
    CHECK_EQ(next(r, &g), 0);
    CHECK_EQ(g.v.nrows, 1);
    tfos__reader_close(r);
    /* YES: the first record is the header even when all are strings. */
    o.csv_header = TFOS_CSV_HEADER_YES;
    r = open_file(write_str("yes.csv", "a,b\nc,d\n"), &o);
    CHECK_EQ(next(r, &g), 0);
    CHECK_EQ(g.v.nrows, 1);
    CHECK(name_is(&g, 0, "a") && name_is(&g, 1, "b"));
    CHECK_VAR(&g, 1, 0, "d");
    tfos__reader_close(r);
    /* Only a header: no rows. */
    r = open_file(write_str("only.csv", "a,b\n"), &o);
    CHECK_EQ(next(r, &g), TFOS_EEND);
    tfos__reader_close(r);
    /* Header count differs from the data. */
    expect_fail("hd.csv", "a,b,c\n1,2\n", &o, TFOS_EPROTO, "line 2", "2 fields", "header (line 1)");
    /* BOM, blank lines, no final newline. */
    r = open_file(write_str("bom.csv", "\xef\xbb\xbf" "a,b\n\n1,2\n\r\n\n3,4"), NULL);
    CHECK_EQ(next(r, &g), 0);
    CHECK_EQ(g.v.nrows, 2);
    CHECK(name_is(&g, 0, "a"));
    CHECK_EQ(i64_at(&g, 0, 1), 3);
    CHECK_EQ(i64_at(&g, 1, 1), 4);
    tfos__reader_close(r);
    /* Other delimiters: an option, or tab for .tsv. */
    tfos__reader_opts semi = {.csv_delim = ';'};
    r = open_file(write_str("semi.csv", "x;y\n1;\"a;b\"\n"), &semi);
    CHECK_EQ(next(r, &g), 0);
    CHECK_VAR(&g, 1, 0, "a;b");
    tfos__reader_close(r);
    r = open_file(write_str("t.tsv", "x\ty\n1\ta,b\n"), NULL);
    CHECK_EQ(next(r, &g), 0);
    CHECK_EQ(g.v.ncols, 2);
    CHECK_VAR(&g, 1, 0, "a,b");
    tfos__reader_close(r);
}

static void csv_errors(void)
{
    expect_fail("e1.csv", "x,y\n1,2\n3,abc\n", NULL, TFOS_EPROTO, "line 3, column 2 (\"y\")", "\"abc\"",
                "integer");
    /* An integer column meeting a float is an error (no promotion). */
    expect_fail("e2.csv", "x\n1\n2.5\n", NULL, TFOS_EPROTO, "line 3, column 1 (\"x\")", "\"2.5\" is not an integer",
                "line 2");
    /* A float column takes integers, and an empty field as NaN. */
    tfos__reader *r = open_file(write_str("f.csv", "x,s\n1.5,a\n2,b\n,c\n\"\",d\n"), NULL);
    got g;
    CHECK_EQ(next(r, &g), 0);
    CHECK_EQ(g.v.nrows, 4);
    CHECK(f64_at(&g, 0, 1) == 2.0);
    CHECK(isnan(f64_at(&g, 0, 2)) && isnan(f64_at(&g, 0, 3)));
    tfos__reader_close(r);
    expect_fail("e3.csv", "x,y\n1.5,2\nfoo,3\n", NULL, TFOS_EPROTO, "line 3, column 1", "\"foo\" is not a number",
                NULL);
    expect_fail("e4.csv", "1,2\n3,\n", NULL, TFOS_EPROTO, "line 2, column 2", "\"\" is not an integer", NULL);
    /* Ragged rows. */
    expect_fail("r1.csv", "a,b\n1,2\n3\n", NULL, TFOS_EPROTO, "line 3: 1 fields", "line 1 has 2", NULL);
    expect_fail("r2.csv", "1,2\n3,4,5\n", NULL, TFOS_EPROTO, "line 2: 3 fields", "line 1 has 2", NULL);
    /* Quotes. */
    expect_fail("u.csv", "a\n\"abc\n\n", NULL, TFOS_EPROTO, "line 2", "not closed", NULL);
    expect_fail("t.csv", "\"ab\"c,d\n", NULL, TFOS_EPROTO, "line 1, column 1", "after the closing quote", NULL);
    /* Invalid UTF-8 in a string column. */
    expect_fail("b.csv", "a\nx\n\xff\xfe\n", NULL, TFOS_EPROTO, "line 3, column 1 (\"a\")", "UTF-8", NULL);
    /* A record over max_line. */
    tfos__reader_opts small = {.max_line = 16};
    expect_fail("big.csv", "a\nb\nxxxxxxxxxxxxxxxxxxxxxxxx\n", &small, TFOS_ETOOBIG, "line 3", "16-byte", NULL);
    expect_fail("bigq.csv", "a\n\"x\nxxxxxxxxx\nxxxxxxxxxxx\"\n", &small, TFOS_ETOOBIG, "line 2", NULL, NULL);
    /* 16 bytes exactly is fine. */
    r = open_file(write_str("ok16.csv", "xxxxxxxxxxxxxxxx\r\n"), &small);
    CHECK_EQ(next(r, &g), 0);
    tfos__reader_close(r);

    /* Rows before a bad row are delivered, then the error, every time. */
    tfos__reader_opts o = {.batch_rows = 10};
    r = open_file(write_str("part.csv", "1\n2\nx\n4\n"), &o);
    CHECK_EQ(next(r, &g), 0);
    CHECK_EQ(g.v.nrows, 2);
    CHECK_EQ(i64_at(&g, 0, 1), 2);
    CHECK_EQ(next(r, &g), TFOS_EPROTO);
    CHECK(strstr(g.err, "line 3"));
    CHECK_EQ(next(r, &g), TFOS_EPROTO);
    tfos__reader_close(r);
}

/* ---- JSON lines ------------------------------------------------------------------ */

static void jsonl_arrays(void)
{
    const char *text = "[1, 2.5, \"x\", true, [1, 2]]\n"
                       "\n"
                       "  [ -7 , 3 , \"\" , false , [ 3 , -4 ] ]  \r\n"
                       "[9223372036854775807,-0.5e-1,\"z\",true,[5,6]]";
    tfos__reader *r = open_file(write_str("a.jsonl", text), NULL);
    got g;
    CHECK_EQ(next(r, &g), 0);
    CHECK_EQ(g.v.nrows, 3);
    CHECK_EQ(g.v.ncols, 5);
    CHECK(name_is(&g, 0, ""));
    CHECK_EQ(i64_at(&g, 0, 0), 1);
    CHECK_EQ(i64_at(&g, 0, 1), -7);
    CHECK_EQ(i64_at(&g, 0, 2), INT64_MAX);
    CHECK(f64_at(&g, 1, 0) == 2.5 && f64_at(&g, 1, 1) == 3.0 && f64_at(&g, 1, 2) == -0.05);
    CHECK_VAR(&g, 2, 0, "x");
    CHECK_VAR(&g, 2, 1, "");
    CHECK_EQ(g.c[3].dtype, TFOS_TCB_BOOL);
    const uint8_t *bools = tfos__tcb_col_data(&g.v, &g.c[3]);
    CHECK(bools[0] == 1 && bools[1] == 0 && bools[2] == 1);
    CHECK_EQ(g.c[4].ndim, 1);
    CHECK_EQ(g.c[4].shape[0], 2);
    CHECK_EQ(i64_at(&g, 4, 3), -4);
    CHECK_EQ(i64_at(&g, 4, 5), 6);
    CHECK_EQ(next(r, &g), TFOS_EEND);
    tfos__reader_close(r);
}

static void jsonl_objects_nested(void)
{
    const char *text = "{\"a\": 1, \"b\": [[1.5, 2], [3, 4], [5, 6]], \"c\": [[[1]], [[2]]]}\n"
                       "{\"c\": [[[3]], [[4]]], \"b\": [[0, 0], [0, 0], [0, 7]], \"a\": 2}\n";
    tfos__reader *r = open_file(write_str("o.jsonl", text), NULL);
    got g;
    CHECK_EQ(next(r, &g), 0);
    CHECK_EQ(g.v.nrows, 2);
    CHECK(name_is(&g, 0, "a") && name_is(&g, 1, "b") && name_is(&g, 2, "c"));
    CHECK_EQ(i64_at(&g, 0, 1), 2);
    CHECK_EQ(g.c[1].dtype, TFOS_TCB_F64);
    CHECK_EQ(g.c[1].ndim, 2);
    CHECK(g.c[1].shape[0] == 3 && g.c[1].shape[1] == 2);
    CHECK(f64_at(&g, 1, 0) == 1.5 && f64_at(&g, 1, 5) == 6.0 && f64_at(&g, 1, 11) == 7.0);
    CHECK_EQ(g.c[2].dtype, TFOS_TCB_I64);
    CHECK(g.c[2].ndim == 3 && g.c[2].shape[0] == 2 && g.c[2].shape[1] == 1 && g.c[2].shape[2] == 1);
    CHECK_EQ(i64_at(&g, 2, 3), 4);
    tfos__reader_close(r);
}

static void jsonl_escapes(void)
{
    const char *text = "[\"a\\\"b\\\\c\\/\\b\\f\\n\\r\\t\", \"\\u00e9\\u4E2D\\ud83d\\ude00\\u0000\", \"raw é中😀\"]\n"
                       "{\"k\\u00e9y\": 1}\n";
    tfos__reader_opts o = {.format = TFOS_READER_JSONL};
    tfos__reader *r = open_file(write_str("esc.txt", text), &o);
    got g;
    CHECK_EQ(next(r, &g), 0);
    CHECK_EQ(g.v.nrows, 1);
    CHECK_VAR(&g, 0, 0, "a\"b\\c/\b\f\n\r\t");
    CHECK_VAR(&g, 1, 0, "\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\0");
    CHECK_VAR(&g, 2, 0, "raw \xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80");
    CHECK_EQ(next(r, &g), TFOS_EPROTO); /* an object after arrays */
    CHECK(strstr(g.err, "line 2: an object, but line 1 is an array"));
    tfos__reader_close(r);
    r = open_file(write_str("key.jsonl", "{\"k\\u00e9y\": \"v\"}\n"), NULL);
    CHECK_EQ(next(r, &g), 0);
    CHECK(name_is(&g, 0, "k\xc3\xa9y"));
    tfos__reader_close(r);
}

static void jsonl_errors(void)
{
    const int P = TFOS_EPROTO;
    expect_fail("j1.jsonl", "[1, 2]\n[1, 2\n", NULL, P, "line 2", "not closed", NULL);
    expect_fail("j2.jsonl", "[1, 2]\n\n[1,]\n", NULL, P, "line 3", "value", NULL);
    expect_fail("j3.jsonl", "[1, null]\n", NULL, P, "line 1, byte 5", "null", NULL);
    expect_fail("j4.jsonl", "[1, 2]\n[3, null]\n", NULL, P, "line 2", "null", NULL);
    expect_fail("j5.jsonl", "{\"a\": 1, \"b\": 2}\n{\"a\": 1}\n", NULL, P, "line 2", "\"b\" is missing", NULL);
    expect_fail("j6.jsonl", "{\"a\": 1, \"b\": 2}\n{\"a\": 1, \"c\": 2}\n", NULL, P, "line 2",
                "\"c\" is not among the keys", NULL);
    expect_fail("j7.jsonl", "{\"a\": 1}\n{\"a\": 1, \"a\": 2}\n", NULL, P, "line 2", "duplicate key \"a\"", NULL);
    expect_fail("j8.jsonl", "{\"a\": 1, \"a\": 2}\n", NULL, P, "line 1", "duplicate key", NULL);
    expect_fail("j9.jsonl", "[[1, 2]]\n[[1, 2, 3]]\n", NULL, P, "line 2, column 1", "shape (3,)", "(2,)");
    expect_fail("j10.jsonl", "[[[1, 2], [3, 4]]]\n[[1, 2]]\n", NULL, P, "line 2", "shape (2,)", "(2, 2)");
    expect_fail("j11.jsonl", "[1]\n[1.5]\n", NULL, P, "line 2, column 1", "a float where line 1 has an integer",
                NULL);
    expect_fail("j12.jsonl", "[[1, 2]]\n[[1, 2.5]]\n", NULL, P, "line 2", "floats in an array", NULL);
    expect_fail("j13.jsonl", "[\"x\"]\n[1]\n", NULL, P, "line 2", "an integer where line 1 has a string", NULL);
    expect_fail("j14.jsonl", "[[[[[[[[[1]]]]]]]]]\n", NULL, P, "line 1", "more than 8 deep", NULL);
    expect_fail("j15.jsonl", "[[]]\n", NULL, P, "line 1", "empty array", NULL);
    expect_fail("j16.jsonl", "[[1, 2], [3]]\n", NULL, P, "line 1", "ragged", NULL);
    expect_fail("j17.jsonl", "[[[1, 2], [3, 4]], [[1, 2], 5]]\n", NULL, P, "line 1", "ragged", NULL);
    expect_fail("j18.jsonl", "[[1, [2]]]\n", NULL, P, "line 1", "ragged", NULL);
    expect_fail("j19.jsonl", "[\"\\ud800\"]\n", NULL, P, "line 1", "surrogate", NULL);
    expect_fail("j20.jsonl", "[\"\\udc00\"]\n", NULL, P, "line 1", "surrogate", NULL);
    expect_fail("j21.jsonl", "[\"a\tb\"]\n", NULL, P, "line 1", "control character", NULL);
    expect_fail("j22.jsonl", "[1] x\n", NULL, P, "line 1", "text after", NULL);
    expect_fail("j23.jsonl", "[9223372036854775808]\n", NULL, P, "line 1", "64-bit range", NULL);
    expect_fail("j24.jsonl", "[1e999]\n", NULL, P, "line 1", "range of a double", NULL);
    expect_fail("j25.jsonl", "5\n", NULL, P, "line 1", "array or object", NULL);
    expect_fail("j26.jsonl", "[{\"a\": 1}]\n", NULL, P, "line 1", "objects inside a row", NULL);
    expect_fail("j27.jsonl", "[01]\n", NULL, P, "line 1", NULL, NULL);
    expect_fail("j28.jsonl", "[\"\\x\"]\n", NULL, P, "line 1", "unknown escape", NULL);
    expect_fail("j29.jsonl", "[[\"a\"]]\n", NULL, P, "line 1", "only numbers", NULL);
    expect_fail("j30.jsonl", "[1]\n[\xc3\x28]\n", NULL, P, "line 2", "UTF-8", NULL);
    expect_fail("j31.jsonl", "[1, 2]\n[1]\n", NULL, P, "line 2: 1 values", "line 1 has 2", NULL);
    expect_fail("j32.jsonl", "[]\n", NULL, P, "line 1", "no values", NULL);
    expect_fail("j33.jsonl", "[true]\n[1]\n", NULL, P, "line 2", "boolean", NULL);
    expect_fail("j34.jsonl", "[1.5]\n[true]\n", NULL, P, "line 2", "a boolean where line 1 has a number", NULL);
    expect_fail("j35.jsonl", "[-]\n", NULL, P, "line 1", "bad number", NULL);
    expect_fail("j36.jsonl", "[1.]\n", NULL, P, "line 1", "bad number", NULL);
    tfos__reader_opts small = {.max_line = 10};
    expect_fail("j37.jsonl", "[1]\n[1, 2, 3, 4, 5]\n", &small, TFOS_ETOOBIG, "line 2", "10-byte", NULL);
    /* A float column takes integers, in scalars and arrays. */
    tfos__reader *r = open_file(write_str("fi.jsonl", "[1.5, [0.5, 1]]\n[2, [3, 4]]\n"), NULL);
    got g;
    CHECK_EQ(next(r, &g), 0);
    CHECK(f64_at(&g, 0, 1) == 2.0 && f64_at(&g, 1, 3) == 4.0);
    tfos__reader_close(r);
}

/* ---- NPY ----------------------------------------------------------------------- */

/* A .npy file image: magic, version, header padded to 64 with spaces and a
 * newline, then the data. */
static size_t npy_image(uint8_t *out, int major, const char *dict, const void *data, size_t len)
{
    size_t pre = major == 1 ? 10 : 12, dl = strlen(dict);
    size_t total = (pre + dl + 1 + 63) / 64 * 64;
    size_t hl = total - pre;
    memcpy(out, "\x93NUMPY", 6);
    out[6] = (uint8_t)major;
    out[7] = 0;
    if (major == 1) {
        out[8] = (uint8_t)hl;
        out[9] = (uint8_t)(hl >> 8);
    } else {
        out[8] = (uint8_t)hl;
        out[9] = (uint8_t)(hl >> 8);
        out[10] = out[11] = 0;
    }
    memcpy(out + pre, dict, dl);
    memset(out + pre + dl, ' ', hl - dl - 1);
    out[total - 1] = '\n';
    if (len)
        memcpy(out + total, data, len);
    return total + len;
}

static const char *npy_file(const char *name, int major, const char *dict, const void *data, size_t len)
{
    static uint8_t img[1 << 16];
    size_t n = npy_image(img, major, dict, data, len);
    return write_file(name, img, n);
}

static void npy_types(void)
{
    got g;
    /* v1, f4, 2-D: 3 rows of shape (2,). */
    float f4[6] = {0, 0.5f, 1, 1.5f, 2, 2.5f};
    tfos__reader *r = open_file(
        npy_file("f4.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", f4, sizeof f4), NULL);
    CHECK_EQ(next(r, &g), 0);
    CHECK_EQ(g.v.nrows, 3);
    CHECK_EQ(g.v.flags, TFOS_TCB_FLAT_ROWS);
    CHECK_EQ(g.c[0].dtype, TFOS_TCB_F32);
    CHECK(g.c[0].ndim == 1 && g.c[0].shape[0] == 2);
    CHECK(f32_at(&g, 0, 5) == 2.5f);
    CHECK(!memcmp(tfos__tcb_col_data(&g.v, &g.c[0]), f4, sizeof f4));
    CHECK_EQ(next(r, &g), TFOS_EEND);
    tfos__reader_close(r);
    /* v2, f8, 1-D: scalar rows. */
    double f8[4] = {1, -2, 3.25, 1e300};
    r = open_file(npy_file("f8.npy", 2, "{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }", f8, sizeof f8),
                  NULL);
    CHECK_EQ(next(r, &g), 0);
    CHECK_EQ(g.v.nrows, 4);
    CHECK_EQ(g.c[0].ndim, 0);
    CHECK(f64_at(&g, 0, 3) == 1e300);
    tfos__reader_close(r);
    /* v3, i8, 3-D (2, 2, 3), double-quoted keys, Python 2 longs. */
    int64_t i8[12];
    for (int k = 0; k < 12; k++)
        i8[k] = (int64_t)k * -1000000000000LL;
    r = open_file(npy_file("i8.npy", 3, "{\"descr\": \"<i8\", \"fortran_order\": False, \"shape\": (2L, 2L, 3L)}", i8,
                           sizeof i8),
                  NULL);
    CHECK_EQ(next(r, &g), 0);
    CHECK_EQ(g.v.nrows, 2);
    CHECK(g.c[0].ndim == 2 && g.c[0].shape[0] == 2 && g.c[0].shape[1] == 3);
    CHECK_EQ(i64_at(&g, 0, 11), 11 * -1000000000000LL);
    tfos__reader_close(r);
    /* u1 and bool. */
    uint8_t u1[5] = {0, 1, 127, 200, 255};
    r = open_file(npy_file("u1.npy", 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (5,), }", u1, 5), NULL);
    CHECK_EQ(next(r, &g), 0);
    CHECK_EQ(g.c[0].dtype, TFOS_TCB_U8);
    CHECK(!memcmp(tfos__tcb_col_data(&g.v, &g.c[0]), u1, 5));
    tfos__reader_close(r);
    uint8_t b1[4] = {1, 0, 0, 1};
    r = open_file(npy_file("b1.npy", 2, "{'descr': '|b1', 'fortran_order': False, 'shape': (2, 2), }", b1, 4), NULL);
    CHECK_EQ(next(r, &g), 0);
    CHECK_EQ(g.c[0].dtype, TFOS_TCB_BOOL);
    CHECK_EQ(g.v.nrows, 2);
    CHECK(!memcmp(tfos__tcb_col_data(&g.v, &g.c[0]), b1, 4));
    tfos__reader_close(r);
    /* fortran_order True with one dimension above 1: the same bytes. */
    r = open_file(npy_file("f1.npy", 1, "{'descr': '<f8', 'fortran_order': True, 'shape': (4, 1), }", f8, sizeof f8),
                  NULL);
    CHECK_EQ(next(r, &g), 0);
    CHECK_EQ(g.v.nrows, 4);
    tfos__reader_close(r);
    /* Zero rows. */
    r = open_file(npy_file("z.npy", 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (0, 3), }", NULL, 0),
                  NULL);
    CHECK_EQ(next(r, &g), TFOS_EEND);
    tfos__reader_close(r);
}

static void npy_open_fails(const char *name, const uint8_t *img, size_t n, const char *a, const char *b)
{
    const char *path = write_file(name, img, n);
    tfos__reader *r = NULL;
    char err[512] = "";
    int rc = tfos__reader_open(&r, path, NULL, err, sizeof err);
    if (rc != TFOS_EPROTO || !strstr(err, a) || (b && !strstr(err, b)) || !strstr(err, name)) {
        fprintf(stderr, "%s: expected [%s] [%s], got %d \"%s\"\n", name, a, b ? b : "", rc, err);
        exit(1);
    }
    CHECK(r == NULL);
}

static void npy_errors(void)
{
    static uint8_t img[4096];
    double d[6] = {0};
    size_t n;
    n = npy_image(img, 1, "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }", d, sizeof d);
    npy_open_fails("fo.npy", img, n, "fortran_order", NULL);
    n = npy_image(img, 1, "{'descr': '>f8', 'fortran_order': False, 'shape': (6,), }", d, sizeof d);
    npy_open_fails("be.npy", img, n, "'>f8'", "big-endian");
    n = npy_image(img, 1, "{'descr': '<c16', 'fortran_order': False, 'shape': (3,), }", d, sizeof d);
    npy_open_fails("c16.npy", img, n, "'<c16' is not supported", NULL);
    n = npy_image(img, 1, "{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (6,), }", d, sizeof d);
    npy_open_fails("st.npy", img, n, "structured", NULL);
    n = npy_image(img, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (), }", d, 8);
    npy_open_fails("0d.npy", img, n, "0-d", NULL);
    n = npy_image(img, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 0), }", d, 0);
    npy_open_fails("zd.npy", img, n, "dimension 1 is 0", NULL);
    n = npy_image(img, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1,1), }", d, 8);
    npy_open_fails("10d.npy", img, n, "more than 9 dimensions", NULL);
    n = npy_image(img, 1, "{'descr': '<f8', 'shape': (6,), }", d, sizeof d);
    npy_open_fails("nf.npy", img, n, "lacks 'fortran_order'", NULL);
    n = npy_image(img, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (6,), 'x': 1}", d, sizeof d);
    npy_open_fails("xk.npy", img, n, "unexpected key 'x'", NULL);
    /* Truncated data: 6 rows promised, 5 present. */
    n = npy_image(img, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (6,), }", d, 40);
    npy_open_fails("tr.npy", img, n, "truncated", "row 5");
    /* Truncated header. */
    npy_open_fails("th.npy", img, 40, "truncated", "header");
    npy_open_fails("th2.npy", img, 9, "truncated", NULL);
    npy_open_fails("mg.npy", (const uint8_t *)"PK\3\4 not numpy", 15, "bad magic", NULL);
    n = npy_image(img, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (6,), }", d, sizeof d);
    img[6] = 4;
    npy_open_fails("v4.npy", img, n, "version 4.0", NULL);
}

/* A pipe can't be sized up front: truncation shows at the read. */
static void npy_stream_truncated(void)
{
    int p[2];
    CHECK_EQ(pipe(p), 0);
    static uint8_t img[4096];
    double d[5] = {1, 2, 3, 4, 5};
    size_t n = npy_image(img, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (8,), }", d, sizeof d);
    CHECK_EQ(write(p[1], img, n), (ssize_t)n);
    close(p[1]);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", p[0]);
    tfos__reader_opts o = {.format = TFOS_READER_NPY, .batch_rows = 3};
    tfos__reader *r = open_file(path, &o);
    got g;
    CHECK_EQ(next(r, &g), 0);
    CHECK_EQ(g.v.nrows, 3);
    CHECK(f64_at(&g, 0, 2) == 3.0);
    CHECK_EQ(next(r, &g), TFOS_EPROTO);
    CHECK(strstr(g.err, "truncated") && strstr(g.err, "row 5 of 8") && strstr(g.err, "byte 168"));
    tfos__reader_close(r);
    close(p[0]);
}

/* ---- batching, limits, empty files -------------------------------------------------- */

static void check_batches(tfos__reader *r, const uint32_t *sizes, int nb)
{
    got g;
    uint64_t row = 0;
    for (int b = 0; b < nb; b++) {
        CHECK_EQ(next(r, &g), 0);
        CHECK_EQ(g.first, row);
        CHECK_EQ(g.v.nrows, sizes[b]);
        for (uint32_t k = 0; k < g.v.nrows; k++) {
            if (g.c[0].dtype == TFOS_TCB_I64)
                CHECK_EQ(i64_at(&g, 0, k), (int64_t)(row + k));
            else
                CHECK(f64_at(&g, 0, k) == (double)(row + k));
        }
        row += g.v.nrows;
    }
    CHECK_EQ(next(r, &g), TFOS_EEND);
    tfos__reader_close(r);
}

static void batching(void)
{
    static const uint32_t sizes[] = {3, 3, 3, 1};
    tfos__reader_opts o = {.batch_rows = 3};
    check_batches(open_file(write_str("b.csv", "n\n0\n1\n2\n3\n4\n\n5\n6\n7\n8\n9\n"), &o), sizes, 4);
    check_batches(open_file(write_str("b.jsonl", "[0]\n[1]\n[2]\n[3]\n[4]\n[5]\n[6]\n[7]\n[8]\n[9]\n"), &o), sizes, 4);
    double d[10];
    for (int k = 0; k < 10; k++)
        d[k] = k;
    const char *npy = npy_file("b.npy", 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (10,), }", d, sizeof d);
    check_batches(open_file(npy, &o), sizes, 4);
    /* A byte limit: batches end early and stay within it. */
    tfos__reader_opts lim = {.batch_rows = 100, .max_batch_bytes = 256};
    tfos__reader *r = open_file(npy, &lim);
    got g;
    const void *b;
    size_t len;
    uint64_t first, rows = 0;
    char err[256];
    while (tfos__reader_next(r, &b, &len, &first, err, sizeof err) == 0) {
        CHECK(len <= 256);
        CHECK_EQ(first, rows);
        CHECK_EQ(tfos__tcb_open(b, len, &g.v, err, sizeof err), 0);
        CHECK(g.v.nrows > 0);
        rows += g.v.nrows;
    }
    CHECK_EQ(rows, 10);
    tfos__reader_close(r);
    lim.max_batch_bytes = 600;
    r = open_file(write_str("lim.csv", "s\nabcdefghijklmnopqrstuvwxyz\nabcdefghijklmnopqrstuvwxyz\nab\nabc\nabcd\n"), &lim);
    rows = 0;
    int nbatches = 0;
    while (tfos__reader_next(r, &b, &len, &first, err, sizeof err) == 0) {
        CHECK(len <= 600);
        CHECK_EQ(first, rows);
        CHECK_EQ(tfos__tcb_open(b, len, &g.v, err, sizeof err), 0);
        rows += g.v.nrows;
        nbatches++;
    }
    CHECK_EQ(rows, 5);
    CHECK(nbatches > 1);
    tfos__reader_close(r);
    /* One row over the limit. */
    lim.max_batch_bytes = 64;
    expect_fail("lim2.csv", "1,2\n", &lim, TFOS_ETOOBIG, "line 1", "64-byte", NULL);
    r = open_file(npy, &lim);
    CHECK_EQ(next(r, &g), TFOS_ETOOBIG);
    CHECK(strstr(g.err, "row 0"));
    tfos__reader_close(r);
}

static void empty_and_bad_opens(void)
{
    got g;
    const char *names[] = {"e.csv", "e.jsonl", "e.npy"};
    for (int k = 0; k < 3; k++) {
        tfos__reader *r = open_file(write_str(names[k], ""), NULL);
        CHECK_EQ(next(r, &g), TFOS_EEND);
        CHECK_EQ(next(r, &g), TFOS_EEND);
        tfos__reader_close(r);
    }
    tfos__reader *r = open_file(write_str("blank.jsonl", "\n  \n\r\n"), NULL);
    CHECK_EQ(next(r, &g), TFOS_EEND);
    tfos__reader_close(r);
    r = NULL;
    char err[512];
    CHECK_EQ(tfos__reader_open(&r, "/nonexistent/dir/x.csv", NULL, err, sizeof err), TFOS_ESYS);
    CHECK_EQ(errno, ENOENT);
    CHECK(strstr(err, "/nonexistent/dir/x.csv") && strstr(err, "cannot open"));
    CHECK_EQ(tfos__reader_open(&r, write_str("x.parquet", "x"), NULL, err, sizeof err), TFOS_EINVAL);
    CHECK(strstr(err, "format"));
    tfos__reader_opts o = {.format = 9};
    CHECK_EQ(tfos__reader_open(&r, "x.csv", &o, err, sizeof err), TFOS_EINVAL);
    tfos__reader_opts q = {.csv_delim = '"'};
    CHECK_EQ(tfos__reader_open(&r, "x.csv", &q, err, sizeof err), TFOS_EINVAL);
    CHECK(r == NULL);
    tfos__reader_close(NULL);
    /* Memory sources. */
    const char *text = "a,b\n1,x\n";
    CHECK_EQ(tfos__reader_open_mem(&r, "mem.csv", text, strlen(text), NULL, err, sizeof err), 0);
    CHECK_EQ(next(r, &g), 0);
    CHECK_VAR(&g, 1, 0, "x");
    tfos__reader_close(r);
}

/* ---- fuzz --------------------------------------------------------------------------- */

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Run a reader over data to the end; every batch must decode. */
static int drain(const char *name, const uint8_t *data, size_t n, const tfos__reader_opts *o)
{
    uint8_t *exact = malloc(n ? n : 1);
    memcpy(exact, data, n);
    tfos__reader *r;
    char err[512];
    int rc = tfos__reader_open_mem(&r, name, exact, n, o, err, sizeof err);
    if (rc == 0) {
        const void *b;
        size_t len;
        uint64_t first, rows = 0;
        while ((rc = tfos__reader_next(r, &b, &len, &first, err, sizeof err)) == 0) {
            tfos__tcb_view v;
            char why[200];
            CHECK_EQ(first, rows);
            if (tfos__tcb_open(b, len, &v, why, sizeof why)) {
                fprintf(stderr, "bad batch from fuzzed %s: %s\n", name, why);
                exit(1);
            }
            for (uint32_t i = 0; i < v.ncols; i++) {
                tfos__tcb_col c;
                CHECK_EQ(tfos__tcb_column(&v, i, &c), 0);
                CHECK_EQ(tfos__tcb_check_utf8(&v, &c, why, sizeof why), 0);
            }
            rows += v.nrows;
        }
        tfos__reader_close(r);
    }
    if (rc != TFOS_EEND)
        CHECK(strncmp(err, name, strlen(name)) == 0);
    free(exact);
    return rc;
}

static void fuzz_one(const char *name, const char *const *seeds, const size_t *seed_len, int nseeds,
                     const char *alphabet, int iters)
{
    uint8_t buf[1024];
    int ok = 0, bad = 0;
    for (int it = 0; it < iters; it++) {
        int s = (int)(next_rand() % (uint64_t)nseeds);
        size_t n = seed_len[s];
        memcpy(buf, seeds[s], n);
        int muts = 1 + (int)(next_rand() % 6);
        for (int m = 0; m < muts && n; m++) {
            size_t at = next_rand() % n;
            switch (next_rand() % 5) {
            case 0: buf[at] = (uint8_t)next_rand(); break;
            case 1: buf[at] = (uint8_t)alphabet[next_rand() % strlen(alphabet)]; break;
            case 2: n = at; break;
            case 3: /* insert */
                if (n < sizeof buf) {
                    memmove(buf + at + 1, buf + at, n - at);
                    buf[at] = (uint8_t)alphabet[next_rand() % strlen(alphabet)];
                    n++;
                }
                break;
            default: /* delete */
                memmove(buf + at, buf + at + 1, n - at - 1);
                n--;
                break;
            }
        }
        tfos__reader_opts o = {.batch_rows = 1 + (uint32_t)(next_rand() % 3), .max_line = 64 + next_rand() % 64};
        if (next_rand() % 4 == 0)
            o.max_batch_bytes = 200 + next_rand() % 800;
        o.csv_header = (int)(next_rand() % 3);
        if (drain(name, buf, n, &o) == TFOS_EEND)
            ok++;
        else
            bad++;
    }
    CHECK(ok > 0 && bad > 0);
}

static void fuzz_parsers(void)
{
    const char *csv[] = {"a,b,c\n1,2.5,x\n-3,4,\"y,z\"\n", "id,text\r\n1,\"he said \"\"hi\"\"\"\r\n2,\"a\nb\"\r\n",
                         "1,2\n\n3,4", "\xef\xbb\xbfx\n1.5\n\n2\n"};
    size_t csv_len[4];
    for (int k = 0; k < 4; k++)
        csv_len[k] = strlen(csv[k]);
    fuzz_one("f.csv", csv, csv_len, 4, ",\"\n\r0123456789.e-ax \t\xc3", 20000);

    const char *jl[] = {"[1, 2.5, \"x\", true, [1, 2]]\n[2, 3, \"y\", false, [3, 4]]\n",
                        "{\"a\": 1, \"b\": [[1.5, 2], [3, 4]]}\n{\"b\": [[0, 0], [0, 0]], \"a\": 2}\n",
                        "[\"\\u00e9\\ud83d\\ude00\\n\", -0.5e-3]\n\n[\"\", 1]\n", "[[[1]]]\r\n[[[2]]]\r\n"};
    size_t jl_len[4];
    for (int k = 0; k < 4; k++)
        jl_len[k] = strlen(jl[k]);
    fuzz_one("f.jsonl", jl, jl_len, 4, "[]{},:\"\\u0123456789.eE-+ tfnd\n", 20000);

    static uint8_t n1[256], n2[256], n3[256];
    double d[4] = {1, 2, 3, 4};
    uint8_t u[6] = {1, 2, 3, 4, 5, 6};
    size_t l1 = npy_image(n1, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }", d, sizeof d);
    size_t l2 = npy_image(n2, 2, "{'descr': '|u1', 'fortran_order': False, 'shape': (3, 2), }", u, 6);
    size_t l3 = npy_image(n3, 3, "{'descr': '<i2', 'fortran_order': True, 'shape': (3, 1), }", u, 6);
    const char *np[] = {(const char *)n1, (const char *)n2, (const char *)n3};
    size_t np_len[] = {l1, l2, l3};
    fuzz_one("f.npy", np, np_len, 3, "{}()'\",: 0123456789<|fiub8TrueFalse", 20000);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tfos_reader_XXXXXX");
    CHECK(mkdtemp(tmpdir));
    RUN(csv_header_types);
    RUN(csv_quotes_crlf);
    RUN(csv_headers);
    RUN(csv_errors);
    RUN(jsonl_arrays);
    RUN(jsonl_objects_nested);
    RUN(jsonl_escapes);
    RUN(jsonl_errors);
    RUN(npy_types);
    RUN(npy_errors);
    RUN(npy_stream_truncated);
    RUN(batching);
    RUN(empty_and_bad_opens);
    RUN(fuzz_parsers);
    for (int k = 0; k < nfiles; k++)
        unlink(files[k]);
    CHECK_EQ(rmdir(tmpdir), 0);
    return 0;
}
