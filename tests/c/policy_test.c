/* policy_test.c: the restart policy, table-driven; the traceback parser;
 * the checkpoint fingerprint. */
#include "check.h"
#include "platform/fs.h"
#include "tfos/tfos.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct step {
    int cause;
    const char *job, *exc, *where, *progress;
    int want;     /* TFOS_RESTART / TFOS_RAISE */
    int want_why; /* TFOS_WHY_* */
} step;

typedef struct scenario {
    const char *name;
    int max_restarts;
    step steps[6];
    int nsteps;
} scenario;

#define EXC(job, where) TFOS_CAUSE_EXIT, job, "ValueError", where
#define R TFOS_RESTART
#define X TFOS_RAISE

static const scenario scenarios[] = {
    {"a signal restarts while the budget lasts", 2,
     {{TFOS_CAUSE_SIGNAL, "worker", "", "", "", R, TFOS_WHY_RESTART},
      {TFOS_CAUSE_SIGNAL, "worker", "", "", "", R, TFOS_WHY_RESTART},
      {TFOS_CAUSE_SIGNAL, "worker", "", "", "", X, TFOS_WHY_EXHAUSTED}}, 3},
    {"no restarts at all", 0, {{TFOS_CAUSE_EXIT, "worker", "", "", "", X, TFOS_WHY_EXHAUSTED}}, 1},
    {"causes retrying cannot fix", 3,
     {{TFOS_CAUSE_RESERVATION, "", "", "", "", X, TFOS_WHY_NOT_RETRYABLE}}, 1},
    {"a bad feed", 3, {{TFOS_CAUSE_FEED, "", "", "", "", X, TFOS_WHY_NOT_RETRYABLE}}, 1},
    {"a stop on purpose", 3, {{TFOS_CAUSE_STOPPED, "", "", "", "", X, TFOS_WHY_NOT_RETRYABLE}}, 1},
    {"every node cause is retryable", 6,
     {{TFOS_CAUSE_HEARTBEAT, "worker", "", "", "", R, TFOS_WHY_RESTART},
      {TFOS_CAUSE_AGENT_LOST, "worker", "", "", "", R, TFOS_WHY_RESTART},
      {TFOS_CAUSE_EXECUTOR_LOST, "worker", "", "", "", R, TFOS_WHY_RESTART},
      {TFOS_CAUSE_START, "worker", "", "", "", R, TFOS_WHY_RESTART},
      {TFOS_CAUSE_PS_EXITED, "ps", "", "", "", R, TFOS_WHY_RESTART}}, 5},
    {"the same exception twice without progress is deterministic", 3,
     {{EXC("worker", "train.py:10"), "3 files", R, TFOS_WHY_RESTART},
      {EXC("worker", "train.py:10"), "3 files", X, TFOS_WHY_DETERMINISTIC}}, 2},
    {"the same exception with checkpoint progress in between is retried", 3,
     {{EXC("worker", "train.py:10"), "3 files", R, TFOS_WHY_RESTART},
      {EXC("worker", "train.py:10"), "4 files", R, TFOS_WHY_RESTART},
      {EXC("worker", "train.py:10"), "4 files", X, TFOS_WHY_DETERMINISTIC}}, 3},
    {"the same file in another directory (a new container) is the same place", 3,
     {{EXC("worker", "/nm/container_01/train.py:10"), "", R, TFOS_WHY_RESTART},
      {EXC("worker", "/nm/container_05/train.py:10"), "", X, TFOS_WHY_DETERMINISTIC}}, 2},
    {"another place is not the same failure", 3,
     {{EXC("worker", "train.py:10"), "", R, TFOS_WHY_RESTART},
      {EXC("worker", "train.py:11"), "", R, TFOS_WHY_RESTART}}, 2},
    {"another job is not the same failure", 3,
     {{EXC("worker", "train.py:10"), "", R, TFOS_WHY_RESTART},
      {EXC("chief", "train.py:10"), "", R, TFOS_WHY_RESTART}}, 2},
    {"a signal in between breaks the repetition", 4,
     {{EXC("worker", "train.py:10"), "", R, TFOS_WHY_RESTART},
      {TFOS_CAUSE_SIGNAL, "worker", "", "", "", R, TFOS_WHY_RESTART},
      {EXC("worker", "train.py:10"), "", R, TFOS_WHY_RESTART}}, 3},
    {"two signals in a row are not deterministic", 3,
     {{TFOS_CAUSE_SIGNAL, "worker", "", "", "", R, TFOS_WHY_RESTART},
      {TFOS_CAUSE_SIGNAL, "worker", "", "", "", R, TFOS_WHY_RESTART}}, 2},
};

