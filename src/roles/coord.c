/* coord.c: the coordinator: reservation, cluster spec, liveness, shutdown.
 *
 * One thread, one poll loop (tfos_coord_step). Peers connect over TCP, are
 * greeted with a nonce, and must answer with a REGISTER (agents), QUERY
 * (status clients) or ABORT (a node task that could not start its node)
 * carrying HMAC(secret, nonce). Anything malformed, oversized or
 * unauthenticated is logged with the peer's address and dropped; it never
 * stops the coordinator.
 *
 * Node lifecycle: EMPTY -> REGISTERED (agent holds its port) -> RUNNING
 * (program started) -> EXITED. When every node has registered the spec is
 * published to all of them at once. Tracked nodes (chief, workers, evaluator)
 * decide the outcome; ps nodes are stopped once the tracked ones succeed.
 */
#include "core/auth.h"
#include "core/json.h"
#include "core/log.h"
#include "core/spec.h"
#include "core/wire.h"
#include "platform/clock.h"
#include "platform/net.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_PEERS 1024
#define AUTH_TIMEOUT_MS 10000 /* a connection must authenticate this fast */
#define TAIL_MAX 4096

enum { N_EMPTY, N_REGISTERED, N_RUNNING, N_EXITED };
static const char *const node_state_names[] = {"waiting", "registered", "running", "exited"};

typedef struct cnode {
    tfos__node_addr addr;
    int state;
    int peer;       /* index in peers, -1 when not connected */
    int agent_pid;
    int prog_pid;
    int tb_port;    /* TensorBoard port the agent announced, 0: none */
    int exit_code;  /* shell-style: code or 128+signal; -1 unknown */
    char exit_desc[96];
    char tail[TAIL_MAX];
    int64_t last_heartbeat;
    int stop_sent;
} cnode;

typedef struct peer {
    tfos__conn conn;
    char name[64];
    char nonce[33];
    int node;        /* -1 until registered */
    int authed;
    int closing;     /* drop once the output is flushed */
    int64_t accepted;
} peer;

struct tfos_coord {
    tfos_coord_opts opts;
    char *secret;
    char address[TFOS_HOST_MAX + 16];
    int lfd;
    int state;
    int n;
    int registered;
    cnode *nodes;
    peer *peers;
    int npeers;
    int64_t reserve_deadline;
    int64_t stop_deadline;
    int failed;
    int failure_code;
    char failure[8192];
};

static void set_failure(tfos_coord *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_failure(tfos_coord *c, const char *fmt, ...)
{
    if (c->failed)
        return;
    c->failed = 1;
    c->failure_code = TFOS_EFAILED;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->failure, sizeof c->failure, fmt, ap);
    va_end(ap);
}

/* Log the first line of the failure; the whole text goes to the summary. */
static void log_failure(const tfos_coord *c)
{
    const char *nl = strchr(c->failure, '\n');
    int len = nl ? (int)(nl - c->failure) : (int)strlen(c->failure);
    TFOS_ERROR("coordinator: %.*s; stopping the cluster", len, c->failure);
}

static const char *node_label(const cnode *nd, char *buf, size_t len)
{
    snprintf(buf, len, "%s:%d", nd->addr.job, nd->addr.index);
    return buf;
}

static int is_tracked(const cnode *nd)
{
    return strcmp(nd->addr.job, "ps") != 0;
}

static void send_msg(tfos_coord *c, int pi, tfos__msg *m)
{
    peer *p = &c->peers[pi];
    int rc = tfos__msg_end(m);
    if (rc == 0)
        rc = tfos__conn_send(&p->conn, m);
    if (rc && rc != TFOS_ECLOSED)
        TFOS_WARN("coordinator: sending to %s failed: %s", p->name, tfos_strerror(rc));
    tfos__msg_fini(m);
}

static void send_error(tfos_coord *c, int pi, const char *text)
{
    tfos__msg m;
    tfos__msg_begin(&m, TFOS_MSG_ERROR);
    tfos__msg_add(&m, "message", "%s", text);
    send_msg(c, pi, &m);
    c->peers[pi].closing = 1;
}

static void enter_stopping(tfos_coord *c);

