/* policy.c: failure records, the restart policy, and the checkpoint
 * fingerprint the policy compares (see "failures and the restart policy" in
 * include/tfos/tfos.h). Every launcher -- `tfos run`, TFCluster on Spark,
 * the engines to come -- hands its coordinator one tfos_policy; the
 * coordinator asks it when the cluster fails, and the launcher acts on the
 * answer. Nothing else decides about restarts. */
#include "core/json.h"
#include "platform/fs.h"
#include "tfos/tfos.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *const cause_names[] = {"none",      "exit",  "signal",  "heartbeat", "agent_lost",
                                          "executor_lost", "start", "ps_exited", "reservation", "feed",
                                          "stopped",   "hang",  "setup"};

const char *tfos_cause_name(int cause)
{
    return cause >= 0 && cause <= TFOS_CAUSE_MAX_ ? cause_names[cause] : "unknown";
}

/* ---- Python tracebacks --------------------------------------------------- */

/* `  File "path", line N, in fn` -> "path:N" in where. */
static int frame_line(const char *s, char *where, size_t len)
{
    const char *p = s;
    while (*p == ' ')
        p++;
    if (p == s || strncmp(p, "File \"", 6))
        return 0;
    p += 6;
    const char *q = strstr(p, "\", line ");
    if (!q)
        return 0;
    long line = strtol(q + 8, NULL, 10);
    if (line <= 0)
        return 0;
    snprintf(where, len, "%.*s:%ld", (int)(q - p), p, line);
    return 1;
}

/* An exception line starts at column 0 with a dotted identifier followed by
 * ':' or the end of the line ("ValueError: bad", "KeyboardInterrupt"). */
static int exception_line(const char *s, char *type, size_t len)
{
    size_t n = 0;
    while (s[n] && s[n] != ':') {
        char ch = s[n];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
              ch == '.'))
            return 0;
        n++;
    }
    if (!n || (s[0] >= '0' && s[0] <= '9'))
        return 0;
    snprintf(type, len, "%.*s", (int)n, s);
    return 1;
}

void tfos_failure_parse_traceback(tfos_failure *f, const char *const *lines, int n)
{
    f->exc_type[0] = f->exc_where[0] = '\0';
    /* the innermost frame of the last traceback, and the exception line that
     * ends it (the first line after that frame that is not indented) */
    int last = -1;
    char where[sizeof f->exc_where];
    for (int i = 0; i < n; i++)
        if (frame_line(lines[i], where, sizeof where))
            last = i;
    if (last < 0)
        return;
    frame_line(lines[last], f->exc_where, sizeof f->exc_where);
    for (int i = last + 1; i < n; i++) {
        if (lines[i][0] == ' ' || lines[i][0] == '\t' || !lines[i][0])
            continue;
        if (exception_line(lines[i], f->exc_type, sizeof f->exc_type))
            return;
        break;
    }
    f->exc_where[0] = '\0'; /* a frame without its exception: not a traceback we understand */
}

/* ---- the policy ----------------------------------------------------------- */

struct tfos_policy {
    int max_restarts;
    int attempt;
    int resizes;        /* attempts begun by a resize: they spend no restart */
    tfos_attempt_record *recs;
    int n, cap;
    char verdict[1024];
};

int tfos_policy_open(tfos_policy **out, int max_restarts)
{
    if (!out || max_restarts < 0)
        return TFOS_EINVAL;
    tfos_policy *p = calloc(1, sizeof *p);
    if (!p)
        return TFOS_ENOMEM;
    p->max_restarts = max_restarts;
    p->attempt = 1;
    *out = p;
    return 0;
}

void tfos_policy_close(tfos_policy *p)
{
    if (!p)
        return;
    free(p->recs);
    free(p);
}

/* Rule 1. START is a program that cannot start (exec failed, exit 126/127,
 * a missing script, an interpreter without what tfos's own program needs):
 * the next attempt runs the same command on the same files. A node that
 * could not be set up (SETUP: an agent lost before it registered, a fork
 * that failed) may well start the next time. */
static int retryable(int cause)
{
    return cause != TFOS_CAUSE_START && cause != TFOS_CAUSE_RESERVATION && cause != TFOS_CAUSE_FEED &&
           cause != TFOS_CAUSE_STOPPED;
}

/* "dir/train.py:52" -> "train.py:52": the same program file sits in another
 * directory in every YARN container (and Spark work dir) */
static const char *file_and_line(const char *where)
{
    const char *slash = strrchr(where, '/');
    return slash ? slash + 1 : where;
}

/* Rule 2: a node failed with the same exception at the same place as the
 * attempt before, and no checkpoint data was written in between. Any node:
 * chief:0 and worker:0 run the same program, and which of them reaches the
 * bug first is a matter of timing, not a new failure. */
