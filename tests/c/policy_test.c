/* policy_test.c: the restart policy, table-driven; the traceback parser;
 * the checkpoint fingerprint. */
#include "check.h"
#include "platform/fs.h"
#include "tfos/tfos.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
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
    {"every node cause but a program that cannot start is retryable", 6,
     {{TFOS_CAUSE_HEARTBEAT, "worker", "", "", "", R, TFOS_WHY_RESTART},
      {TFOS_CAUSE_AGENT_LOST, "worker", "", "", "", R, TFOS_WHY_RESTART},
      {TFOS_CAUSE_EXECUTOR_LOST, "worker", "", "", "", R, TFOS_WHY_RESTART},
      {TFOS_CAUSE_SETUP, "worker", "", "", "", R, TFOS_WHY_RESTART},
      {TFOS_CAUSE_PS_EXITED, "ps", "", "", "", R, TFOS_WHY_RESTART}}, 5},
    /* exec failed, exit 126/127, no script, the built-in ps without
     * tensorflow: the same command fails the same way every time */
    {"a program that cannot start is never retried", 3,
     {{TFOS_CAUSE_START, "worker", "", "", "", X, TFOS_WHY_NOT_RETRYABLE}}, 1},
    {"nor after a restart for something else", 3,
     {{TFOS_CAUSE_SIGNAL, "worker", "", "", "", R, TFOS_WHY_RESTART},
      {TFOS_CAUSE_START, "ps", "", "", "", X, TFOS_WHY_NOT_RETRYABLE}}, 2},
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
    /* chief:0 and worker:0 run the same program: which of them reaches the
     * bug first is timing (issue 35: they alternated, and all 4 attempts ran) */
    {"the same exception at the same place from another node is the same failure", 3,
     {{EXC("chief", "train.py:10"), "", R, TFOS_WHY_RESTART},
      {EXC("worker", "train.py:10"), "", X, TFOS_WHY_DETERMINISTIC}}, 2},
    {"another exception type at the same place is not", 3,
     {{EXC("chief", "train.py:10"), "", R, TFOS_WHY_RESTART},
      {TFOS_CAUSE_EXIT, "worker", "KeyError", "train.py:10", "", R, TFOS_WHY_RESTART}}, 2},
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
    CHECK_STR(tfos_cause_name(TFOS_CAUSE_START), "start");
    CHECK_STR(tfos_cause_name(TFOS_CAUSE_SETUP), "setup");
    CHECK_STR(tfos_cause_name(TFOS_CAUSE_MAX_ + 1), "unknown");
    CHECK_STR(tfos_cause_name(99), "unknown");
    tfos_policy_close(p);

    /* two nodes, one failure: the verdict names both */
    CHECK_EQ(tfos_policy_open(&p, 3), 0);
    snprintf(f.node, sizeof f.node, "chief:0");
    snprintf(f.job, sizeof f.job, "chief");
    CHECK_EQ(tfos_policy_decide(p, &f, "", NULL), TFOS_RESTART);
    snprintf(f.node, sizeof f.node, "worker:0");
    snprintf(f.job, sizeof f.job, "worker");
    CHECK_EQ(tfos_policy_decide(p, &f, "", NULL), TFOS_RAISE);
    CHECK(strstr(tfos_policy_verdict(p), "ended attempts 1 and 2 (chief:0, then worker:0)"));
    CHECK(strstr(tfos_policy_verdict(p), "(2 of 3 restarts unused)"));
    tfos_policy_close(p);

    /* a program that cannot start: said once, with the budget it leaves */
    CHECK_EQ(tfos_policy_open(&p, 3), 0);
    memset(&f, 0, sizeof f);
    f.cause = TFOS_CAUSE_START;
    f.exit_code = 127;
    snprintf(f.summary, sizeof f.summary, "worker:0 failed: could not start 'python9'");
    int why = -1;
    CHECK_EQ(tfos_policy_decide(p, &f, "", &why), TFOS_RAISE);
    CHECK_EQ(why, TFOS_WHY_NOT_RETRYABLE);
    CHECK_STR(tfos_policy_verdict(p), "a program that cannot start is not retried: the same command would fail the "
                                      "same way (3 of 3 restarts unused)");
    char line[1200];
    tfos_policy_line(tfos_policy_record(p, 0), line, sizeof line);
    CHECK(strstr(line, "could not start 'python9' -> not restarted"));
    tfos_policy_close(p);
}

/* An elastic run's resizes: recorded, rendered, never spending the budget,
 * and taken back by retract like any record. */