static void drop_peer(tfos_coord *c, int pi, const char *why)
{
    peer *p = &c->peers[pi];
    if (why)
        TFOS_WARN("coordinator: dropped peer %s: %s", p->name, why);
    int ni = p->node;
    tfos__conn_fini(&p->conn);
    /* keep indexes stable for nodes: move the last peer into this slot */
    int last = c->npeers - 1;
    if (pi != last) {
        c->peers[pi] = c->peers[last];
        if (c->peers[pi].node >= 0)
            c->nodes[c->peers[pi].node].peer = pi;
    }
    c->npeers--;
    if (ni < 0)
        return;
    cnode *nd = &c->nodes[ni];
    nd->peer = -1;
    char label[48];
    node_label(nd, label, sizeof label);
    if (nd->state == N_EXITED)
        return;
    if (c->state == TFOS_COORD_RESERVING) {
        /* the agent went away before the cluster formed: its slot is free again */
        TFOS_WARN("coordinator: executor %d (%s) disconnected before the cluster formed", nd->addr.executor_id,
                  label);
        nd->state = N_EMPTY;
        c->registered--;
        return;
    }
    if (c->state == TFOS_COORD_RUNNING) {
        set_failure(c, "%s (executor %d, host %s) lost contact with the coordinator: its agent died or was killed",
                    label, nd->addr.executor_id, nd->addr.host);
        log_failure(c);
        nd->state = N_EXITED;
        nd->exit_code = -1;
        snprintf(nd->exit_desc, sizeof nd->exit_desc, "agent lost");
        enter_stopping(c);
        return;
    }
    nd->state = N_EXITED;
    if (nd->exit_code == 0 && !nd->exit_desc[0])
        nd->exit_code = -1;
}

static void send_stop(tfos_coord *c, cnode *nd, const char *reason)
{
    if (nd->stop_sent || nd->peer < 0 || nd->state == N_EXITED)
        return;
    nd->stop_sent = 1;
    tfos__msg m;
    tfos__msg_begin(&m, TFOS_MSG_STOP);
    tfos__msg_add(&m, "grace_ms", "%d", (int)(c->opts.stop_grace * 1000));
    tfos__msg_add(&m, "reason", "%s", reason);
    send_msg(c, nd->peer, &m);
}

static void enter_stopping(tfos_coord *c)
{
    if (c->state == TFOS_COORD_STOPPING || c->state >= TFOS_COORD_DONE)
        return;
    c->state = TFOS_COORD_STOPPING;
    c->stop_deadline = tfos__now_ms() + (int64_t)(c->opts.stop_grace * 1000) + 10000;
    for (int i = 0; i < c->n; i++)
        send_stop(c, &c->nodes[i], c->failed ? "the cluster is stopping after a failure" : "training finished");
}

/* Stop the cluster from whatever state it is in: while reserving, the
 * registered agents are told with an ERROR (no program runs yet); once
 * running, every agent gets a STOP. */
static void stop_cluster(tfos_coord *c, const char *reason)
{
    if (c->state != TFOS_COORD_RESERVING) {
        enter_stopping(c);
        return;
    }
    for (int i = 0; i < c->n; i++)
        if (c->nodes[i].peer >= 0)
            send_error(c, c->nodes[i].peer, reason);
    c->state = TFOS_COORD_STOPPING;
    c->stop_deadline = tfos__now_ms() + 5000;
}

static void publish_spec(tfos_coord *c)
{
    TFOS_INFO("coordinator: all %d nodes registered; publishing the cluster spec", c->n);
    c->state = TFOS_COORD_RUNNING;
    int64_t now = tfos__now_ms();
    for (int i = 0; i < c->n; i++) {
        cnode *nd = &c->nodes[i];
        nd->last_heartbeat = now;
        tfos__msg m;
        tfos__msg_begin(&m, TFOS_MSG_SPEC);
        tfos__msg_add(&m, "self", "%d", i);
        tfos__msg_add(&m, "attempt", "%d", c->opts.attempt);
        tfos__msg_add(&m, "coord", "%s", c->address);
        for (int j = 0; j < c->n; j++) {
            const tfos__node_addr *a = &c->nodes[j].addr;
            tfos__msg_add(&m, "node", "%s %d %d %s %d", a->job, a->index, a->executor_id, a->host, a->port);
        }
        send_msg(c, nd->peer, &m);
    }
}

