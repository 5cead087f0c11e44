/* inspect.c: `tfos status` and `tfos logs`, reading a running (or ended)
 * `tfos run` from the command line.
 *
 *   tfos status [URL | LOG_DIR] [--json]   the cluster table and the feed
 *                                          (from /status)
 *   tfos logs [-f] [NODE] [--log-dir D]    the nodes' logs; -f follows them
 *                                          until the run ends
 * Without a target, the newest tfos-logs/run-* under the current directory. */
#include "cli/inspect.h"

#include "platform/clock.h"
#include "platform/net.h"
#include "tfos/tfos.h"

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The newest tfos-logs/run-* directory, into out. */
static int newest_run(char *out, size_t len)
{
    DIR *d = opendir("tfos-logs");
    if (!d)
        return -1;
    struct dirent *e;
    time_t best = 0;
    int found = -1;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "run-", 4))
            continue;
        char path[1024];
        struct stat st;
        snprintf(path, sizeof path, "tfos-logs/%s", e->d_name);
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_mtime >= best) {
            best = st.st_mtime;
            snprintf(out, len, "%s", path);
            found = 0;
        }
    }
    closedir(d);
    return found;
}

/* URL of the run in `target` (a URL or a log dir; NULL: the newest run). */
static int find_url(const char *target, char *url, size_t len, char *dir, size_t dirlen)
{
    if (target && !strncmp(target, "http://", 7)) {
        snprintf(url, len, "%s", target);
        if (dir)
            dir[0] = 0;
        return 0;
    }
    char d[1024];
    if (target)
        snprintf(d, sizeof d, "%s", target);
    else if (newest_run(d, sizeof d)) {
        fprintf(stderr, "tfos: no run found: give a status URL or a log dir (no tfos-logs/run-* here)\n");
        return -1;
    }
    if (dir)
        snprintf(dir, dirlen, "%s", d);
    char path[1100];
    snprintf(path, sizeof path, "%s/status-url", d);
    FILE *f = fopen(path, "r");
    if (!f || !fgets(url, (int)len, f)) {
        fprintf(stderr, "tfos: %s has no status-url (not a tfos run log dir, or run with --status-port -1)\n", d);
        if (f)
            fclose(f);
        return -1;
    }
    fclose(f);
    url[strcspn(url, "\r\n")] = 0;
    return 0;
}

/* GET url+path; the body (malloc'd) or NULL. Bounded by 5 s. */
static char *http_get(const char *url, const char *path)
{
    char host[256];
    int port;
    const char *hp = url + 7;
    char hostport[300];
    snprintf(hostport, sizeof hostport, "%.*s", (int)strcspn(hp, "/"), hp);
    if (tfos__parse_hostport(hostport, host, sizeof host, &port))
        return NULL;
    int fd;
    if (tfos__tcp_connect(host, port, 5000, &fd))
        return NULL;
    char req[600];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, hostport);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int64_t deadline = tfos__now_ms() + 5000;
    if (send(fd, req, (size_t)n, MSG_NOSIGNAL) != n)
        goto fail;
    for (;;) {
        if (len + 4096 > cap) {
            cap = cap ? 2 * cap : 16384;
            char *nb = realloc(buf, cap + 1);
            if (!nb)
                goto fail;
            buf = nb;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, tfos__ms_left(deadline, -1)) <= 0)
            goto fail;
        ssize_t r = recv(fd, buf + len, cap - len, 0);
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (r < 0)
            goto fail;
        if (r == 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    buf[len] = 0;
    char *body = strstr(buf, "\r\n\r\n");
    if (!body || strncmp(buf, "HTTP/1.0 200", 12)) {
        free(buf);
        return NULL;
    }
    memmove(buf, body + 4, strlen(body + 4) + 1);
    return buf;
fail:
    close(fd);
    free(buf);
    return NULL;
}

/* The value after "key": in obj (a string's content or a number), into out. */
static void field(const char *obj, const char *end, const char *key, char *out, size_t len)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    out[0] = 0;
    const char *p = strstr(obj, pat);
    if (!p || p > end)
        return;
    p += strlen(pat);
    if (*p == '"') {
        p++;
        size_t n = strcspn(p, "\"");
        snprintf(out, len, "%.*s", (int)n, p);
    } else {
        size_t n = strcspn(p, ",}");
        snprintf(out, len, "%.*s", (int)n, p);
    }
}

