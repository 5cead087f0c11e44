/* position.c: reading saved feed positions (see position.h). */
#include "feed/position.h"

#include "core/log.h"
#include "platform/fs.h"
#include "tfos/tfos.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>


/* A growable array of (id, rows) pairs. */
typedef struct pairs {
    uint64_t (*v)[2];
    size_t n, cap;
} pairs;

static int push(pairs *p, uint64_t id, uint64_t rows)
{
    if (p->n == p->cap) {
        size_t nc = p->cap ? p->cap * 2 : 256;
        uint64_t(*nv)[2] = realloc(p->v, nc * sizeof *nv);
        if (!nv)
            return TFOS_ENOMEM;
        p->v = nv;
        p->cap = nc;
    }
    p->v[p->n][0] = id;
    p->v[p->n][1] = rows;
    p->n++;
    return 0;
}

static int cmp_pair(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

static int has(const uint64_t *ids, size_t n, uint64_t id)
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

/* One file's "partitions" and "partial" into whole and part. */
static int read_file(const char *path, pairs *whole, pairs *part)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    json_t *parts = root ? json_object_get(root, "partitions") : NULL;
    if (!json_is_array(parts)) {
        TFOS_WARN("feed position %s is not readable (%s); ignored", path, root ? "no partitions" : jerr.text);
        json_decref(root);
        return 0;
    }
    int rc = 0;
    size_t i;
    json_t *v;
    json_array_foreach(parts, i, v) {
        if (json_is_integer(v) && json_integer_value(v) >= 0 && (rc = push(whole, (uint64_t)json_integer_value(v), 0)))
            break;
    }
    const char *key;
    json_t *partial = json_object_get(root, "partial");
    json_object_foreach(partial, key, v) {
        char *end;
        unsigned long long id = strtoull(key, &end, 10);
        if (rc || *end || !json_is_integer(v) || json_integer_value(v) <= 0)
            continue;
        rc = push(part, id, (uint64_t)json_integer_value(v));
    }
    json_decref(root);
    return rc ? rc : 1;
}

int tfos__feed_positions(const char *checkpoint_dir, double since, tfos__position *pos)
{
    memset(pos, 0, sizeof *pos);
    if (!(checkpoint_dir = tfos__local_path(checkpoint_dir)))
        return 0; /* not on this machine: --input needs a local checkpoint dir */
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/%s", checkpoint_dir, TFOS__POSITION_DIR);
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    pairs whole = {0}, part = {0};
    int found = 0, rc = 0;
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".json"))
            continue;
        char path[4500];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) < 0 || (double)st.st_mtim.tv_sec + (double)st.st_mtim.tv_nsec / 1e9 < since)
            continue;
        int r = read_file(path, &whole, &part);
        if (r < 0)
            rc = r;
        found |= r == 1;
    }
    closedir(d);
    if (!rc && (pos->whole = malloc((whole.n + 1) * sizeof *pos->whole)) &&
        (pos->part_id = malloc((part.n + 1) * sizeof *pos->part_id)) &&
        (pos->part_rows = malloc((part.n + 1) * sizeof *pos->part_rows))) {
        qsort(whole.v, whole.n, sizeof *whole.v, cmp_pair);
        for (size_t i = 0; i < whole.n; i++)
            if (!pos->nwhole || pos->whole[pos->nwhole - 1] != whole.v[i][0])
                pos->whole[pos->nwhole++] = whole.v[i][0];
        /* partial counts of one partition add up across attempts; a partition
         * some file has whole is whole */
        qsort(part.v, part.n, sizeof *part.v, cmp_pair);
        for (size_t i = 0; i < part.n; i++) {
            if (has(pos->whole, pos->nwhole, part.v[i][0]))
                continue;
            if (pos->npart && pos->part_id[pos->npart - 1] == part.v[i][0]) {
                pos->part_rows[pos->npart - 1] += part.v[i][1];
                continue;
            }
            pos->part_id[pos->npart] = part.v[i][0];
            pos->part_rows[pos->npart++] = part.v[i][1];
        }
    } else if (!rc) {
        rc = TFOS_ENOMEM;
    }
    free(whole.v);
    free(part.v);
    if (rc) {
        tfos__position_fini(pos);
        return rc;
    }
    return found;
}

void tfos__position_fini(tfos__position *pos)
{
    free(pos->whole);
    free(pos->part_id);
    free(pos->part_rows);
    memset(pos, 0, sizeof *pos);
}

int tfos__position_whole(const tfos__position *pos, uint64_t id)
{
    return has(pos->whole, pos->nwhole, id);
}

uint64_t tfos__position_rows(const tfos__position *pos, uint64_t id)
{
    size_t lo = 0, hi = pos->npart;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (pos->part_id[mid] == id)
            return pos->part_rows[mid];
        if (pos->part_id[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}
