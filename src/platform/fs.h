/* fs.h: the filesystem calls more than one part of tfos needs. */
#ifndef TFOS_PLATFORM_FS_H
#define TFOS_PLATFORM_FS_H
#include <sys/types.h>

/* mkdir -p: create path and its missing parents with `mode` (existing ones
 * are left as they are). 0, or TFOS_ESYS with errno (TFOS_EINVAL for a path
 * longer than PATH_MAX). */
int tfos__mkdir_p(const char *path, mode_t mode);

/* Write text to path whole: into a temporary file beside it, then a rename,
 * so a reader sees all of it or none (address files, status.json). 0, or -1
 * with errno (the temporary file removed). */
int tfos__write_file_whole(const char *path, const char *text);

/* A directory given as a path or a URL (checkpoint dirs): the path on this
 * machine (`file://` taken off), or NULL for a URL of another scheme
 * (`hdfs://...`: the programs reach it, tfos's own processes do not). */
const char *tfos__local_path(const char *path_or_url);

#endif