static int host_valid(const char *h)
{
    if (!*h)
        return 0;
    for (; *h; h++)
        if (!((*h >= 'a' && *h <= 'z') || (*h >= 'A' && *h <= 'Z') || (*h >= '0' && *h <= '9') || *h == '.' ||
              *h == '-' || *h == ':' || *h == '_'))
            return 0;
    return 1;
}

static void handle_register(tfos_coord *c, int pi, const tfos__frame *f)
{
    peer *p = &c->peers[pi];
    char mac[TFOS_MAC_HEX_LEN + 2] = "";
    tfos__kv_str(f->payload, f->len, "mac", mac, sizeof mac);
    if (tfos__auth_check(c->secret, p->nonce, mac)) {
        TFOS_WARN("coordinator: rejected peer %s: it does not know the cluster secret", p->name);
        send_error(c, pi, "authentication failed: wrong cluster secret");
        return;
    }
    p->authed = 1;
    long long id, port, pid, tb_port = 0;
    char host[TFOS_HOST_MAX], tb[16];
    /* tb_port is optional (agents before it was added do not send it), but
     * when present it must be a port */
    int has_tb = tfos__kv_str(f->payload, f->len, "tb_port", tb, sizeof tb) != TFOS_EINVAL;
    if (tfos__kv_int(f->payload, f->len, "executor_id", 0, 1 << 20, &id) ||
        tfos__kv_int(f->payload, f->len, "port", 1, 65535, &port) ||
        tfos__kv_int(f->payload, f->len, "pid", 1, 1LL << 31, &pid) ||
        tfos__kv_str(f->payload, f->len, "host", host, sizeof host) || !host_valid(host) ||
        (has_tb && tfos__kv_int(f->payload, f->len, "tb_port", 0, 65535, &tb_port))) {
        TFOS_WARN("coordinator: peer %s sent an invalid registration", p->name);
        send_error(c, pi, "invalid registration (executor_id, host, port and pid are required; tb_port must be a "
                   "port)");
        return;
    }
    char msg[512];
    if (c->state != TFOS_COORD_RESERVING) {
        snprintf(msg, sizeof msg, "executor %lld registered after the cluster was formed", id);
        TFOS_WARN("coordinator: %s (peer %s)", msg, p->name);
        send_error(c, pi, msg);
        return;
    }
    if (id >= c->n) {
        snprintf(msg, sizeof msg, "executor %lld is out of range: this cluster has %d nodes (executors 0..%d)", id,
                 c->n, c->n - 1);
        TFOS_WARN("coordinator: %s (peer %s)", msg, p->name);
        send_error(c, pi, msg);
        return;
    }
    cnode *nd = &c->nodes[id];
    char label[48];
    node_label(nd, label, sizeof label);
    if (nd->state != N_EMPTY) {
        snprintf(msg, sizeof msg, "executor %lld (%s) is already registered by pid %d on %s; two nodes landed on "
                 "one executor", id, label, nd->agent_pid, nd->addr.host);
        TFOS_WARN("coordinator: %s (peer %s)", msg, p->name);
        send_error(c, pi, msg);
        return;
    }
    snprintf(nd->addr.host, sizeof nd->addr.host, "%s", host);
    nd->addr.port = (int)port;
    nd->agent_pid = (int)pid;
    nd->tb_port = (int)tb_port;
    nd->state = N_REGISTERED;
    nd->peer = pi;
    p->node = (int)id;
    c->registered++;
    TFOS_INFO("coordinator: registered executor %lld as %s at %s:%lld (%d/%d)", id, label, host, port, c->registered,
              c->n);
    if (c->registered == c->n)
        publish_spec(c);
}

static void check_done(tfos_coord *c)
{
    if (c->state != TFOS_COORD_RUNNING)
        return;
    for (int i = 0; i < c->n; i++)
        if (is_tracked(&c->nodes[i]) && (c->nodes[i].state != N_EXITED || c->nodes[i].exit_code != 0))
            return;
    TFOS_INFO("coordinator: every chief/worker/evaluator finished; stopping the rest");
    enter_stopping(c);
}

