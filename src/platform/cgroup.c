/* cgroup.c: a cgroup v2 per node (see cgroup.h). */
#include "platform/cgroup.h"

#include "platform/clock.h"
#include "platform/proc.h"
#include "tfos/tfos.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The cgroup2 mount point, from /proc/self/mountinfo. */
static int cgroup2_mount(char *out, size_t len)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return -1;
    char line[1024];
    int found = -1;
    while (found < 0 && fgets(line, sizeof line, f)) {
        /* "... MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS" */
        const char *dash = strstr(line, " - ");
        if (!dash || strncmp(dash + 3, "cgroup2 ", 8))
            continue;
        char mnt[512];
        if (sscanf(line, "%*s %*s %*s %*s %511s", mnt) == 1) {
            snprintf(out, len, "%s", mnt);
            found = 0;
        }
    }
    fclose(f);
    return found;
}

/* Our own cgroup in the v2 hierarchy ("0::/path" in /proc/self/cgroup). */
static int own_cgroup(char *out, size_t len)
{
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f)
        return -1;
    char line[1024];
    int found = -1;
    while (found < 0 && fgets(line, sizeof line, f)) {
        if (strncmp(line, "0::", 3))
            continue;
        line[strcspn(line, "\n")] = 0;
        const char *own = strcmp(line + 3, "/") ? line + 3 : "";
        if (strlen(own) < len) {
            memcpy(out, own, strlen(own) + 1);
            found = 0;
        }
    }
    fclose(f);
    return found;
}

int tfos__cgroup_create(const char *name, char *path, size_t len)
{
    char mnt[512], own[512];
    if (cgroup2_mount(mnt, sizeof mnt) || own_cgroup(own, sizeof own))
        return TFOS_EAGAIN;
    if (snprintf(path, len, "%s%s/%s", mnt, own, name) >= (int)len)
        return TFOS_EINVAL;
    if (mkdir(path, 0755) < 0 && errno != EEXIST)
        return errno == EACCES || errno == EPERM || errno == EROFS || errno == ENOENT ? TFOS_EAGAIN : TFOS_ESYS;
    /* cgroup.kill appeared in 5.14: without it the fallback kills pid by pid */
    return 0;
}

int tfos__cgroup_procs_fd(const char *path)
{
    char p[TFOS_CGROUP_PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/cgroup.procs", path);
    return open(p, O_WRONLY | O_CLOEXEC);
}

static int populated(const char *path)
{
    char p[TFOS_CGROUP_PATH_MAX + 32], buf[256];
    snprintf(p, sizeof p, "%s/cgroup.events", path);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n > 0 ? n : 0] = 0;
    const char *v = strstr(buf, "populated ");
    return v && v[10] == '1';
}

/* SIGKILL each pid listed in cgroup.procs; how many there were. */
static int kill_listed(const char *path)
{
    char p[TFOS_CGROUP_PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/cgroup.procs", path);
    FILE *f = fopen(p, "re");
    if (!f)
        return 0;
    int n = 0;
    long pid;
    while (fscanf(f, "%ld", &pid) == 1) {
        kill((pid_t)pid, SIGKILL);
        n++;
    }
    fclose(f);
    return n;
}

int tfos__cgroup_destroy(const char *path, int timeout_ms)
{
    struct stat st;
    if (!path || !*path || stat(path, &st) < 0)
        return 0;
    char p[TFOS_CGROUP_PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/cgroup.kill", path);
    int fd = open(p, O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t w = write(fd, "1", 1);
        (void)w;
        close(fd);
    }
    int64_t deadline = tfos__now_ms() + timeout_ms;
    while (populated(path)) {
        kill_listed(path); /* no cgroup.kill (before 5.14), or a fork raced it */
        if (tfos__now_ms() >= deadline)
            return TFOS_ETIMEDOUT;
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (rmdir(path) < 0 && errno != ENOENT)
        return TFOS_ESYS;
    return 0;
}

int tfos__kill_orphans(pid_t keep)
{
    pid_t self = getpid();
    int killed = 0;
    for (int round = 0; round < 5; round++) {
        /* no children at all, so nothing re-parented to us either: skip the
         * scan of every process on the machine (a thousand agents ending
         * at once made that quadratic) */
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 && errno == ECHILD)
            return killed;
        DIR *d = opendir("/proc");
        if (!d)
            return killed;
        int found = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
            char *end;
            long pid = strtol(e->d_name, &end, 10);
            if (*end || pid <= 0 || pid == keep)
                continue;
            char state;
            pid_t ppid;
            if (tfos__proc_stat((pid_t)pid, &state, &ppid) || ppid != self || state == 'Z')
                continue;
            kill((pid_t)pid, SIGKILL);
            found++;
        }
        closedir(d);
        killed += found;
        if (!found)
            break;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return killed;
}
