/* simagents.c: many agents' protocol in one process, against the real
 * coordinator (`tfos coordinator`), to form clusters beyond what one
 * machine's processes allow (4,096, 16,384 nodes).
 *
 * Each simulated agent has its own TCP connection and does what
 * src/roles/agent.c does up to its program: it reads the coordinator's
 * HELLO, answers with a REGISTER carrying HMAC(secret, nonce) (the real
 * handshake, core/auth.h), its executor id, a distinct port and its own
 * t_hello / t_register times, waits for its SPEC and checks it, then says
 * STARTED and EXITED 0 at once (a program like `true`). What it leaves out:
 * fork/exec of an agent and of a program, the port reservation, the
 * Keras probe, rings, heartbeats (it exits before its first beat).
 *
 * At most --window agents are between their connect and their REGISTER at
 * once (default 200, under the coordinator's 256 places for peers still in
 * their handshake), as real agents spread over a cluster's machines arrive;
 * one whose connection is dropped before its spec dials again (5 times at
 * most), as a real agent does.
 *
 * Prints one line: N, the form, seconds to form (launch -> the last node
 * has its spec), seconds to the coordinator's end, redials, the
 * coordinator's peak RSS (VmHWM) and CPU seconds, then its "start:" line.
 *
 * Limits: one descriptor per agent plus a few: RLIMIT_NOFILE is raised to
 * its hard limit, and N + 64 must fit (the coordinator needs as many);
 * local ports: the connections to one address take N of the ephemeral
 * range (net.ipv4.ip_local_port_range, 28,232 by default). The TF form
 * cannot go past about 1,800 nodes: one node's spec lists every address
 * and a control frame holds 64 KiB.
 *
 * usage: tfos-simagents --tfos build/tfos -n N [--framework torch|tf] [--window W] */
#include "core/auth.h"
#include "core/wire.h"
#include "platform/clock.h"
#include "tfos/tfos.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

enum { S_IDLE, S_CONNECTING, S_HELLO, S_SPEC, S_DONE, S_FAILED };

typedef struct sim {
    int fd, state, tries;
    int64_t began;  /* when this agent (its latest try) started */
    char in[2048];  /* the frame being read: HELLO and SPEC are small in the ranks form */
    size_t have;
    char *big;      /* a larger SPEC (the full form) */
    size_t big_cap;
} sim;

static int n, window = 200, ranks = 1, inflight, done, failed, redials;
static sim *sims;
static const char *secret;
static struct sockaddr_in coord;
static int ep;
static int64_t t0, formed_at;

static void die(const char *fmt, const char *arg)
{
    fprintf(stderr, "tfos-simagents: ");
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    exit(2);
}

static int send_frame(int fd, tfos__msg *m)
{
    int rc = tfos__msg_end(m);
    /* the frames are small and the socket's buffer empty: one write */
    if (!rc && write(fd, m->buf, m->len) != (ssize_t)m->len)
        rc = TFOS_ESYS;
    tfos__msg_fini(m);
    return rc;
}

static void start(int i);

static void fail(int i, const char *why)
{
    sim *s = &sims[i];
    if (s->state == S_CONNECTING || s->state == S_HELLO)
        inflight--;
    epoll_ctl(ep, EPOLL_CTL_DEL, s->fd, NULL);
    close(s->fd);
    s->fd = -1;
    if (s->state != S_DONE && s->tries < 5) {
        redials++;
        s->state = S_IDLE;
        return; /* dialed again by the main loop */
    }
    s->state = S_FAILED;
    failed++;
    fprintf(stderr, "tfos-simagents: executor %d: %s\n", i, why);
}

