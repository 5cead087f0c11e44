/* oip_test.c: the Open Inference Protocol request reader and the float
 * writer of tfos serve's front end (src/serve/oip.c). */
#include "serve/oip.h"

#include "core/batch.h"

#include "check.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse(const char *body, tfos__oip_request *rq, char *err)
{
    return tfos__oip_parse(body, strlen(body), rq, err, 300);
}

static void test_a_request_is_read(void)
{
    tfos__oip_request rq;
    char err[300] = "";
    const char *body = "{\"parameters\": {\"x\": [1, {\"y\": null}]}, \"id\": \"r\\u00e9-1\",\n"
                       " \"inputs\": [{\"data\": [[1.5, -2e-1], [3, 4]], \"name\": \"pix\\\"els\", \"shape\": [2, 2],"
                       " \"datatype\": \"FP32\"},\n  {\"name\": \"k\", \"shape\": [2], \"datatype\": \"INT64\","
                       " \"data\": [-9223372036854775808, 9223372036854775807]}],"
                       " \"outputs\": [{\"name\": \"out\"}, {}]}";
    CHECK_EQ(parse(body, &rq, err), 0);
    CHECK_STR(rq.id, "r\xc3\xa9-1");
    CHECK_EQ(rq.ninputs, 2);
    CHECK(rq.inputs_is_list && rq.outputs_is_list && rq.has_outputs);
    CHECK_STR(rq.inputs[0].name, "pix\"els");
    CHECK_STR(rq.inputs[0].datatype, "FP32");
    CHECK_EQ(rq.inputs[0].ndim, 2);
    CHECK_EQ(rq.inputs[0].shape[0], 2);
    float f[4];
    size_t at;
    CHECK_EQ(tfos__oip_numbers(rq.inputs[0].data, rq.inputs[0].data_len, TFOS_DT_F32, f, 4, &at), 0);
    CHECK(f[0] == 1.5f && f[1] == -0.2f && f[2] == 3.0f && f[3] == 4.0f);
    int64_t k[2];
    CHECK_EQ(tfos__oip_numbers(rq.inputs[1].data, rq.inputs[1].data_len, TFOS_DT_I64, k, 2, &at), 0);
    CHECK(k[0] == INT64_MIN && k[1] == INT64_MAX);
    CHECK_EQ(rq.noutputs, 2);
    CHECK_STR(rq.outputs[0], "out");
    CHECK_STR(rq.outputs[1], "");
}

static void test_bad_json_is_named_with_its_place(void)
{
    tfos__oip_request rq;
    char err[300];
    const char *bad[] = {"", "{", "{\"inputs\": [1,]}", "{\"a\" 1}", "{\"a\": tru}", "{\"a\": 01}", "{\"a\": 1.}",
                         "{\"a\": \"x\\q\"}", "{\"a\": \"\x01\"}", "{\"a\": 1} x", "[1]", "{\"a\": \"\\ud800\"}",
                         "{\"a\": -}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = 0;
        CHECK_EQ(parse(bad[i], &rq, err), -1);
        CHECK(err[0]);
    }
    CHECK_EQ(parse("{\n  \"inputs\": [1,]}", &rq, err), -1);
    CHECK(strstr(err, "(line 2, column 16)"));
    /* deep nesting is refused, not recursed into */
    char deep[400];
    memset(deep, '[', sizeof deep);
    memcpy(deep, "{\"a\":", 5);
    deep[sizeof deep - 1] = 0;
    CHECK_EQ(parse(deep, &rq, err), -1);
    CHECK(strstr(err, "nested too deep"));
}