static void table(void)
{
    for (size_t s = 0; s < sizeof scenarios / sizeof scenarios[0]; s++) {
        const scenario *sc = &scenarios[s];
        tfos_policy *p;
        CHECK_EQ(tfos_policy_open(&p, sc->max_restarts), 0);
        for (int i = 0; i < sc->nsteps; i++) {
            const step *st = &sc->steps[i];
            tfos_failure f;
            memset(&f, 0, sizeof f);
            f.cause = st->cause;
            snprintf(f.job, sizeof f.job, "%s", st->job);
            snprintf(f.node, sizeof f.node, "%s:0", st->job);
            snprintf(f.exc_type, sizeof f.exc_type, "%s", st->exc);
            snprintf(f.exc_where, sizeof f.exc_where, "%s", st->where);
            snprintf(f.summary, sizeof f.summary, "step %d", i);
            int why = -1;
            int d = tfos_policy_decide(p, &f, st->progress, &why);
            if (d != st->want || why != st->want_why) {
                fprintf(stderr, "scenario '%s', step %d: decision %d why %d, want %d why %d\n", sc->name, i, d, why,
                        st->want, st->want_why);
                exit(1);
            }
            CHECK_EQ(tfos_policy_count(p), i + 1);
            CHECK_EQ(tfos_policy_record(p, i)->failure.attempt, i + 1);
            CHECK_EQ(tfos_policy_attempt(p), i + 1 + (d == TFOS_RESTART));
        }
        char *text = tfos_policy_render(p), *json = tfos_policy_json(p);
        CHECK(text && json);
        int lines = 0;
        for (char *c = text; *c; c++)
            lines += *c == '\n';
        CHECK_EQ(lines, sc->nsteps);
        CHECK(json[0] == '[' && strstr(json, "\"cause\": "));
        free(text);
        free(json);
        tfos_policy_close(p);
    }
}

static void verdicts_and_errors(void)
{
    tfos_policy *p;
    CHECK_EQ(tfos_policy_open(&p, -1), TFOS_EINVAL);
    CHECK_EQ(tfos_policy_open(&p, 3), 0);
    tfos_failure f;
    memset(&f, 0, sizeof f);
    CHECK_EQ(tfos_policy_decide(p, &f, NULL, NULL), TFOS_EINVAL); /* no cause */
    f.cause = TFOS_CAUSE_EXIT;
    snprintf(f.job, sizeof f.job, "worker");
    snprintf(f.exc_type, sizeof f.exc_type, "KeyError");
    snprintf(f.exc_where, sizeof f.exc_where, "/x/m.py:7");
    CHECK_EQ(tfos_policy_decide(p, &f, NULL, NULL), TFOS_RESTART);
    CHECK_STR(tfos_policy_verdict(p), "");
    CHECK_EQ(tfos_policy_decide(p, &f, "", NULL), TFOS_RAISE);
    CHECK(strstr(tfos_policy_verdict(p), "KeyError at /x/m.py:7") && strstr(tfos_policy_verdict(p), "deterministic"));
    CHECK_STR(tfos_cause_name(TFOS_CAUSE_SIGNAL), "signal");
    CHECK_STR(tfos_cause_name(99), "unknown");
    tfos_policy_close(p);
}