static void start(int i)
{
    sim *s = &sims[i];
    s->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->fd < 0)
        die("socket: %s (raise the open files limit: ulimit -n)", strerror(errno));
    s->tries++;
    s->began = tfos__now_ms();
    s->have = 0;
    s->state = S_CONNECTING;
    inflight++;
    if (connect(s->fd, (struct sockaddr *)&coord, sizeof coord) < 0 && errno != EINPROGRESS) {
        fail(i, strerror(errno));
        return;
    }
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP, .data.u32 = (uint32_t)i};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, s->fd, &ev) < 0)
        die("epoll_ctl: %s", strerror(errno));
}

/* Read one whole frame into the agent's buffer: 1 when it is there, 0 not
 * yet, -1 the connection ended or the frame is bad. */
static int read_frame(sim *s, tfos__frame *f)
{
    for (;;) {
        char *buf = s->big ? s->big : s->in;
        size_t cap = s->big ? s->big_cap : sizeof s->in;
        if (s->have >= TFOS_WIRE_HEADER) {
            const char *why;
            if (tfos__wire_header((const uint8_t *)buf, s->have, TFOS_WIRE_MAX_PAYLOAD, f, &why))
                return -1;
            size_t whole = TFOS_WIRE_HEADER + f->len;
            if (whole > cap) {
                char *b = malloc(whole);
                if (!b)
                    return -1;
                memcpy(b, buf, s->have);
                free(s->big);
                s->big = b;
                s->big_cap = whole;
                continue;
            }
            if (s->have >= whole) {
                f->payload = buf + TFOS_WIRE_HEADER;
                return tfos__wire_payload(f, &why) ? -1 : 1;
            }
        }
        ssize_t r = read(s->fd, buf + s->have, cap - s->have);
        if (r > 0) {
            s->have += (size_t)r;
            continue;
        }
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            return 0;
        return -1;
    }
}

static void consumed(sim *s)
{
    s->have = 0;
    free(s->big);
    s->big = NULL;
}