static void test_numbers_by_dtype(void)
{
    size_t at;
    uint8_t u8[3];
    CHECK_EQ(tfos__oip_numbers("[1, 2, 255]", 11, TFOS_DT_U8, u8, 3, &at), 0);
    CHECK_EQ(tfos__oip_numbers("[1, 2, 256]", 11, TFOS_DT_U8, u8, 3, &at), -2);
    CHECK_EQ(at, 2);
    CHECK_EQ(tfos__oip_numbers("[1, -1]", 7, TFOS_DT_U8, u8, 2, &at), -2);
    int32_t i32[2];
    float f32[2];
    CHECK_EQ(tfos__oip_numbers("[1, 2.5]", 8, TFOS_DT_I32, i32, 2, &at), -2);
    CHECK_EQ(tfos__oip_numbers("[1, \"2\"]", 8, TFOS_DT_F32, f32, 2, &at), -2);
    CHECK_EQ(tfos__oip_numbers("[true, false]", 13, TFOS_DT_BOOL, u8, 2, &at), 0);
    CHECK(u8[0] == 1 && u8[1] == 0);
    CHECK_EQ(tfos__oip_numbers("[true]", 6, TFOS_DT_F32, f32, 1, &at), -2);
    float f[2];
    CHECK_EQ(tfos__oip_numbers("[1]", 3, TFOS_DT_F32, f, 2, &at), -1);
    CHECK_EQ(at, 1);
    CHECK_EQ(tfos__oip_numbers("[1, 2, 3]", 9, TFOS_DT_F32, f, 2, &at), -3);
    double d[3];
    /* the fast path and strtod agree with strtod, to the last bit */
    const char *lit = "[0.1, 123456789012345678901234567890e-10, 2.2250738585072014e-308]";
    CHECK_EQ(tfos__oip_numbers(lit, strlen(lit), TFOS_DT_F64, d, 3, &at), 0);
    CHECK(d[0] == strtod("0.1", NULL) && d[1] == strtod("123456789012345678901234567890e-10", NULL) &&
          d[2] == strtod("2.2250738585072014e-308", NULL));
}

/* Issue 35, item 10: the whole range of each dtype is taken, nothing
 * beyond it: UINT64 up to 2^64 - 1, a long but valid FP64 literal, and no
 * infinity from a literal out of range. */
static void test_numbers_at_the_edges(void)
{
    size_t at;
    uint64_t u[2];
    const char *top = "[18446744073709551615, 18446744073709551609]";
    CHECK_EQ(tfos__oip_numbers(top, strlen(top), TFOS_DT_U64, u, 2, &at), 0);
    CHECK(u[0] == UINT64_MAX && u[1] == UINT64_MAX - 6);
    CHECK_EQ(tfos__oip_numbers("[18446744073709551616]", 22, TFOS_DT_U64, u, 1, &at), -2);
    CHECK_EQ(tfos__oip_numbers("[99999999999999999999]", 22, TFOS_DT_U64, u, 1, &at), -2);
    /* 521 digits: a double still, as strtod reads it */
    char lit[600] = "[1.";
    for (int i = 0; i < 520; i++)
        lit[3 + i] = (char)('0' + (i * 7) % 10);
    strcpy(lit + 523, "]");
    double d[2];
    CHECK_EQ(tfos__oip_numbers(lit, strlen(lit), TFOS_DT_F64, d, 1, &at), 0);
    CHECK(d[0] == strtod(lit + 1, NULL));
    float f[2];
    CHECK_EQ(tfos__oip_numbers(lit, strlen(lit), TFOS_DT_F32, f, 1, &at), 0);
    /* beyond the range: refused, naming the element, never infinity */
    CHECK_EQ(tfos__oip_numbers("[1, 1e400]", 10, TFOS_DT_F64, d, 2, &at), -2);
    CHECK_EQ(at, 1);
    CHECK_EQ(tfos__oip_numbers("[-1e400]", 8, TFOS_DT_F64, d, 1, &at), -2);
    CHECK_EQ(tfos__oip_numbers("[0, 1e39]", 9, TFOS_DT_F32, f, 2, &at), -2);
    CHECK_EQ(at, 1);
    CHECK_EQ(tfos__oip_numbers("[3.4028235e38, 1e-400]", 22, TFOS_DT_F32, f, 2, &at), 0);
    CHECK(f[0] == 3.4028235e38f && f[1] == 0);
    CHECK_EQ(tfos__oip_numbers("[1.7976931348623157e308]", 24, TFOS_DT_F64, d, 1, &at), 0);
}

/* Issue 35, item 10: a key given twice is refused (JSONL input refuses it
 * too), and an "id" or a name longer than its field is refused naming the
 * limit, not cut: -2, valid JSON refused. */
