/* tracker_test.c: the MLflow tracker (track/tracker.h) without a server:
 * a URI that is not http(s) is refused naming the fix; a closed port is
 * warned about once, however much is queued, the run has no id, and the
 * end's summary counts every param, tag and metric that was not logged
 * (reports' per-rank and mean metrics included; a nan skipped). The real
 * server's side is tests/python/test_tracking.py. */
#include "check.h"
#include "track/tracker.h"
#include "tfos/tfos.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int warnings;
static char first_warning[1024];

static void logger(int level, const char *msg, void *user)
{
    (void)user;
    if (level == TFOS_LOG_WARN && !warnings++)
        snprintf(first_warning, sizeof first_warning, "%s", msg);
}

int main(void)
{
    tfos_set_logger(logger, NULL);
    tfos__tracker *t;
    char err[600];
    CHECK_EQ(tfos__tracker_open(&t, "file:///tmp/mlruns", NULL, NULL, err, sizeof err), TFOS_EINVAL);
    CHECK(strstr(err, "file:///tmp/mlruns") && strstr(err, "http://"));

    /* a port nobody listens on: bound, then closed */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    CHECK(bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    char uri[64];
    snprintf(uri, sizeof uri, "http://127.0.0.1:%d", ntohs(a.sin_port));
    close(fd);
    CHECK_EQ(tfos__tracker_open(&t, uri, "exp", "name", err, sizeof err), 0);
    CHECK_STR(tfos__tracker_run_id(t), "");
    CHECK_EQ(warnings, 1);
    CHECK(strstr(first_warning, uri) && strstr(first_warning, "goes on"));
    tfos__tracker_param(t, "workers", "2");
    tfos__tracker_tag(t, "tfos.attempts", "1");
    for (int step = 1; step <= 50; step++) {
        char r[64];
        snprintf(r, sizeof r, "step=%d loss=%g", step, 1.0 / step);
        tfos__tracker_report(t, 0, r, 0); /* rank0/loss and loss */
        tfos__tracker_report(t, 1, r, 0); /* rank1/loss */
    }
    tfos__tracker_report(t, 1, "step=51 loss=nan", 0);
    char summary[1024];
    tfos__tracker_end(t, "FINISHED", summary, sizeof summary);
    CHECK_EQ(warnings, 2); /* the one at the start, and the end's summary */
    CHECK(strstr(summary, "no run was made at ") && strstr(summary, uri) && strstr(summary, "nothing was logged"));
    CHECK(strstr(summary, "150 of 150 metrics") && strstr(summary, "1 of 1 params") && strstr(summary, "1 of 1 tags"));
    tfos__tracker_close(t);
    printf("ok\n");
    return 0;
}