static void handle_exited(tfos_coord *c, int pi, const tfos__frame *f)
{
    peer *p = &c->peers[pi];
    if (p->node < 0)
        return;
    cnode *nd = &c->nodes[p->node];
    long long code = -1;
    tfos__kv_int(f->payload, f->len, "code", -1, 1 << 16, &code);
    nd->exit_code = (int)code;
    if (tfos__kv_str(f->payload, f->len, "desc", nd->exit_desc, sizeof nd->exit_desc))
        snprintf(nd->exit_desc, sizeof nd->exit_desc, "exit code %lld", code);
    /* gather tail lines */
    size_t pos = 0, kl, vl, tl = 0;
    const char *k, *v;
    nd->tail[0] = '\0';
    while (tfos__kv_next(f->payload, f->len, &pos, &k, &kl, &v, &vl) == 0) {
        if (kl != 4 || memcmp(k, "tail", 4))
            continue;
        int w = snprintf(nd->tail + tl, sizeof nd->tail - tl, "  | %.*s\n", (int)vl, v);
        if (w < 0 || (size_t)w >= sizeof nd->tail - tl)
            break;
        tl += (size_t)w;
    }
    int was_running = nd->state != N_EXITED;
    nd->state = N_EXITED;
    char label[48];
    node_label(nd, label, sizeof label);
    if (!was_running || c->state >= TFOS_COORD_DONE) /* over: a late agent only updates its node */
        return;
    if (c->state == TFOS_COORD_RUNNING && (code != 0 || !is_tracked(nd))) {
        if (code != 0) {
            char pid[32] = "";
            if (nd->prog_pid > 0) /* 0: the program never started */
                snprintf(pid, sizeof pid, ", pid %d", nd->prog_pid);
            set_failure(c, "%s (executor %d, host %s%s) failed: %s\nlast lines of %s:\n%s", label,
                        nd->addr.executor_id, nd->addr.host, pid, nd->exit_desc, label,
                        nd->tail[0] ? nd->tail : "  | (no output)\n");
        }
        else
            set_failure(c, "%s (executor %d, host %s) exited before training finished (%s); ps nodes must run "
                        "until the workers are done",
                        label, nd->addr.executor_id, nd->addr.host, nd->exit_desc);
        log_failure(c);
        enter_stopping(c);
        return;
    }
    TFOS_INFO("coordinator: %s %s: %s", label, c->state == TFOS_COORD_STOPPING ? "stopped" : "finished", nd->exit_desc);
    check_done(c);
}

/* Check the mac of a client's first frame; on failure answer with an ERROR
 * (the peer is then dropped) and return 0. `what` names the request in the log. */
static int client_authed(tfos_coord *c, int pi, const tfos__frame *f, const char *what)
{
    peer *p = &c->peers[pi];
    char mac[TFOS_MAC_HEX_LEN + 2] = "";
    tfos__kv_str(f->payload, f->len, "mac", mac, sizeof mac);
    if (tfos__auth_check(c->secret, p->nonce, mac)) {
        TFOS_WARN("coordinator: rejected %s from %s: it does not know the cluster secret", what, p->name);
        send_error(c, pi, "authentication failed: wrong cluster secret");
        return 0;
    }
    p->authed = 1;
    return 1;
}

/* Answer a client with the status JSON, then drop it once that is sent. */
static void send_status(tfos_coord *c, int pi)
{
    char *json = tfos_coord_status_json(c);
    tfos__msg m;
    tfos__msg_begin(&m, TFOS_MSG_STATUS);
    tfos__msg_add(&m, "json", "%s", json ? json : "{}");
    free(json);
    send_msg(c, pi, &m);
    c->peers[pi].closing = 1;
}

static void handle_query(tfos_coord *c, int pi, const tfos__frame *f)
{
    if (client_authed(c, pi, f, "status query"))
        send_status(c, pi);
}

/* A node task could not start its node: that node will never register (or
 * run), so the cluster has failed. Recorded, logged, and the cluster stopped
 * whether it is reserving or running; answered with STATUS. */