static void test_duplicates_and_long_strings_are_refused(void)
{
    tfos__oip_request rq;
    char err[300] = "";
    const char *dup = "{\"inputs\": [{\"name\": \"a\", \"shape\": [1], \"datatype\": \"FP32\", \"data\": [1]}],\n"
                      " \"inputs\": [{\"name\": \"b\", \"shape\": [1], \"datatype\": \"FP32\", \"data\": [2]}]}";
    CHECK_EQ(parse(dup, &rq, err), -2);
    CHECK(strstr(err, "the key \"inputs\" is given twice in one object (line 2, column"));
    CHECK_EQ(parse("{\"inputs\": [{\"name\": \"a\", \"name\": \"b\"}]}", &rq, err), -2);
    CHECK(strstr(err, "the key \"name\" is given twice"));
    CHECK_EQ(parse("{\"inputs\": [{\"data\": [1], \"data\": [2]}]}", &rq, err), -2);
    CHECK_EQ(parse("{\"id\": \"a\", \"id\": \"b\"}", &rq, err), -2);
    /* keys it does not read may repeat (it keeps none of them) */
    CHECK_EQ(parse("{\"x\": 1, \"x\": 2, \"inputs\": []}", &rq, err), 0);
    char body[1200];
    char id[300];
    memset(id, 'i', 255);
    id[255] = 0;
    snprintf(body, sizeof body, "{\"id\": \"%s\", \"inputs\": []}", id);
    CHECK_EQ(parse(body, &rq, err), 0);
    CHECK_EQ(strlen(rq.id), 255);
    id[255] = 'i';
    id[256] = 0;
    snprintf(body, sizeof body, "{\"id\": \"%s\", \"inputs\": []}", id);
    CHECK_EQ(parse(body, &rq, err), -2);
    CHECK(strstr(err, "the request's \"id\" is longer than 255 bytes, the most tfos serve takes (line 1, column 8)"));
    char name[200];
    memset(name, 'n', 128);
    name[128] = 0;
    snprintf(body, sizeof body, "{\"inputs\": [{\"name\": \"%s\"}]}", name);
    CHECK_EQ(parse(body, &rq, err), -2);
    CHECK(strstr(err, "an input's \"name\" is longer than 127 bytes"));
    snprintf(body, sizeof body, "{\"inputs\": [], \"outputs\": [{\"name\": \"%s\"}]}", name);
    CHECK_EQ(parse(body, &rq, err), -2);
}

/* Every float the writer prints reads back as itself, and the text is
 * what %.9g would print, in value. */
static void test_floats_round_trip(void)
{
    uint32_t x = 2463534242u;
    char b[48];
    for (int i = 0; i < 2000000; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        float v;
        memcpy(&v, &x, 4);
        int n = tfos__oip_fmt_f32(b, v);
        b[n] = 0;
        if (!isfinite(v)) {
            CHECK_STR(b, "null");
            continue;
        }
        float w = strtof(b, NULL);
        if (memcmp(&v, &w, 4) && !(v == 0 && w == 0)) {
            fprintf(stderr, "%.9g printed as %s\n", (double)v, b);
            CHECK(0);
        }
    }
    const struct {
        float v;
        const char *want;
    } cases[] = {{0.5f, "0.5"}, {1.0f, "1"}, {-3.0f, "-3"}, {0.1f, "0.100000001"}, {1e9f, "1e+09"},
                 {123456.0f, "123456"}, {1e-5f, "9.99999975e-06"}, {0.0f, "0"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int n = tfos__oip_fmt_f32(b, cases[i].v);
        b[n] = 0;
        CHECK_STR(b, cases[i].want);
    }
}

/* Mutated requests: every one is read or refused, never a crash (run under
 * ASan by make test-asan). */
static void test_mutations_never_crash(void)
{
    const char *seed = "{\"id\": \"a\", \"inputs\": [{\"name\": \"x\", \"shape\": [2, 3], \"datatype\": \"FP32\", "
                       "\"data\": [[1, 2, 3], [4.5, -6e2, 0.25]]}], \"outputs\": [{\"name\": \"y\"}]}";
    size_t n = strlen(seed);
    uint32_t r = 12345;
    char buf[512];
    tfos__oip_request rq;
    char err[300];
    for (int i = 0; i < 200000; i++) {
        memcpy(buf, seed, n);
        size_t len = n;
        for (int k = 0; k < 1 + i % 4; k++) {
            r = r * 1103515245u + 12345u;
            size_t at = (r >> 8) % len;
            static const char alpha[] = "{}[]\":,0123456789-eE.+ tfnul\\x";
            buf[at] = alpha[(r >> 20) % (sizeof alpha - 1)];
            if ((r & 7) == 0 && len > 10)
                len -= (r >> 4) % 10;
        }
        if (tfos__oip_parse(buf, len, &rq, err, sizeof err) == 0) {
            for (int j = 0; j < rq.ninputs; j++) {
                float out[64];
                size_t at;
                if (rq.inputs[j].has_data)
                    (void)tfos__oip_numbers(rq.inputs[j].data, rq.inputs[j].data_len, TFOS_DT_F32, out, 64, &at);
            }
        }
    }
}

int main(void)
{
    test_a_request_is_read();
    test_bad_json_is_named_with_its_place();
    test_numbers_by_dtype();
    test_numbers_at_the_edges();
    test_duplicates_and_long_strings_are_refused();
    test_floats_round_trip();
    test_mutations_never_crash();
    printf("oip_test: ok\n");
    return 0;
}
