/* input_test.c: the --input readers: CSV (quotes, CRLF, headers, types,
 * errors), JSON lines (arrays, objects, escapes, errors), .npy (v1/v2,
 * dtypes, truncation, the header dict), batching, inputs once read as the
 * wrong data (a BOM, other delimiters, headers that cannot be told, empty
 * values, numbers out of range or not decimal, a directory), FIFO reads
 * that a stop flag ends, .npy batches read into the caller's buffer, and a
 * mutation fuzz of each parser. */
#include "check.h"
#include "core/batch.h"
#include "feed/input.h"
#include "platform/fs.h"
#include "tfos/tfos.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[] = "/tmp/tfos-input-test-XXXXXX";

static const char *write_file(const char *name, const void *data, size_t n)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f);
    CHECK_EQ(fwrite(data, 1, n, f), (long long)n);
    fclose(f);
    return path;
}

/* Read a whole file in one batch and open it. */
static int read_all(const char *path, uint32_t max, tfos__batch_view *v, tfos__col *st, char *err,
                    tfos__input **keep)
{
    tfos__input *in;
    *keep = NULL;
    int rc = tfos__input_open(&in, path, TFOS_FMT_AUTO, -1, err, 256);
    if (rc)
        return rc;
    const void *b;
    size_t len;
    uint64_t first;
    rc = tfos__input_next(in, max, &b, &len, &first, err, 256);
    if (rc == 0)
        CHECK_EQ(tfos__batch_open(b, len, v, st, 64, err, 256), 0);
    *keep = in;
    return rc;
}

/* Open path and read its first batch (up to 100 rows); the batch's bytes. */
static const uint8_t *first_batch(const char *path, tfos__input **in, tfos__batch_view *v, tfos__col *st)
{
    char err[256];
    const void *b;
    size_t len;
    uint64_t first;
    CHECK_EQ(tfos__input_open(in, path, TFOS_FMT_AUTO, -1, err, sizeof err), 0);
    CHECK_EQ(tfos__input_next(*in, 100, &b, &len, &first, err, sizeof err), 0);
    CHECK_EQ(tfos__batch_open(b, len, v, st, 64, err, sizeof err), 0);
    return b;
}

static const uint8_t *var_value(const tfos__batch_view *v, const void *base, int col, int row, size_t *n)
{
    const uint8_t *b = base;
    uint64_t o0, o1;
    memcpy(&o0, b + v->cols[col].offsets_off + 8 * row, 8);
    memcpy(&o1, b + v->cols[col].offsets_off + 8 * (row + 1), 8);
    *n = o1 - o0;
    return b + v->cols[col].data_off + o0;
}

static void csv_basics(void)
{
    const char text[] = "id,score,name\r\n1,2.5,\"Smith, J\"\r\n2,-3,\"say \"\"hi\"\"\"\r\n3,1e3,\"two\nlines\"\r\n"
                        "4,0,caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\r\n"; /* UTF-8 of 2, 3 and 4 bytes */
    const char *p = write_file("a.csv", text, sizeof text - 1);
    tfos__input *in;
    tfos__batch_view v;
    tfos__col st[64];
    char err[256];
    CHECK_EQ(tfos__input_open(&in, p, TFOS_FMT_AUTO, -1, err, sizeof err), 0);
    const void *b;
    size_t len;
    uint64_t first;
    CHECK_EQ(tfos__input_next(in, 100, &b, &len, &first, err, sizeof err), 0);
    CHECK_EQ(tfos__batch_open(b, len, &v, st, 64, err, sizeof err), 0);
    CHECK_EQ(v.nrows, 4);
    CHECK_EQ(v.ncols, 3);
    CHECK(v.cols[0].name_len == 2 && !memcmp(v.cols[0].name, "id", 2));
    CHECK_EQ(v.cols[0].dtype, TFOS_DT_I64);
    CHECK_EQ(v.cols[1].dtype, TFOS_DT_F64);
    CHECK_EQ(v.cols[2].kind, TFOS_COL_STR);
    const double *score = (const double *)(const void *)((const uint8_t *)b + v.cols[1].data_off);
    CHECK(score[0] == 2.5 && score[1] == -3 && score[2] == 1000);
    size_t n;
    const uint8_t *s = var_value(&v, b, 2, 0, &n);
    CHECK(n == 8 && !memcmp(s, "Smith, J", 8));
    s = var_value(&v, b, 2, 1, &n);
    CHECK(n == 8 && !memcmp(s, "say \"hi\"", 8));
    s = var_value(&v, b, 2, 2, &n);
    CHECK(n == 9 && !memcmp(s, "two\nlines", 9));
    s = var_value(&v, b, 2, 3, &n);
    CHECK(n == 14 && !memcmp(s, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14));
    CHECK_EQ(tfos__input_next(in, 100, &b, &len, &first, err, sizeof err), TFOS_EEND);
    tfos__input_close(in);
}

static void csv_no_header_and_batches(void)
{
    char text[400] = "";
    for (int i = 0; i < 10; i++)
        sprintf(text + strlen(text), "%d,%d.5\n", i, i);
    const char *p = write_file("b.csv", text, strlen(text));
    tfos__input *in;
    char err[256];
    CHECK_EQ(tfos__input_open(&in, p, TFOS_FMT_CSV, -1, err, sizeof err), 0);
    uint32_t sizes[8];
    uint64_t firsts[8];
    int k = 0, rc;
    const void *b;
    size_t len;
    uint64_t first;
    while ((rc = tfos__input_next(in, 3, &b, &len, &first, err, sizeof err)) == 0) {
        memcpy(&sizes[k], (const uint8_t *)b + 4, 4);
        firsts[k++] = first;
    }
    CHECK_EQ(rc, TFOS_EEND);
    CHECK_EQ(k, 4);
    CHECK(sizes[0] == 3 && sizes[1] == 3 && sizes[2] == 3 && sizes[3] == 1);
    CHECK(firsts[0] == 0 && firsts[1] == 3 && firsts[3] == 9);
    tfos__input_close(in);
}

