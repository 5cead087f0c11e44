/* backend_test.c: the launcher's backends (launch/backend.h) with real
 * processes: the local backend starting, observing and stopping children
 * (an exec failure reported at once, a SIGTERM-deaf node ended by force,
 * nothing left after close); the yarn backend's stand-in command and
 * environment, with a script in place of `tfos yarn-container`; and a whole
 * launcher (launch/launch.h) forming a cluster of real agents through that
 * stand-in: --host auto, forwarded output, the added environment, the
 * address file, and a /metrics contributor on its HTTP server. */
#include "check.h"
#include "core/auth.h"
#include "core/loop.h"
#include "launch/backend.h"
#include "launch/launch.h"
#include "platform/clock.h"
#include "tfos/tfos.h"
#include "web/logbuf.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmp[256];

typedef struct ends {
    int n;
    int id[8], status[8];
} ends;

static void on_ended(void *user, int id, int status)
{
    ends *e = user;
    CHECK(e->n < 8);
    e->id[e->n] = id;
    e->status[e->n++] = status;
}

/* Run the loop until e has `count` ends, 10 s at most. */
static void wait_ends(tfos__loop *loop, ends *e, int count)
{
    int64_t until = tfos__now_ms() + 10000;
    while (e->n < count && tfos__now_ms() < until)
        tfos__loop_run(loop, 50);
    CHECK_EQ(e->n, count);
}

static int status_of(const ends *e, int id)
{
    for (int i = 0; i < e->n; i++)
        if (e->id[i] == id)
            return e->status[i];
    CHECK(!"no end reported for that node");
    return -1;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char *buf = calloc(1, 1 << 16);
    CHECK(buf != NULL);
    size_t n = fread(buf, 1, (1 << 16) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* Wait until path exists and holds something (5 s at most). */
static char *await_file(const char *path)
{
    int64_t until = tfos__now_ms() + 5000;
    char *s;
    while (!((s = slurp(path)) && *s) && tfos__now_ms() < until) {
        free(s);
        usleep(10000);
    }
    CHECK(s && *s);
    return s;
}

static void local_starts_observes_and_stops(void)
{
    const tfos__backend_ops *ops = &tfos__backend_local;
    CHECK_STR(ops->name, "local");
    CHECK_STR(ops->agent_host, "127.0.0.1");
    CHECK_EQ(ops->forward_logs, 0);
    tfos__loop *loop;
    CHECK_EQ(tfos__loop_open(&loop), 0);
    ends e = {0};
    void *b;
    CHECK_EQ(ops->open(&b, loop, NULL, 3, on_ended, &e), 0);
    char out[300], script[400];
    snprintf(out, sizeof out, "%s/env-out", tmp);
    snprintf(script, sizeof script, "echo \"$NODE_WORD\" > %s", out);
    char *exit3[] = {"sh", "-c", "exit 3", NULL}, *sleeper[] = {"sleep", "30", NULL},
         *env_echo[] = {"sh", "-c", script, NULL};
    char *envp[] = {"NODE_WORD=from-the-launcher", "PATH=/usr/bin:/bin", NULL};
    tfos__node_launch n0 = {.id = 0, .job = "worker", .index = 0, .argv = exit3, .envp = envp};
    tfos__node_launch n1 = {.id = 1, .job = "worker", .index = 1, .argv = sleeper, .envp = envp};
    tfos__node_launch n2 = {.id = 2, .job = "worker", .index = 2, .argv = env_echo, .envp = envp};
    CHECK_EQ(ops->observe(b, 0, NULL), TFOS_NODE_IDLE);
    CHECK_EQ(ops->start(b, &n0), 0);
    CHECK_EQ(ops->start(b, &n1), 0);
    CHECK_EQ(ops->start(b, &n2), 0);
    CHECK_EQ(ops->start(b, &n1), TFOS_EINVAL); /* each node starts once */
    CHECK_EQ(ops->observe(b, 1, NULL), TFOS_NODE_RUNNING);
    wait_ends(loop, &e, 2); /* 0 and 2 end by themselves */
    int st = status_of(&e, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 3);
    CHECK_EQ(WEXITSTATUS(status_of(&e, 2)), 0);
    char *got = await_file(out);
    CHECK_STR(got, "from-the-launcher\n"); /* the environment given, not ours */
    free(got);
    st = -1;
    CHECK_EQ(ops->observe(b, 0, &st), TFOS_NODE_ENDED);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 3);
    CHECK_EQ(ops->observe(b, 1, NULL), TFOS_NODE_RUNNING);
    ops->stop(b, 1, 0); /* SIGTERM: it ends, and says so */
    wait_ends(loop, &e, 3);
    st = status_of(&e, 1);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM);
    ops->stop(b, 1, 1); /* an ended node: nothing */
    ops->stop(b, 7, 1); /* no such node: nothing */
    CHECK_EQ(ops->observe(b, 7, NULL), TFOS_NODE_IDLE);
    ops->close(b);
    tfos__loop_close(loop);
}

