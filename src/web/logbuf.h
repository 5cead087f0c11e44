/* logbuf.h: the nodes' output lines forwarded to the launcher (agents with
 * --forward-logs: tfos yarn), numbered, the newest kept within a bound, for
 * the status page's /logs/stream/<seq> (see logbuf.c). */
#ifndef TFOS_WEB_LOGBUF_H
#define TFOS_WEB_LOGBUF_H
#include <stddef.h>
#include <stdint.h>

typedef struct tfos__logbuf {
    char **lines;          /* a ring of `cap` lines; line seq s is lines[s % cap] */
    size_t cap, bytes, max_bytes;
    uint64_t first, next;  /* the oldest line kept, the next line's seq */
    uint64_t served;       /* lines before this one have been read (a follower is up to date) */
} tfos__logbuf;

int tfos__logbuf_init(tfos__logbuf *b, size_t max_lines, size_t max_bytes);
void tfos__logbuf_fini(tfos__logbuf *b);
/* Keep "[node] line" (a line the agent dropped before is noted in it). */
void tfos__logbuf_add(tfos__logbuf *b, const char *node, const char *line, unsigned long long dropped);
/* "next N\n", then "skipped K\n" when lines from `from` on are gone, then
 * the lines from `from` on, at most max_bytes of them (malloc'd). */
char *tfos__logbuf_since(tfos__logbuf *b, uint64_t from, size_t max_bytes);

#endif
