/* guard.c: the guardian of a node's processes (see guard.h). One poll on
 * the agent's pidfd, woken once a second to look at its state. */
#include "roles/guard.h"

#include "core/log.h"
#include "platform/cgroup.h"
#include "platform/clock.h"
#include "platform/proc.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int tfos__guard_run(pid_t agent, pid_t pgid, const char *cgroup, double stopped_s)
{
    /* no terminal signal meant for the run may end the guardian early */
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    int fd = tfos__pidfd_open(agent);
    int64_t stopped_since = 0;
    while (tfos__pid_alive(agent)) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (fd >= 0)
            poll(&p, 1, 1000);
        else
            sleep(1);
        char st = 0;
        tfos__proc_stat(agent, &st, NULL);
        if (st == 'T' || st == 't') {
            int64_t now = tfos__now_ms();
            if (!stopped_since)
                stopped_since = now;
            if (now - stopped_since >= (int64_t)(stopped_s * 1000)) {
                TFOS_WARN("guardian: the agent (pid %d) has been stopped for %g s; ending it and its node's "
                          "processes", (int)agent, stopped_s);
                kill(agent, SIGKILL);
                break;
            }
        } else {
            stopped_since = 0;
        }
    }
    if (fd >= 0)
        close(fd);
    /* the agent is gone: whatever of its node still runs goes with it */
    if (pgid > 1)
        kill(-pgid, SIGKILL);
    int rc = cgroup && *cgroup ? tfos__cgroup_destroy(cgroup, 5000) : 0;
    if (rc)
        TFOS_WARN("guardian: cannot remove the node's cgroup %s: %s", cgroup, tfos_strerror(rc));
    return 0;
}
