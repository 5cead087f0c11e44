/* position.c: reading saved feed positions (see position.h). */
#include "run/position.h"

#include "core/log.h"
#include "tfos/tfos.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define POSITION_DIR "tfos-feed-position"

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int tfos__feed_positions(const char *checkpoint_dir, int64_t since_s, uint64_t **ids_out, size_t *n_out)
{
    *ids_out = NULL;
    *n_out = 0;
    if (!checkpoint_dir)
        return 0;
    if (!strncmp(checkpoint_dir, "file://", 7))
        checkpoint_dir += 7;
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/%s", checkpoint_dir, POSITION_DIR);
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    uint64_t *ids = NULL;
    size_t n = 0, cap = 0;
    int found = 0, rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".json"))
            continue;
        char path[4500];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) < 0 || (int64_t)st.st_mtime < since_s)
            continue;
        json_error_t jerr;
        json_t *root = json_load_file(path, 0, &jerr);
        json_t *parts = root ? json_object_get(root, "partitions") : NULL;
        if (!json_is_array(parts)) {
            TFOS_WARN("feed position %s is not readable (%s); ignored", path, root ? "no partitions" : jerr.text);
            json_decref(root);
            continue;
        }
        found = 1;
        size_t i;
        json_t *v;
        json_array_foreach(parts, i, v) {
            if (!json_is_integer(v) || json_integer_value(v) < 0)
                continue;
            if (n == cap) {
                size_t nc = cap ? cap * 2 : 256;
                uint64_t *ni = realloc(ids, nc * sizeof *ni);
                if (!ni) {
                    rc = TFOS_ENOMEM;
                    break;
                }
                ids = ni;
                cap = nc;
            }
            ids[n++] = (uint64_t)json_integer_value(v);
        }
        json_decref(root);
        if (rc)
            break;
    }
    closedir(d);
    if (rc) {
        free(ids);
        return rc;
    }
    qsort(ids, n, sizeof *ids, cmp_u64);
    size_t u = 0;
    for (size_t i = 0; i < n; i++)
        if (!u || ids[u - 1] != ids[i])
            ids[u++] = ids[i];
    *ids_out = u ? ids : (free(ids), NULL);
    *n_out = u;
    return found;
}

int tfos__position_has(const uint64_t *ids, size_t n, uint64_t id)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ids[mid] == id)
            return 1;
        if (ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}
