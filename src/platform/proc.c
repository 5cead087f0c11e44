/* proc.c: fork/exec with an exec-error pipe, process groups, parent-death
 * signal, status decoding. */
#include "platform/proc.h"

#include "platform/clock.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* Child side: only async-signal-safe calls from here to exec. */
static void child_exec(const tfos__spawn_opts *o, int errpipe, pid_t parent)
{
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (int s = 1; s < NSIG; s++) {
        if (s == SIGKILL || s == SIGSTOP)
            continue;
        signal(s, SIG_DFL);
    }
    if (o->new_pgroup)
        setpgid(0, 0);
    if (o->cgroup_procs_fd > 0) { /* best effort: without it the process group still holds */
        ssize_t w = write(o->cgroup_procs_fd, "0", 1);
        (void)w;
    }
    if (o->pdeathsig) {
        prctl(PR_SET_PDEATHSIG, o->pdeathsig);
        if (getppid() != parent) /* parent died before prctl took effect */
            _exit(127);
    }
    int in = o->stdin_fd;
    if (in < 0)
        in = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (in >= 0 && dup2(in, 0) < 0)
        goto fail;
    if (o->stdout_fd >= 0 && dup2(o->stdout_fd, 1) < 0)
        goto fail;
    if (o->stderr_fd >= 0 && dup2(o->stderr_fd, 2) < 0)
        goto fail;
    for (int i = 0; i < o->nkeep; i++)
        if (fcntl(o->keep_fds[i], F_SETFD, 0) < 0)
            goto fail;
    execvpe(o->argv[0], o->argv, o->envp ? o->envp : environ);
fail:;
    int e = errno;
    ssize_t w = write(errpipe, &e, sizeof e);
    (void)w;
    _exit(127);
}

int tfos__spawn(const tfos__spawn_opts *o, pid_t *pid_out)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return TFOS_ESYS;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(p[0]);
        close(p[1]);
        errno = e;
        return TFOS_ESYS;
    }
    if (pid == 0) {
        close(p[0]);
        child_exec(o, p[1], parent);
    }
    close(p[1]);
    if (o->new_pgroup)
        setpgid(pid, pid); /* also in the parent: no race with a kill(-pid) */
    int child_errno = 0;
    ssize_t n;
    do
        n = read(p[0], &child_errno, sizeof child_errno);
    while (n < 0 && errno == EINTR);
    close(p[0]);
    if (n == (ssize_t)sizeof child_errno) {
        int st;
        waitpid(pid, &st, 0);
        errno = child_errno;
        return TFOS_ESYS;
    }
    *pid_out = pid;
    return 0;
}