static void exec_failure_is_reported_at_once(void)
{
    tfos__loop *loop;
    CHECK_EQ(tfos__loop_open(&loop), 0);
    ends e = {0};
    void *b;
    CHECK_EQ(tfos__backend_local.open(&b, loop, NULL, 1, on_ended, &e), 0);
    char *argv[] = {"/nonexistent/tfos-agent", "node", NULL};
    tfos__node_launch n = {.id = 0, .job = "worker", .argv = argv, .envp = NULL};
    int64_t t0 = tfos__now_ms();
    errno = 0;
    CHECK_EQ(tfos__backend_local.start(b, &n), TFOS_ESYS);
    CHECK_EQ(errno, ENOENT);
    CHECK(tfos__now_ms() - t0 < 2000);
    CHECK_EQ(tfos__backend_local.observe(b, 0, NULL), TFOS_NODE_IDLE);
    for (int i = 0; i < 5; i++)
        tfos__loop_run(loop, 10);
    CHECK_EQ(e.n, 0); /* no end for what never started */
    tfos__backend_local.close(b);
    tfos__loop_close(loop);
}

static void a_deaf_node_is_forced_and_close_leaves_nothing(void)
{
    tfos__loop *loop;
    CHECK_EQ(tfos__loop_open(&loop), 0);
    ends e = {0};
    void *b;
    CHECK_EQ(tfos__backend_local.open(&b, loop, NULL, 2, on_ended, &e), 0);
    char ready[300], pidfile[300], deaf_script[400], sleeper_script[400];
    snprintf(ready, sizeof ready, "%s/deaf-ready", tmp);
    snprintf(pidfile, sizeof pidfile, "%s/sleeper-pid", tmp);
    snprintf(deaf_script, sizeof deaf_script, "trap '' TERM; echo up > %s; while :; do sleep 0.1; done", ready);
    snprintf(sleeper_script, sizeof sleeper_script, "echo $$ > %s; exec sleep 30", pidfile);
    char *deaf[] = {"sh", "-c", deaf_script, NULL}, *sleeper[] = {"sh", "-c", sleeper_script, NULL};
    tfos__node_launch n0 = {.id = 0, .job = "ps", .argv = deaf, .envp = NULL};
    tfos__node_launch n1 = {.id = 1, .job = "worker", .argv = sleeper, .envp = NULL};
    CHECK_EQ(tfos__backend_local.start(b, &n0), 0);
    CHECK_EQ(tfos__backend_local.start(b, &n1), 0);
    free(await_file(ready));
    tfos__backend_local.stop(b, 0, 0);
    for (int64_t t = tfos__now_ms() + 300; tfos__now_ms() < t;)
        tfos__loop_run(loop, 20);
    CHECK_EQ(tfos__backend_local.observe(b, 0, NULL), TFOS_NODE_RUNNING); /* it ignores SIGTERM */
    tfos__backend_local.stop(b, 0, 1);
    wait_ends(loop, &e, 1);
    CHECK(WIFSIGNALED(e.status[0]) && WTERMSIG(e.status[0]) == SIGKILL);
    char *pid_text = await_file(pidfile);
    pid_t pid = (pid_t)atoi(pid_text);
    free(pid_text);
    CHECK(pid > 0 && kill(pid, 0) == 0);
    tfos__backend_local.close(b); /* kills and reaps node 1, reporting nothing */
    CHECK(kill(pid, 0) < 0 && errno == ESRCH);
    CHECK_EQ(e.n, 1);
    tfos__loop_close(loop);
}

/* The stand-in in place of `tfos yarn-container`: it writes its arguments
 * and the secret it was given, then runs the agent's command (after --). */
static void write_standin(const char *path, const char *log)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fprintf(f, "#!/bin/sh\n"
               "echo \"$*\" >> %s\n"
               "echo \"secret=$TFOS_SECRET\" >> %s\n"
               "while [ \"$1\" != -- ]; do shift; done\n"
               "shift\n"
               "exec \"$@\"\n",
            log, log);
    fclose(f);
    CHECK(chmod(path, 0755) == 0);
}

