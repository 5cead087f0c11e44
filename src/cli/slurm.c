/* slurm.c: `tfos slurm`: submit a tfos cluster as a Slurm batch job and
 * follow it, and `tfos slurm status|logs|cancel JOBID` (docs/SLURM.md).
 *
 * The job is a batch script that execs `tfos run --backend slurm` with the
 * run options and the program given here (src/launch/backend_slurm.c runs
 * each node as a job step). Slurm is driven through its own commands, run as
 * processes: sbatch --parsable (the script on its stdin), squeue to see
 * whether the job is still queued or running, scontrol show job for its
 * state, exit code and output file, scancel. Following a job is reading its
 * output file as it grows (the nodes' lines are prefixed by tfos run
 * already) until squeue no longer lists it; the exit code is the job's,
 * which is tfos run's (the batch shell is tfos run). A stop signal while
 * following cancels the job the way its time limit's warning would
 * (SIGTERM to the batch shell only: tfos run stops its nodes with their
 * grace); a second one cancels it outright. */
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/run.h"
#include "platform/proc.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char tfos__slurm_help[] =
    "usage: tfos slurm [slurm options] [tfos run options] [--] PROGRAM [ARGS...]\n"
    "       tfos slurm status JOBID | logs [-f] JOBID | cancel JOBID\n"
    "\n"
    "Submits a batch job that runs `tfos run --backend slurm` with the run options and the\n"
    "program (each node a job step of the allocation; docs/SLURM.md), follows it (its output\n"
    "as it comes, every node's lines prefixed) and exits with its exit code, tfos run's.\n"
    "Ctrl-C while following cancels the job as its time limit's warning would (tfos run\n"
    "stops its nodes with their grace); a second Ctrl-C cancels it outright.\n"
    "\n"
    "slurm options (given to sbatch):\n"
    "  --nodes N                nodes of the allocation (default 1)\n"
    "  --ntasks-per-node K      tasks, so cluster nodes, per Slurm node (default 1)\n"
    "  --time T                 time limit (sbatch's formats: MM, HH:MM:SS, D-HH)\n"
    "  --partition P            partition\n"
    "  --gpus-per-task G        GPUs per task (CUDA_VISIBLE_DEVICES as Slurm sets it)\n"
    "  --job-name NAME          the job's name (default tfos)\n"
    "  --signal-before S        SIGTERM to tfos run S seconds before the time limit\n"
    "                           (--signal=B:TERM@S; default 60 with --time)\n"
    "  --output F               the job's output file (default tfos-slurm-%j.out here)\n"
    "  --sbatch-arg ARG         any other sbatch option, as one argument; repeatable\n"
    "                           (--sbatch-arg=--mem-per-cpu=2G)\n"
    "  --no-follow              print the job id and exit once submitted\n"
    "\n"
    "tfos run's options follow (tfos run --help); the cluster has one worker per task unless\n"
    "--workers/--ps/--chief/--evaluator say otherwise.\n";

#define MAX_SBATCH 64

typedef struct slurm_cli {
    const char *nodes, *ntasks_per_node, *time, *partition, *gpus_per_task, *job_name, *signal_before, *output;
    const char *sbatch[MAX_SBATCH];
    int nsbatch, no_follow;
} slurm_cli;

/* ---- Slurm's commands ---------------------------------------------------------- */

/* Run argv with input on its stdin (NULL: none), its stdout into out[len]
 * (NUL-terminated, cut at len-1), stderr to ours. Waits at most 60 s (a
 * controller that does not answer: Slurm's commands retry for a while on
 * their own). The exit code (128+signal), or -1 with a message when it
 * could not run or did not end. */
