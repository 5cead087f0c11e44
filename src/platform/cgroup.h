/* cgroup.h: a cgroup v2 per node, so that every process a node's program
 * starts -- children that call setsid, daemons, grandchildren re-parented to
 * init -- ends with the node (cgroup.kill, Linux 5.14+).
 *
 * Where there is no writable cgroup v2 hierarchy (no cgroup2 mount, no
 * permission), tfos__cgroup_create says so and the callers fall back to the
 * process group plus the agent as child subreaper (see docs/RELIABILITY.md
 * for which guarantee holds where). */
#ifndef TFOS_PLATFORM_CGROUP_H
#define TFOS_PLATFORM_CGROUP_H
#include <stddef.h>
#include <sys/types.h>

#define TFOS_CGROUP_PATH_MAX 512

/* Create the cgroup `name` below the caller's own cgroup in the cgroup v2
 * hierarchy; path[len] gets its directory. TFOS_EAGAIN when cgroup v2 is
 * not available or not writable here (nothing to clean up), TFOS_ESYS. */
int tfos__cgroup_create(const char *name, char *path, size_t len);

/* Open the cgroup's cgroup.procs for writing (close-on-exec): a child
 * writes "0" to it before exec to move itself in (async-signal-safe). -1
 * with errno on failure. */
int tfos__cgroup_procs_fd(const char *path);

/* Kill every process in the cgroup (cgroup.kill; else SIGKILL to each pid
 * in cgroup.procs, a few rounds), wait until it is empty (at most
 * timeout_ms) and remove it. 0 once it is gone, TFOS_ETIMEDOUT or
 * TFOS_ESYS. A path that does not exist any more is success. */
int tfos__cgroup_destroy(const char *path, int timeout_ms);

/* SIGKILL every process whose parent is this process, except `keep` (0:
 * none), a few rounds: with PR_SET_CHILD_SUBREAPER, that is every orphan
 * the node's program left behind. Returns how many were killed. */
int tfos__kill_orphans(pid_t keep);

#endif
