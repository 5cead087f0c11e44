/* yarn_am.c: `tfos yarn-am` (internal): tfos run, or tfos serve, inside the
 * YARN ApplicationMaster's container (docs/YARN.md). The ApplicationMaster
 * (yarn/, Java) starts it with the Unix socket it takes container requests
 * on, the host to listen on, each role's container size and the file to
 * write the addresses to; the launcher then starts every node through a
 * stand-in (src/launch/backend_yarn.c, tfos yarn-container).
 *
 * What the user sees on the terminal that ran tfos yarn comes from here too.
 * The launcher's lines (its logger's) go to this container's stderr, as tfos
 * run's go to its terminal, and into the status page's stream, as "[tfos]
 * LINE" (a node is always "job:index"), which tfos yarn prints as its own
 * "tfos: LINE" on stderr. The ApplicationMaster's notes (YARN allocating
 * containers, a container's exit in YARN's words) arrive on stdin, "NOTE
 * TEXT" lines, and are logged as the launcher's; its "DRAIN REASON" (YARN
 * preempting a container of the application) drains the cluster as SIGTERM
 * does. And while the cluster runs,
 * a timer says when the programs have started and, until the first line of
 * theirs arrives, that it waits for it. */
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/run.h"
#include "cli/serve.h"
#include "cli/yarn_opts.h"
#include "core/log.h"
#include "launch/launch.h"
#include "platform/clock.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char tfos__yarn_am_help[] =
    "usage: tfos yarn-am --am-socket S --bind HOST --resources R --address-file F [run options] -- PROGRAM...\n"
    "\n"
    "Internal: tfos run inside the YARN ApplicationMaster's container; every agent starts in a\n"
    "container of its own through tfos yarn-container.\n";

typedef struct am_cli {
    const char *am_socket, *bind, *resources, *address_file;
} am_cli;

/* yarn-am's own options, before run's (tfos__run_extra_fn). */
static int am_option(void *user, tfos__args *it, const char *a)
{
    am_cli *am = user;
    if (!strcmp(a, "--am-socket"))
        return tfos__opt_need(a, am->am_socket = tfos__args_value(it), "a path") ? 2 : 1;
    if (!strcmp(a, "--bind"))
        return tfos__opt_need(a, am->bind = tfos__args_value(it), "an address") ? 2 : 1;
    if (!strcmp(a, "--resources"))
        return tfos__opt_need(a, am->resources = tfos__args_value(it), "a list") ? 2 : 1;
    if (!strcmp(a, "--address-file"))
        return tfos__opt_need(a, am->address_file = tfos__args_value(it), "a file name") ? 2 : 1;
    return tfos__yarn_option_elsewhere(a);
}

/* ---- the user's terminal (see the top) ---------------------------------------- */

#define EARLY_LINES 64

static struct {
    pthread_t thread;          /* the launcher's: the only one that adds to lines */
    tfos__logbuf *lines;       /* the status page's stream; NULL until the launcher is open */
    char *early[EARLY_LINES];  /* lines logged before it was */
    int nearly;
    unsigned long long added;  /* lines added here; the rest of the stream is the nodes' */
} g_term;

static void stream_add(const char *line)
{
    if (!g_term.lines) {
        if (g_term.nearly < EARLY_LINES)
            g_term.early[g_term.nearly++] = strdup(line);
        return;
    }
    tfos__logbuf_add(g_term.lines, "tfos", line, 0);
    g_term.added++;
}

/* The logger of tfos yarn-am: stderr as always, and the stream, a line of
 * the message per entry (a failure summary spans several). Lines logged on
 * another thread stay on stderr: the stream belongs to the launcher's. */
static void term_log(int level, const char *msg, void *user)
{
    (void)user;
    static const char *const names[] = {"debug: ", "", "warning: ", "error: "};
    tfos__log_stderr(level, msg);
    if (!pthread_equal(pthread_self(), g_term.thread))
        return;
    for (const char *p = msg; *p;) {
        size_t n = strcspn(p, "\n");
        char line[4200];
        snprintf(line, sizeof line, "%s%.*s", p == msg ? names[level & 3] : "  ", (int)n, p);
        stream_add(line);
        p += n + (p[n] == '\n');
    }
}

static void term_open(tfos_local *l)
{
    tfos__status_src *st = tfos__launch_status(l);
    g_term.lines = st ? st->lines : NULL;
    for (int i = 0; i < g_term.nearly; i++) {
        if (g_term.early[i] && g_term.lines) {
            tfos__logbuf_add(g_term.lines, "tfos", g_term.early[i], 0);
            g_term.added++;
        }
        free(g_term.early[i]);
    }
    g_term.nearly = 0;
}

static void term_close(void)
{
    tfos_set_logger(NULL, NULL);
    g_term.lines = NULL;
    for (int i = 0; i < g_term.nearly; i++)
        free(g_term.early[i]);
    g_term.nearly = 0;
}

