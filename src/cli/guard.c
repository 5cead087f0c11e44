/* guard.c: `tfos guard --agent-pid P --pgid G [--cgroup DIR]` (internal):
 * started by a node agent beside its program (roles/guard.h); ends the
 * program's process group (and cgroup) when the agent is gone. */
#include "cli/commands.h"
#include "cli/common.h"
#include "roles/guard.h"
#include "tfos/tfos.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

const char tfos__guard_help[] =
    "usage: tfos guard --agent-pid P --pgid G [--cgroup DIR]\n"
    "\n"
    "Internal: started by a node agent beside its program; ends the program's process group\n"
    "(and cgroup) when the agent is gone.\n";

int tfos__cmd_guard(int argc, char **argv)
{
    int agent = 0, pgid = 0;
    const char *cgroup = "";
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(tfos__guard_help, stdout);
            return 0;
        }
    for (int i = 0; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--agent-pid") && tfos__opt_int(argv[i], argv[i + 1], 1, INT_MAX, &agent))
            return 2;
        if (!strcmp(argv[i], "--pgid") && tfos__opt_int(argv[i], argv[i + 1], 0, INT_MAX, &pgid))
            return 2;
        if (!strcmp(argv[i], "--cgroup"))
            cgroup = argv[i + 1];
    }
    if (!agent)
        return tfos__usage_error("%s", "guard needs --agent-pid");
    return tfos__guard_run((pid_t)agent, (pid_t)pgid, cgroup, TFOS_DEFAULT_HEARTBEAT_TIMEOUT);
}