static void csv_errors(void)
{
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"a,b\n1,2\n3,x\n", "line 3, column 2: 'x' is not an integer"},
        {"1,2\n3\n", "line 2: 1 fields where the first row has 2"},
        {"1,2\n3,4.5\n", "line 2, column 2: '4.5' is not an integer"},
        {"1,\"open\n", "line 1: a quoted field is not closed"},
        {"1,\"a\"b\n", "text after a closing quote"},
        /* issue 35: text that is not UTF-8 is refused where it is, not by the consumer */
        {"a,b\n1,x\n2,caf\xe9\n", "line 3, column 2: byte 4 of the field is 0xe9, which is not UTF-8"},
        {"a,b\n1,\xc0\xaf\n", "line 2, column 2: byte 1 of the field is 0xc0"},       /* overlong */
        {"a,b\n1,\xed\xa0\x80\n", "line 2, column 2: byte 1 of the field is 0xed"}, /* a surrogate */
        {"a,b\n1,ok\xf0\x9f\x98\n", "line 2, column 2: byte 3 of the field is 0xf0"}, /* cut short */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *p = write_file("e.csv", cases[i].text, strlen(cases[i].text));
        tfos__input *in = NULL;
        tfos__batch_view v;
        tfos__col st[64];
        char err[256] = "";
        int rc = read_all(p, 100, &v, st, err, &in);
        if (rc != TFOS_EPROTO || !strstr(err, cases[i].want) || !strstr(err, "e.csv")) {
            fprintf(stderr, "case %zu: rc %d, '%s' lacks '%s'\n", i, rc, err, cases[i].want);
            exit(1);
        }
        tfos__input_close(in);
    }
}

static void jsonl_rows(void)
{
    const char text[] = "{\"x\": [1, 2], \"ok\": true, \"s\": \"a\\u00e9\\ud83d\\ude00\\n\", \"f\": 1}\n"
                        "\n"
                        "{\"x\": [3, 4], \"ok\": false, \"s\": \"\", \"f\": 2}\n";
    const char *p = write_file("c.jsonl", text, sizeof text - 1);
    tfos__input *in;
    tfos__batch_view v;
    tfos__col st[64];
    char err[256];
    CHECK_EQ(read_all(p, 100, &v, st, err, &in), 0);
    CHECK_EQ(v.nrows, 2);
    CHECK_EQ(v.ncols, 4);
    CHECK(v.cols[0].ndim == 1 && v.cols[0].shape[0] == 2 && v.cols[0].dtype == TFOS_DT_I64);
    CHECK_EQ(v.cols[1].dtype, TFOS_DT_BOOL);
    CHECK(v.cols[3].name_len == 1 && v.cols[3].name[0] == 'f');
    tfos__input_close(in);
    /* the value bytes: re-read to check the string */
    const void *b;
    size_t len, n;
    uint64_t first;
    CHECK_EQ(tfos__input_open(&in, p, TFOS_FMT_AUTO, -1, err, sizeof err), 0);
    CHECK_EQ(tfos__input_next(in, 100, &b, &len, &first, err, sizeof err), 0);
    CHECK_EQ(tfos__batch_open(b, len, &v, st, 64, err, sizeof err), 0);
    const uint8_t *s = var_value(&v, b, 2, 0, &n);
    CHECK(n == 8 && !memcmp(s, "a\xc3\xa9\xf0\x9f\x98\x80\n", 8));
    const int64_t *x = (const int64_t *)(const void *)((const uint8_t *)b + v.cols[0].data_off);
    CHECK(x[0] == 1 && x[3] == 4);
    tfos__input_close(in);
}

static void jsonl_errors(void)
{
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"[1, 2]\n[1, null]\n", "line 2: null in column 2"},
        {"{\"a\": 1}\n{\"b\": 1}\n", "line 2: key 'b' where the first row has 'a'"},
        {"[[1, 2]]\n[[1, 2, 3]]\n", "line 2: column 1: an array of 3 numbers"},
        {"[1]\n[1.5]\n", "line 2: column 1: 1.5 in an integer column"},
        {"[1, \"x\"\n", "line 1: expected , or ]"},
        {"[\"\\q\"]\n", "line 1: bad escape"},
        {"\"just a string\"\n", "line 1: a row must be a JSON array or object"},
        {"[1]\n[\"s\"]\n", "line 2: column 1: a string where the first row has a number"},
        /* what jansson reports, in this reader's words */
        {"[\"a\xff\"]\n", "line 1: not valid UTF-8"},
        {"{\"a\": 1, \"a\": 2}\n", "line 1: a key appears twice"},
        {"[1]\n[1] x\n", "line 2: text after the row"},
        {"[99999999999999999999]\n", "line 1: a number out of range"},
        {"{\"a\" 1}\n", "line 1: expected :"},
        /* what the walk over the parsed row rejects */
        {"[{\"a\": 1}]\n", "line 1: column 1: an object"},
        {"[[1, \"a\"]]\n", "line 1: arrays may hold numbers only"},
        {"[[1, 2]]\n[[1, 2.5]]\n", "line 2: column 1: a float in an integer array column"},
        {"[1, 2]\n[1, 2, 3]\n", "line 2: more columns than the first row"},
        {"[1, 2]\n[1]\n", "line 2: 1 columns where the first row has 2"},
        {"[true]\n[1]\n", "line 2: column 1: a number where the first row has another type"},
        {"[]\n", "line 1: empty row"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *p = write_file("e.jsonl", cases[i].text, strlen(cases[i].text));
        tfos__input *in = NULL;
        tfos__batch_view v;
        tfos__col st[64];
        char err[256] = "";
        int rc = read_all(p, 100, &v, st, err, &in);
        if (rc != TFOS_EPROTO || !strstr(err, cases[i].want)) {
            fprintf(stderr, "case %zu: rc %d, '%s' lacks '%s'\n", i, rc, err, cases[i].want);
            exit(1);
        }
        tfos__input_close(in);
    }
}