static void on_event(int i, uint32_t events)
{
    sim *s = &sims[i];
    if (s->state == S_CONNECTING) {
        int err = 0;
        socklen_t l = sizeof err;
        getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &l);
        if (err) {
            fail(i, strerror(err));
            return;
        }
        s->state = S_HELLO;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u32 = (uint32_t)i};
        epoll_ctl(ep, EPOLL_CTL_MOD, s->fd, &ev);
    }
    if (!(events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
        return;
    tfos__frame f;
    int rc = read_frame(s, &f);
    if (rc == 0)
        return;
    if (rc < 0 && s->state == S_DONE) { /* the coordinator ended the connection: the cluster is over */
        epoll_ctl(ep, EPOLL_CTL_DEL, s->fd, NULL);
        close(s->fd);
        s->fd = -1;
        consumed(s);
        return;
    }
    if (rc < 0) {
        fail(i, s->state == S_HELLO ? "dropped before its HELLO" : "dropped before its spec");
        return;
    }
    if (s->state == S_HELLO) {
        char nonce[128], mac[TFOS_MAC_HEX_LEN + 1];
        if (f.type != TFOS_MSG_HELLO || tfos__kv_str(f.payload, f.len, "nonce", nonce, sizeof nonce) ||
            tfos__auth_mac(secret, nonce, mac)) {
            fail(i, "no nonce in the coordinator's first frame");
            return;
        }
        consumed(s);
        int64_t hello = tfos__now_ms() - s->began;
        tfos__msg m;
        tfos__msg_begin(&m, TFOS_MSG_REGISTER);
        tfos__msg_add(&m, "mac", "%s", mac);
        tfos__msg_add(&m, "executor_id", "%d", i);
        tfos__msg_add(&m, "t_hello", "%lld", (long long)hello);
        tfos__msg_add(&m, "host", "%s", "127.0.0.1");
        tfos__msg_add(&m, "port", "%d", 1024 + i % 64000); /* distinct below 64,000 nodes */
        tfos__msg_add(&m, "pid", "%d", 100000 + i);
        tfos__msg_add(&m, "t_register", "%lld", (long long)(tfos__now_ms() - s->began));
        if (send_frame(s->fd, &m)) {
            fail(i, "could not send its REGISTER");
            return;
        }
        s->state = S_SPEC;
        inflight--;
        return;
    }
    if (s->state == S_SPEC) {
        if (f.type == TFOS_MSG_ERROR) {
            char text[512] = "";
            tfos__kv_str(f.payload, f.len, "message", text, sizeof text);
            s->tries = 99; /* refused: not worth a redial */
            fail(i, text);
            return;
        }
        long long rank = -1, world = -1;
        int ok = f.type == TFOS_MSG_SPEC;
        if (ok && ranks)
            ok = !tfos__kv_int(f.payload, f.len, "rank", 0, n - 1, &rank) &&
                 !tfos__kv_int(f.payload, f.len, "world", 0, n, &world) && rank == i && world == n;
        if (ok && !ranks) { /* the full form: self is this executor, one node= per node */
            long long self = -1;
            size_t pos = 0, kl, vl;
            const char *k, *v;
            int count = 0;
            while (tfos__kv_next(f.payload, f.len, &pos, &k, &kl, &v, &vl) == 0)
                count += kl == 4 && !memcmp(k, "node", 4);
            ok = !tfos__kv_int(f.payload, f.len, "self", 0, n - 1, &self) && self == i && count == n;
        }
        if (!ok) {
            s->tries = 99;
            fail(i, "its spec is not this node's (rank, world size or node count)");
            return;
        }
        consumed(s);
        done++;
        if (done == n)
            formed_at = tfos__now_ms();
        s->state = S_DONE;
        tfos__msg m;
        tfos__msg_begin(&m, TFOS_MSG_STARTED);
        tfos__msg_add(&m, "pid", "%d", 200000 + i);
        send_frame(s->fd, &m);
        tfos__msg_begin(&m, TFOS_MSG_EXITED);
        tfos__msg_add(&m, "code", "%d", 0);
        tfos__msg_add(&m, "desc", "%s", "exit code 0");
        send_frame(s->fd, &m);
        return;
    }
    consumed(s); /* S_DONE: a STOP or the end; nothing to do */
}

/* The coordinator's peak RSS (kB) from /proc while it runs. */
static long peak_rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6))
            kb = strtol(line + 6, NULL, 10);
    if (f)
        fclose(f);
    return kb;
}