static int deterministic(const tfos_attempt_record *prev, const tfos_failure *f, const char *progress)
{
    const tfos_failure *g = &prev->failure;
    return f->cause == TFOS_CAUSE_EXIT && g->cause == TFOS_CAUSE_EXIT && f->exc_type[0] && f->exc_where[0] &&
           !strcmp(f->exc_type, g->exc_type) && !strcmp(file_and_line(f->exc_where), file_and_line(g->exc_where)) &&
           !strcmp(progress, prev->progress);
}

static int grow(tfos_policy *p)
{
    if (p->n < p->cap)
        return 0;
    int cap = p->cap ? p->cap * 2 : 8;
    tfos_attempt_record *r = realloc(p->recs, (size_t)cap * sizeof *r);
    if (!r)
        return TFOS_ENOMEM;
    p->recs = r;
    p->cap = cap;
    return 0;
}

/* The last record that was a failure (resizes are not), or NULL. */
static const tfos_attempt_record *last_failure(const tfos_policy *p)
{
    for (int i = p->n - 1; i >= 0; i--)
        if (p->recs[i].decision != TFOS_RESIZE)
            return &p->recs[i];
    return NULL;
}

int tfos_policy_decide(tfos_policy *p, const tfos_failure *f, const char *progress, int *why_out)
{
    if (!p || !f || f->cause <= TFOS_CAUSE_NONE || f->cause > TFOS_CAUSE_MAX_)
        return TFOS_EINVAL;
    if (!progress)
        progress = "";
    if (grow(p))
        return TFOS_ENOMEM;
    tfos_attempt_record *rec = &p->recs[p->n];
    memset(rec, 0, sizeof *rec);
    rec->failure = *f;
    rec->failure.attempt = p->attempt;
    snprintf(rec->progress, sizeof rec->progress, "%s", progress);
    int why;
    const tfos_attempt_record *prev = last_failure(p);
    int spent = p->attempt - p->resizes; /* restarts so far + 1 */
    if (!retryable(f->cause))
        why = TFOS_WHY_NOT_RETRYABLE;
    else if (prev && deterministic(prev, f, progress))
        why = TFOS_WHY_DETERMINISTIC;
    else if (spent > p->max_restarts)
        why = TFOS_WHY_EXHAUSTED;
    else
        why = TFOS_WHY_RESTART;
    rec->why = why;
    rec->decision = why == TFOS_WHY_RESTART ? TFOS_RESTART : TFOS_RAISE;
    p->n++;
    p->verdict[0] = '\0';
    char unused[48] = "";
    if (p->max_restarts > 0)
        snprintf(unused, sizeof unused, " (%d of %d restarts unused)", p->max_restarts - spent + 1,
                 p->max_restarts);
    if (why == TFOS_WHY_DETERMINISTIC) {
        /* "(worker)" when one job failed twice, else the two nodes */
        const tfos_failure *g = &prev->failure;
        char who[112];
        if (!strcmp(f->job, g->job))
            snprintf(who, sizeof who, "%s", f->job);
        else
            snprintf(who, sizeof who, "%s, then %s", g->node, f->node);
        snprintf(p->verdict, sizeof p->verdict,
                 "the same %s at %s ended attempts %d and %d (%s) with no checkpoint progress in between: the "
                 "failure is deterministic, so tfos stops retrying%s",
                 f->exc_type, f->exc_where, prev->failure.attempt, p->attempt, who, unused);
    } else if (why == TFOS_WHY_EXHAUSTED && p->max_restarts > 0) {
        snprintf(p->verdict, sizeof p->verdict, "every restart is used (max_restarts %d)", p->max_restarts);
    } else if (why == TFOS_WHY_NOT_RETRYABLE && f->cause == TFOS_CAUSE_START) {
        snprintf(p->verdict, sizeof p->verdict,
                 "a program that cannot start is not retried: the same command would fail the same way%s", unused);
    } else if (why == TFOS_WHY_NOT_RETRYABLE && f->cause != TFOS_CAUSE_STOPPED) {
        snprintf(p->verdict, sizeof p->verdict, "a %s failure is not restarted: retrying cannot fix it",
                 tfos_cause_name(f->cause));
    }
    if (rec->decision == TFOS_RESTART)
        p->attempt++;
    if (why_out)
        *why_out = why;
    return rec->decision;
}

void tfos_policy_retract(tfos_policy *p)
{
    if (!p || p->n == 0)
        return;
    p->n--;
    if (p->recs[p->n].decision != TFOS_RAISE)
        p->attempt--;
    if (p->recs[p->n].decision == TFOS_RESIZE)
        p->resizes--;
    p->verdict[0] = '\0';
}