static int run_capture(char *const *argv, const char *input, char *out, size_t len)
{
    int inp[2] = {-1, -1}, outp[2] = {-1, -1};
    pid_t pid = -1;
    int code = -1;
    out[0] = 0;
    if ((input && pipe2(inp, O_CLOEXEC)) || pipe2(outp, O_CLOEXEC)) {
        fprintf(stderr, "tfos slurm: cannot run %s: %s\n", argv[0], strerror(errno));
        goto fail;
    }
    tfos__spawn_opts so = {.argv = argv, .stdin_fd = input ? inp[0] : -1, .stdout_fd = outp[1], .stderr_fd = -1};
    if (tfos__spawn(&so, &pid)) {
        fprintf(stderr, "tfos slurm: cannot run %s: %s (is Slurm's client installed and on PATH?)\n", argv[0],
                strerror(errno));
        pid = -1;
        goto fail;
    }
    close(outp[1]);
    outp[1] = -1;
    if (input) {
        close(inp[0]);
        inp[0] = -1;
        size_t n = strlen(input), off = 0; /* a script, well under a pipe's buffer */
        while (off < n) {
            ssize_t w = write(inp[1], input + off, n - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                break;
            off += (size_t)w;
        }
        close(inp[1]);
        inp[1] = -1;
    }
    size_t got = 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long left = 60000 - ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000);
        if (left <= 0) {
            fprintf(stderr, "tfos slurm: %s did not answer within 60 s (is slurmctld up?)\n", argv[0]);
            kill(pid, SIGKILL);
            break;
        }
        struct pollfd p = {.fd = outp[0], .events = POLLIN};
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            continue;
        char buf[4096];
        ssize_t n = read(outp[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        size_t keep = got + (size_t)n < len - 1 ? (size_t)n : len - 1 - got;
        memcpy(out + got, buf, keep);
        got += keep;
        out[got] = 0;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            goto fail;
    pid = -1;
    code = tfos__exit_code(status);
fail:
    for (int i = 0; i < 2; i++) {
        if (inp[i] >= 0)
            close(inp[i]);
        if (outp[i] >= 0)
            close(outp[i]);
    }
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    return code;
}

/* A job id as Slurm prints it: digits (an array task's "12_3" too). */
static int job_id_ok(const char *s)
{
    if (!s || !*s || strlen(s) > 32)
        return 0;
    for (; *s; s++)
        if (!(*s >= '0' && *s <= '9') && *s != '_')
            return 0;
    return 1;
}

/* KEY=VALUE from `scontrol show job -o`'s one line into buf ("" if absent). */
static void job_field(const char *info, const char *key, char *buf, size_t len)
{
    buf[0] = 0;
    char pat[64];
    snprintf(pat, sizeof pat, " %s=", key);
    const char *p = strstr(info, pat);
    if (!p && !strncmp(info, pat + 1, strlen(pat + 1)))
        p = info - 1;
    if (!p)
        return;
    p += strlen(pat);
    size_t n = strcspn(p, " \n");
    snprintf(buf, len, "%.*s", (int)(n < len ? n : len - 1), p);
}

/* The job's one line from scontrol show job -o into info: 0, or -1 (said). */
static int job_info(const char *job, char *info, size_t len)
{
    char *argv[] = {"scontrol", "show", "job", "-o", (char *)job, NULL};
    int rc = run_capture(argv, NULL, info, len);
    if (rc || !strstr(info, "JobId=")) {
        fprintf(stderr, "tfos slurm: Slurm does not know job %s (scontrol show job keeps an ended job for "
                        "MinJobAge seconds; sacct has it after that where accounting is on)\n", job);
        return -1;
    }
    return 0;
}

/* Whether squeue still lists the job (queued, running or completing): 1,
 * 0, or -1 when squeue itself failed; *pending: whether it waits still. */
static int job_queued(const char *job, int *pending)
{
    char out[256];
    char *argv[] = {"squeue", "-h", "-j", (char *)job, "-o", "%T", NULL};
    int rc = run_capture(argv, NULL, out, sizeof out);
    *pending = 0;
    if (rc)
        return -1; /* an unknown job id makes squeue fail too: the caller asks scontrol */
    *pending = !strncmp(out + strspn(out, " \n"), "PENDING", 7);
    return strspn(out, " \n") != strlen(out);
}

/* "X:Y" (exit code X, or signal Y) to a shell's exit code; -1 unknown. */
static int exit_code_of(const char *ec)
{
    int x, y;
    if (sscanf(ec, "%d:%d", &x, &y) != 2)
        return -1;
    return y ? 128 + y : x;
}

/* ---- following ------------------------------------------------------------------- */

/* Copy what has been appended to path since *off onto stdout. */
static void copy_new(const char *path, long *off)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (fseek(f, *off, SEEK_SET) == 0) {
        char buf[8192];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
            fwrite(buf, 1, n, stdout);
            *off += (long)n;
        }
        fflush(stdout);
    }
    fclose(f);
}

