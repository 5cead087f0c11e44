/* fs.c: filesystem helpers (see fs.h). */
#include "platform/fs.h"

#include "tfos/tfos.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
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
