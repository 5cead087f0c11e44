/* fs.h: the filesystem calls more than one part of tfos needs. */
#ifndef TFOS_PLATFORM_FS_H
#define TFOS_PLATFORM_FS_H
#include <stddef.h>
#include <sys/types.h>

/* mkdir -p: create path and its missing parents with `mode` (existing ones
 * are left as they are). 0, or TFOS_ESYS with errno (TFOS_EINVAL for a path
 * longer than PATH_MAX). */
int tfos__mkdir_p(const char *path, mode_t mode);

/* Write text to path whole: into a temporary file beside it, then a rename,
 * so a reader sees all of it or none (address files, status.json). 0, or -1
 * with errno (the temporary file removed). */
int tfos__write_file_whole(const char *path, const char *text);

/* rm -rf path: every file and directory under it, then path itself, not
 * following symlinks; what cannot be removed is left (best effort: for
 * temporary copies). */
void tfos__rm_tree(const char *path);

/* A directory given as a path or a URL (checkpoint dirs): the path on this
 * machine (`file://` taken off), or NULL for a URL of another scheme
 * (`hdfs://...`: the programs reach it, tfos's own processes do not). */
const char *tfos__local_path(const char *path_or_url);

/* memcpy(dst, src, n) where src lies in a read-only mapping of a file
 * ([map, map + map_len)) that another process may shrink meanwhile. A page
 * cut off by a truncation raises SIGBUS on access: the handler (installed
 * on first use, chained to the handler it replaced for every other SIGBUS)
 * takes this thread out of the copy. 0, or TFOS_EPROTO when a page of src
 * was past the file's end (dst then holds part of the data). */
int tfos__map_copy(void *dst, const void *src, size_t n, const void *map, size_t map_len);

#endif