/* Follow job until squeue no longer lists it: its output file's lines as
 * they come; a stop signal cancels it (see the top). Its exit code. */
static int follow(const char *job, const char *output)
{
    long off = 0;
    int cancels = 0, unknown = 0, started = 0;
    volatile int *stop = tfos__stop_flag();
    for (;;) {
        /* read only once the job has started: its output file is truncated
         * then, and until then may be an older job's of the same name */
        if (started)
            copy_new(output, &off);
        if (*stop && cancels < 2) {
            int outright = cancels == 1;
            fprintf(stderr, "tfos slurm: %s job %s (scancel%s)\n", outright ? "cancelling" : "stopping", job,
                    outright ? "" : " --batch --signal=TERM: tfos run stops its nodes");
            char *gentle[] = {"scancel", "--batch", "--signal=TERM", (char *)job, NULL};
            char *hard[] = {"scancel", (char *)job, NULL};
            char ignored[256];
            run_capture(outright ? hard : gentle, NULL, ignored, sizeof ignored);
            cancels++;
            *stop = 0;
        }
        int pending, q = job_queued(job, &pending);
        if (q == 0 || (q < 0 && ++unknown >= 5))
            break;
        if (q > 0 && !pending && !started) {
            started = 1;
            continue; /* its first lines at once */
        }
        struct timespec ts = {1, 0};
        nanosleep(&ts, NULL); /* a signal cuts it short */
    }
    copy_new(output, &off);
    char info[8192], state[64], ec[32];
    if (job_info(job, info, sizeof info))
        return 1;
    job_field(info, "JobState", state, sizeof state);
    job_field(info, "ExitCode", ec, sizeof ec);
    int code = exit_code_of(ec);
    if (code < 0) {
        fprintf(stderr, "tfos slurm: job %s ended (%s) with no exit code Slurm could say\n", job, state);
        return 1;
    }
    /* Slurm may record a job it ended (scancel, its time limit, preemption) before its batch shell's exit
     * status arrives: ExitCode 0:0. Such a job did not succeed; it was sent SIGTERM: 128 + 15, as its shell
     * exits when the status does arrive */
    int ended_by_slurm = !strncmp(state, "CANCELLED", 9) || !strcmp(state, "TIMEOUT") || !strcmp(state, "PREEMPTED");
    if (code == 0 && ended_by_slurm) {
        fprintf(stderr, "tfos slurm: job %s %s, exit code 143 (Slurm's SIGTERM; it has recorded no exit status)\n",
                job, state);
        return 143;
    }
    fprintf(stderr, "tfos slurm: job %s %s, exit code %d\n", job, state, code);
    return code;
}

/* ---- submitting ------------------------------------------------------------------ */

/* Append s to the script, single-quoted for sh. */
static int append_quoted(char **script, size_t *len, size_t *cap, const char *s)
{
    size_t need = *len + 4 * strlen(s) + 4;
    if (need > *cap) {
        size_t ncap = need * 2;
        char *n = realloc(*script, ncap);
        if (!n)
            return TFOS_ENOMEM;
        *script = n;
        *cap = ncap;
    }
    char *o = *script + *len;
    *o++ = ' ';
    *o++ = '\'';
    for (; *s; s++) {
        if (*s == '\'') {
            memcpy(o, "'\\''", 4);
            o += 4;
        } else {
            *o++ = *s;
        }
    }
    *o++ = '\'';
    *o = 0;
    *len = (size_t)(o - *script);
    return 0;
}