/* A float array column takes integers; strings may hold \u0000. */
static void jsonl_floats_and_nul(void)
{
    const char text[] = "[[1.5, 2], \"a\\u0000b\"]\n[[3, 4], \"\"]\n";
    tfos__input *in;
    tfos__batch_view v;
    tfos__col st[64];
    size_t n;
    const uint8_t *b = first_batch(write_file("d.jsonl", text, sizeof text - 1), &in, &v, st);
    CHECK(v.nrows == 2 && v.cols[0].dtype == TFOS_DT_F64 && v.cols[0].shape[0] == 2);
    const double *x = (const double *)(const void *)(b + v.cols[0].data_off);
    CHECK(x[0] == 1.5 && x[1] == 2 && x[2] == 3 && x[3] == 4);
    const uint8_t *s = var_value(&v, b, 1, 0, &n);
    CHECK(n == 3 && !memcmp(s, "a\0b", 3));
    tfos__input_close(in);
}

static size_t npy_bytes(uint8_t *out, int version, const char *descr, const char *shape, const void *data,
                        size_t n, int fortran)
{
    char dict[200];
    int dl = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", descr,
                      fortran ? "True" : "False", shape);
    size_t pre = version == 1 ? 10 : 12;
    size_t hl = (size_t)dl + 1;
    while ((pre + hl) % 64)
        hl++;
    memcpy(out, "\x93NUMPY", 6);
    out[6] = (uint8_t)version;
    out[7] = 0;
    if (version == 1) {
        out[8] = (uint8_t)hl;
        out[9] = (uint8_t)(hl >> 8);
    } else {
        uint32_t h = (uint32_t)hl;
        memcpy(out + 8, &h, 4);
    }
    memset(out + pre, ' ', hl);
    memcpy(out + pre, dict, (size_t)dl);
    out[pre + hl - 1] = '\n';
    memcpy(out + pre + hl, data, n);
    return pre + hl + n;
}

/* A v1 .npy file with the header dict given as is. */
static size_t npy_with_header(uint8_t *out, const char *dict, const void *data, size_t n)
{
    size_t dl = strlen(dict), hl = dl + 1;
    while ((10 + hl) % 64)
        hl++;
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    out[8] = (uint8_t)hl;
    out[9] = (uint8_t)(hl >> 8);
    memset(out + 10, ' ', hl);
    memcpy(out + 10, dict, dl);
    out[10 + hl - 1] = '\n';
    memcpy(out + 10 + hl, data, n);
    return 10 + hl + n;
}

static void npy_files(void)
{
    float f[12];
    for (int i = 0; i < 12; i++)
        f[i] = (float)i;
    uint8_t buf[1024];
    tfos__input *in;
    tfos__batch_view v;
    tfos__col st[64];
    char err[256];
    for (int ver = 1; ver <= 2; ver++) {
        size_t n = npy_bytes(buf, ver, "<f4", "(3, 2, 2)", f, sizeof f, 0);
        const char *p = write_file("a.npy", buf, n);
        CHECK_EQ(read_all(p, 100, &v, st, err, &in), 0);
        CHECK_EQ(v.nrows, 3);
        CHECK(v.cols[0].dtype == TFOS_DT_F32 && v.cols[0].ndim == 2 && v.cols[0].shape[1] == 2);
        tfos__input_close(in);
    }
    uint8_t bools[4] = {1, 0, 1, 1};
    size_t n = npy_bytes(buf, 1, "|b1", "(4,)", bools, 4, 0);
    const char *p = write_file("b.npy", buf, n);
    CHECK_EQ(read_all(p, 100, &v, st, err, &in), 0);
    CHECK(v.nrows == 4 && v.cols[0].dtype == TFOS_DT_BOOL && v.cols[0].ndim == 0 && (v.flags & TFOS_BATCH_FLAT_ROWS));
    tfos__input_close(in);
    n = npy_bytes(buf, 1, "<f4", "(3, 4)", f, sizeof f, 1);
    p = write_file("c.npy", buf, n);
    CHECK_EQ(read_all(p, 100, &v, st, err, &in), TFOS_EPROTO);
    CHECK(strstr(err, "Fortran"));
    tfos__input_close(in);
    n = npy_bytes(buf, 1, ">f4", "(3, 4)", f, sizeof f, 0);
    p = write_file("d.npy", buf, n);
    CHECK_EQ(read_all(p, 100, &v, st, err, &in), TFOS_EPROTO);
    CHECK(strstr(err, "not supported"));
    tfos__input_close(in);
    n = npy_bytes(buf, 1, "<f4", "(30, 4)", f, sizeof f, 0); /* promises more rows than it has */
    p = write_file("e.npy", buf, n);
    CHECK_EQ(read_all(p, 100, &v, st, err, &in), TFOS_EPROTO);
    CHECK(strstr(err, "truncated"));
    tfos__input_close(in);
}

/* tfos__input_next_size + tfos__input_fill (the feeder's read straight into
 * the ring) give the same batches as tfos__input_next; a truncated file is
 * named; CSV cannot (TFOS_EINVAL). */
