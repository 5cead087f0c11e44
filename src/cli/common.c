/* common.c: the helpers every tfos command shares (see common.h). */
#include "cli/common.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *g_cmd;
static const char *g_help; /* the command's help text: its options, for "did you mean" */

void tfos__set_command(const char *name, const char *help)
{
    g_cmd = name;
    g_help = help;
}

int tfos__self_path(char *buf, size_t len)
{
    ssize_t n = readlink("/proc/self/exe", buf, len - 1);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    return 0;
}

void tfos__on_stop_signals(void (*handler)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

static volatile int got_signal;

static void on_signal(int sig)
{
    if (!got_signal)
        got_signal = sig;
}

void tfos__catch_stop_signals(void)
{
    tfos__on_stop_signals(on_signal);
}

volatile int *tfos__stop_flag(void)
{
    return &got_signal;
}

static void usage_hint(void)
{
    if (g_cmd)
        fprintf(stderr, "(tfos %s --help for usage)\n", g_cmd);
    else
        fprintf(stderr, "(tfos --help for usage)\n");
}

int tfos__usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "tfos: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    usage_hint();
    return 2;
}

/* The optimal-string-alignment distance of a[0..n) and b[0..m) (edits,
 * with a swap of two neighbours counted as one: --wokrers is 1 from
 * --workers), for names of at most 63 characters. */
static int edit_distance(const char *a, size_t n, const char *b, size_t m)
{
    int d[64][64];
    if (n > 63 || m > 63)
        return 64;
    for (size_t i = 0; i <= n; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            int cost = a[i - 1] != b[j - 1];
            int v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v)
                v = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < v)
                v = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[n][m];
}

size_t tfos__nearest_option(const char *given, const char *help, char *out, size_t len)
{
    if (!given || !help || len == 0 || strncmp(given, "--", 2))
        return 0;
    size_t n = strcspn(given, "=");
    int best = 3, ties = 0, prefixes = 0; /* suggest at distance <= 2, or a unique prefix (--work) */
    const char *bp = NULL, *pp = NULL;
    size_t bl = 0, pl = 0;
    for (const char *p = strstr(help, "--"); p; p = strstr(p + 2, "--")) {
        if (p > help && p[-1] != ' ' && p[-1] != ',' && p[-1] != '[' && p[-1] != '(')
            continue;
        size_t m = 2 + strspn(p + 2, "abcdefghijklmnopqrstuvwxyz0123456789-");
        if (m <= 2 || (m == n && !strncmp(p, given, n)))
            continue;
        if (n >= 5 && m > n && !strncmp(p, given, n) && !(pp && pl == m && !strncmp(pp, p, m))) {
            prefixes++;
            pp = p, pl = m;
        }
        int dist = edit_distance(given, n, p, m);
        if (dist < best) {
            best = dist, bp = p, bl = m, ties = 0;
        } else if (dist == best && bp && !(bl == m && !strncmp(bp, p, m))) {
            ties++;
        }
    }
    if (bp && !ties) {
        snprintf(out, len, "%.*s", (int)bl, bp);
        return bl;
    }
    if (prefixes == 1) {
        snprintf(out, len, "%.*s", (int)pl, pp);
        return pl;
    }
    return 0;
}

int tfos__unknown_option(const char *given)
{
    char near[64];
    if (tfos__nearest_option(given, g_help, near, sizeof near))
        fprintf(stderr, "tfos: unknown option '%s'; did you mean '%s'?\n", given, near);
    else
        fprintf(stderr, "tfos: unknown option '%s'\n", given);
    usage_hint();
    return 2;
}

/* ---- the option parser ------------------------------------------------------ */

void tfos__args_init(tfos__args *it, int argc, char **argv)
{
    it->argc = argc;
    it->argv = argv;
    it->i = -1;
    it->eq = NULL;
    it->took = 0;
}

/* Put the current argument's '=' back. */
static void restore(tfos__args *it)
{
    if (it->eq)
        *it->eq = '=';
    it->eq = NULL;
}

char *tfos__args_next(tfos__args *it)
{
    restore(it);
    if (++it->i >= it->argc)
        return NULL;
    char *a = it->argv[it->i];
    it->took = 0;
    if (!strncmp(a, "--", 2) && (it->eq = strchr(a, '=')))
        *it->eq = '\0';
    return a;
}

char *tfos__args_value(tfos__args *it)
{
    if (it->took)
        return NULL;
    it->took = 1;
    if (it->eq)
        return it->eq + 1;
    return it->i + 1 < it->argc ? it->argv[++it->i] : NULL;
}

