/* proc_test.c: spawning, exec failure, status decoding, parent-death signal,
 * and the port a node's agent reserves for its program. */
#include "check.h"
#include "platform/clock.h"
#include "platform/net.h"
#include "platform/proc.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void spawn_and_status(void)
{
    char *ok[] = {"true", NULL}, *bad[] = {"sh", "-c", "exit 3", NULL}, *sig[] = {"sh", "-c", "kill -9 $$", NULL};
    tfos__spawn_opts o = {.argv = ok, .stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1};
    pid_t pid;
    int st;
    char desc[64];
    CHECK_EQ(tfos__spawn(&o, &pid), 0);
    CHECK_EQ(tfos__wait_pid(pid, 5000, &st), 0);
    CHECK_EQ(tfos__exit_code(st), 0);
    o.argv = bad;
    CHECK_EQ(tfos__spawn(&o, &pid), 0);
    CHECK_EQ(tfos__wait_pid(pid, 5000, &st), 0);
    CHECK_EQ(tfos__exit_code(st), 3);
    tfos__describe_status(st, desc, sizeof desc);
    CHECK_STR(desc, "exit code 3");
    o.argv = sig;
    CHECK_EQ(tfos__spawn(&o, &pid), 0);
    CHECK_EQ(tfos__wait_pid(pid, 5000, &st), 0);
    CHECK_EQ(tfos__exit_code(st), 137);
    tfos__describe_status(st, desc, sizeof desc);
    CHECK_STR(desc, "signal 9 (Killed)");
}

static void exec_failure(void)
{
    char *argv[] = {"/nonexistent/tfos-test-program", NULL};
    tfos__spawn_opts o = {.argv = argv, .stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1};
    pid_t pid = 0;
    errno = 0;
    CHECK_EQ(tfos__spawn(&o, &pid), TFOS_ESYS);
    CHECK_EQ(errno, ENOENT);
}

static void wait_timeout(void)
{
    char *argv[] = {"sleep", "5", NULL};
    tfos__spawn_opts o = {.argv = argv, .stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1, .new_pgroup = 1};
    pid_t pid;
    int st;
    CHECK_EQ(tfos__spawn(&o, &pid), 0);
    CHECK_EQ(getpgid(pid), pid);
    CHECK_EQ(tfos__wait_pid(pid, 50, &st), TFOS_ETIMEDOUT);
    CHECK_EQ(kill(-pid, SIGKILL), 0);
    CHECK_EQ(tfos__wait_pid(pid, 5000, &st), 0);
    CHECK(WIFSIGNALED(st));
}

/* Alive and not a zombie (a re-parented zombie may linger under a PID 1
 * that does not reap). */
static int alive(pid_t pid)
{
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *rp = strrchr(buf, ')');
    return rp && rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X';
}

/* A middle process spawns a long sleeper with a parent-death signal and is
 * then SIGKILLed: the sleeper must die too. */
static void parent_death(void)
{
    int p[2];
    CHECK_EQ(pipe(p), 0);
    pid_t mid = fork();
    CHECK(mid >= 0);
    if (mid == 0) {
        char *argv[] = {"sleep", "60", NULL};
        tfos__spawn_opts o = {.argv = argv, .stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1,
                              .pdeathsig = SIGKILL};
        pid_t child;
        if (tfos__spawn(&o, &child))
            _exit(1);
        ssize_t w = write(p[1], &child, sizeof child);
        (void)w;
        pause();
        _exit(0);
    }
    pid_t child = 0;
    CHECK_EQ(read(p[0], &child, sizeof child), (long long)sizeof child);
    CHECK(child > 0);
    CHECK_EQ(kill(child, 0), 0);
    CHECK_EQ(kill(mid, SIGKILL), 0);
    int st;
    CHECK_EQ(tfos__wait_pid(mid, 5000, &st), 0);
    /* the sleeper was re-parented (to init or a subreaper) and killed */
    int64_t deadline = tfos__now_ms() + 5000;
    while (alive(child) && tfos__now_ms() < deadline) {
        waitpid(child, NULL, WNOHANG); /* in case we are the subreaper */
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    CHECK(!alive(child));
    close(p[0]);
    close(p[1]);
}

/* bind 0.0.0.0:port as a program would (no SO_REUSEADDR): 0, or errno */
static int bind_as_program(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    int rc = bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 ? 0 : errno;
    close(fd);
    return rc;
}

/* Reserved ports lie outside the kernel's ephemeral range (no connect or
 * bind to port 0 can take one between the program's exec and its bind),
 * are held until closed, distinct while held, and free once closed. */
static void reserved_ports(void)
{
    int lo, hi;
    tfos__ephemeral_range(&lo, &hi);
    CHECK(lo >= 1 && lo <= hi && hi <= 65535);
    enum { N = 200 };
    int fds[N], ports[N];
    for (int i = 0; i < N; i++) {
        CHECK_EQ(tfos__reserve_port(&fds[i], &ports[i]), 0);
        if (lo > TFOS_RESERVED_PORT_MIN + 1000) /* room below the range (Linux: 32768) */
            CHECK(ports[i] >= TFOS_RESERVED_PORT_MIN && (ports[i] < lo || ports[i] > hi));
        for (int j = 0; j < i; j++)
            CHECK(ports[j] != ports[i]);
    }
    CHECK_EQ(bind_as_program(ports[0]), EADDRINUSE); /* held */
    for (int i = 0; i < N; i++)
        close(fds[i]);
    CHECK_EQ(bind_as_program(ports[0]), 0); /* the program gets it */
}

int main(void)
{
    RUN(spawn_and_status);
    RUN(exec_failure);
    RUN(wait_timeout);
    RUN(parent_death);
    RUN(reserved_ports);
    return 0;
}
