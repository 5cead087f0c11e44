/* main.c: the tfos command: finds the command and hands it its arguments.
 *
 *   tfos run [options] [--] CMD ARGS...   a whole cluster on this machine (run.c)
 *   tfos status, tfos logs                a run's state and its node logs (inspect.c)
 *   tfos node [options] [--] CMD ARGS...  one node agent (used by launchers; node.c)
 *   tfos coordinator [options]            a coordinator alone, for agents
 *                                         started by hand or by other tools (coordinator.c)
 *   tfos yarn [options] [--] CMD ARGS...  the cluster in YARN containers (yarn.c)
 *   tfos serve --model NAME=DIR ...       models over HTTP (serve.c)
 *   tfos version
 *   tfos guard ...                        internal, beside each program (guard.c)
 *   tfos yarn-am, tfos yarn-container     internal, in the YARN ApplicationMaster's
 *                                         container (yarn_am.c, yarn_container.c)
 * Every command has its own --help; tfos --help lists the user commands
 * (node, coordinator and guard are internal). Usage errors exit 2. */
#include "cli/commands.h"
#include "cli/common.h"
#include "tfos/tfos.h"

#include <stdio.h>
#include <string.h>

static const char top_help[] =
    "usage: tfos [-h] [-V] COMMAND [ARGS...]\n"
    "\n"
    "tfos forms clusters of nodes and runs a training program on each with TF_CONFIG,\n"
    "torchrun's and JAX's variables, and TFOS_* context variables set.\n"
    "\n"
    "commands:\n"
    "  run       tfos run [options] [--] PROGRAM [ARGS...]: a whole cluster on this machine\n"
    "  status    tfos status [URL | LOG_DIR] [--json]: a running or finished run's state\n"
    "  logs      tfos logs [-f] [NODE] [--log-dir D]: a run's node logs\n"
    "  yarn      tfos yarn [options] [--] PROGRAM [ARGS...]: the cluster in YARN containers\n"
    "  slurm     tfos slurm [options] [--] PROGRAM [ARGS...]: the cluster as a Slurm batch job\n"
    "  serve     tfos serve --model NAME=DIR [options]: models over HTTP (Open Inference Protocol)\n"
    "  version   tfos version (also -V, --version): the installed tfos\n"
    "\n"
    "options:\n"
    "  -h, --help     show this help and exit\n"
    "  -V, --version  show the version and exit\n"
    "\n"
    "tfos COMMAND --help shows a command's options.\n";

static const struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"run", tfos__cmd_run, tfos__run_help},
    {"status", tfos__cmd_status, tfos__status_help},
    {"logs", tfos__cmd_logs, tfos__logs_help},
    {"node", tfos__cmd_node, tfos__node_help},
    {"coordinator", tfos__cmd_coordinator, tfos__coordinator_help},
    {"guard", tfos__cmd_guard, tfos__guard_help},
    {"yarn", tfos__cmd_yarn, tfos__yarn_help},
    {"yarn-am", tfos__cmd_yarn_am, tfos__yarn_am_help},
    {"yarn-container", tfos__cmd_yarn_container, tfos__yarn_container_help},
    {"serve", tfos__cmd_serve, tfos__serve_help},
    {"slurm", tfos__cmd_slurm, tfos__slurm_help},
};

static const struct command *find(const char *name)
{
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (!strcmp(name, commands[i].name))
            return &commands[i];
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(top_help, stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        const struct command *c = !strcmp(argv[1], "help") && argc > 2 ? find(argv[2]) : NULL;
        if (!strcmp(argv[1], "help") && argc > 2 && !c)
            return tfos__usage_error("no help for '%s': no such command", argv[2]);
        fputs(c ? c->help : top_help, stdout);
        return 0;
    }
    if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
        printf("tfos %s (protocol %d)\n", TFOS_VERSION, TFOS_PROTOCOL_VERSION);
        return 0;
    }
    if (argv[1][0] == '-')
        return tfos__usage_error("unknown option '%s'", argv[1]);
    const struct command *c = find(argv[1]);
    if (!c)
        return tfos__usage_error("unknown command '%s'", argv[1]);
    tfos__set_command(c->name, c->help);
    return c->run(argc - 2, argv + 2);
}