static void handle_abort(tfos_coord *c, int pi, const tfos__frame *f)
{
    if (!client_authed(c, pi, f, "abort report"))
        return;
    long long id;
    if (tfos__kv_int(f->payload, f->len, "executor_id", 0, 1 << 20, &id) || id >= c->n) {
        char msg[160];
        snprintf(msg, sizeof msg, "invalid abort report: executor_id is missing or not in 0..%d", c->n - 1);
        TFOS_WARN("coordinator: %s (peer %s)", msg, c->peers[pi].name);
        send_error(c, pi, msg);
        return;
    }
    /* the message comes as one "message=" line per line of text */
    char text[4096];
    size_t tl = 0, pos = 0, kl, vl;
    const char *k, *v;
    text[0] = '\0';
    while (tfos__kv_next(f->payload, f->len, &pos, &k, &kl, &v, &vl) == 0) {
        if (kl != 7 || memcmp(k, "message", 7))
            continue;
        if (tl && tl + 1 < sizeof text)
            text[tl++] = '\n';
        size_t take = tfos__utf8_cut(v, vl, sizeof text - 1 - tl);
        memcpy(text + tl, v, take);
        tl += take;
        text[tl] = '\0';
    }
    if (!tl)
        snprintf(text, sizeof text, "(no message)");
    cnode *nd = &c->nodes[id];
    char label[48];
    node_label(nd, label, sizeof label);
    if (c->state == TFOS_COORD_RESERVING || c->state == TFOS_COORD_RUNNING) {
        set_failure(c, "%s (executor %lld) could not start: %s", label, id, text);
        log_failure(c);
        stop_cluster(c, tfos_coord_failure(c));
    } else {
        const char *nl = strchr(text, '\n');
        TFOS_WARN("coordinator: %s (executor %lld) could not start: %.*s (the cluster is already %s)", label, id,
                  nl ? (int)(nl - text) : (int)strlen(text), text,
                  c->state == TFOS_COORD_STOPPING ? "stopping" : "over");
    }
    send_status(c, pi);
}

/* Returns 0 to keep the peer, or a reason to drop it. */
static const char *handle_frame(tfos_coord *c, int pi, const tfos__frame *f)
{
    peer *p = &c->peers[pi];
    if (!p->authed) {
        if (f->type == TFOS_MSG_REGISTER)
            handle_register(c, pi, f);
        else if (f->type == TFOS_MSG_QUERY)
            handle_query(c, pi, f);
        else if (f->type == TFOS_MSG_ABORT)
            handle_abort(c, pi, f);
        else
            return "first message was not an authenticated REGISTER, QUERY or ABORT";
        return NULL;
    }
    if (p->node < 0)
        return "unexpected message from a status client";
    cnode *nd = &c->nodes[p->node];
    switch (f->type) {
    case TFOS_MSG_HEARTBEAT:
        nd->last_heartbeat = tfos__now_ms();
        return NULL;
    case TFOS_MSG_STARTED: {
        long long pid = 0;
        tfos__kv_int(f->payload, f->len, "pid", 1, 1LL << 31, &pid);
        nd->prog_pid = (int)pid;
        if (nd->state == N_REGISTERED)
            nd->state = N_RUNNING;
        nd->last_heartbeat = tfos__now_ms();
        return NULL;
    }
    case TFOS_MSG_EXITED:
        handle_exited(c, pi, f);
        return NULL;
    case TFOS_MSG_ERROR: {
        char text[512] = "";
        tfos__kv_str(f->payload, f->len, "message", text, sizeof text);
        char label[48];
        node_label(nd, label, sizeof label);
        if (c->state == TFOS_COORD_RUNNING || c->state == TFOS_COORD_RESERVING) {
            set_failure(c, "%s (executor %d, host %s): %s", label, nd->addr.executor_id, nd->addr.host, text);
            log_failure(c);
            enter_stopping(c);
        }
        return NULL;
    }
    default:
        return "unexpected message type from an agent";
    }
}

static void accept_peers(tfos_coord *c)
{
    for (;;) {
        int fd = accept4(c->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
                TFOS_WARN("coordinator: accept failed: %s", strerror(errno));
            return;
        }
        char name[64];
        tfos__peer_name(fd, name, sizeof name);
        if (c->npeers >= MAX_PEERS) {
            TFOS_WARN("coordinator: refused %s: too many connections", name);
            close(fd);
            continue;
        }
        peer *p = &c->peers[c->npeers];
        memset(p, 0, sizeof *p);
        tfos__conn_init(&p->conn, fd, TFOS_WIRE_MAX_PAYLOAD);
        snprintf(p->name, sizeof p->name, "%s", name);
        p->node = -1;
        p->accepted = tfos__now_ms();
        if (tfos__random_hex(p->nonce, 16)) {
            tfos__conn_fini(&p->conn);
            continue;
        }
        int pi = c->npeers++;
        tfos__msg m;
        tfos__msg_begin(&m, TFOS_MSG_HELLO);
        tfos__msg_add(&m, "nonce", "%s", p->nonce);
        tfos__msg_add(&m, "protocol", "%d", TFOS_PROTOCOL_VERSION);
        send_msg(c, pi, &m);
    }
}