/* Take --opt V or --opt=V into *dst: 1 taken, 0 not this option, 2 usage error. */
static int take(const char *opt, int argc, char **argv, int *i, const char **dst)
{
    size_t n = strlen(opt);
    if (strncmp(argv[*i], opt, n))
        return 0;
    if (argv[*i][n] == '=') {
        *dst = argv[*i] + n + 1;
        return 1;
    }
    if (argv[*i][n])
        return 0;
    if (*i + 1 >= argc)
        return tfos__usage_error("%s needs a value", opt);
    *dst = argv[++*i];
    return 1;
}

static int submit(int argc, char **argv)
{
    slurm_cli s = {0};
    /* our options come first; the rest is tfos run's (options, then the program) */
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!rest)
        return 1;
    int nrest = 0, i, rc = 0;
    for (i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) /* the program: run's parser sees it too */
            break;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(tfos__slurm_help, stdout);
            free(rest);
            return 0;
        }
        if (!strcmp(a, "--no-follow")) {
            s.no_follow = 1;
            continue;
        }
        const char *v = NULL;
        int t = 0;
        struct {
            const char *opt;
            const char **dst;
        } own[] = {{"--nodes", &s.nodes},         {"--ntasks-per-node", &s.ntasks_per_node},
                   {"--time", &s.time},           {"--partition", &s.partition},
                   {"--gpus-per-task", &s.gpus_per_task}, {"--job-name", &s.job_name},
                   {"--signal-before", &s.signal_before}, {"--output", &s.output}};
        for (size_t k = 0; k < sizeof own / sizeof own[0] && !t; k++)
            t = take(own[k].opt, argc, argv, &i, own[k].dst);
        if (!t && (t = take("--sbatch-arg", argc, argv, &i, &v)) == 1) {
            if (s.nsbatch >= MAX_SBATCH) {
                free(rest);
                return tfos__usage_error("%s: at most 64", "--sbatch-arg");
            }
            s.sbatch[s.nsbatch++] = v;
        }
        if (t == 2) {
            free(rest);
            return 2;
        }
        if (t)
            continue;
        if (a[0] != '-') /* the program starts here, as with tfos run */
            break;
        rest[nrest++] = (char *)a;
        /* an option of run's with its value: keep the pair together */
        if (!strchr(a, '=') && i + 1 < argc && argv[i + 1][0] != '-' && strcmp(a, "--chief") &&
            strcmp(a, "--evaluator") && strcmp(a, "--tensorboard") && strcmp(a, "--quiet") &&
            strcmp(a, "--ps-runs-program") && strcmp(a, "--csv-header") && strcmp(a, "--no-csv-header"))
            rest[nrest++] = argv[++i];
    }
    for (; i < argc; i++)
        rest[nrest++] = argv[i];
    rest[nrest] = NULL;
    int n;
    if (s.nodes && tfos__opt_int("--nodes", s.nodes, 1, 100000, &n))
        rc = 2;
    else if (s.ntasks_per_node && tfos__opt_int("--ntasks-per-node", s.ntasks_per_node, 1, 1024, &n))
        rc = 2;
    else if (s.signal_before && tfos__opt_int("--signal-before", s.signal_before, 1, 65535, &n))
        rc = 2;
    /* tfos run's options and program, checked here, before anything is submitted */
    tfos__run_cli r;
    if (!rc && (rc = tfos__run_parse(&r, nrest, rest, NULL, NULL)) == TFOS__HELP)
        rc = 2;
    if (!rc && (!r.argv || !r.argv[0]))
        rc = tfos__usage_error("%s", "slurm needs a program (tfos slurm [options] [--] PROGRAM [ARGS...])");
    if (!rc && r.ninputs && s.nodes && strcmp(s.nodes, "1"))
        rc = tfos__usage_error("--input feeds the nodes through shared memory on the batch host, and --nodes %s "
                               "spans hosts: use --nodes 1, or read the files from a shared file system in "
                               "the program (docs/SLURM.md)", s.nodes);
    if (rc) {
        free(rest);
        return rc;
    }
    char exe[PATH_MAX], cwd[PATH_MAX];
    if (tfos__self_path(exe, sizeof exe) || !getcwd(cwd, sizeof cwd)) {
        fprintf(stderr, "tfos slurm: cannot find my own executable or this directory: %s\n", strerror(errno));
        free(rest);
        return 1;
    }
    char output[PATH_MAX + 64];
    if (s.output && s.output[0] == '/')
        snprintf(output, sizeof output, "%s", s.output);
    else
        snprintf(output, sizeof output, "%s/%s", cwd, s.output ? s.output : "tfos-slurm-%j.out");

    size_t len = 0, cap = 4096;
    char *script = malloc(cap);
    if (!script) {
        free(rest);
        return 1;
    }
    len = (size_t)snprintf(script, cap,
                           "#!/bin/sh\n"
                           "# written by tfos slurm: the batch shell is tfos run itself (exec), so\n"
                           "# scancel's and the time limit's SIGTERM reach it (docs/SLURM.md)\n"
                           "exec");
    rc = append_quoted(&script, &len, &cap, exe);
    const char *fixed[] = {"run", "--backend", "slurm"};
    for (size_t k = 0; !rc && k < 3; k++)
        rc = append_quoted(&script, &len, &cap, fixed[k]);
    for (int k = 0; !rc && k < nrest; k++)
        rc = append_quoted(&script, &len, &cap, rest[k]);
    free(rest);
    if (rc || !(script = realloc(script, len + 2))) {
        free(script);
        return 1;
    }
    strcpy(script + len, "\n");

    /* sbatch's arguments */
    char *sargv[MAX_SBATCH + 24];
    char b[10][PATH_MAX + 256];
    int k = 0, nb = 0;
    sargv[k++] = "sbatch";
    sargv[k++] = "--parsable";
    snprintf(b[nb], sizeof b[nb], "--nodes=%s", s.nodes ? s.nodes : "1");
    sargv[k++] = b[nb++];
    snprintf(b[nb], sizeof b[nb], "--ntasks-per-node=%s", s.ntasks_per_node ? s.ntasks_per_node : "1");
    sargv[k++] = b[nb++];
    snprintf(b[nb], sizeof b[nb], "--job-name=%s", s.job_name ? s.job_name : "tfos");
    sargv[k++] = b[nb++];
    snprintf(b[nb], sizeof b[nb], "--output=%s", output);
    sargv[k++] = b[nb++];
    snprintf(b[nb], sizeof b[nb], "--chdir=%s", cwd);
    sargv[k++] = b[nb++];
    if (s.time) {
        snprintf(b[nb], sizeof b[nb], "--time=%s", s.time);
        sargv[k++] = b[nb++];
    }
    if (s.time || s.signal_before) {
        snprintf(b[nb], sizeof b[nb], "--signal=B:TERM@%s", s.signal_before ? s.signal_before : "60");
        sargv[k++] = b[nb++];
    }
    if (s.partition) {
        snprintf(b[nb], sizeof b[nb], "--partition=%s", s.partition);
        sargv[k++] = b[nb++];
    }
    if (s.gpus_per_task) {
        snprintf(b[nb], sizeof b[nb], "--gpus-per-task=%s", s.gpus_per_task);
        sargv[k++] = b[nb++];
    }
    for (int j = 0; j < s.nsbatch; j++)
        sargv[k++] = (char *)s.sbatch[j];
    sargv[k] = NULL;

    char out[512];
    int code = run_capture(sargv, script, out, sizeof out);
    free(script);
    char job[64];
    snprintf(job, sizeof job, "%.*s", (int)strcspn(out, ";\n"), out);
    if (code || !job_id_ok(job)) {
        fprintf(stderr, "tfos slurm: sbatch could not submit the job%s%s\n", code > 0 ? " (its message above)" : "",
                code ? "" : ": it printed no job id");
        return 1;
    }
    char shown[PATH_MAX + 64];
    snprintf(shown, sizeof shown, "%s", output);
    char *pj = strstr(shown, "%j");
    if (pj) {
        char tail[PATH_MAX + 64];
        snprintf(tail, sizeof tail, "%s", pj + 2);
        snprintf(pj, sizeof shown - (size_t)(pj - shown), "%s%s", job, tail);
    }
    fprintf(stderr, "tfos slurm: submitted job %s (output %s; tfos slurm status|logs|cancel %s)\n", job, shown, job);
    if (s.no_follow) {
        printf("%s\n", job);
        return 0;
    }
    tfos__catch_stop_signals();
    return follow(job, shown);
}