static void yarn_puts_the_standin_in_front(void)
{
    const tfos__backend_ops *ops = &tfos__backend_yarn;
    CHECK_STR(ops->name, "yarn");
    CHECK_STR(ops->agent_host, "auto");
    CHECK_EQ(ops->forward_logs, 1);
    char standin[300], log[300];
    snprintf(standin, sizeof standin, "%s/standin.sh", tmp);
    snprintf(log, sizeof log, "%s/standin.log", tmp);
    write_standin(standin, log);
    tfos__loop *loop;
    CHECK_EQ(tfos__loop_open(&loop), 0);
    ends e = {0};
    void *b;
    CHECK_EQ(ops->open(&b, loop, NULL, 1, on_ended, &e), TFOS_EINVAL); /* it needs its cfg */
    tfos__yarn_cfg cfg = {.exe = standin, .am_socket = "/run/am.sock", .resources = "worker=1024:1:0,ps=512:1:0"};
    CHECK_EQ(ops->open(&b, loop, &cfg, 2, on_ended, &e), 0);
    char *agent[] = {"sh", "-c", "exit 7", "--", "inner", NULL};
    char *envp[] = {"TFOS_SECRET=feedface", "PATH=/usr/bin:/bin", NULL};
    tfos__node_launch n = {.id = 1, .job = "ps", .index = 0, .argv = agent, .envp = envp};
    CHECK_EQ(ops->start(b, &n), 0);
    CHECK(ops->observe(b, 1, NULL) != TFOS_NODE_IDLE); /* running, or already ended: it exits at once */
    wait_ends(loop, &e, 1);
    CHECK_EQ(e.id[0], 1);
    CHECK(WIFEXITED(e.status[0]) && WEXITSTATUS(e.status[0]) == 7); /* the stand-in's exit is the node's */
    char *got = slurp(log);
    CHECK_STR(got, "yarn-container --am-socket /run/am.sock --resources worker=1024:1:0,ps=512:1:0 --role ps -- "
                   "sh -c exit 7 -- inner\nsecret=feedface\n");
    free(got);
    /* a stand-in that cannot start fails the start at once */
    cfg.exe = "/nonexistent/tfos";
    n.id = 0;
    errno = 0;
    CHECK_EQ(ops->start(b, &n), TFOS_ESYS);
    CHECK_EQ(errno, ENOENT);
    ops->close(b);
    tfos__loop_close(loop);
    unlink(log);
}

static void on_yarn_sets_the_launcher_up(void)
{
    setenv("TFOS_SECRET", "ab", 1);
    tfos_run_opts o = {0};
    tfos__launch_opts lo = {0};
    tfos__yarn_cfg cfg;
    tfos__launch_on_yarn(&o, &lo, &cfg, "/bin/tfos", "/am.sock", "worker=1:1:0", "10.0.0.5", "/addr");
    CHECK(lo.backend == &tfos__backend_yarn && lo.backend_cfg == &cfg);
    CHECK_STR(cfg.exe, "/bin/tfos");
    CHECK_STR(cfg.am_socket, "/am.sock");
    CHECK_STR(cfg.resources, "worker=1:1:0");
    CHECK_STR(lo.bind_host, "10.0.0.5");
    CHECK_STR(o.status_host, "10.0.0.5"); /* the page too, unless asked elsewhere */
    CHECK_STR(lo.address_file, "/addr");
    CHECK_STR(lo.secret, "ab");
    o.status_host = "0.0.0.0";
    tfos__launch_on_yarn(&o, &lo, &cfg, "/bin/tfos", "/am.sock", "worker=1:1:0", "10.0.0.5", "/addr");
    CHECK_STR(o.status_host, "0.0.0.0");
    unsetenv("TFOS_SECRET");
}

static void extra_series(FILE *f, void *user)
{
    fprintf(f, "# TYPE tfos_test_series gauge\ntfos_test_series %d\n", *(int *)user);
}

/* GET path from the launcher's page, stepping the launcher meanwhile. */
static char *get_while_stepping(tfos_local *l, int port, const char *path)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    char req[256];
    snprintf(req, sizeof req, "GET %s HTTP/1.0\r\n\r\n", path);
    CHECK(send(fd, req, strlen(req), 0) == (ssize_t)strlen(req));
    char *buf = calloc(1, 1 << 16);
    size_t len = 0;
    int64_t until = tfos__now_ms() + 5000;
    for (;;) {
        CHECK(tfos__now_ms() < until);
        tfos_local_step(l, 10);
        ssize_t r = recv(fd, buf + len, (1 << 16) - 1 - len, MSG_DONTWAIT);
        if (r == 0)
            break;
        if (r > 0)
            len += (size_t)r;
    }
    close(fd);
    return buf;
}