static void service_peer(tfos_coord *c, int pi, short revents)
{
    peer *p = &c->peers[pi];
    if (revents & POLLOUT)
        tfos__conn_flush(&p->conn);
    if (!(revents & (POLLIN | POLLHUP | POLLERR)))
        return;
    int rc = tfos__conn_read(&p->conn);
    int closed = rc == TFOS_ECLOSED;
    if (rc && !closed) {
        drop_peer(c, pi, tfos_strerror(rc));
        return;
    }
    for (;;) {
        tfos__frame f;
        const char *why = NULL;
        rc = tfos__conn_frame(&c->peers[pi].conn, &f, &why);
        if (rc == TFOS_EAGAIN)
            break;
        if (rc) {
            char reason[160];
            snprintf(reason, sizeof reason, "%s: %s", rc == TFOS_ETOOBIG ? "oversized frame" : "malformed frame",
                     why ? why : tfos_strerror(rc));
            drop_peer(c, pi, reason);
            return;
        }
        const char *drop = c->peers[pi].closing ? NULL : handle_frame(c, pi, &f);
        tfos__conn_consume(&c->peers[pi].conn);
        if (drop) {
            drop_peer(c, pi, drop);
            return;
        }
    }
    if (closed) {
        peer *q = &c->peers[pi];
        const char *why = NULL;
        if (!q->authed)
            why = q->conn.in_len ? "closed in the middle of a frame (truncated)" : "closed before authenticating";
        drop_peer(c, pi, why);
    }
}

static void check_timers(tfos_coord *c)
{
    int64_t now = tfos__now_ms();
    /* unauthenticated connections may not linger */
    for (int i = c->npeers - 1; i >= 0; i--) {
        peer *p = &c->peers[i];
        if (!p->authed && now - p->accepted > AUTH_TIMEOUT_MS)
            drop_peer(c, i, "did not authenticate within 10 s");
        else if (p->closing && p->conn.out_len == 0)
            drop_peer(c, i, NULL);
    }
    if (c->state == TFOS_COORD_RESERVING && now >= c->reserve_deadline) {
        char missing[4096];
        size_t ml = 0;
        for (int i = 0; i < c->n && ml < sizeof missing - 64; i++) {
            if (c->nodes[i].state != N_EMPTY)
                continue;
            char label[48];
            int w = snprintf(missing + ml, sizeof missing - ml, "%sexecutor %d (%s)", ml ? ", " : "", i,
                             node_label(&c->nodes[i], label, sizeof label));
            if (w > 0)
                ml += (size_t)w;
        }
        set_failure(c, "reservation timed out after %g s: %d of %d nodes registered; missing: %s",
                    c->opts.reservation_timeout, c->registered, c->n, missing);
        c->failure_code = TFOS_ETIMEDOUT;
        log_failure(c);
        for (int i = 0; i < c->n; i++)
            if (c->nodes[i].peer >= 0)
                send_error(c, c->nodes[i].peer, c->failure);
        c->state = TFOS_COORD_STOPPING;
        c->stop_deadline = now + 5000;
    }
    if (c->state == TFOS_COORD_RUNNING && c->opts.heartbeat_timeout > 0) {
        for (int i = 0; i < c->n; i++) {
            cnode *nd = &c->nodes[i];
            if (nd->state == N_EXITED || nd->peer < 0)
                continue;
            if (now - nd->last_heartbeat > (int64_t)(c->opts.heartbeat_timeout * 1000)) {
                char label[48];
                set_failure(c, "%s (executor %d, host %s) sent no heartbeat for %g s: its agent hangs or the host "
                            "is unreachable",
                            node_label(nd, label, sizeof label), nd->addr.executor_id, nd->addr.host,
                            c->opts.heartbeat_timeout);
                log_failure(c);
                enter_stopping(c);
                break;
            }
        }
    }
    if (c->state == TFOS_COORD_STOPPING) {
        int live = 0;
        for (int i = 0; i < c->n; i++)
            if (c->nodes[i].state != N_EXITED && c->nodes[i].peer >= 0)
                live++;
        if (live && now >= c->stop_deadline) {
            TFOS_WARN("coordinator: %d agent(s) did not confirm the stop in time; giving up on them", live);
            live = 0;
        }
        if (!live)
            c->state = c->failed ? TFOS_COORD_FAILED : TFOS_COORD_DONE;
    }
}