static void npy_fill_into_a_buffer(void)
{
    float f[40];
    for (int i = 0; i < 40; i++)
        f[i] = (float)i * 0.25f;
    uint8_t buf[1024];
    char err[256];
    size_t n = npy_bytes(buf, 1, "<f4", "(10, 4)", f, sizeof f, 0);
    const char *p = write_file("fill.npy", buf, n);
    tfos__input *a, *b;
    CHECK_EQ(tfos__input_open(&a, p, TFOS_FMT_AUTO, -1, err, sizeof err), 0);
    CHECK_EQ(tfos__input_open(&b, p, TFOS_FMT_AUTO, -1, err, sizeof err), 0);
    uint8_t *slot = NULL;
    for (int k = 0; k < 4; k++) { /* batches of 3, 3, 3, 1 */
        const void *want;
        size_t wlen, len;
        uint64_t wfirst, first;
        uint32_t rows;
        CHECK_EQ(tfos__input_next(a, 3, &want, &wlen, &wfirst, err, sizeof err), 0);
        CHECK_EQ(tfos__input_next_size(b, 3, &rows, &len, &first), 0);
        CHECK_EQ(len, (long long)wlen);
        CHECK_EQ(first, (long long)wfirst);
        CHECK_EQ(rows, k < 3 ? 3 : 1);
        slot = realloc(slot, len);
        CHECK(slot);
        CHECK_EQ(tfos__input_fill(b, rows, slot, len, err, sizeof err), 0);
        CHECK(memcmp(slot, want, len) == 0);
    }
    uint32_t rows;
    size_t len;
    uint64_t first;
    CHECK_EQ(tfos__input_next_size(b, 3, &rows, &len, &first), TFOS_EEND);
    CHECK_EQ(first, 10);
    tfos__input_close(a);
    tfos__input_close(b);
    /* the header promises 30 rows, the file has 10 */
    n = npy_bytes(buf, 1, "<f4", "(30, 4)", f, sizeof f, 0);
    p = write_file("short.npy", buf, n);
    CHECK_EQ(tfos__input_open(&b, p, TFOS_FMT_AUTO, -1, err, sizeof err), 0);
    CHECK_EQ(tfos__input_next_size(b, 25, &rows, &len, &first), 0);
    slot = realloc(slot, len);
    CHECK(slot);
    CHECK_EQ(tfos__input_fill(b, rows, slot, len, err, sizeof err), TFOS_EPROTO);
    CHECK(strstr(err, "truncated") && strstr(err, "row 10"));
    tfos__input_close(b);
    free(slot);
    p = write_file("f.csv", "a,b\n1,2\n", 8);
    CHECK_EQ(tfos__input_open(&b, p, TFOS_FMT_AUTO, -1, err, sizeof err), 0);
    CHECK_EQ(tfos__input_next_size(b, 3, &rows, &len, &first), TFOS_EINVAL);
    tfos__input_close(b);
}

/* The rows of a regular .npy are copied out of a mapping of it: a file cut
 * short while it is read gives an error naming it and where it now ends
 * (the copy's SIGBUS is caught), and a SIGBUS anywhere else still kills the
 * process as before (the handler passes it on). */
static void npy_shrinking_under_the_mapping(void)
{
    enum { ROWS = 64, COLS = 1024 }; /* 4 KiB rows: the cut falls on a page */
    float *f = malloc(ROWS * COLS * sizeof *f);
    uint8_t *buf = malloc(ROWS * COLS * sizeof *f + 256);
    CHECK(f && buf);
    for (int i = 0; i < ROWS * COLS; i++)
        f[i] = (float)i;
    char err[256];
    size_t n = npy_bytes(buf, 1, "<f4", "(64, 1024)", f, ROWS * COLS * sizeof *f, 0);
    const char *p = write_file("shrink.npy", buf, n);
    size_t head = n - ROWS * COLS * sizeof *f;
    tfos__input *in;
    CHECK_EQ(tfos__input_open(&in, p, TFOS_FMT_AUTO, -1, err, sizeof err), 0);
    uint32_t rows;
    size_t len;
    uint64_t first;
    CHECK_EQ(tfos__input_next_size(in, 8, &rows, &len, &first), 0);
    CHECK_EQ(tfos__input_fill(in, rows, buf, len, err, sizeof err), 0);
    tfos__batch_view v;
    tfos__col st[4];
    CHECK_EQ(tfos__batch_open(buf, len, &v, st, 4, err, sizeof err), 0);
    CHECK(memcmp(buf + v.cols[0].data_off, f, 8 * COLS * sizeof *f) == 0);
    CHECK_EQ(truncate(p, (off_t)(head + 20 * COLS * sizeof *f)), 0); /* 20 of the 64 rows left */
    CHECK_EQ(tfos__input_next_size(in, 8, &rows, &len, &first), 0); /* rows 8-15: still there */
    CHECK_EQ(tfos__input_fill(in, rows, buf, len, err, sizeof err), 0);
    CHECK_EQ(tfos__input_next_size(in, 8, &rows, &len, &first), 0); /* rows 16-23: cut at 20 */
    CHECK_EQ(tfos__input_fill(in, rows, buf, len, err, sizeof err), TFOS_EPROTO);
    CHECK(strstr(err, "shrink.npy") && strstr(err, "shrank") && strstr(err, "row 20 of 64"));
    tfos__input_close(in);
    /* another SIGBUS: the process dies of it (the access never returns) */
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        char b[8];
        tfos__map_copy(b, "abcdefgh", 8, "abcdefgh", 8); /* installs the handler */
        int fd = open(p, O_RDWR);
        volatile char *m = mmap(NULL, 1 << 16, PROT_READ, MAP_SHARED, fd, 0);
        if (fd < 0 || m == MAP_FAILED || ftruncate(fd, 0))
            _exit(3);
        (void)m[100];
        _exit(0);
    }
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    /* killed by SIGBUS; under a sanitizer, whose handler was the one before
     * ours, that handler's report and exit */
    CHECK(WIFSIGNALED(status) ? WTERMSIG(status) == SIGBUS : WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 3);
    free(f);
    free(buf);
}