static void parse(const char *const *lines, int n, const char *type, const char *where)
{
    tfos_failure f;
    memset(&f, 0, sizeof f);
    tfos_failure_parse_traceback(&f, lines, n);
    CHECK_STR(f.exc_type, type);
    CHECK_STR(f.exc_where, where);
}

static void tracebacks(void)
{
    const char *plain[] = {"epoch 1", "Traceback (most recent call last):",
                           "  File \"/app/train.py\", line 40, in <module>", "    main()",
                           "  File \"/app/train.py\", line 12, in main", "    raise ValueError(\"bad lr\")",
                           "ValueError: bad lr"};
    parse(plain, 7, "ValueError", "/app/train.py:12");
    /* 3.11's carets, a dotted type, output after the exception line */
    const char *carets[] = {"Traceback (most recent call last):", "  File \"m.py\", line 3, in f",
                            "    x = d['k']", "        ~^^^^^", "tensorflow.python.framework.errors_impl.NotFoundError: gone",
                            "I0000 some log line"};
    parse(carets, 6, "tensorflow.python.framework.errors_impl.NotFoundError", "m.py:3");
    /* chained: the last traceback counts */
    const char *chained[] = {"  File \"a.py\", line 1, in x", "KeyError: 'a'", "",
                             "During handling of the above exception, another exception occurred:", "",
                             "Traceback (most recent call last):", "  File \"b.py\", line 9, in y",
                             "RuntimeError"};
    parse(chained, 8, "RuntimeError", "b.py:9");
    const char *none[] = {"loss 0.3", "Killed"};
    parse(none, 2, "", "");
    const char *cut[] = {"  File \"c.py\", line 5, in z", "    boom()"}; /* no exception line */
    parse(cut, 2, "", "");
    parse(NULL, 0, "", "");
}

static void fingerprint(void)
{
    char buf[128], before[128];
    CHECK_EQ(tfos_checkpoint_progress("hdfs://nn:8020/ckpt", buf, sizeof buf), 0);
    CHECK_STR(buf, "");
    CHECK_EQ(tfos_checkpoint_progress("/nonexistent/tfos-ckpt", buf, sizeof buf), 0);
    CHECK_STR(buf, "");
    CHECK_EQ(tfos_checkpoint_progress("/tmp", buf, 10), TFOS_EINVAL);
    char dir[] = "/tmp/tfos-policy-XXXXXX";
    CHECK(mkdtemp(dir));
    CHECK_EQ(tfos_checkpoint_progress(dir, before, sizeof before), 0);
    CHECK(before[0]);
    CHECK_EQ(tfos_checkpoint_progress(dir, buf, sizeof buf), 0);
    CHECK_STR(buf, before); /* nothing written: the same */
    char path[256];
    snprintf(path, sizeof path, "%s/ckpt-1.index", dir);
    FILE *f = fopen(path, "w");
    CHECK(f);
    fputs("step 1", f);
    fclose(f);
    CHECK_EQ(tfos_checkpoint_progress(dir, buf, sizeof buf), 0);
    CHECK(strcmp(buf, before) != 0);
    unlink(path);
    rmdir(dir);
}

/* checkpoint dirs as paths or URLs: what is on this machine */
static void local_paths(void)
{
    CHECK_STR(tfos__local_path("/a/b"), "/a/b");
    CHECK_STR(tfos__local_path("rel/dir"), "rel/dir");
    CHECK_STR(tfos__local_path("file:///a/b"), "/a/b");
    CHECK(tfos__local_path("hdfs://nn:8020/ckpt") == NULL);
    CHECK(tfos__local_path("hdfs:///user/x") == NULL);
    CHECK(tfos__local_path("s3a://bucket/x") == NULL);
    CHECK_STR(tfos__local_path("/dir/with://inside"), "/dir/with://inside"); /* no scheme before it */
    CHECK_STR(tfos__local_path("://x"), "://x");
    CHECK(tfos__local_path(NULL) == NULL);
}

int main(void)
{
    local_paths();
    table();
    verdicts_and_errors();
    tracebacks();
    fingerprint();
    printf("policy: ok\n");
    return 0;
}