int tfos_coord_open(tfos_coord **out, const tfos_coord_opts *opts)
{
    if (!out || !opts || !opts->secret || !*opts->secret)
        return TFOS_EINVAL;
    int n = tfos_layout_total(&opts->layout);
    if (n <= 0 || opts->layout.num_ps < 0 || opts->layout.num_workers < 0 || n > 4096)
        return TFOS_EINVAL;
    tfos_coord *c = calloc(1, sizeof *c);
    if (!c)
        return TFOS_ENOMEM;
    c->opts = *opts;
    if (!c->opts.bind_host)
        c->opts.bind_host = "127.0.0.1";
    if (c->opts.reservation_timeout <= 0)
        c->opts.reservation_timeout = 600;
    if (c->opts.stop_grace <= 0)
        c->opts.stop_grace = 5;
    if (c->opts.heartbeat_timeout == 0)
        c->opts.heartbeat_timeout = 30;
    if (c->opts.attempt <= 0)
        c->opts.attempt = 1;
    c->lfd = -1;
    int rc = TFOS_ENOMEM;
    c->secret = strdup(opts->secret);
    c->nodes = calloc((size_t)n, sizeof *c->nodes);
    c->peers = calloc(MAX_PEERS, sizeof *c->peers);
    if (!c->secret || !c->nodes || !c->peers)
        goto fail;
    c->n = n;
    for (int i = 0; i < n; i++) {
        const char *job;
        tfos_layout_role(&opts->layout, i, &job, &c->nodes[i].addr.index);
        snprintf(c->nodes[i].addr.job, sizeof c->nodes[i].addr.job, "%s", job);
        c->nodes[i].addr.executor_id = i;
        c->nodes[i].peer = -1;
        c->nodes[i].exit_code = -1;
    }
    int port;
    rc = tfos__tcp_listen(c->opts.bind_host, opts->port, 128, &c->lfd, &port);
    if (rc)
        goto fail;
    if (strchr(c->opts.bind_host, ':'))
        snprintf(c->address, sizeof c->address, "[%s]:%d", c->opts.bind_host, port);
    else
        snprintf(c->address, sizeof c->address, "%s:%d", c->opts.bind_host, port);
    c->state = TFOS_COORD_RESERVING;
    c->reserve_deadline = tfos__now_ms() + (int64_t)(c->opts.reservation_timeout * 1000);
    TFOS_DEBUG("coordinator: listening on %s for %d nodes", c->address, n);
    *out = c;
    return 0;
fail:
    tfos_coord_close(c);
    return rc;
}

int tfos_coord_step(tfos_coord *c, int timeout_ms)
{
    struct pollfd pfd[MAX_PEERS + 1];
    pfd[0].fd = c->lfd;
    pfd[0].events = POLLIN;
    int np = c->npeers;
    for (int i = 0; i < np; i++) {
        pfd[i + 1].fd = c->peers[i].conn.fd;
        pfd[i + 1].events = POLLIN | (c->peers[i].conn.out_len ? POLLOUT : 0);
    }
    /* never sleep past a deadline we must act on; once the cluster is over
     * nothing changes any more, but clients that come to ask (a node task
     * wanting the failure) are still answered: without waiting, so callers
     * that step until the end see no difference */
    int wait = timeout_ms;
    if (wait > 200)
        wait = 200;
    if (c->state >= TFOS_COORD_DONE)
        wait = 0;
    int n = poll(pfd, (nfds_t)np + 1, wait);
    if (n > 0) {
        /* service peers from the last: drop_peer moves the last peer into a
         * freed slot, which we have then already serviced */
        for (int i = np - 1; i >= 0; i--)
            if (pfd[i + 1].revents && i < c->npeers)
                service_peer(c, i, pfd[i + 1].revents);
        if (pfd[0].revents & POLLIN)
            accept_peers(c);
    }
    check_timers(c);
    return c->state;
}