static void empty_and_unknown(void)
{
    const char *p = write_file("empty.csv", "", 0);
    tfos__input *in;
    char err[256];
    const void *b;
    size_t len;
    uint64_t first;
    CHECK_EQ(tfos__input_open(&in, p, TFOS_FMT_AUTO, -1, err, sizeof err), 0);
    CHECK_EQ(tfos__input_next(in, 10, &b, &len, &first, err, sizeof err), TFOS_EEND);
    tfos__input_close(in);
    p = write_file("x.parquet", "PAR1", 4);
    CHECK_EQ(tfos__input_open(&in, p, TFOS_FMT_AUTO, -1, err, sizeof err), TFOS_EINVAL);
    CHECK(strstr(err, "unknown file type"));
}

/* Open text (as `name`) with opts, read it whole: the return code; *v and
 * the batch's bytes in *b when it gave rows. */
static int read_opts(const char *name, const char *text, const tfos__input_opts *o, tfos__input **in,
                     tfos__batch_view *v, tfos__col *st, const uint8_t **b, char *err)
{
    const char *p = write_file(name, text, strlen(text));
    *in = NULL;
    int rc = tfos__input_open_opts(in, p, o, err, 256);
    if (rc)
        return rc;
    const void *batch;
    size_t len;
    uint64_t first;
    rc = tfos__input_next(*in, 100, &batch, &len, &first, err, 256);
    if (rc == 0) {
        CHECK_EQ(tfos__batch_open(batch, len, v, st, 64, err, 256), 0);
        *b = batch;
    }
    return rc;
}

static int64_t i64_at(const tfos__batch_view *v, const uint8_t *b, int col, int row)
{
    int64_t x;
    memcpy(&x, b + v->cols[col].data_off + 8 * row, 8);
    return x;
}

static double f64_at(const tfos__batch_view *v, const uint8_t *b, int col, int row)
{
    double x;
    memcpy(&x, b + v->cols[col].data_off + 8 * row, 8);
    return x;
}

/* Inputs that used to be read as the wrong data with no error: each is now
 * read right, or refused naming the file, line and column. */
