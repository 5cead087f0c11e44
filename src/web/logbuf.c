/* logbuf.c: see logbuf.h. One thread (the launcher's loop) adds and reads. */
#include "web/logbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tfos__logbuf_init(tfos__logbuf *b, size_t max_lines, size_t max_bytes)
{
    memset(b, 0, sizeof *b);
    b->lines = calloc(max_lines, sizeof *b->lines);
    if (!b->lines)
        return -1;
    b->cap = max_lines;
    b->max_bytes = max_bytes;
    return 0;
}

void tfos__logbuf_fini(tfos__logbuf *b)
{
    for (uint64_t s = b->first; b->lines && s < b->next; s++)
        free(b->lines[s % b->cap]);
    free(b->lines);
    memset(b, 0, sizeof *b);
}

static void drop_oldest(tfos__logbuf *b)
{
    char **slot = &b->lines[b->first % b->cap];
    b->bytes -= strlen(*slot) + 1;
    free(*slot);
    *slot = NULL;
    b->first++;
}

void tfos__logbuf_add(tfos__logbuf *b, const char *node, const char *line, unsigned long long dropped)
{
    if (!b->lines)
        return;
    char *text = NULL;
    int n = dropped ? asprintf(&text, "[%s] (%llu lines not forwarded: too many too fast; see the node's log) %s",
                               node, dropped, line)
                    : asprintf(&text, "[%s] %s", node, line);
    if (n < 0)
        return;
    while (b->next > b->first && (b->next - b->first >= b->cap || b->bytes + (size_t)n + 1 > b->max_bytes))
        drop_oldest(b);
    b->lines[b->next % b->cap] = text;
    b->bytes += (size_t)n + 1;
    b->next++;
}

char *tfos__logbuf_since(tfos__logbuf *b, uint64_t from, size_t max_bytes)
{
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    if (!f)
        return NULL;
    uint64_t s = from < b->first ? b->first : from > b->next ? b->next : from;
    uint64_t end = s;
    size_t taken = 0;
    while (end < b->next && taken + strlen(b->lines[end % b->cap]) + 1 <= max_bytes) {
        taken += strlen(b->lines[end % b->cap]) + 1;
        end++;
    }
    if (end == s && end < b->next) /* one line longer than max_bytes still goes */
        end++;
    fprintf(f, "next %llu\n", (unsigned long long)end);
    if (end > b->served)
        b->served = end;
    if (from < b->first)
        fprintf(f, "skipped %llu\n", (unsigned long long)(b->first - from));
    for (; s < end; s++)
        fprintf(f, "%s\n", b->lines[s % b->cap]);
    if (fclose(f)) {
        free(out);
        return NULL;
    }
    return out;
}
