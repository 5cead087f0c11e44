/* fs.c: filesystem helpers (see fs.h). */
#include "platform/fs.h"

#include "tfos/tfos.h"

#include <ctype.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
#include <string.h>
#include <sys/stat.h>

const char *tfos__local_path(const char *p)
{
    if (!p)
        return NULL;
    if (!strncmp(p, "file://", 7))
        return p + 7;
    const char *colon = strstr(p, "://");
    if (!colon)
        return p;
    for (const char *c = p; c < colon; c++) /* a scheme: letters, digits, + - . */
        if (!isalnum((unsigned char)*c) && !strchr("+-.", *c))
            return p;
    return colon > p ? NULL : p;
}

int tfos__mkdir_p(const char *path, mode_t mode)
{
    char buf[PATH_MAX];
    size_t len = strlen(path);
    if (len >= sizeof buf)
        return TFOS_EINVAL;
    memcpy(buf, path, len + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, mode) < 0 && errno != EEXIST)
            return TFOS_ESYS;
        *p = '/';
    }
    if (mkdir(buf, mode) < 0 && errno != EEXIST)
        return TFOS_ESYS;
    return 0;
}

int tfos__write_file_whole(const char *path, const char *text)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    int bad = fputs(text, f) < 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path)) {
        int e = errno;
        unlink(tmp);
        errno = e;
        return -1;
    }
    return 0;
}

/* ---- copies out of a file mapping (tfos__map_copy) ------------------------
 * The copying thread publishes its jump buffer and the mapping it reads;
 * a SIGBUS whose address lies in that mapping jumps back into the copy,
 * any other goes to the handler that was there before (restored, so the
 * faulting access repeats under it: a crash stays the crash it was). */

static struct sigaction old_bus;
static pthread_once_t bus_once = PTHREAD_ONCE_INIT;
static _Thread_local sigjmp_buf *volatile bus_jump;
static _Thread_local const char *volatile bus_lo, *volatile bus_hi;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)uc;
    const char *a = si->si_addr;
    if (bus_jump && a >= bus_lo && a < bus_hi)
        siglongjmp(*bus_jump, 1);
    sigaction(SIGBUS, &old_bus, NULL);
}

static void install_bus(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &old_bus);
}

int tfos__map_copy(void *dst, const void *src, size_t n, const void *map, size_t map_len)
{
    pthread_once(&bus_once, install_bus);
    sigjmp_buf jb;
    if (sigsetjmp(jb, 1)) {
        bus_jump = NULL;
        return TFOS_EPROTO;
    }
    bus_lo = map;
    bus_hi = (const char *)map + map_len;
    bus_jump = &jb;
    memcpy(dst, src, n);
    bus_jump = NULL;
    return 0;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st, (void)flag, (void)f;
    remove(p);
    return 0;
}

void tfos__rm_tree(const char *path)
{
    nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}
