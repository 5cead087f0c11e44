/* coordinator.c: `tfos coordinator [options]` (internal): a coordinator
 * alone, for agents started by hand or by other tools (the Spark Connect
 * engine starts one per attempt: python/tfos/_spark/session.py). Prints
 * TFOS_SECRET (unless set in the environment) and TFOS_COORD_ADDR. */
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/yarn_opts.h"
#include "core/auth.h"
#include "core/log.h"
#include "core/loop.h"
#include "platform/clock.h"
#include "platform/fs.h"
#include "roles/coord.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char tfos__coordinator_help[] =
    "usage: tfos coordinator --workers N [options]\n"
    "\n"
    "Internal: a coordinator alone, for agents started by hand or by other tools. Prints\n"
    "TFOS_SECRET (unless set in the environment) and TFOS_COORD_ADDR.\n"
    "\n"
    "options:\n"
    "  -h, --help               show this help and exit\n"
    TFOS__CLUSTER_OPTIONS
    "  --listen HOST:PORT       address to listen on (default 127.0.0.1:0)\n"
    "  --address-file F         also write HOST:PORT to F (atomically, once listening)\n"
    "  --attempt N              the attempt the nodes are told (TFOS_ATTEMPT; default 1)\n"
    "  --framework F            tf (default), torch or jax: what each node is sent of the cluster\n"
    "                           (tfos run --help)\n"
    "  --lease S                stop the cluster when no status query came for S seconds (the\n"
    "                           client that queries is gone; default: no lease)\n"
    "  --linger S               once the cluster is over, keep answering status queries for up to\n"
    "                           S seconds, or until a client releases it (default 0)\n";

typedef struct coordinator_cli {
    tfos__cluster_cli cluster;
    const char *listen, *address_file, *framework;
    int attempt;
    double lease, linger;
    char **argv; /* a program given: refused */
} coordinator_cli;

/* 1 taken, 0 not one, 2 a usage error. */
static int coordinator_option(coordinator_cli *c, tfos__args *it, const char *a)
{
    if (!strcmp(a, "--listen"))
        return tfos__opt_need(a, c->listen = tfos__args_value(it), "HOST:PORT") ? 2 : 1;
    if (!strcmp(a, "--address-file"))
        return tfos__opt_need(a, c->address_file = tfos__args_value(it), "a file name") ? 2 : 1;
    if (!strcmp(a, "--framework")) {
        c->framework = tfos__args_value(it);
        if (!c->framework || tfos_framework_spec_form(c->framework) < 0)
            return tfos__usage_error("--framework takes tf, torch or jax; got '%s'",
                                     c->framework ? c->framework : "");
        return 1;
    }
    if (!strcmp(a, "--attempt"))
        return tfos__opt_int(a, tfos__args_value(it), 1, INT_MAX, &c->attempt) ? 2 : 1;
    if (!strcmp(a, "--lease"))
        return tfos__opt_secs(a, tfos__args_value(it), 0, &c->lease) ? 2 : 1;
    if (!strcmp(a, "--linger"))
        return tfos__opt_secs(a, tfos__args_value(it), 1, &c->linger) ? 2 : 1;
    if (!strcmp(a, "--cluster-id")) /* names the cluster on the command line, for people and ps; not used */
        return tfos__opt_need(a, tfos__args_value(it), "an id") ? 2 : 1;
    return 0;
}

/* tfos__opt_fn over everything the coordinator takes. */
static int coordinator_any(void *user, tfos__args *it, const char *a)
{
    coordinator_cli *c = user;
    if (!strcmp(a, "--am-socket") || !strcmp(a, "--bind") || !strcmp(a, "--resources"))
        return tfos__usage_error("%s is an option of tfos yarn", "--am-socket/--bind/--resources");
    int taken = tfos__yarn_option_elsewhere(a);
    if (!taken)
        taken = tfos__cluster_option(&c->cluster, it, a);
    if (!taken)
        taken = coordinator_option(c, it, a);
    return taken;
}

/* 0, 2 (a usage error, reported) or TFOS__HELP. */
static int coordinator_parse(coordinator_cli *c, int argc, char **argv)
{
    memset(c, 0, sizeof *c);
    tfos__cluster_init(&c->cluster);
    return tfos__args_parse(argc, argv, coordinator_any, c, &c->argv);
}