void tfos__describe_status(int status, char *buf, size_t len)
{
    if (WIFEXITED(status))
        snprintf(buf, len, "exit code %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, len, "signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(buf, len, "status 0x%x", status);
}

int tfos__exit_code(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return 1;
}

int tfos__wait_pid(pid_t pid, int timeout_ms, int *status)
{
    int64_t deadline = tfos__now_ms() + timeout_ms;
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid)
            return 0;
        if (r < 0 && errno != EINTR)
            return TFOS_ESYS;
        if (tfos__now_ms() >= deadline)
            return TFOS_ETIMEDOUT;
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

int tfos__proc_stat(pid_t pid, char *state, pid_t *ppid)
{
    char path[32] = "/proc/";
    char digits[12];
    int nd = 0;
    for (uint32_t v = (uint32_t)pid; v; v /= 10)
        digits[nd++] = (char)('0' + v % 10);
    size_t at = 6;
    while (nd)
        path[at++] = digits[--nd];
    memcpy(path + at, "/stat", 6);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    char buf[512];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    /* "pid (comm) S PPID ...": comm may hold ')' itself, so take the last one. */
    const char *rp = strrchr(buf, ')');
    if (!rp || rp + 2 >= buf + n)
        return -1;
    if (state)
        *state = rp[2];
    if (ppid) {
        long v = 0;
        const char *p = rp + 3;
        while (*p == ' ')
            p++;
        for (; *p >= '0' && *p <= '9'; p++)
            v = v * 10 + (*p - '0');
        *ppid = (pid_t)v;
    }
    return 0;
}

/* Whether process `pid` still runs: kill(pid, 0), then /proc/<pid>/stat to
 * count an unreaped zombie as dead (its parent may never reap it soon).
 * Without /proc, kill's answer stands. */
int tfos__pid_alive(pid_t pid)
{
    if (pid <= 0)
        return 0;
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 0;
    char state;
    if (tfos__proc_stat(pid, &state, NULL))
        return 1;
    return state != 'Z' && state != 'X';
}

int tfos__pidfd_open(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0); /* close-on-exec by definition */
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77 /* Linux 6.5 */
#endif

int tfos__peer_pidfd(int sockfd, pid_t *pid)
{
    struct ucred cred;
    socklen_t cl = sizeof cred;
    if (getsockopt(sockfd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) || cred.pid <= 0)
        return -1;
    *pid = cred.pid;
    /* the kernel's pidfd of the peer pins the process that connected; else
     * one opened now (the peer could have gone and its pid been reused in
     * between: it is still connected, so that is as good as it gets) */
    int fd = -1;
    socklen_t fl = sizeof fd;
    if (getsockopt(sockfd, SOL_SOCKET, SO_PEERPIDFD, &fd, &fl) == 0 && fd >= 0) {
        fcntl(fd, F_SETFD, FD_CLOEXEC);
        return fd;
    }
    return tfos__pidfd_open(cred.pid);
}

int tfos__pidfd_signal(int pidfd, int sig)
{
#ifdef SYS_pidfd_send_signal
    return (int)syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0);
#else
    (void)pidfd;
    (void)sig;
    errno = ENOSYS;
    return -1;
#endif
}

static ssize_t read_full(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

int tfos__spawn_detached(const tfos__spawn_opts *o, pid_t *pid_out)
{
    /* pids: the middle child tells the grandchild's pid; errs: the
     * grandchild tells its exec errno (close-on-exec: EOF means it exec'd) */
    int pids[2], errs[2];
    if (pipe2(pids, O_CLOEXEC) < 0)
        return TFOS_ESYS;
    if (pipe2(errs, O_CLOEXEC) < 0) {
        int e = errno;
        close(pids[0]);
        close(pids[1]);
        errno = e;
        return TFOS_ESYS;
    }
    tfos__spawn_opts go = *o;
    go.pdeathsig = 0;  /* detached: it outlives us on purpose */
    go.new_pgroup = 0; /* it leads a session of its own (setsid) */
    pid_t mid = fork();
    if (mid < 0) {
        int e = errno;
        close(pids[0]);
        close(pids[1]);
        close(errs[0]);
        close(errs[1]);
        errno = e;
        return TFOS_ESYS;
    }
    if (mid == 0) { /* middle: async-signal-safe calls only */
        close(pids[0]);
        close(errs[0]);
        setsid();
        pid_t g = fork();
        if (g == 0) {
            close(pids[1]);
            child_exec(&go, errs[1], getppid());
        }
        ssize_t w = write(pids[1], &g, sizeof g);
        (void)w;
        _exit(g < 0 ? 1 : 0);
    }
    close(pids[1]);
    close(errs[1]);
    pid_t g = -1;
    int child_errno = 0;
    ssize_t n = read_full(pids[0], &g, sizeof g);
    ssize_t m = read_full(errs[0], &child_errno, sizeof child_errno);
    close(pids[0]);
    close(errs[0]);
    int st;
    while (waitpid(mid, &st, 0) < 0 && errno == EINTR)
        ;
    if (n != (ssize_t)sizeof g || g <= 0) {
        errno = EAGAIN; /* the middle could not fork */
        return TFOS_ESYS;
    }
    if (m == (ssize_t)sizeof child_errno) {
        errno = child_errno;
        return TFOS_ESYS;
    }
    *pid_out = g;
    return 0;
}
