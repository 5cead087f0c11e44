/* proc.h: starting, signalling and reaping child processes.
 *
 * Everything a child needs (argv, envp, fds) is prepared by the caller before
 * fork; the child runs only async-signal-safe calls, then execs. An exec
 * failure is reported to the parent over a close-on-exec pipe, so the parent
 * learns "no such program" as an error code, not as a mysterious exit 127. */
#ifndef TFOS_PLATFORM_PROC_H
#define TFOS_PLATFORM_PROC_H
#include <stddef.h>
#include <sys/types.h>

typedef struct tfos__spawn_opts {
    char *const *argv;  /* argv[0] is looked up on PATH (execvpe) */
    char *const *envp;  /* full environment; NULL: inherit */
    int stdin_fd;       /* -1: /dev/null */
    int stdout_fd;      /* -1: inherit */
    int stderr_fd;      /* -1: inherit */
    int new_pgroup;     /* child leads a new process group (pgid == pid) */
    int pdeathsig;      /* signal the child gets when this thread dies; 0: none */
    const int *keep_fds; /* close-on-exec fds the child inherits anyway */
    int nkeep;
    int cgroup_procs_fd; /* > 0: a cgroup.procs the child moves itself into before exec */
} tfos__spawn_opts;

/* Start a child. On exec failure returns TFOS_ESYS with errno set to the
 * child's exec errno (and the child is already reaped). */
int tfos__spawn(const tfos__spawn_opts *o, pid_t *pid);

/* Start a child detached from us: it runs in a session of its own as our
 * grandchild (the middle process exits at once), so it is never our zombie,
 * no signal of our group or terminal reaches it, and it outlives us -- what a
 * Spark task needs for a node agent that must outlive the task. o->pdeathsig
 * and o->new_pgroup are ignored. Like tfos__spawn, a failed exec is reported
 * at once, through a close-on-exec pipe: TFOS_ESYS with errno set to the
 * exec's errno (ENOENT, EACCES...). *pid gets the grandchild's pid. */
int tfos__spawn_detached(const tfos__spawn_opts *o, pid_t *pid);

/* Whether process pid runs: kill(pid, 0), then /proc/<pid>/stat so an
 * unreaped zombie counts as dead. The one liveness check of tfos (rings,
 * feeds, the Python glue through the extension). */
int tfos__pid_alive(pid_t pid);

/* From /proc/<pid>/stat: the state letter ('R', 'S', 'T' stopped, 'Z'
 * zombie...) and the parent's pid; either may be NULL. 0, or -1 when the
 * process or /proc is not there. The one parser of that file in tfos. */
int tfos__proc_stat(pid_t pid, char *state, pid_t *ppid);

/* A pidfd for pid (readable once it has exited; close-on-exec), or -1 with
 * errno (ENOSYS on kernels before 5.3, ESRCH). */
int tfos__pidfd_open(pid_t pid);
/* A pidfd of the process at the other end of a connected Unix socket (the
 * one that connected: the kernel's SO_PEERPIDFD where it has it, Linux 6.5,
 * else pidfd_open of SO_PEERCRED's pid; close-on-exec), its pid in *pid;
 * -1 with errno. */
int tfos__peer_pidfd(int sockfd, pid_t *pid);
/* Send sig to the process of pidfd (never another that took its pid since):
 * 0, or -1 with errno (ESRCH: it has gone; ENOSYS before Linux 5.1). */
int tfos__pidfd_signal(int pidfd, int sig);

/* Describe a waitpid status: "exit code 3", "signal 9 (Killed)". */
void tfos__describe_status(int status, char *buf, size_t len);
/* Shell-style exit code of a status: the code, or 128+signal. */
int tfos__exit_code(int status);

/* waitpid(pid) for at most timeout_ms (polling in short slices).
 * Returns 0 with *status set, or TFOS_ETIMEDOUT. */
int tfos__wait_pid(pid_t pid, int timeout_ms, int *status);

#endif
