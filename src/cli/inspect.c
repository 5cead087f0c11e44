/* inspect.c: `tfos status` and `tfos logs`, reading a running (or ended)
 * `tfos run` from the command line.
 *
 *   tfos status [URL | LOG_DIR] [--json]   the cluster table and the feed
 *                                          (from /status)
 *   tfos logs [-f] [NODE] [--log-dir D]    the nodes' logs; -f follows them
 *                                          until the run ends
 * Without a target, the newest tfos-logs/run-* under the current directory.
 * The status document is read with jansson, by key: its layout is status.c's
 * and the coordinator's to choose. */
#include "cli/inspect.h"

#include "cli/commands.h"
#include "cli/common.h"

#include "platform/clock.h"
#include "platform/net.h"
#include "tfos/tfos.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char tfos__status_help[] =
    "usage: tfos status [URL | LOG_DIR] [--json] [--log-dir D]\n"
    "\n"
    "Shows a run's state: from its status URL, or from its log directory (default: the newest\n"
    "run under tfos-logs).\n"
    "\n"
    "options:\n"
    "  -h, --help     show this help and exit\n"
    "  --json         print the status JSON as served\n"
    "  --log-dir D    the run's log directory (as LOG_DIR)\n";

const char tfos__logs_help[] =
    "usage: tfos logs [-f] [NODE] [--log-dir D]\n"
    "\n"
    "Prints a run's node logs (NODE: e.g. worker-0; default: all of them).\n"
    "\n"
    "options:\n"
    "  -h, --help     show this help and exit\n"
    "  -f, --follow   keep printing as the logs grow\n"
    "  --log-dir D    the run's log directory (default: the newest run under tfos-logs)\n";

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
char *tfos__http_get(const char *url, const char *path)
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
    /* a run whose page listens beyond loopback has a token in its URL */
    const char *tok = strstr(url, "?token=");
    char auth[120] = "";
    if (tok)
        snprintf(auth, sizeof auth, "Authorization: Bearer %.64s\r\n", tok + 7);
    char req[800];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: %s\r\n%s\r\n", path, hostport, auth);
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
    if (!body || (strncmp(buf, "HTTP/1.0 200", 12) && strncmp(buf, "HTTP/1.1 200", 12))) {
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

/* Member `key` of obj as table text into buf: a string's content, an
 * integer, a real; "" when missing or null. */
static const char *text_of(const json_t *obj, const char *key, char *buf, size_t len)
{
    const json_t *v = json_object_get(obj, key);
    buf[0] = 0;
    if (json_is_string(v))
        snprintf(buf, len, "%s", json_string_value(v));
    else if (json_is_integer(v))
        snprintf(buf, len, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    else if (json_is_real(v))
        snprintf(buf, len, "%g", json_real_value(v));
    return buf;
}

/* The feed's totals line of `tfos status` ("feed feeding: 1200 rows written,
 * 800 consumed, ..."); rates while there is something to rate. */
static void print_feed(const json_t *feed)
{
    char state[32];
    const json_t *rows = json_object_get(feed, "rows"), *rps = json_object_get(feed, "rows_per_s"),
                 *eta = json_object_get(feed, "eta_s"), *taken = json_object_get(feed, "rows_consumed"),
                 *tps = json_object_get(feed, "consumed_per_s");
    json_int_t done = json_integer_value(json_object_get(feed, "partitions_completed")),
               aborted = json_integer_value(json_object_get(feed, "partitions_aborted"));
    int feeding = !strcmp(text_of(feed, "state", state, sizeof state), "feeding");
    printf("feed %s: ", state);
    if (json_is_integer(rows))
        printf("%" JSON_INTEGER_FORMAT " rows written, ", json_integer_value(rows));
    if (json_is_integer(taken))
        printf("%" JSON_INTEGER_FORMAT " consumed, ", json_integer_value(taken));
    printf("%.1f MB, %" JSON_INTEGER_FORMAT " partitions", json_number_value(json_object_get(feed, "bytes")) / 1e6,
           done);
    if (aborted)
        printf(" (%" JSON_INTEGER_FORMAT " aborted)", aborted);
    if (feeding && json_is_number(rps))
        printf(", writing %.0f rows/s", json_number_value(rps));
    if (json_is_number(tps) && json_number_value(tps) > 0)
        printf(", consuming %.0f rows/s", json_number_value(tps));
    if (json_is_number(eta))
        printf(", ETA %.0f s", json_number_value(eta));
    printf("\n");
}

/* The PROGRESS cell: a node's report ("step 120 loss 0.31"), cut to fit. */
static void report_text(const json_t *n, char *buf, size_t len)
{
    const json_t *r = json_object_get(n, "report");
    const char *k;
    const json_t *v;
    size_t used = 0;
    buf[0] = 0;
    json_object_foreach((json_t *)r, k, v) {
        char val[40];
        if (json_is_integer(v))
            snprintf(val, sizeof val, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        else if (json_is_real(v))
            snprintf(val, sizeof val, "%.4g", json_real_value(v));
        else
            snprintf(val, sizeof val, "%s", json_is_string(v) ? json_string_value(v) : "?");
        int w = snprintf(buf + used, len - used, "%s%s %s", used ? " " : "", k, val);
        if (w < 0 || (size_t)w >= len - used)
            break;
        used += (size_t)w;
    }
}

/* How the nodes started: each phase's p50/p99/max and its slowest nodes
 * (the coordinator's "start" object). */
static void print_start(const json_t *start)
{
    const json_t *phases = json_object_get(start, "phases"), *p;
    size_t i;
    if (!json_array_size(phases))
        return;
    printf("START (ms)       %-8s %-8s %-8s %s\n", "P50", "P99", "MAX", "SLOWEST");
    json_array_foreach(phases, i, p) {
        if (!json_is_integer(json_object_get(p, "max_ms")))
            continue;
        char name[32], p50[24], p99[24], mx[24], slow[200] = "";
        const json_t *s, *sl = json_object_get(p, "slowest");
        size_t j, used = 0;
        json_array_foreach(sl, j, s) {
            int w = snprintf(slow + used, sizeof slow - used, "%s%s", j ? ", " : "",
                             json_is_string(s) ? json_string_value(s) : "?");
            if (w < 0 || (size_t)w >= sizeof slow - used)
                break;
            used += (size_t)w;
        }
        printf("  %-14s %-8s %-8s %-8s %s\n", text_of(p, "phase", name, sizeof name), text_of(p, "p50_ms", p50, sizeof p50),
               text_of(p, "p99_ms", p99, sizeof p99), text_of(p, "max_ms", mx, sizeof mx), slow);
    }
    const json_t *slowest = json_object_get(start, "slowest_phase");
    if (json_is_string(slowest))
        printf("slowest start phase: %s\n", json_string_value(slowest));
}

/* The table of `tfos status`, from a /status document. */
static void print_status(const json_t *st, const char *where)
{
    const json_t *cluster = json_object_get(st, "cluster");
    char state[32], addr[128];
    if (json_is_object(cluster)) {
        text_of(cluster, "state", state, sizeof state);
        text_of(cluster, "address", addr, sizeof addr);
    } else { /* between attempts */
        snprintf(state, sizeof state, "starting");
        snprintf(addr, sizeof addr, "-");
    }
    printf("cluster %s, attempt %" JSON_INTEGER_FORMAT " of %" JSON_INTEGER_FORMAT ", coordinator %s, status %s\n",
           state, json_integer_value(json_object_get(st, "attempt")),
           json_integer_value(json_object_get(st, "max_restarts")) + 1, addr, where);
    printf("%-14s %-8s %-22s %-11s %-8s %-5s %-10s %-10s %s\n", "NODE", "EXECUTOR", "ADDRESS", "STATE", "PID", "EXIT",
           "WRITTEN", "CONSUMED", "PROGRESS");
    const json_t *nodes = json_object_get(cluster, "nodes"), *n;
    size_t i;
    json_array_foreach(nodes, i, n) {
        char job[16], idx[16], eid[16], host[256], port[16], nst[16], pid[16], node[40], where_[300];
        char written[24] = "", consumed[24] = "", progress[200];
        const json_t *ex = json_object_get(n, "exit_code"), *feed = json_object_get(n, "feed");
        char exit_code[16] = "";
        if (json_is_integer(ex) && json_integer_value(ex) != -1)
            snprintf(exit_code, sizeof exit_code, "%" JSON_INTEGER_FORMAT, json_integer_value(ex));
        if (json_is_object(feed)) {
            text_of(feed, "rows_written", written, sizeof written);
            text_of(feed, "rows_consumed", consumed, sizeof consumed);
        }
        report_text(n, progress, sizeof progress);
        snprintf(node, sizeof node, "%s:%s", text_of(n, "job", job, sizeof job), text_of(n, "index", idx, sizeof idx));
        snprintf(where_, sizeof where_, "%s:%s", text_of(n, "host", host, sizeof host),
                 text_of(n, "port", port, sizeof port));
        printf("%-14s %-8s %-22s %-11s %-8s %-5s %-10s %-10s %s\n", node, text_of(n, "executor_id", eid, sizeof eid),
               where_, text_of(n, "state", nst, sizeof nst), text_of(n, "pid", pid, sizeof pid), exit_code, written,
               consumed, progress);
    }
    const json_t *page = json_object_get(cluster, "nodes_page");
    if (json_is_object(page))
        printf("(nodes %" JSON_INTEGER_FORMAT "-%" JSON_INTEGER_FORMAT " of %" JSON_INTEGER_FORMAT
               "; the rest with --json on URL/status?nodes=FIRST-LAST)\n",
               json_integer_value(json_object_get(page, "first")), json_integer_value(json_object_get(page, "last")),
               json_integer_value(json_object_get(cluster, "size")));
    if (json_is_object(json_object_get(cluster, "start")))
        print_start(json_object_get(cluster, "start"));
    const json_t *feed = json_object_get(st, "feed");
    if (json_is_object(feed))
        print_feed(feed);
    const json_t *history = json_object_get(st, "history");
    if (json_array_size(history)) {
        printf("earlier attempts:");
        json_array_foreach(history, i, n) {
            printf("%s %s", i ? ";" : "", json_is_string(n) ? json_string_value(n) : "?");
        }
        printf("\n");
    }
    const json_t *failure = json_object_get(cluster, "failure");
    if (json_is_string(failure) && json_string_length(failure))
        printf("failure: %s\n", json_string_value(failure));
}

/* The document in `body` (taken) as JSON or as the table. */
static int show_status(char *body, const char *where, int json)
{
    if (json) {
        printf("%s\n", body);
        free(body);
        return 0;
    }
    json_error_t je;
    json_t *st = json_loads(body, 0, &je);
    free(body);
    if (!json_is_object(st)) {
        fprintf(stderr, "tfos: %s is not a tfos status document (%s)\n", where, st ? "not a JSON object" : je.text);
        json_decref(st);
        return 1;
    }
    print_status(st, where);
    json_decref(st);
    return 0;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0, got;
    do {
        if (len + 65536 > cap) {
            char *nb = realloc(buf, (cap = len + 65536) + 1);
            if (!nb)
                break;
            buf = nb;
        }
        got = fread(buf + len, 1, cap - len, f);
        len += got;
    } while (got > 0 && len < (16u << 20));
    fclose(f);
    if (buf)
        buf[len] = 0;
    return buf;
}

static int status_of(const char *target, int json)
{
    char url[512], dir[1024] = "";
    if (find_url(target, url, sizeof url, dir, sizeof dir))
        return 1;
    char *body = tfos__http_get(url, "/status");
    if (body) {
        return show_status(body, url, json);
    }
    /* ended: the launcher left its last state in the log dir */
    char path[1100];
    snprintf(path, sizeof path, "%s/status.json", dir);
    body = dir[0] ? read_file(path) : NULL;
    if (!body) {
        fprintf(stderr, "tfos: %s does not answer: the run has ended or is not on this machine\n", url);
        return 1;
    }
    if (!json)
        printf("the run has ended; its final state, from %s:\n", path);
    return show_status(body, path, json);
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

static int logs_of(const char *node, const char *log_dir, int follow)
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
            char *b = has_url ? tfos__http_get(url, "/status") : NULL;
            if (!b) {
                pump_logs(dir, node ? only : NULL, offsets, names, &n);
                return 0;
            }
            free(b);
        }
    }
}

/* `tfos status [URL | LOG_DIR] [--json] [--log-dir D]`, `tfos logs [-f]
 * [NODE] [--log-dir D]`: one parser, their options being alike. */
static int status_or_logs(int argc, char **argv, int status)
{
    const char *target = NULL, *dir = NULL;
    int json = 0, follow = 0;
    for (int i = 0; i < argc; i++) {
        char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(status ? tfos__status_help : tfos__logs_help, stdout);
            return 0;
        }
        if (!strcmp(a, "--json"))
            json = 1;
        else if (!strcmp(a, "-f") || !strcmp(a, "--follow"))
            follow = 1;
        else if (!strcmp(a, "--log-dir")) {
            if (i + 1 >= argc)
                return tfos__usage_error("%s needs a directory", a);
            dir = argv[++i];
        } else if (!strncmp(a, "--log-dir=", 10)) {
            if (!a[10])
                return tfos__usage_error("%s needs a directory", "--log-dir");
            dir = a + 10;
        } else if (a[0] == '-' && a[1])
            return tfos__usage_error("unknown option '%s'", a);
        else if (target)
            return tfos__usage_error("unexpected argument '%s'", a);
        else
            target = a;
    }
    return status ? status_of(target ? target : dir, json) : logs_of(target, dir, follow);
}

int tfos__cmd_status(int argc, char **argv)
{
    return status_or_logs(argc, argv, 1);
}

int tfos__cmd_logs(int argc, char **argv)
{
    return status_or_logs(argc, argv, 0);
}