static void a_launcher_through_the_yarn_backend(void)
{
    const char *agent = getenv("TFOS_CLI");
    if (!agent || access(agent, X_OK)) {
        printf("(no TFOS_CLI: skipped) ");
        return;
    }
    char standin[300], log[300], logs[300], addr[300];
    snprintf(standin, sizeof standin, "%s/standin.sh", tmp);
    snprintf(log, sizeof log, "%s/standin-run.log", tmp);
    snprintf(logs, sizeof logs, "%s/logs", tmp);
    snprintf(addr, sizeof addr, "%s/addresses", tmp);
    write_standin(standin, log);
    char secret[TFOS_HEX_SECRET_LEN + 1];
    memset(secret, 'c', TFOS_HEX_SECRET_LEN);
    secret[TFOS_HEX_SECRET_LEN] = '\0';
    setenv("TFOS_SECRET", secret, 1);
    char *prog[] = {"sh", "-c", "echo node $TFOS_JOB_NAME:$TFOS_TASK_INDEX extra=$BACKEND_TEST_EXTRA", NULL};
    tfos_run_opts o = {.layout = {.num_workers = 2}, .argv = prog, .agent_path = agent, .log_dir = logs,
                       .status_port = 0, .reservation_timeout = 30, .quiet = true};
    tfos__launch_opts lo = {0};
    tfos__yarn_cfg cfg;
    tfos__launch_on_yarn(&o, &lo, &cfg, standin, "/run/am.sock", "worker=1024:1:0", "127.0.0.1", addr);
    tfos_local *l;
    CHECK_EQ(tfos__launch_open(&l, &o, &lo), 0);
    CHECK(tfos__launch_loop(l) != NULL && tfos__launch_http(l) != NULL);
    CHECK_STR(tfos__launch_secret(l), secret);
    CHECK_STR(tfos__launch_token(l), ""); /* loopback: no token */
    int seven = 7;
    CHECK_EQ(tfos__status_add_metrics(tfos__launch_status(l), extra_series, &seven), 0);
    CHECK_EQ(tfos__launch_setenv(l, "BACKEND_TEST_EXTRA", "41"), 0);
    CHECK_EQ(tfos__launch_setenv(l, "BACKEND_TEST_EXTRA", "42"), 0); /* set again: replaced */
    CHECK_EQ(tfos__launch_setenv(l, "BAD=NAME", "x"), TFOS_EINVAL);
    CHECK_EQ(tfos__launch_start(l), 0);
    CHECK_EQ(tfos__launch_setenv(l, "LATE", "x"), TFOS_EINVAL); /* the agents have their environment */
    int port = tfos_local_status_port(l);
    char *metrics = get_while_stepping(l, port, "/metrics");
    CHECK(strstr(metrics, "HTTP/1.0 200") && strstr(metrics, "tfos_attempt 1\n"));
    CHECK(strstr(metrics, "tfos_test_series 7\n") > strstr(metrics, "tfos_attempt 1\n")); /* after the page's */
    free(metrics);
    int64_t until = tfos__now_ms() + 60000;
    while (!tfos_local_step(l, 100))
        CHECK(tfos__now_ms() < until);
    CHECK_EQ(tfos_local_exit_code(l), 0);
    /* the nodes' output came back forwarded, with the added environment */
    char *lines = tfos__logbuf_since(tfos__launch_status(l)->lines, 0, 1 << 16);
    CHECK(lines && strstr(lines, "[worker:0] node worker:0 extra=42\n") && strstr(lines, "[worker:1] node worker:1 "
                                                                                         "extra=42\n"));
    free(lines);
    /* each agent went through the stand-in, registering with --host auto */
    char *got = slurp(log);
    CHECK(got != NULL);
    CHECK(strstr(got, "yarn-container --am-socket /run/am.sock --resources worker=1024:1:0 --role worker -- "));
    CHECK(strstr(got, " node --coord 127.0.0.1:") && strstr(got, "--executor-id 0 --host auto") &&
          strstr(got, "--executor-id 1 --host auto"));
    CHECK(strstr(got, "--forward-logs"));
    char want[TFOS_HEX_SECRET_LEN + 16];
    snprintf(want, sizeof want, "secret=%s\n", secret);
    CHECK(strstr(got, want)); /* the application's secret: in the environment, never on a command line */
    for (char *line = strtok(got, "\n"); line; line = strtok(NULL, "\n"))
        CHECK(strncmp(line, "yarn-container", 14) || !strstr(line, secret));
    free(got);
    /* the addresses, for the ApplicationMaster */
    char *a = slurp(addr), url[64];
    snprintf(url, sizeof url, "\nhttp://127.0.0.1:%d/\n", port);
    CHECK(a && !strncmp(a, "127.0.0.1:", 10) && strstr(a, url));
    free(a);
    tfos_local_close(l);
    unsetenv("TFOS_SECRET");
}

int main(void)
{
    snprintf(tmp, sizeof tmp, "/tmp/tfos-backend-test-XXXXXX");
    CHECK(mkdtemp(tmp) != NULL);
    RUN(local_starts_observes_and_stops);
    RUN(exec_failure_is_reported_at_once);
    RUN(a_deaf_node_is_forced_and_close_leaves_nothing);
    RUN(yarn_puts_the_standin_in_front);
    RUN(on_yarn_sets_the_launcher_up);
    RUN(a_launcher_through_the_yarn_backend);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    CHECK(system(cmd) == 0);
    return 0;
}