/* The ApplicationMaster's notes (stdin, "NOTE TEXT" lines) and the wait for
 * the programs' first lines. */
typedef struct am_watch {
    tfos_local *l;
    int fd;              /* the notes; -1 once they ended */
    int drain_off;       /* --drain-grace 0: a notice is told, not drained */
    int elastic;         /* --min-nodes: a drain on a notice re-forms the cluster at the size left */
    char buf[8192];
    size_t have;
    tfos__timer timer;
    int attempt;         /* the attempt the fields below are about */
    int started;         /* every node's program has started (said) */
    int64_t started_at, quiet_said;
    unsigned long long lines_at_start; /* the nodes' lines in the stream then */
} am_watch;

/* "DRAIN REASON": the ApplicationMaster's notice that YARN preempts a
 * container of this application (once per container). Taken as
 * tfos__launch_run takes SIGTERM: drained, with signo SIGTERM (no restart
 * after it; exit 75 when every node checkpointed) and YARN's reason in the
 * coordinator's lines; where no drain can start (the cluster forms, or its
 * attempt is ending) stopped. Differences: a drain under way (a graceful
 * kill came first) goes on, where a second SIGTERM would stop it; with
 * --drain-grace 0 the notice is only told: the container's loss is then a
 * node failure, restarted under --max-restarts, rather than a stop; and
 * with --min-nodes (elastic) the drained cluster forms again on the
 * containers YARN grants then (a resize, docs/YARN.md), unless `end` (the
 * ApplicationMaster's own container: "DRAIN-END"), going on without the
 * `lost` worker containers YARN named ("DRAIN K": 0, a ps or chief among
 * them, asks for every node again), and a notice while it
 * forms is only told (the container's loss, if it was one of the
 * attempt's, is then a node failure). */
static void drain_on_notice(am_watch *w, const char *reason, int end, int lost)
{
    if (w->drain_off) {
        TFOS_WARN("%s: not drained (--drain-grace 0): its loss will be a node failure", reason);
        return;
    }
    int go_on = w->elastic && !end;
    if (go_on)
        tfos__launch_lost(w->l, lost);
    int rc = tfos_local_drain(w->l, reason, go_on ? 0 : SIGTERM);
    tfos_coord *c = tfos_local_coord(w->l);
    if (rc == TFOS_EINVAL && c && tfos_coord_state(c) == TFOS_COORD_RUNNING) {
        TFOS_INFO("%s: the cluster drains already", reason);
    } else if (rc && go_on) {
        TFOS_WARN("%s: not drained (%s): the container's loss will be a node failure", reason,
                  rc == TFOS_EAGAIN ? "the cluster forms" : "no drain can start now");
    } else if (rc) {
        TFOS_WARN("%s: %s; stopping the cluster", reason,
                  rc == TFOS_EAGAIN ? "the cluster forms, no program runs to checkpoint" : "no drain can start now");
        tfos_local_stop(w->l, reason, SIGTERM);
    }
}

