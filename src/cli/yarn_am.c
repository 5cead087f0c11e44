/* yarn_am.c: `tfos yarn-am` (internal): tfos run, or tfos serve, inside the
 * YARN ApplicationMaster's container (docs/YARN.md). The ApplicationMaster
 * (yarn/, Java) starts it with the Unix socket it takes container requests
 * on, the host to listen on, each role's container size and the file to
 * write the addresses to; the launcher then starts every node through a
 * stand-in (src/launch/backend_yarn.c, tfos yarn-container). */
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/run.h"
#include "cli/serve.h"
#include "cli/yarn_opts.h"
#include "launch/launch.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

const char tfos__yarn_am_help[] =
    "usage: tfos yarn-am --am-socket S --bind HOST --resources R --address-file F [run options] -- PROGRAM...\n"
    "\n"
    "Internal: tfos run inside the YARN ApplicationMaster's container; every agent starts in a\n"
    "container of its own through tfos yarn-container.\n";

typedef struct am_cli {
    const char *am_socket, *bind, *resources, *address_file;
} am_cli;

/* yarn-am's own options, before run's (tfos__run_extra_fn). */
static int am_option(void *user, tfos__args *it, const char *a)
{
    am_cli *am = user;
    if (!strcmp(a, "--am-socket"))
        return tfos__opt_need(a, am->am_socket = tfos__args_value(it), "a path") ? 2 : 1;
    if (!strcmp(a, "--bind"))
        return tfos__opt_need(a, am->bind = tfos__args_value(it), "an address") ? 2 : 1;
    if (!strcmp(a, "--resources"))
        return tfos__opt_need(a, am->resources = tfos__args_value(it), "a list") ? 2 : 1;
    if (!strcmp(a, "--address-file"))
        return tfos__opt_need(a, am->address_file = tfos__args_value(it), "a file name") ? 2 : 1;
    return tfos__yarn_option_elsewhere(a);
}

int tfos__cmd_yarn_am(int argc, char **argv)
{
    am_cli am = {0};
    tfos__run_cli r;
    int rc = tfos__run_parse(&r, argc, argv, am_option, &am);
    if (rc == TFOS__HELP) {
        fputs(tfos__yarn_am_help, stdout);
        return 0;
    }
    if (rc)
        return rc;
    if (!am.am_socket || !am.bind || !am.resources || !am.address_file)
        return tfos__usage_error("%s", "yarn-am needs --am-socket, --bind, --resources and --address-file");
    if (r.argv && r.argv[0] && !strcmp(r.argv[0], "serve")) { /* tfos yarn serve's */
        int n = 0;
        while (r.argv[n])
            n++;
        tfos__serve_am sa = {.am_socket = am.am_socket, .address_file = am.address_file, .bind = am.bind,
                             .resources = am.resources};
        return tfos__serve_on_yarn(n - 1, r.argv + 1, &sa);
    }
    if ((rc = tfos__run_check(&r)))
        return rc;
    char exe[PATH_MAX];
    if (tfos__self_path(exe, sizeof exe)) {
        fprintf(stderr, "tfos: cannot find my own executable: %s\n", strerror(errno));
        return 1;
    }
    tfos_run_opts o;
    tfos__run_opts(&r, exe, &o);
    tfos__launch_opts lo = {0};
    tfos__yarn_cfg cfg;
    tfos__launch_on_yarn(&o, &lo, &cfg, exe, am.am_socket, am.resources, am.bind, am.address_file);
    for (int i = 0; i < r.ninputs; i++)
        if (access(r.inputs[i], R_OK)) {
            fprintf(stderr, "tfos: --input %s: %s\n", r.inputs[i], strerror(errno));
            return 2;
        }
    tfos__catch_stop_signals();
    int code = 1;
    tfos_local *l;
    rc = tfos__launch_open(&l, &o, &lo);
    if (!rc && (rc = tfos__launch_start(l)))
        tfos_local_close(l);
    if (rc) {
        fprintf(stderr, "tfos: could not start the cluster: %s\n", tfos_strerror(rc));
        return 1;
    }
    tfos__launch_run(l, tfos__stop_flag(), &code);
    tfos_local_close(l);
    return code;
}
