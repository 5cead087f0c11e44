/* guard.h: the guardian of a node's processes.
 *
 * A node's program dies with its agent (parent-death signal), but what the
 * program started does not: children that called setsid, daemons, anything
 * re-parented to init. While the agent lives it ends them itself (the
 * program's process group, its cgroup, and as child subreaper every orphan).
 * If the agent is killed (SIGKILL, OOM) or stays stopped (SIGSTOP), nobody
 * would: the guardian is a tiny detached process (`tfos guard`) the agent
 * starts beside each program, which waits for the agent and, when it is gone
 * or has been stopped for longer than `stopped_s`, kills the program's cgroup
 * and process group (and a stopped agent) and exits. When the agent ends
 * normally it has already cleaned up and the guardian only leaves. */
#ifndef TFOS_ROLES_GUARD_H
#define TFOS_ROLES_GUARD_H
#include <sys/types.h>

/* Run the guardian until the agent is gone; returns the exit code. cgroup
 * may be NULL or "" (no cgroup on this machine). */
int tfos__guard_run(pid_t agent, pid_t pgid, const char *cgroup, double stopped_s);

#endif