static void on_notes(tfos__loop *loop, int fd, int events, void *user)
{
    (void)events;
    am_watch *w = user;
    ssize_t r = read(fd, w->buf + w->have, sizeof w->buf - 1 - w->have);
    if (r < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (r <= 0) { /* the ApplicationMaster closed it */
        tfos__loop_unwatch(loop, fd);
        close(fd);
        w->fd = -1;
        return;
    }
    w->have += (size_t)r;
    w->buf[w->have] = '\0';
    char *start = w->buf, *nl;
    while ((nl = strchr(start, '\n')) || (start == w->buf && w->have == sizeof w->buf - 1)) {
        if (nl)
            *nl = '\0';
        if (!strncmp(start, "NOTE ", 5))
            TFOS_INFO("%s", start + 5);
        else if (nl && !strncmp(start, "DRAIN ", 6)) {
            char *reason = NULL;
            long lost = strtol(start + 6, &reason, 10); /* "DRAIN K REASON" */
            drain_on_notice(w, reason && *reason == ' ' ? reason + 1 : start + 6, 0,
                            lost > 0 && lost < 1 << 20 ? (int)lost : 0);
        } else if (nl && !strncmp(start, "DRAIN-END ", 10))
            drain_on_notice(w, start + 10, 1, 0);
        start = nl ? nl + 1 : w->buf + w->have;
    }
    w->have = strlen(start);
    memmove(w->buf, start, w->have);
}

static unsigned long long node_lines(void)
{
    return g_term.lines ? g_term.lines->next - g_term.added : 0;
}

/* Once a second: when every node's program has started, say so; then, until
 * a line of theirs arrives, that it waits for one (every 15 s). */
static void on_watch(tfos__loop *loop, tfos__timer *t, void *user)
{
    am_watch *w = user;
    int64_t now = tfos__now_ms();
    tfos__status_src *st = tfos__launch_status(w->l);
    tfos_coord *c = st ? st->coord : NULL;
    if (c && st->attempt != w->attempt) {
        w->attempt = st->attempt;
        w->started = 0;
    }
    if (c && tfos_coord_state(c) == TFOS_COORD_RUNNING) {
        int n = tfos_coord_node_count(c), running = 0;
        for (int i = 0; i < n; i++) {
            tfos_node_info ni;
            if (!tfos_coord_node(c, i, &ni) && (ni.pid > 0 || !strcmp(ni.state, "exited")))
                running++;
        }
        if (!w->started && running == n) {
            TFOS_INFO("the programs have started on all %d nodes; their output follows as they print it", n);
            w->started = 1;
            w->started_at = w->quiet_said = now;
            w->lines_at_start = node_lines();
        } else if (w->started && node_lines() == w->lines_at_start && now - w->quiet_said >= 15000) {
            TFOS_INFO("no output from the programs yet, %lld s after they started (importing a framework "
                      "takes a while; `tfos yarn status` and the status page show the nodes)",
                      (long long)((now - w->started_at) / 1000));
            w->quiet_said = now;
        }
    }
    tfos__timer_arm(loop, t, now + 1000, on_watch, w);
}

int tfos__cmd_yarn_am(int argc, char **argv)
{
    am_cli am = {0};
    tfos__run_cli r;
    int rc = tfos__run_parse(&r, argc, argv, am_option, &am);
    if (rc == TFOS__HELP) {
        fputs(tfos__yarn_am_help, stdout);
        return 0;
    }
    if (rc)
        return rc;
    if (!am.am_socket || !am.bind || !am.resources || !am.address_file)
        return tfos__usage_error("%s", "yarn-am needs --am-socket, --bind, --resources and --address-file");
    /* the notes: our own descriptor, and /dev/null for stdin, which the
     * stand-ins inherit (tfos yarn serve's launcher reads none: the
     * ApplicationMaster then gets EPIPE and keeps them in its stderr) */
    int notes = -1, devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull >= 0) {
        notes = fcntl(0, F_DUPFD_CLOEXEC, 3);
        dup2(devnull, 0);
        close(devnull);
    }
    if (r.argv && r.argv[0] && !strcmp(r.argv[0], "serve")) { /* tfos yarn serve's */
        if (notes >= 0)
            close(notes);
        int n = 0;
        while (r.argv[n])
            n++;
        tfos__serve_am sa = {.am_socket = am.am_socket, .address_file = am.address_file, .bind = am.bind,
                             .resources = am.resources};
        return tfos__serve_on_yarn(n - 1, r.argv + 1, &sa);
    }
    if ((rc = tfos__run_check(&r))) {
        if (notes >= 0)
            close(notes);
        return rc;
    }
    char exe[PATH_MAX];
    if (tfos__self_path(exe, sizeof exe)) {
        fprintf(stderr, "tfos: cannot find my own executable: %s\n", strerror(errno));
        return 1;
    }
    tfos_run_opts o;
    tfos__run_opts(&r, exe, &o);
    tfos__launch_opts lo = {0};
    tfos__yarn_cfg cfg;
    tfos__launch_on_yarn(&o, &lo, &cfg, exe, am.am_socket, am.resources, am.bind, am.address_file);
    for (int i = 0; i < r.ninputs; i++)
        if (access(r.inputs[i], R_OK)) {
            fprintf(stderr, "tfos: --input %s: %s\n", r.inputs[i], strerror(errno));
            if (notes >= 0)
                close(notes);
            return 2;
        }
    tfos__catch_stop_signals();
    g_term.thread = pthread_self();
    tfos_set_logger(term_log, NULL);
    int code = 1;
    tfos_local *l;
    rc = tfos__launch_open(&l, &o, &lo);
    if (rc) {
        term_close();
        if (notes >= 0)
            close(notes);
        fprintf(stderr, "tfos: could not start the cluster: %s\n", tfos_strerror(rc));
        return 1;
    }
    term_open(l);
    am_watch w = {.l = l, .fd = notes, .drain_off = o.drain_grace < 0,
                  .elastic = o.min_nodes > 0 && o.min_nodes < tfos_layout_total(&o.layout)};
    tfos__loop *loop = tfos__launch_loop(l);
    if (w.fd >= 0 && tfos__loop_watch(loop, w.fd, TFOS_EV_READ, on_notes, &w)) {
        close(w.fd);
        w.fd = -1;
    }
    tfos__timer_arm(loop, &w.timer, tfos__now_ms() + 1000, on_watch, &w);
    if (!(rc = tfos__launch_start(l)))
        tfos__launch_run(l, tfos__stop_flag(), &code);
    tfos__timer_disarm(loop, &w.timer);
    if (w.fd >= 0) {
        tfos__loop_unwatch(loop, w.fd);
        close(w.fd);
    }
    term_close(); /* the stream goes with the launcher */
    tfos_local_close(l);
    if (rc) {
        fprintf(stderr, "tfos: could not start the cluster: %s\n", tfos_strerror(rc));
        return 1;
    }
    return code;
}