int tfos_policy_resize(tfos_policy *p, const tfos_failure *f)
{
    if (!p || !f || !f->summary[0])
        return TFOS_EINVAL;
    if (grow(p))
        return TFOS_ENOMEM;
    tfos_attempt_record *rec = &p->recs[p->n++];
    memset(rec, 0, sizeof *rec);
    rec->failure = *f;
    rec->failure.attempt = p->attempt;
    rec->decision = TFOS_RESIZE;
    rec->why = TFOS_WHY_RESIZE;
    p->verdict[0] = '\0';
    p->attempt++;
    p->resizes++;
    return 0;
}

const char *tfos_decision_name(int decision)
{
    return decision == TFOS_RESTART ? "restart" : decision == TFOS_RAISE ? "raise" : decision == TFOS_RESIZE ? "resize" : "";
}

int tfos_policy_resizes(const tfos_policy *p)
{
    return p->resizes;
}

int tfos_policy_attempt(const tfos_policy *p)
{
    return p->attempt;
}

int tfos_policy_max_restarts(const tfos_policy *p)
{
    return p->max_restarts;
}

int tfos_policy_count(const tfos_policy *p)
{
    return p->n;
}

const tfos_attempt_record *tfos_policy_record(const tfos_policy *p, int i)
{
    return i >= 0 && i < p->n ? &p->recs[i] : NULL;
}

const char *tfos_policy_verdict(const tfos_policy *p)
{
    return p->verdict;
}

static const char *const why_words[] = {"restarted", "not restarted", "deterministic: not restarted",
                                        "no restarts left", "resized (not a restart)"};

void tfos_policy_line(const tfos_attempt_record *r, char *buf, size_t len)
{
    time_t t = (time_t)r->failure.time;
    struct tm tm;
    localtime_r(&t, &tm);
    char stamp[16];
    strftime(stamp, sizeof stamp, "%H:%M:%S", &tm);
    char exc[480] = "";
    if (r->failure.exc_type[0])
        snprintf(exc, sizeof exc, " [%s at %s]", r->failure.exc_type, r->failure.exc_where);
    snprintf(buf, len, "attempt %d at %s: %s%s -> %s", r->failure.attempt, stamp, r->failure.summary, exc,
             why_words[r->why]);
}

char *tfos_policy_render(const tfos_policy *p)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    if (!out)
        return NULL;
    for (int i = 0; i < p->n; i++) {
        char line[1200];
        tfos_policy_line(&p->recs[i], line, sizeof line);
        fprintf(out, "%s\n", line);
    }
    fclose(out);
    return buf;
}

char *tfos_policy_json(const tfos_policy *p)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    if (!out)
        return NULL;
    fputc('[', out);
    for (int i = 0; i < p->n; i++) {
        const tfos_attempt_record *r = &p->recs[i];
        const tfos_failure *f = &r->failure;
        fprintf(out, "%s{\"attempt\": %d, \"time\": %.3f, \"cause\": \"%s\", \"node\": ", i ? ", " : "", f->attempt,
                f->time, tfos_cause_name(f->cause));
        tfos__json_str(out, f->node);
        fprintf(out, ", \"executor_id\": %d, \"host\": ", f->executor_id);
        tfos__json_str(out, f->host);
        fprintf(out, ", \"exit_code\": %d, \"signal\": %d, \"exception\": ", f->exit_code, f->signo);
        tfos__json_str(out, f->exc_type);
        fprintf(out, ", \"where\": ");
        tfos__json_str(out, f->exc_where);
        fprintf(out, ", \"summary\": ");
        tfos__json_str(out, f->summary);
        fprintf(out, ", \"decision\": \"%s\", \"why\": \"%s\"}", tfos_decision_name(r->decision),
                why_words[r->why]);
    }
    fputc(']', out);
    fclose(out);
    return buf;
}

/* ---- checkpoint fingerprint ------------------------------------------------ */

typedef struct walk {
    unsigned long long files, bytes;
    long long newest_ns;
} walk;

/* Only files that hold data count: a save that died on a full disk leaves
 * an empty file (and its directory's mtime moves), which is no progress. */
static void walk_dir(const char *path, walk *w, int depth)
{
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char sub[4096];
        if (snprintf(sub, sizeof sub, "%s/%s", path, e->d_name) >= (int)sizeof sub)
            continue;
        struct stat st;
        if (lstat(sub, &st) < 0)
            continue;
        if (S_ISDIR(st.st_mode) && depth < 8) {
            walk_dir(sub, w, depth + 1);
        } else if (S_ISREG(st.st_mode) && st.st_size > 0) {
            long long ns = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
            if (ns > w->newest_ns)
                w->newest_ns = ns;
            w->files++;
            w->bytes += (unsigned long long)st.st_size;
        }
    }
    closedir(d);
}