static void resizes(void)
{
    tfos_policy *p;
    CHECK_EQ(tfos_policy_open(&p, 1), 0);
    tfos_failure f;
    memset(&f, 0, sizeof f);
    f.cause = TFOS_CAUSE_EXECUTOR_LOST;
    CHECK_EQ(tfos_policy_resize(p, &f), TFOS_EINVAL); /* a resize says why */
    snprintf(f.summary, sizeof f.summary, "resized from 2 to 1 nodes: drained: Spark executor 1 decommissioned");
    for (int i = 0; i < 3; i++)
        CHECK_EQ(tfos_policy_resize(p, &f), 0);
    CHECK_EQ(tfos_policy_attempt(p), 4);
    CHECK_EQ(tfos_policy_resizes(p), 3);
    CHECK_STR(tfos_decision_name(tfos_policy_record(p, 0)->decision), "resize");
    char line[1200];
    tfos_policy_line(tfos_policy_record(p, 2), line, sizeof line);
    CHECK(strstr(line, "attempt 3 at ") == line);
    CHECK(strstr(line, ": resized from 2 to 1 nodes: drained: Spark executor 1 decommissioned -> resized (not a "
                       "restart)"));
    char *json = tfos_policy_json(p);
    CHECK(json && strstr(json, "\"decision\": \"resize\""));
    free(json);
    /* three resizes spent nothing: the one restart of the budget is still there */
    tfos_failure g;
    memset(&g, 0, sizeof g);
    g.cause = TFOS_CAUSE_SIGNAL;
    snprintf(g.summary, sizeof g.summary, "worker:1 killed by signal 9");
    CHECK_EQ(tfos_policy_decide(p, &g, "", NULL), TFOS_RESTART);
    int why = -1;
    CHECK_EQ(tfos_policy_decide(p, &g, "", &why), TFOS_RAISE);
    CHECK_EQ(why, TFOS_WHY_EXHAUSTED);
    tfos_policy_retract(p);
    tfos_policy_retract(p);
    tfos_policy_retract(p); /* the third resize */
    CHECK_EQ(tfos_policy_attempt(p), 3);
    CHECK_EQ(tfos_policy_resizes(p), 2);
    /* a deterministic failure is still one across a resize: the records compared are failures */
    tfos_failure e;
    memset(&e, 0, sizeof e);
    e.cause = TFOS_CAUSE_EXIT;
    snprintf(e.job, sizeof e.job, "worker");
    snprintf(e.exc_type, sizeof e.exc_type, "ValueError");
    snprintf(e.exc_where, sizeof e.exc_where, "/app/train.py:9");
    tfos_policy_close(p);
    CHECK_EQ(tfos_policy_open(&p, 5), 0);
    CHECK_EQ(tfos_policy_decide(p, &e, "fp1", NULL), TFOS_RESTART);
    CHECK_EQ(tfos_policy_resize(p, &f), 0);
    CHECK_EQ(tfos_policy_decide(p, &e, "fp1", &why), TFOS_RAISE);
    CHECK_EQ(why, TFOS_WHY_DETERMINISTIC);
    CHECK(strstr(tfos_policy_verdict(p), "ended attempts 1 and 3"));
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
    /* a save that died on a full disk: an empty file, a new directory.
     * Neither is progress (issue 35: the fingerprint moved, so every
     * attempt of a deterministic failure ran) */
    CHECK_EQ(tfos_checkpoint_progress(dir, before, sizeof before), 0);
    char empty[256], sub[256];
    snprintf(empty, sizeof empty, "%s/ckpt-2.index", dir);
    snprintf(sub, sizeof sub, "%s/ckpt-2", dir);
    f = fopen(empty, "w");
    CHECK(f);
    fclose(f);
    CHECK_EQ(mkdir(sub, 0700), 0);
    CHECK_EQ(tfos_checkpoint_progress(dir, buf, sizeof buf), 0);
    CHECK_STR(buf, before);
    /* the same file given data is, and so is rewriting data (a newer mtime) */
    f = fopen(empty, "w");
    CHECK(f);
    fputs("step 2", f);
    fclose(f);
    CHECK_EQ(tfos_checkpoint_progress(dir, buf, sizeof buf), 0);
    CHECK(strcmp(buf, before) != 0);
    strcpy(before, buf);
    struct timespec later[2] = {{0, UTIME_OMIT}, {time(NULL) + 5, 0}};
    CHECK_EQ(utimensat(AT_FDCWD, path, later, 0), 0);
    CHECK_EQ(tfos_checkpoint_progress(dir, buf, sizeof buf), 0);
    CHECK(strcmp(buf, before) != 0);
    unlink(empty);
    unlink(path);
    rmdir(sub);
    rmdir(dir);
}

