/* fs.c: filesystem helpers (see fs.h). */
#include "platform/fs.h"

#include "tfos/tfos.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>

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