/* ---- status, logs, cancel ------------------------------------------------------------ */

static int cmd_status(const char *job)
{
    char info[8192], state[64], ec[32], nodes[256], out[PATH_MAX], reason[128];
    if (job_info(job, info, sizeof info))
        return 1;
    job_field(info, "JobState", state, sizeof state);
    job_field(info, "ExitCode", ec, sizeof ec);
    job_field(info, "NodeList", nodes, sizeof nodes);
    job_field(info, "StdOut", out, sizeof out);
    job_field(info, "Reason", reason, sizeof reason);
    printf("job %s: %s", job, state);
    if (strcmp(state, "PENDING") && strcmp(state, "RUNNING") && strcmp(state, "COMPLETING"))
        printf(", exit code %d", exit_code_of(ec));
    if (strcmp(nodes, "(null)") && *nodes)
        printf(" on %s", nodes);
    if (!strcmp(state, "PENDING") && *reason)
        printf(" (%s)", reason);
    printf("\noutput: %s\n", out);
    return 0;
}

static int cmd_logs(const char *job, int follow_it)
{
    char info[8192], out[PATH_MAX];
    if (job_info(job, info, sizeof info))
        return 1;
    job_field(info, "StdOut", out, sizeof out);
    if (follow_it) {
        tfos__catch_stop_signals();
        return follow(job, out);
    }
    long off = 0;
    if (access(out, R_OK)) {
        fprintf(stderr, "tfos slurm: job %s's output %s: %s (it is on the batch host's filesystem)\n", job, out,
                strerror(errno));
        return 1;
    }
    copy_new(out, &off);
    return 0;
}

