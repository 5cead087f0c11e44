/* report_test.c: tests of the progress report's text form
 * (src/core/report.c): what ctx.report() builds, what every reader accepts,
 * and the JSON the status page gets. */
#include "core/report.h"

#include "check.h"
#include "tfos/tfos.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *as_json(const char *text)
{
    return check_capture(tfos__report_json, text);
}

static void test_build_and_json(void)
{
    char buf[256] = "";
    size_t len = 0;
    CHECK_EQ(tfos__report_add(buf, sizeof buf, &len, "step", 4, 120), 0);
    CHECK_EQ(tfos__report_add(buf, sizeof buf, &len, "loss", 4, 0.3125), 0);
    CHECK_EQ(tfos__report_add(buf, sizeof buf, &len, "val.acc_1", 9, NAN), 0);
    CHECK_EQ(tfos__report_add(buf, sizeof buf, &len, "lr", 2, -INFINITY), 0);
    CHECK_STR(buf, "step=120 loss=0.3125 val.acc_1=nan lr=-inf");
    CHECK_EQ(len, strlen(buf));
    CHECK_EQ(tfos__report_check(buf, NULL), 0);
    char *j = as_json(buf);
    CHECK_STR(j, "{\"step\": 120, \"loss\": 0.3125, \"val.acc_1\": \"nan\", \"lr\": \"-inf\"}");
    free(j);
    j = as_json("");
    CHECK_STR(j, "{}");
    free(j);
    j = as_json(NULL);
    CHECK_STR(j, "null");
    free(j);
}

static void test_bad_names_and_limits(void)
{
    char buf[64] = "";
    size_t len = 0;
    CHECK_EQ(tfos__report_add(buf, sizeof buf, &len, "1st", 3, 1), TFOS_EINVAL);
    CHECK_EQ(tfos__report_add(buf, sizeof buf, &len, "a b", 3, 1), TFOS_EINVAL);
    CHECK_EQ(tfos__report_add(buf, sizeof buf, &len, "a=b", 3, 1), TFOS_EINVAL);
    CHECK_EQ(tfos__report_add(buf, sizeof buf, &len, "", 0, 1), TFOS_EINVAL);
    CHECK_EQ(tfos__report_add(buf, sizeof buf, &len, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 33, 1), TFOS_EINVAL);
    CHECK_EQ(len, 0);
    CHECK_STR(buf, "");
    /* a pair that does not fit is not half-written */
    for (int i = 0; i < 10; i++)
        if (tfos__report_add(buf, sizeof buf, &len, "abcdefgh", 8, 123456.0) == TFOS_ETOOBIG)
            break;
    CHECK(len < sizeof buf && strlen(buf) == len);
    CHECK_EQ(tfos__report_check(buf, NULL), 0);
    /* at most 16 pairs */
    char big[1024] = "";
    len = 0;
    for (int i = 0; i < 16; i++)
        CHECK_EQ(tfos__report_add(big, sizeof big, &len, "k", 1, i), 0);
    CHECK_EQ(tfos__report_add(big, sizeof big, &len, "k", 1, 16), TFOS_EINVAL);
}

/* Whatever text a program leaves in the ring, a reader rejects what is not a
 * report and writes valid JSON (null) for it. */
static void test_hostile_text(void)
{
    static const char *const bad[] = {"step", "step=", "=1", "step=1 ", " step=1", "step=1  loss=2", "step=x",
                                      "step=1x", "step= 1", "a\"b=1", "a=1\nb=2", "step=0x10", "a=1,b=2",
                                      "é=1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *why = NULL;
        CHECK_EQ(tfos__report_check(bad[i], &why), TFOS_EPROTO);
        CHECK(why != NULL);
        char *j = as_json(bad[i]);
        CHECK_STR(j, "null");
        free(j);
    }
    char *j = as_json("a=1e300 b=-2.5e-7 c=inf");
    CHECK_STR(j, "{\"a\": 1e+300, \"b\": -2.5e-07, \"c\": \"inf\"}");
    free(j);
}

int main(void)
{
    RUN(test_build_and_json);
    RUN(test_bad_names_and_limits);
    RUN(test_hostile_text);
    return 0;
}