int tfos_checkpoint_progress(const char *dir, char *buf, size_t len)
{
    if (!dir || !buf || len < 64)
        return TFOS_EINVAL;
    buf[0] = '\0';
    if (!(dir = tfos__local_path(dir)))
        return 0; /* not on this machine */
    struct stat st;
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
        return 0;
    walk w = {0, 0, 0};
    walk_dir(dir, &w, 0);
    snprintf(buf, len, "%llu files, %llu bytes, newest %lld", w.files, w.bytes, w.newest_ns);
    return 0;
}

/* ---- can the program start at all --------------------------------------- */

/* Is path an executable regular file? 0, or -1 with errno (ENOENT, EACCES). */
static int executable(const char *path)
{
    struct stat st;
    if (stat(path, &st) < 0)
        return -1;
    if (S_ISDIR(st.st_mode) || access(path, X_OK) < 0) {
        errno = EACCES;
        return -1;
    }
    return 0;
}

/* The script a python command line runs, or NULL when it runs none (-c,
 * -m, stdin, or an option this parser does not know: then the interpreter
 * says what is wrong itself). Options that take a value: -W, -X and
 * --check-hash-based-pycs; others are single letters, which may be grouped
 * (-uB). */
static const char *python_script(char *const *argv)
{
    for (int i = 1; argv[i]; i++) {
        const char *a = argv[i];
        if (a[0] != '-')
            return a;
        if (!strcmp(a, "-"))
            return NULL; /* stdin */
        if (!strcmp(a, "--"))
            return argv[i + 1];
        if (!strcmp(a, "--check-hash-based-pycs")) {
            if (!argv[++i])
                return NULL;
            continue;
        }
        if (a[1] == '-')
            return NULL; /* --help, --version, ...: nothing runs */
        for (const char *c = a + 1; *c; c++) {
            if (*c == 'c' || *c == 'm')
                return NULL;
            if (*c == 'W' || *c == 'X') {
                if (!c[1] && !argv[++i])
                    return NULL;
                break; /* the rest of this argument, or the next one, is the value */
            }
            if (!strchr("bBdEhiIOPqsSuvVxR", *c))
                return NULL;
        }
    }
    return NULL;
}

int tfos_program_check(char *const *argv, char *why, size_t len)
{
    if (!argv || !argv[0] || !argv[0][0] || !why || !len)
        return TFOS_EINVAL;
    why[0] = '\0';
    const char *prog = argv[0];
    if (strchr(prog, '/')) {
        if (executable(prog) < 0) {
            int e = errno;
            snprintf(why, len, "could not start '%s': %s%s", prog, strerror(e),
                     e == EACCES ? " (not an executable file: chmod +x it, or run it with its interpreter)" : "");
            errno = e;
            return TFOS_ESYS;
        }
    } else {
        /* execvp's search: the first executable file on $PATH; a file found
         * there that is not executable is EACCES when nothing later is */
        const char *path = getenv("PATH");
        if (!path)
            path = "/bin:/usr/bin";
        int e = ENOENT;
        int found = 0;
        for (const char *p = path; !found;) {
            size_t n = strcspn(p, ":");
            char full[4096];
            if (snprintf(full, sizeof full, "%.*s/%s", (int)n, n ? p : ".", prog) < (int)sizeof full) {
                if (executable(full) == 0)
                    found = 1;
                else if (errno == EACCES)
                    e = EACCES;
            }
            if (!p[n])
                break;
            p += n + 1;
        }
        if (!found) {
            snprintf(why, len, "could not start '%s': %s (%s on PATH: %s)", prog, strerror(e),
                     e == EACCES ? "no executable file of that name" : "not", path);
            errno = e;
            return TFOS_ESYS;
        }
    }
    const char *base = strrchr(prog, '/');
    base = base ? base + 1 : prog;
    const char *script = strncmp(base, "python", 6) ? NULL : python_script(argv);
    if (script && access(script, R_OK) < 0) {
        int e = errno;
        char cwd[1024];
        if (script[0] == '/' || !getcwd(cwd, sizeof cwd))
            snprintf(why, len, "could not start '%s %s': its script %s: %s", prog, script, script, strerror(e));
        else
            snprintf(why, len, "could not start '%s %s': its script %s (in %s): %s", prog, script, script, cwd,
                     strerror(e));
        errno = e == ENOENT ? ENOENT : EACCES;
        return TFOS_ESYS;
    }
    return 0;
}