int tfos__cmd_status(const char *target, int json)
{
    char url[512];
    if (find_url(target, url, sizeof url, NULL, 0))
        return 1;
    char *body = http_get(url, "/status");
    if (!body) {
        fprintf(stderr, "tfos: %s does not answer: the run has ended or is not on this machine\n", url);
        return 1;
    }
    if (json) {
        printf("%s\n", body);
        free(body);
        return 0;
    }
    char attempt[16], maxr[16], state[32], addr[128];
    field(body, body + strlen(body), "attempt", attempt, sizeof attempt);
    field(body, body + strlen(body), "max_restarts", maxr, sizeof maxr);
    const char *cl = strstr(body, "\"cluster\": ");
    const char *cend = body + strlen(body);
    field(cl ? cl : body, cend, "state", state, sizeof state);
    field(cl ? cl : body, cend, "address", addr, sizeof addr);
    printf("cluster %s, attempt %s of %d, coordinator %s, status %s\n", state, attempt, atoi(maxr) + 1, addr, url);
    printf("%-14s %-8s %-22s %-11s %-8s %s\n", "NODE", "EXECUTOR", "ADDRESS", "STATE", "PID", "EXIT");
    const char *p = cl ? strstr(cl, "\"nodes\": [") : NULL;
    while (p && (p = strchr(p, '{'))) {
        const char *e = strchr(p, '}');
        if (!e)
            break;
        char job[16], idx[16], eid[16], host[256], port[16], st[16], pid[16], ex[16], node[40], where[300];
        field(p, e, "job", job, sizeof job);
        field(p, e, "index", idx, sizeof idx);
        field(p, e, "executor_id", eid, sizeof eid);
        field(p, e, "host", host, sizeof host);
        field(p, e, "port", port, sizeof port);
        field(p, e, "state", st, sizeof st);
        field(p, e, "pid", pid, sizeof pid);
        field(p, e, "exit_code", ex, sizeof ex);
        snprintf(node, sizeof node, "%s:%s", job, idx);
        snprintf(where, sizeof where, "%s:%s", host, port);
        printf("%-14s %-8s %-22s %-11s %-8s %s\n", node, eid, where, st, pid, strcmp(ex, "-1") ? ex : "");
        p = e + 1;
    }
    /* the feed's totals: the keys of "feed" before its "nodes" */
    const char *fd = strstr(body, "\"feed\": {");
    const char *fe = fd ? strstr(fd, "\"nodes\": [") : NULL;
    if (fd && fe) {
        char fstate[16], rows[32], bytes[32], done[32], aborted[32], rps[32], eta[32];
        field(fd, fe, "state", fstate, sizeof fstate);
        field(fd, fe, "rows", rows, sizeof rows);
        field(fd, fe, "bytes", bytes, sizeof bytes);
        field(fd, fe, "partitions_completed", done, sizeof done);
        field(fd, fe, "partitions_aborted", aborted, sizeof aborted);
        field(fd, fe, "rows_per_s", rps, sizeof rps);
        field(fd, fe, "eta_s", eta, sizeof eta);
        printf("feed %s: ", fstate);
        if (strcmp(rows, "null"))
            printf("%s rows, ", rows);
        printf("%.1f MB, %s partitions", atof(bytes) / 1e6, done);
        if (strcmp(aborted, "0"))
            printf(" (%s aborted)", aborted);
        if (strcmp(rps, "null"))
            printf(", %.0f rows/s", atof(rps));
        if (strcmp(eta, "null") && eta[0])
            printf(", ETA %.0f s", atof(eta));
        printf("\n");
    }
    const char *h = strstr(body, "\"history\": [");
    if (h && h[12] != ']')
        printf("earlier attempts: %.*s\n", (int)strcspn(h + 12, "]"), h + 12);
    free(body);
    return 0;
}

/* Print what was appended to the log files since last time. */
static int pump_logs(const char *dir, const char *only, long *offsets, char names[][64], int *n)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 4, ".log") || l >= 64)
            continue;
        if (only && strncmp(e->d_name, only, strlen(only)))
            continue;
        int k;
        for (k = 0; k < *n; k++)
            if (!strcmp(names[k], e->d_name))
                break;
        if (k == *n) {
            if (*n >= 256)
                continue;
            snprintf(names[k], 64, "%.63s", e->d_name);
            offsets[k] = 0;
            (*n)++;
        }
    }
    closedir(d);
    for (int k = 0; k < *n; k++) {
        char path[1200], label[64], line[8192];
        snprintf(path, sizeof path, "%.1000s/%.63s", dir, names[k]);
        snprintf(label, sizeof label, "%.*s", (int)(strlen(names[k]) - 4), names[k]);
        char *dash = strrchr(label, '-');
        if (dash)
            *dash = ':';
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        fseek(f, offsets[k], SEEK_SET);
        while (fgets(line, sizeof line, f)) {
            size_t ll = strlen(line);
            if (line[ll - 1] != '\n' && !feof(f))
                break;
            if (line[ll - 1] != '\n') /* a partial last line: wait for the rest */
                break;
            printf("[%s] %s", label, line);
            offsets[k] = ftell(f);
        }
        fclose(f);
    }
    fflush(stdout);
    return 0;
}

int tfos__cmd_logs(const char *node, const char *log_dir, int follow)
{
    char dir[1024], url[512];
    if (log_dir)
        snprintf(dir, sizeof dir, "%s", log_dir);
    else if (newest_run(dir, sizeof dir)) {
        fprintf(stderr, "tfos: no run found: give --log-dir (no tfos-logs/run-* here)\n");
        return 1;
    }
    char only[64] = "";
    if (node) {
        snprintf(only, sizeof only, "%s", node);
        char *colon = strchr(only, ':');
        if (colon)
            *colon = '-';
        strncat(only, ".log", sizeof only - strlen(only) - 1);
    }
    static long offsets[256];
    static char names[256][64];
    int n = 0;
    if (pump_logs(dir, node ? only : NULL, offsets, names, &n)) {
        fprintf(stderr, "tfos: cannot read %s: %s\n", dir, strerror(errno));
        return 1;
    }
    if (node && n == 0) {
        fprintf(stderr, "tfos: no log for %s in %s\n", node, dir);
        return 1;
    }
    if (!follow)
        return 0;
    /* follow until the run's status page stops answering (the run ended) */
    int has_url = find_url(dir, url, sizeof url, NULL, 0) == 0;
    int64_t next_check = 0;
    for (;;) {
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
        pump_logs(dir, node ? only : NULL, offsets, names, &n);
        if (tfos__now_ms() >= next_check) {
            next_check = tfos__now_ms() + 1000;
            char *b = has_url ? http_get(url, "/status") : NULL;
            if (!b) {
                pump_logs(dir, node ? only : NULL, offsets, names, &n);
                return 0;
            }
            free(b);
        }
    }
}