static void csv_dialects_and_headers(void)
{
    tfos__input_opts detect = {.format = TFOS_FMT_CSV, .csv_header = -1};
    tfos__input *in;
    tfos__batch_view v;
    tfos__col st[64];
    const uint8_t *b;
    char err[256];
    size_t n;

    /* a UTF-8 byte order mark is skipped: no header taken, no row dropped */
    CHECK_EQ(read_opts("bom.csv", "\xef\xbb\xbf" "1,2\n3,4\n", &detect, &in, &v, st, &b, err), 0);
    CHECK(v.nrows == 2 && v.cols[0].dtype == TFOS_DT_I64 && i64_at(&v, b, 0, 0) == 1 && i64_at(&v, b, 0, 1) == 3);
    tfos__input_close(in);
    CHECK_EQ(read_opts("bomh.csv", "\xef\xbb\xbf" "a,b\n1,2\n", &detect, &in, &v, st, &b, err), 0);
    CHECK(v.nrows == 1 && v.cols[0].name_len == 1 && v.cols[0].name[0] == 'a');
    tfos__input_close(in);

    /* a pandas index column: its header field is empty */
    CHECK_EQ(read_opts("pd.csv", ",a,b\n0,1.5,x\n1,2.5,y\n", &detect, &in, &v, st, &b, err), 0);
    CHECK(v.nrows == 2 && v.cols[0].name_len == 0 && v.cols[1].name_len == 1 && v.cols[1].dtype == TFOS_DT_F64);
    tfos__input_close(in);

    /* refused, naming file, line and column: rows of text alone (a header
     * cannot be told from data until --csv-header or --no-csv-header says
     * which), ';' or a tab under the default delimiter, empty values in
     * number columns, numbers out of range or not decimal */
    static const struct {
        int delim;
        const char *text, *want;
    } refused[] = {
        {0, "a,b\n", "line 1: cannot tell whether this row is a header"},
        {0, "name,city\nbob,paris\nann,rome\n", "line 1: cannot tell whether this row is a header"},
        {0, "x,y,2020\n1.5,2.5,3\n", "line 1: cannot tell whether this row is a header"},
        {0, "a;b\n1;2.5\n", "line 1, column 1: 'a;b' holds a ';': if the file is ';'-separated, give "
                            "--csv-delimiter ';'"},
        {0, "1\t2\n", "line 1, column 1: '1\t2' holds a tab: if the file is tab-separated, give --csv-delimiter '\\t'"},
        {';', "a;b\n1;2.5\n3;\"x;y\"\n", "line 3, column 2: 'x;y' is not a number"},
        {0, "1,,3\n4,5,6\n", "line 1, column 2: an empty value in a column of numbers (line 2 has one"},
        {0, "1,2\n3,\n", "line 2, column 2: an empty value in a column of numbers"},
        {0, "1e400\n", "line 1, column 1: '1e400' is out of range for a float64"},
        {0, "1.5\n-1e400\n", "line 2, column 1: '-1e400' is out of range for a float64"},
        {0, "99999999999999999999\n", "line 1, column 1: '99999999999999999999' is out of range for an int64"},
        {0, "1\n99999999999999999999\n", "line 2, column 1: '99999999999999999999' is out of range for an int64"},
        {0, "1.5\n0x10\n", "line 2, column 1: '0x10' is not a number"},
        {0, "1.0\n1_000\n", "line 2, column 1: '1_000' is not a number"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        tfos__input_opts o = detect;
        o.csv_delimiter = refused[i].delim;
        int rc = read_opts("r.csv", refused[i].text, &o, &in, &v, st, &b, err);
        if (rc != TFOS_EPROTO || strncmp(err, dir, strlen(dir)) || !strstr(err, "r.csv ") ||
            !strstr(err, refused[i].want)) {
            fprintf(stderr, "case %zu: rc %d, '%s' lacks '%s'\n", i, rc, err, refused[i].want);
            exit(1);
        }
        tfos__input_close(in);
    }

    /* what --csv-header, --no-csv-header and --csv-delimiter make of them */
    tfos__input_opts header = detect, no_header = detect;
    header.csv_header = 1;
    no_header.csv_header = 0;
    CHECK_EQ(read_opts("h.csv", "a,b\n", &header, &in, &v, st, &b, err), TFOS_EEND); /* a header, no rows */
    tfos__input_close(in);
    CHECK_EQ(read_opts("h.csv", "a,b\n", &no_header, &in, &v, st, &b, err), 0);
    CHECK(v.nrows == 1 && v.cols[0].kind == TFOS_COL_STR);
    tfos__input_close(in);
    CHECK_EQ(read_opts("h.csv", "name,city\nbob,paris\nann,rome\n", &header, &in, &v, st, &b, err), 0);
    CHECK(v.nrows == 2 && v.cols[1].name_len == 4);
    const uint8_t *s = var_value(&v, b, 1, 1, &n);
    CHECK(n == 4 && !memcmp(s, "rome", 4));
    tfos__input_close(in);
    tfos__input_opts semi = detect;
    semi.csv_delimiter = ';';
    CHECK_EQ(read_opts("semi.csv", "a;b\n1;2.5\n3;4\n", &semi, &in, &v, st, &b, err), 0);
    CHECK(v.nrows == 2 && v.ncols == 2 && f64_at(&v, b, 1, 0) == 2.5 && f64_at(&v, b, 1, 1) == 4);
    tfos__input_close(in);
    tfos__input_opts comma = detect;
    comma.csv_delimiter = ',';
    CHECK_EQ(read_opts("semi.csv", "x;y,1\n", &comma, &in, &v, st, &b, err), 0); /* given: no check */
    CHECK(v.nrows == 1 && v.ncols == 2 && v.cols[0].kind == TFOS_COL_STR);
    tfos__input_close(in);

    /* an empty first value above text: a string column */
    CHECK_EQ(read_opts("e.csv", "1,,x\n2,y,z\n", &detect, &in, &v, st, &b, err), 0);
    CHECK(v.nrows == 2 && v.cols[1].kind == TFOS_COL_STR);
    tfos__input_close(in);
    /* 0x10 is text, never 16.0; spaces around numbers, underflow, inf, nan */
    CHECK_EQ(read_opts("n.csv", "1,0x10\n2,0x20\n", &detect, &in, &v, st, &b, err), 0);
    CHECK(v.cols[1].kind == TFOS_COL_STR);
    tfos__input_close(in);
    CHECK_EQ(read_opts("n.csv", "1, 2.5 ,1e-400,nan\n3,4,5,-inf\n1,2,3,4\n", &detect, &in, &v, st, &b, err), 0);
    CHECK(v.nrows == 3 && v.cols[0].dtype == TFOS_DT_I64 && v.cols[1].dtype == TFOS_DT_F64 &&
          f64_at(&v, b, 1, 0) == 2.5 && f64_at(&v, b, 2, 0) >= 0 && f64_at(&v, b, 2, 0) < 1e-300 &&
          f64_at(&v, b, 3, 0) != f64_at(&v, b, 3, 0) && f64_at(&v, b, 3, 1) < -1e308);
    tfos__input_close(in);
}

static void jsonl_bom_and_ranges(void)
{
    tfos__input_opts o = {.format = TFOS_FMT_AUTO, .csv_header = -1};
    tfos__input *in;
    tfos__batch_view v;
    tfos__col st[64];
    const uint8_t *b;
    char err[256];
    CHECK_EQ(read_opts("bom.jsonl", "\xef\xbb\xbf{\"a\": 1}\n{\"a\": 2}\n", &o, &in, &v, st, &b, err), 0);
    CHECK(v.nrows == 2 && v.cols[0].name_len == 1 && v.cols[0].name[0] == 'a');
    tfos__input_close(in);
    CHECK_EQ(read_opts("r.jsonl", "[1.5]\n[1e400]\n", &o, &in, &v, st, &b, err), TFOS_EPROTO);
    CHECK(strstr(err, "r.jsonl line 2: a number out of range"));
    tfos__input_close(in);
    CHECK_EQ(read_opts("d.jsonl", "{\"a\": 1, \"b\": 2, \"a\": 3}\n", &o, &in, &v, st, &b, err), TFOS_EPROTO);
    CHECK(strstr(err, "d.jsonl line 1: a key appears twice"));
    tfos__input_close(in);
}

static void npy_headers(void)
{
    double d[3] = {1.5, 2.5, 3.5};
    uint8_t buf[1024];
    tfos__input *in;
    tfos__batch_view v;
    tfos__col st[64];
    char err[256];
    static const struct {
        const char *dict, *want;
    } bad[] = {
        {"{'descr': '<f4', 'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", "key 'descr' twice"},
        {"{'descr': '<f8', 'fortran_order': False, 'shape': (3,), 'shape': (1,), }", "key 'shape' twice"},
        {"{'descr': '<f8', 'fortran_order': False, 'shape': (3,), 'extra': 1, }", "unexpected key 'extra'"},
        {"{'descr': '<f8', 'shape': (3,), }", "header lacks"},
        {"{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (3,), }", "structured dtypes"},
        {"{'descr': '<f8', 'fortran_order': False, 'shape': (3,), } x", "text after the header"},
        {"{'descr': '<f8', 'fortran_order': Maybe, 'shape': (3,), }", "unreadable fortran_order"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *p = write_file("h.npy", buf, npy_with_header(buf, bad[i].dict, d, sizeof d));
        int rc = tfos__input_open(&in, p, TFOS_FMT_AUTO, -1, err, sizeof err);
        if (rc != TFOS_EPROTO || !strstr(err, bad[i].want) || !strstr(err, "h.npy")) {
            fprintf(stderr, "case %zu: rc %d, '%s' lacks '%s'\n", i, rc, err, bad[i].want);
            exit(1);
        }
    }
    /* the keys in another order, double quotes, no trailing comma */
    const char *p = write_file("h.npy", buf, npy_with_header(buf, "{\"shape\": (3,), \"fortran_order\": False, "
                                                             "\"descr\": \"<f8\"}", d, sizeof d));
    CHECK_EQ(read_all(p, 100, &v, st, err, &in), 0);
    CHECK(v.nrows == 3 && v.cols[0].dtype == TFOS_DT_F64 && v.cols[0].ndim == 0);
    tfos__input_close(in);
}

static void directory_refused(void)
{
    tfos__input *in;
    char err[256];
    char sub[300];
    snprintf(sub, sizeof sub, "%s/d.csv", dir);
    CHECK_EQ(mkdir(sub, 0700), 0);
    CHECK_EQ(tfos__input_open(&in, sub, TFOS_FMT_AUTO, -1, err, sizeof err), TFOS_EINVAL);
    CHECK(strstr(err, "d.csv: is a directory"));
    CHECK_EQ(rmdir(sub), 0);
}

/* A FIFO with no writer: opening does not wait, and a read waits only until
 * the stop flag is set. */
static _Atomic int stop_flag;

static void *set_stop(void *arg)
{
    (void)arg;
    usleep(100 * 1000);
    stop_flag = 1;
    return NULL;
}

static void fifo_waits_are_stoppable(void)
{
    char path[300];
    static const char *const names[] = {"p.csv", "p.jsonl", "p.npy"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        CHECK_EQ(mkfifo(path, 0600), 0);
        stop_flag = 0;
        pthread_t t;
        CHECK_EQ(pthread_create(&t, NULL, set_stop, NULL), 0);
        tfos__input_opts o = {.format = TFOS_FMT_AUTO, .csv_header = -1, .stop = &stop_flag};
        tfos__input *in = NULL;
        char err[256] = "";
        int rc = tfos__input_open_opts(&in, path, &o, err, sizeof err); /* .npy reads its header here */
        if (rc == 0) {
            const void *b;
            size_t len;
            uint64_t first;
            rc = tfos__input_next(in, 10, &b, &len, &first, err, sizeof err);
        }
        CHECK_EQ(pthread_join(t, NULL), 0);
        CHECK_EQ(rc, TFOS_ESTOPPED);
        CHECK(strstr(err, names[i]) && strstr(err, "stopped"));
        tfos__input_close(in);
        unlink(path);
    }
}

static unsigned long long rng = 88172645463325252ull;
#define next_rand() check_rand(&rng)

static void fuzz(void)
{
    static const char *seeds[] = {
        "a,b,c\n1,2.5,\"x,y\"\n2,3.5,\"q\"\"q\"\n",
        "{\"a\": [1, 2], \"b\": \"s\\u00e9\", \"c\": true}\n{\"a\": [3, 4], \"b\": \"t\", \"c\": false}\n",
    };
    static const char *names[] = {"f.csv", "f.jsonl"};
    char buf[256];
    for (int s = 0; s < 2; s++) {
        for (int iter = 0; iter < 3000; iter++) {
            size_t n = strlen(seeds[s]);
            memcpy(buf, seeds[s], n);
            for (int m = 0; m < 1 + (int)(next_rand() % 3) && n > 0; m++) {
                size_t at = next_rand() % n;
                if (next_rand() % 6 == 0)
                    n = at;
                else
                    buf[at] = (char)"\",\n\\[]{}:0a9e-."[next_rand() % 16];
            }
            const char *p = write_file(names[s], buf, n);
            tfos__input *in;
            char err[256];
            if (tfos__input_open(&in, p, TFOS_FMT_AUTO, -1, err, sizeof err))
                continue;
            const void *b;
            size_t len;
            uint64_t first;
            int rc;
            while ((rc = tfos__input_next(in, 2, &b, &len, &first, err, sizeof err)) == 0) {
                tfos__batch_view v;
                tfos__col st[64];
                CHECK_EQ(tfos__batch_open(b, len, &v, st, 64, err, sizeof err), 0); /* what it emits is valid */
            }
            tfos__input_close(in);
        }
    }
}

extern int tfos__jsonl_fast; /* input_jsonl.c: 0 sends every row through jansson */

/* The whole read of path: its batches' bytes one after the other, the
 * final rc (TFOS_EEND when it read to the end) and its error. */
static size_t read_whole(const char *path, uint8_t *out, size_t cap, int *rc, char *err)
{
    tfos__input *in;
    size_t used = 0;
    err[0] = 0;
    if ((*rc = tfos__input_open(&in, path, TFOS_FMT_JSONL, -1, err, 256)))
        return 0;
    const void *b;
    size_t len;
    uint64_t first;
    while ((*rc = tfos__input_next(in, 3, &b, &len, &first, err, 256)) == 0) {
        CHECK(used + len <= cap);
        memcpy(out + used, b, len);
        used += len;
    }
    tfos__input_close(in);
    return used;
}

/* The fast path (rows after the first) and jansson alone agree, row for
 * row: the same batches, the same error at the same line, on the edges of
 * numbers, strings, escapes, UTF-8 and layout, and on mutations of them. */
static void jsonl_fast_path_agrees_with_jansson(void)
{
    static const char *seeds[] = {
        "[1, 2.5, \"a\", true, [1, 2]]\n[-0, 1e308, \"\\u00e9\\ud83d\\ude00\\\"\\\\\\/\\b\\f\\n\\r\\t\", false, [3,4]]\n"
        "[ 9223372036854775807 ,-1E-400,\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\",true,[ -9223372036854775808 , 0 ]]\n"
        "[9223372036854775808, 1, \"x\", true, [1, 2]]\n",
        "{\"id\": 1, \"x\": 0.5, \"k\\u0061\": \"s\", \"v\": [1.5, 2]}\n{\"id\": 2, \"x\": 1, \"ka\": \"\\u0000\", "
        "\"v\": [3, 4.25e-3]}\n\t{ \"id\" : -3 , \"x\" : -0.0 , \"ka\" : \"\" , \"v\" : [ 5 , 6 ] }\r\n"
        "{\"id\": 4, \"x\": 2, \"k\\u0061\": \"t\", \"v\": [7, 8]}\n{\"id\": 5, \"x\": 1e999, \"ka\": \"u\", \"v\": [1, 2]}\n",
        "[\"a\", 1]\n[\"\\ud800\", 1]\n[\"\\udc00x\", 2]\n[\"\xed\xa0\x80\", 3]\n[\"\xc0\xaf\", 4]\n[\"\xf4\x90\x80\x80\", 5]\n",
        "{\"a\": 1}\n{\"a\": 1, \"a\": 2}\n{\"\\u0000\": 1}\n{\"a\": 01}\n{\"a\": 1.}\n{\"a\": .5}\n{\"a\": +1}\n",
    };
    static uint8_t fast[1 << 16], slow[1 << 16];
    char buf[512], ferr[256], serr[256];
    int fuzzed = 0;
    for (int s = 0; s < (int)(sizeof seeds / sizeof *seeds); s++) {
        for (int iter = 0; iter < 1500; iter++) {
            size_t n = strlen(seeds[s]);
            memcpy(buf, seeds[s], n);
            if (iter) {
                for (int m = 0; m < 1 + (int)(next_rand() % 3) && n > 0; m++) {
                    size_t at = next_rand() % n;
                    buf[at] = "\",\n\\[]{}:0a9eE-.+ u\x00\xc3\xa9\xed\xff\tdtf"[next_rand() % 27];
                }
                fuzzed++;
            }
            const char *p = write_file("agree.jsonl", buf, n);
            int frc, src;
            tfos__jsonl_fast = 1;
            size_t fn = read_whole(p, fast, sizeof fast, &frc, ferr);
            tfos__jsonl_fast = 0;
            size_t sn = read_whole(p, slow, sizeof slow, &src, serr);
            tfos__jsonl_fast = 1;
            if (frc != src || strcmp(ferr, serr) || fn != sn || memcmp(fast, slow, fn)) {
                fprintf(stderr, "seed %d iter %d: fast rc %d '%s' (%zu bytes), jansson rc %d '%s' (%zu bytes)\n%.*s\n",
                        s, iter, frc, ferr, fn, src, serr, sn, (int)n, buf);
                exit(1);
            }
            if (iter == 0 && s < 2)
                CHECK_EQ(frc, TFOS_EPROTO); /* each of these seeds ends in a row jansson refuses */
        }
    }
    CHECK(fuzzed > 5000);
}

/* Mutations of a .npy header: the dict parser refuses or reads, and what it
 * reads gives valid batches. */
static void fuzz_npy_header(void)
{
    double d[12];
    for (int i = 0; i < 12; i++)
        d[i] = i;
    static const char alphabet[] = "'\"{}():, 0123456789<>|fiubL_TrueFalsdescrshape";
    uint8_t seed[512], buf[512];
    size_t n = npy_bytes(seed, 1, "<f8", "(3, 4)", d, sizeof d, 0);
    size_t hl = seed[8] | (size_t)seed[9] << 8;
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(buf, seed, n);
        for (int m = 0; m < 1 + (int)(next_rand() % 4); m++)
            buf[10 + next_rand() % hl] = (uint8_t)alphabet[next_rand() % (sizeof alphabet - 1)];
        const char *p = write_file("f.npy", buf, n);
        tfos__input *in;
        char err[256];
        if (tfos__input_open(&in, p, TFOS_FMT_AUTO, -1, err, sizeof err))
            continue;
        const void *b;
        size_t len;
        uint64_t first;
        while (tfos__input_next(in, 2, &b, &len, &first, err, sizeof err) == 0) {
            tfos__batch_view v;
            tfos__col st[64];
            CHECK_EQ(tfos__batch_open(b, len, &v, st, 64, err, sizeof err), 0);
        }
        tfos__input_close(in);
    }
}

int main(void)
{
    CHECK(mkdtemp(dir));
    RUN(csv_basics);
    RUN(csv_no_header_and_batches);
    RUN(csv_errors);
    RUN(jsonl_rows);
    RUN(jsonl_errors);
    RUN(jsonl_floats_and_nul);
    RUN(npy_files);
    RUN(npy_fill_into_a_buffer);
    RUN(npy_shrinking_under_the_mapping);
    RUN(empty_and_unknown);
    RUN(csv_dialects_and_headers);
    RUN(jsonl_bom_and_ranges);
    RUN(npy_headers);
    RUN(directory_refused);
    RUN(fifo_waits_are_stoppable);
    RUN(fuzz);
    RUN(fuzz_npy_header);
    RUN(jsonl_fast_path_agrees_with_jansson);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK_EQ(system(cmd), 0);
    return 0;
}