static void expect_cannot(char *const *argv, int want_errno, const char *want)
{
    char why[512] = "unset";
    errno = 0;
    int rc = tfos_program_check(argv, why, sizeof why);
    if (rc != TFOS_ESYS || errno != want_errno || !strstr(why, want)) {
        fprintf(stderr, "program_check(%s ...): rc %d errno %d why '%s'; want errno %d and '%s'\n", argv[0], rc,
                errno, why, want_errno, want);
        exit(1);
    }
}

static void expect_can(char *const *argv)
{
    char why[512] = "";
    int rc = tfos_program_check(argv, why, sizeof why);
    if (rc) {
        fprintf(stderr, "program_check(%s %s ...): rc %d: %s\n", argv[0], argv[1] ? argv[1] : "", rc, why);
        exit(1);
    }
}

/* What no restart can fix, found without running anything. */
static void program_check(void)
{
    char dir[] = "/tmp/tfos-progcheck-XXXXXX";
    CHECK(mkdtemp(dir));
    char python[256], script[256], plain[256];
    snprintf(python, sizeof python, "%s/python3.11", dir);
    snprintf(script, sizeof script, "%s/train.py", dir);
    snprintf(plain, sizeof plain, "%s/data.txt", dir);
    CHECK_EQ(symlink("/bin/true", python), 0);
    FILE *f = fopen(script, "w");
    CHECK(f);
    fclose(f);
    f = fopen(plain, "w");
    CHECK(f);
    fclose(f);
    CHECK_EQ(chmod(plain, 0644), 0);
    char why[64];
    CHECK_EQ(tfos_program_check(NULL, why, sizeof why), TFOS_EINVAL);

    /* the program itself: a path, or a name on PATH */
    expect_cannot((char *[]){"/nonexistent/program", NULL}, ENOENT, "could not start '/nonexistent/program': No such");
    expect_cannot((char *[]){plain, NULL}, EACCES, "Permission denied (not an executable file");
    expect_cannot((char *[]){dir, NULL}, EACCES, "Permission denied");
    expect_can((char *[]){"sh", "-c", "true", NULL});
    expect_can((char *[]){"/bin/sh", NULL});
    char *path = getenv("PATH") ? strdup(getenv("PATH")) : NULL;
    setenv("PATH", "/nonexistent:/bin:/usr/bin", 1);
    expect_cannot((char *[]){"python9-tfos", "x.py", NULL}, ENOENT,
                  "could not start 'python9-tfos': No such file or directory "
                  "(not on PATH: /nonexistent:/bin:/usr/bin)");
    setenv("PATH", dir, 1);
    expect_cannot((char *[]){"data.txt", NULL}, EACCES, "no executable file of that name on PATH");
    /* the script is looked for from the current directory, as the program will */
    expect_cannot((char *[]){"python3.11", "train.py", NULL}, ENOENT, "its script train.py (in ");
    char cwd[1024];
    CHECK(getcwd(cwd, sizeof cwd));
    CHECK_EQ(chdir(dir), 0);
    expect_can((char *[]){"python3.11", "train.py", NULL});
    CHECK_EQ(chdir(cwd), 0);
    if (path) {
        setenv("PATH", path, 1);
        free(path);
    }

    /* a python's script: Python would say "can't open file" and exit 2 */
    expect_cannot((char *[]){python, "nope.py", NULL}, ENOENT, "its script nope.py (in ");
    expect_cannot((char *[]){python, "-u", "-W", "ignore", "-X", "dev", "/nonexistent/nope.py", "--lr", "1", NULL},
                  ENOENT, "its script /nonexistent/nope.py: No such file or directory");
    expect_cannot((char *[]){python, "-uBWignore", "-Xdev", "--", "nope.py", NULL}, ENOENT, "nope.py");
    expect_cannot((char *[]){python, "--check-hash-based-pycs", "never", "nope.py", NULL}, ENOENT, "nope.py");
    expect_can((char *[]){python, "-u", script, "--epochs", "3", NULL});
    expect_can((char *[]){python, "-c", "import nope", "nope.py", NULL}); /* -c: no script */
    expect_can((char *[]){python, "-uc", "pass", NULL});
    expect_can((char *[]){python, "-m", "nope", NULL}); /* -m: its own error, exit 1 */
    expect_can((char *[]){python, "-", NULL});          /* stdin */
    expect_can((char *[]){python, NULL});
    expect_can((char *[]){python, "--version", NULL});
    expect_can((char *[]){python, "-J", "nope.py", NULL}); /* an option not known here: Python says */
    expect_can((char *[]){"/bin/sh", "nope.py", NULL});    /* not a python: its arguments are its own */
    unlink(python);
    unlink(script);
    unlink(plain);
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
    resizes();
    verdicts_and_errors();
    tracebacks();
    fingerprint();
    program_check();
    printf("policy: ok\n");
    return 0;
}