char **tfos__args_rest(tfos__args *it)
{
    restore(it);
    return it->argv + it->i;
}

const char *tfos__args_whole(tfos__args *it)
{
    if (it->eq && !it->took) {
        *it->eq = '=';
        it->eq = NULL;
    }
    return it->argv[it->i];
}

int tfos__args_flag(tfos__args *it)
{
    if (it->eq && !it->took)
        return tfos__usage_error("%s takes no value", it->argv[it->i]);
    return 0;
}

int tfos__args_parse(int argc, char **argv, tfos__opt_fn fn, void *user, char ***program)
{
    *program = NULL;
    tfos__args it;
    tfos__args_init(&it, argc, argv);
    for (char *a; (a = tfos__args_next(&it));) {
        if (!strcmp(a, "--")) {
            *program = argv + it.i + 1;
            return 0;
        }
        if (a[0] != '-' || !a[1]) {
            *program = tfos__args_rest(&it);
            return 0;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return TFOS__HELP;
        int taken = fn(user, &it, a);
        if (!taken)
            return tfos__unknown_option(tfos__args_whole(&it));
        if (taken == 2)
            return 2;
    }
    return 0;
}

int tfos__parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

int tfos__opt_int(const char *opt, const char *s, int lo, int hi, int *out)
{
    if (!tfos__parse_int(s, lo, hi, out))
        return 0;
    if (s)
        fprintf(stderr, "tfos: %s needs an integer between %d and %d, got '%s'\n", opt, lo, hi, s);
    else
        fprintf(stderr, "tfos: %s needs an integer between %d and %d\n", opt, lo, hi);
    usage_hint();
    return 2;
}

int tfos__opt_secs(const char *opt, const char *s, int zero_ok, double *out)
{
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || errno || end == s || *end || v < 0 || (v == 0 && !zero_ok) || v > 1e7) {
        if (s)
            fprintf(stderr, "tfos: %s needs a %s number of seconds, got '%s'\n", opt,
                    zero_ok ? "non-negative" : "positive", s);
        else
            fprintf(stderr, "tfos: %s needs a %s number of seconds\n", opt, zero_ok ? "non-negative" : "positive");
        usage_hint();
        return 2;
    }
    *out = v;
    return 0;
}

int tfos__opt_need(const char *opt, const char *s, const char *what)
{
    if (s)
        return 0;
    fprintf(stderr, "tfos: %s needs %s\n", opt, what);
    usage_hint();
    return 2;
}

/* ---- the cluster options -------------------------------------------------- */

void tfos__cluster_init(tfos__cluster_cli *c)
{
    memset(c, 0, sizeof *c);
    c->failure_grace = TFOS_DEFAULT_FAILURE_GRACE;
}

int tfos__cluster_option(tfos__cluster_cli *c, tfos__args *it, const char *a)
{
    if (!strcmp(a, "--workers")) {
        c->have_workers = 1;
        return tfos__opt_int(a, tfos__args_value(it), 0, TFOS_MAX_NODES, &c->layout.num_workers) ? 2 : 1;
    }
    if (!strcmp(a, "--ps"))
        return tfos__opt_int(a, tfos__args_value(it), 0, TFOS_MAX_NODES, &c->layout.num_ps) ? 2 : 1;
    if (!strcmp(a, "--chief") || !strcmp(a, "--evaluator")) {
        if (tfos__args_flag(it))
            return 2;
        *(a[2] == 'c' ? &c->layout.chief : &c->layout.evaluator) = true;
        return 1;
    }
    if (!strcmp(a, "--reservation-timeout"))
        return tfos__opt_secs(a, tfos__args_value(it), 0, &c->reservation_timeout) ? 2 : 1;
    if (!strcmp(a, "--grace"))
        return tfos__opt_secs(a, tfos__args_value(it), 0, &c->grace) ? 2 : 1;
    if (!strcmp(a, "--failure-grace"))
        return tfos__opt_secs(a, tfos__args_value(it), 1, &c->failure_grace) ? 2 : 1;
    if (!strcmp(a, "--heartbeat-timeout"))
        return tfos__opt_secs(a, tfos__args_value(it), 0, &c->heartbeat_timeout) ? 2 : 1;
    return 0;
}

int tfos__cluster_check(const tfos__cluster_cli *c, const char *cmd)
{
    if (!c->have_workers && !c->layout.chief)
        return tfos__usage_error("%s needs --workers N (or --chief)", cmd);
    if (!c->layout.num_workers && !c->layout.chief)
        return tfos__usage_error("%s", "--workers 0 needs --chief: a cluster needs at least one worker or a chief");
    return 0;
}