static int cmd_cancel(const char *job)
{
    /* as the time limit's warning: tfos run stops its nodes with their grace */
    char *argv[] = {"scancel", "--batch", "--signal=TERM", (char *)job, NULL};
    char out[256];
    int rc = run_capture(argv, NULL, out, sizeof out);
    if (rc) {
        fprintf(stderr, "tfos slurm: scancel could not signal job %s (its message above)\n", job);
        return 1;
    }
    fprintf(stderr, "tfos slurm: job %s: SIGTERM sent to tfos run; its nodes stop within their grace\n", job);
    return 0;
}

int tfos__cmd_slurm(int argc, char **argv)
{
    if (argc >= 1 && (!strcmp(argv[0], "status") || !strcmp(argv[0], "logs") || !strcmp(argv[0], "cancel"))) {
        int f = argc >= 2 && !strcmp(argv[0], "logs") && (!strcmp(argv[1], "-f") || !strcmp(argv[1], "--follow"));
        if (argc != 2 + f || !job_id_ok(argv[1 + f]))
            return tfos__usage_error("tfos slurm %s takes one job id (digits), as sbatch printed it", argv[0]);
        const char *job = argv[1 + f];
        return !strcmp(argv[0], "status") ? cmd_status(job) : !strcmp(argv[0], "logs") ? cmd_logs(job, f)
                                                                                         : cmd_cancel(job);
    }
    return submit(argc, argv);
}