int main(int argc, char **argv)
{
    const char *tfos = NULL, *framework = "torch";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tfos") && i + 1 < argc)
            tfos = argv[++i];
        else if (!strcmp(argv[i], "-n") && i + 1 < argc)
            n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--framework") && i + 1 < argc)
            framework = argv[++i];
        else if (!strcmp(argv[i], "--window") && i + 1 < argc)
            window = atoi(argv[++i]);
        else
            die("usage: tfos-simagents --tfos PATH -n N [--framework torch|tf] [--window W] (got '%s')", argv[i]);
    }
    if (!tfos || n < 1 || n > 65536 || window < 1)
        die("%s", "usage: tfos-simagents --tfos PATH -n N (1..65536) [--framework torch|tf] [--window W]");
    ranks = strcmp(framework, "tf") != 0;
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl); /* the coordinator inherits it */
    if (rl.rlim_cur < (rlim_t)n + 64) {
        char need[64];
        snprintf(need, sizeof need, "%d", n + 64);
        die("the open files limit's hard maximum is below N + 64 = %s: raise it (ulimit -Hn, or run as root)",
            need);
    }
    static char secret_buf[65];
    if (tfos__random_hex(secret_buf, 32))
        die("%s", "no random bytes for the secret");
    secret = secret_buf;
    setenv("TFOS_SECRET", secret, 1);

    /* the coordinator: its stdout says its address; its log goes to a file */
    int out[2];
    if (pipe(out) < 0)
        die("pipe: %s", strerror(errno));
    char nbuf[16];
    snprintf(nbuf, sizeof nbuf, "%d", n);
    char logpath[] = "/tmp/tfos-simagents-XXXXXX";
    int logfd = mkstemp(logpath);
    if (logfd < 0)
        die("mkstemp: %s", strerror(errno));
    t0 = tfos__now_ms();
    pid_t pid = fork();
    if (pid == 0) {
        dup2(out[1], 1);
        dup2(logfd, 2);
        execl(tfos, tfos, "coordinator", "--workers", nbuf, "--framework", framework, "--reservation-timeout", "300",
              (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    FILE *cf = fdopen(out[0], "r");
    char line[4096], addr[300] = "";
    while (fgets(line, sizeof line, cf))
        if (!strncmp(line, "TFOS_COORD_ADDR=", 16)) {
            line[strcspn(line, "\n")] = 0;
            if (strlen(line + 16) < sizeof addr)
                memcpy(addr, line + 16, strlen(line + 16) + 1);
            break;
        }
    char *colon = strrchr(addr, ':');
    if (!colon)
        die("%s", "the coordinator did not start (see its log)");
    *colon = 0;
    coord.sin_family = AF_INET;
    coord.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, addr, &coord.sin_addr) != 1)
        die("the coordinator's address %s is not IPv4", addr);

    sims = calloc((size_t)n, sizeof *sims);
    ep = epoll_create1(EPOLL_CLOEXEC);
    if (!sims || ep < 0)
        die("%s", "out of memory");
    long peak = 0;
    int next = 0;
    struct epoll_event evs[256];
    int64_t deadline = tfos__now_ms() + 600000;
    while (done + failed < n && tfos__now_ms() < deadline) {
        for (; next < n && inflight < window; next++)
            start(next);
        for (int i = 0; i < n && inflight < window; i++) /* redials */
            if (sims[i].state == S_IDLE && sims[i].tries)
                start(i);
        int k = epoll_wait(ep, evs, 256, 100);
        for (int j = 0; j < k; j++)
            on_event((int)evs[j].data.u32, evs[j].events);
        static int64_t sampled;
        if (tfos__now_ms() - sampled >= 50) {
            sampled = tfos__now_ms();
            long p = peak_rss_kb(pid);
            if (p > peak)
                peak = p;
        }
    }
    /* every node has exited 0: the coordinator ends (bounded: 60 s) */
    int status = 0;
    int64_t end_deadline = tfos__now_ms() + 60000;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        long p = peak_rss_kb(pid);
        if (p > peak)
            peak = p;
        if (tfos__now_ms() > end_deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            fprintf(stderr, "tfos-simagents: the coordinator did not end within 60 s of the last exit\n");
            break;
        }
        /* read what the coordinator sends (STOPs, the end) so it never blocks */
        int k = epoll_wait(ep, evs, 256, 10);
        for (int j = 0; j < k; j++)
            on_event((int)evs[j].data.u32, evs[j].events);
    }
    int64_t ended = tfos__now_ms();
    struct rusage ru;
    getrusage(RUSAGE_CHILDREN, &ru);
    double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
                 (double)ru.ru_stime.tv_usec / 1e6;
    printf("N=%d form=%s formed_s=%.3f ended_s=%.3f redials=%d failed=%d coord_peak_rss_mb=%.1f coord_cpu_s=%.2f\n", n,
           ranks ? "ranks" : "full", formed_at ? (double)(formed_at - t0) / 1000 : -1.0, (double)(ended - t0) / 1000,
           redials, failed, (double)peak / 1024, cpu);
    FILE *lf = fopen(logpath, "r");
    while (lf && fgets(line, sizeof line, lf))
        if (strstr(line, "start: spec sent"))
            fputs(line, stdout);
    if (lf)
        fclose(lf);
    unlink(logpath);
    int ok = !failed && done == n && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok)
        fprintf(stderr, "tfos-simagents: %d of %d nodes got their spec; the coordinator %s %d\n", done, n,
                WIFEXITED(status) ? "exited" : "was killed by signal",
                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    return ok ? 0 : 1;
}