/* Write "HOST:PORT\n" to path, whole. */
static int write_address_file(const char *path, const char *addr)
{
    char text[300];
    snprintf(text, sizeof text, "%s\n", addr);
    return tfos__write_file_whole(path, text);
}

int tfos__cmd_coordinator(int argc, char **argv)
{
    coordinator_cli c;
    int rc = coordinator_parse(&c, argc, argv);
    if (rc == TFOS__HELP) {
        fputs(tfos__coordinator_help, stdout);
        return 0;
    }
    if (rc || (rc = tfos__cluster_check(&c.cluster, "coordinator")))
        return rc;
    if (c.argv && c.argv[0])
        return tfos__usage_error("coordinator runs no program, got '%s'", c.argv[0]);
    char host[256] = "127.0.0.1";
    int port = 0;
    if (c.listen) {
        const char *colon = strrchr(c.listen, ':');
        if (!colon || (size_t)(colon - c.listen) >= sizeof host || tfos__parse_int(colon + 1, 0, 65535, &port))
            return tfos__usage_error("--listen needs HOST:PORT, got '%s'", c.listen);
        memcpy(host, c.listen, (size_t)(colon - c.listen));
        host[colon - c.listen] = '\0';
    }
    char fresh[TFOS_HEX_SECRET_LEN + 1];
    const char *secret = getenv("TFOS_SECRET");
    if (!secret || !*secret) {
        if (tfos__random_hex(fresh, 32))
            return 1;
        secret = fresh;
        printf("TFOS_SECRET=%s\n", secret);
    }
    const tfos__cluster_cli *cl = &c.cluster;
    tfos_coord_opts o = {.layout = cl->layout, .bind_host = host, .port = port, .secret = secret,
                         .reservation_timeout = cl->reservation_timeout, .stop_grace = cl->grace,
                         .failure_grace = cl->failure_grace, .heartbeat_timeout = cl->heartbeat_timeout,
                         .lease_timeout = c.lease, .attempt = c.attempt,
                         .spec_form = tfos_framework_spec_form(c.framework)};
    tfos_coord *co;
    rc = tfos_coord_open(&co, &o);
    if (rc) {
        fprintf(stderr, "tfos: cannot start the coordinator on %s:%d: %s\n", host, port,
                rc == TFOS_ESYS ? strerror(errno) : tfos_strerror(rc));
        return 1;
    }
    printf("TFOS_COORD_ADDR=%s\n", tfos_coord_address(co));
    fflush(stdout);
    if (c.address_file && write_address_file(c.address_file, tfos_coord_address(co))) {
        fprintf(stderr, "tfos: cannot write %s: %s\n", c.address_file, strerror(errno));
        tfos_coord_close(co);
        return 1;
    }
    tfos__catch_stop_signals();
    volatile int *got_signal = tfos__stop_flag();
    int stopped = 0;
    while (tfos_coord_step(co, 100) < TFOS_COORD_DONE) {
        if (*got_signal && !stopped) {
            char reason[96];
            snprintf(reason, sizeof reason, "interrupted by signal %d (%s)", *got_signal, strsignal(*got_signal));
            tfos_coord_stop(co, reason);
            stopped = 1;
        }
    }
    /* the outcome stays readable for a while: its client asks for it */
    int64_t linger_until = tfos__now_ms() + (int64_t)(c.linger * 1000);
    while (c.linger > 0 && !*got_signal && !tfos_coord_released(co) && tfos__now_ms() < linger_until)
        tfos__loop_run(tfos__coord_loop(co), 100);
    char start[1024];
    if (!tfos__coord_start_summary(co, start, sizeof start))
        TFOS_INFO("%s", start);
    int code = 0;
    if (tfos_coord_state(co) == TFOS_COORD_FAILED) {
        fprintf(stderr, "tfos: the cluster failed:\n%s\n", tfos_coord_failure(co));
        code = stopped ? 128 + *got_signal : tfos_coord_failure_code(co) == TFOS_ETIMEDOUT ? 124 : 1;
    }
    tfos_coord_close(co);
    return code;
}