int tfos_coord_state(const tfos_coord *c)
{
    return c->state;
}

const char *tfos_coord_address(const tfos_coord *c)
{
    return c->address;
}

void tfos_coord_stop(tfos_coord *c, const char *reason)
{
    if (c->state >= TFOS_COORD_DONE)
        return;
    if (reason) {
        int was = c->failed;
        set_failure(c, "%s", reason);
        if (!was)
            c->failure_code = TFOS_ESTOPPED;
        TFOS_WARN("coordinator: stopping: %s", reason);
    }
    stop_cluster(c, reason ? reason : "cluster stopped");
}

void tfos_coord_end_feed(tfos_coord *c)
{
    int told = 0;
    for (int i = 0; i < c->n; i++) {
        cnode *nd = &c->nodes[i];
        if (!is_tracked(nd) || nd->state != N_RUNNING || nd->peer < 0)
            continue;
        tfos__msg m;
        tfos__msg_begin(&m, TFOS_MSG_END_FEED);
        send_msg(c, nd->peer, &m);
        told++;
    }
    TFOS_DEBUG("coordinator: asked %d running node(s) to end their feed", told);
}

int tfos_coord_failure_code(const tfos_coord *c)
{
    return c->failed ? c->failure_code : 0;
}

const char *tfos_coord_failure(const tfos_coord *c)
{
    return c->failed ? c->failure : "";
}

int tfos_coord_node_count(const tfos_coord *c)
{
    return c->n;
}

int tfos_coord_node(const tfos_coord *c, int i, tfos_node_info *out)
{
    if (i < 0 || i >= c->n)
        return TFOS_EINVAL;
    const cnode *nd = &c->nodes[i];
    out->job = nd->addr.job;
    out->index = nd->addr.index;
    out->executor_id = nd->addr.executor_id;
    out->host = nd->state == N_EMPTY ? "" : nd->addr.host;
    out->port = nd->state == N_EMPTY ? 0 : nd->addr.port;
    out->state = node_state_names[nd->state];
    out->pid = nd->prog_pid;
    out->exit_code = nd->state == N_EXITED ? nd->exit_code : -1;
    out->tb_port = nd->state == N_EMPTY ? 0 : nd->tb_port;
    return 0;
}


char *tfos_coord_status_json(const tfos_coord *c)
{
    static const char *const states[] = {"reserving", "running", "stopping", "done", "failed"};
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    fprintf(f, "{\"state\": \"%s\", \"address\": ", states[c->state]);
    tfos__json_str(f, c->address);
    fprintf(f, ", \"attempt\": %d, \"registered\": %d, \"size\": %d, \"failure\": ", c->opts.attempt,
            c->registered, c->n);
    tfos__json_str(f, tfos_coord_failure(c));
    fprintf(f, ", \"nodes\": [");
    for (int i = 0; i < c->n; i++) {
        const cnode *nd = &c->nodes[i];
        fprintf(f, "%s{\"executor_id\": %d, \"job\": \"%s\", \"index\": %d, \"host\": ", i ? ", " : "",
                nd->addr.executor_id, nd->addr.job, nd->addr.index);
        tfos__json_str(f, nd->state == N_EMPTY ? "" : nd->addr.host);
        fprintf(f, ", \"port\": %d, \"state\": \"%s\", \"agent_pid\": %d, \"pid\": %d, \"exit_code\": %d, \"exit\": ",
                nd->state == N_EMPTY ? 0 : nd->addr.port, node_state_names[nd->state], nd->agent_pid, nd->prog_pid,
                nd->state == N_EXITED ? nd->exit_code : -1);
        tfos__json_str(f, nd->exit_desc);
        fprintf(f, ", \"tensorboard_port\": %d}", nd->state == N_EMPTY ? 0 : nd->tb_port);
    }
    fprintf(f, "]}");
    fclose(f);
    return buf;
}

void tfos_coord_close(tfos_coord *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->npeers; i++)
        tfos__conn_fini(&c->peers[i].conn);
    if (c->lfd >= 0)
        close(c->lfd);
    free(c->peers);
    free(c->nodes);
    free(c->secret);
    free(c);
}
