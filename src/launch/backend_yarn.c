/* backend_yarn.c: nodes in YARN containers, from the ApplicationMaster's
 * container (backend.h; docs/YARN.md).
 *
 * What the launcher sees as a node's agent process is a stand-in on this
 * host, `tfos yarn-container --am-socket S --resources R --role JOB --
 * AGENT-ARGV...` (src/cli/yarn_container.c): it asks the ApplicationMaster,
 * over the Unix socket the ApplicationMaster gave the launcher, for one
 * container with the role's resources, has the agent command run in it,
 * and exits with the container's exit status. When the launcher ends it (an
 * attempt over, the run stopped), its socket closes and the ApplicationMaster
 * stops the container. So the stand-ins are local children, and every op
 * but start is the local backend's; start puts the stand-in's words in
 * front of the agent's command.
 *
 * The agents run on other hosts: they register with --host auto and forward
 * their program's output (their console is a container log, not the
 * user's). tfos__launch_on_yarn sets a launcher up for this (launch.h). */
#include "launch/backend.h"
#include "launch/launch.h"

#include "tfos/tfos.h"

#include <stdlib.h>
#include <string.h>

typedef struct yarn {
    void *local;          /* tfos__backend_local's state: the stand-ins */
    const tfos__yarn_cfg *cfg;
} yarn;

static int yarn_open(void **out, tfos__loop *loop, const void *cfg, int n, tfos__node_ended_fn ended, void *user)
{
    const tfos__yarn_cfg *c = cfg;
    if (!c || !c->exe || !c->am_socket || !c->resources)
        return TFOS_EINVAL;
    yarn *y = calloc(1, sizeof *y);
    if (!y)
        return TFOS_ENOMEM;
    /* the stand-ins out of the container's process group: YARN's
     * GRACEFUL_SHUTDOWN (tfos yarn kill --graceful) signals that group, and
     * the launcher alone must take it (it drains the nodes) */
    static const tfos__local_cfg own_groups = {.new_pgroup = 1};
    int rc = tfos__backend_local.open(&y->local, loop, &own_groups, n, ended, user);
    if (rc) {
        free(y);
        return rc;
    }
    y->cfg = c;
    *out = y;
    return 0;
}

static int yarn_start(void *state, const tfos__node_launch *spec)
{
    yarn *y = state;
    size_t argc = 0;
    while (spec->argv[argc])
        argc++;
    char **argv = calloc(argc + 10, sizeof *argv);
    if (!argv)
        return TFOS_ENOMEM;
    size_t k = 0;
    argv[k++] = (char *)y->cfg->exe;
    argv[k++] = "yarn-container";
    argv[k++] = "--am-socket";
    argv[k++] = (char *)y->cfg->am_socket;
    argv[k++] = "--resources";
    argv[k++] = (char *)y->cfg->resources;
    argv[k++] = "--role";
    argv[k++] = (char *)spec->job;
    argv[k++] = "--";
    memcpy(argv + k, spec->argv, argc * sizeof *argv);
    tfos__node_launch standin = *spec;
    standin.argv = argv;
    int rc = tfos__backend_local.start(y->local, &standin);
    free(argv);
    return rc;
}

static void yarn_stop(void *state, int id, int force)
{
    tfos__backend_local.stop(((yarn *)state)->local, id, force);
}

static int yarn_observe(void *state, int id, int *status)
{
    return tfos__backend_local.observe(((yarn *)state)->local, id, status);
}

static void yarn_close(void *state)
{
    yarn *y = state;
    if (!y)
        return;
    tfos__backend_local.close(y->local);
    free(y);
}

const tfos__backend_ops tfos__backend_yarn = {
    .name = "yarn",
    .agent_host = "auto",
    .forward_logs = 1,
    .open = yarn_open,
    .start = yarn_start,
    .stop = yarn_stop,
    .observe = yarn_observe,
    .close = yarn_close,
};

void tfos__launch_on_yarn(tfos_run_opts *o, tfos__launch_opts *lo, tfos__yarn_cfg *cfg, const char *exe,
                          const char *am_socket, const char *resources, const char *bind, const char *address_file)
{
    cfg->exe = exe;
    cfg->am_socket = am_socket;
    cfg->resources = resources;
    lo->backend = &tfos__backend_yarn;
    lo->backend_cfg = cfg;
    lo->bind_host = bind;
    if (!o->status_host)
        o->status_host = bind;
    lo->address_file = address_file;
    lo->secret = getenv("TFOS_SECRET");
}
