/* coord.c: the coordinator: reservation, cluster spec, liveness, shutdown,
 * and the restart decision.
 *
 * It registers with an event loop (core/loop.h): its listening socket, one
 * watch per peer, and one timer armed for the earliest deadline it has (the
 * reservation, a heartbeat, an unauthenticated peer, the stop), so it sleeps
 * exactly until something can happen. Peers connect over TCP links
 * (core/link.h: the listener greets them and bounds those that have not
 * authenticated) and must answer with a REGISTER (agents), QUERY (status
 * clients) or ABORT (a node task that could not start its node) carrying
 * HMAC(secret, nonce). Anything malformed, oversized or unauthenticated is
 * logged with the peer's address and dropped; it never stops the coordinator.
 *
 * Node lifecycle: EMPTY -> REGISTERED (agent holds its port) -> RUNNING
 * (program started) -> EXITED. When every node has registered the spec is
 * published to all of them at once. Tracked nodes (chief, workers, evaluator)
 * decide the outcome; ps nodes are stopped once the tracked ones succeed.
 *
 * Failures. The first failure is recorded as a tfos_failure (cause, node,
 * exit code or signal, the Python exception its output ended with) plus a
 * text for people; the policy the launcher handed in decides at once whether
 * the cluster will be re-formed (tfos_coord_decision). Survivors of a failed
 * node are stopped with the failure grace (default 0: killed at once: a
 * trainer blocked in a collective with a dead peer never gets to its SIGTERM
 * handler); a stop on purpose or a finished run uses the stop grace.
 *
 * Drain on notice (tfos_coord_drain). A notice (SIGTERM to the launcher, a
 * Spark executor's decommission) asks every chief, worker and evaluator to
 * checkpoint at one step and end. The coordinator chooses that step from
 * the steps the programs report (ctx.report(step=), in each heartbeat) and
 * the rate at which they climb. It first asks every agent for a fresh
 * report (PROGRESS: the agent answers with a heartbeat at once; a
 * heartbeat's report may be a second old, and a program makes many steps in
 * a second), waits for the answers (TFOS_DRAIN_PROBE_MS at most), then
 * sends the step: the highest estimated current step plus
 * TFOS_DRAIN_LEAD_MS of steps, plus one, so the DRAIN frame reaches every
 * program before it passes the step. The drain succeeds when every tracked
 * node exits 0 within the grace (tfos_coord_drained); at its end the nodes
 * still running are stopped (cause STOPPED) and the run falls back to its
 * last checkpoint.
 *
 * Peers are freed only between callbacks (the graveyard), so a handler may
 * drop any peer, its own included. */
#include "roles/coord.h"

#include "core/auth.h"
#include "core/json.h"
#include "core/link.h"
#include "core/log.h"
#include "core/report.h"
#include "core/ring.h"
#include "core/spec.h"
#include "core/turns.h"
#include "core/wire.h"
#include "platform/clock.h"
#include "platform/net.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Peers that have sent their first frame: every node's agent and, beside
 * them, up to this many status and command clients at once. */
#define EXTRA_PEERS 256
/* Connections that have not authenticated yet: bounded on their own by the
 * listener (core/link.h: the oldest is evicted for a newcomer once its
 * grace is over) so a flood of idle connections never takes the slots
 * registrations need, and each has TFOS_AUTH_TIMEOUT_MS to prove itself.
 * 256 of them cost at most 17 MB; the rest of a large cluster dialing at
 * once waits in the kernel's backlog (BACKLOG, as far as somaxconn lets). */
#define UNAUTH_MAX 256
#define BACKLOG 4096
#define WARN_WINDOW_MS 10000
#define WARN_PER_WINDOW 10
#define TAIL_MAX 4096
/* The others finished, but workers that joined in place run on: how long
 * their own end is waited for before they are stopped (check_done) */
#define JOINERS_WAIT_MS 3000

enum { N_EMPTY, N_REGISTERED, N_RUNNING, N_EXITED };
static const char *const node_state_names[] = {"waiting", "registered", "running", "exited"};

typedef struct peer peer;

typedef struct cnode {
    tfos__node_addr addr;
    int state;
    peer *peer;     /* NULL when not connected */
    int agent_pid;
    int prog_pid;
    int left;       /* lost, and the others went on without it (resize_in_place) */
    int joined;     /* it joined the running cluster in a lost worker's slot (join_in_place) */
    int join_pending; /* ... and the others are told once its program is ready to form the group */
    int local_rank, local_world; /* its place among the trainers on its host (the ranks spec form): a
                                  * worker that joins into its slot in place takes them */
    int tb_port;    /* TensorBoard port the agent announced, 0: none */
    char executor_key[64]; /* the Spark executor its agent runs for (its JVM's pid there), "" none */
    int exit_code;  /* shell-style: code or 128+signal; -1 unknown */
    char exit_desc[400]; /* the agent's one line: "exit code 1", or why the program could not start */
    char log_error[300]; /* the agent could not write the node's log ("" fine) */
    char tail[TAIL_MAX];
    int64_t last_heartbeat;
    int stop_sent;
    /* what the agent last said of the node's input ring and report */
    int has_feed, feed_ended;
    int reader_gone; /* its program reads its feed no more (terminate(), close, or dead) */
    uint64_t ring_cap, ring_used, rows_in, rows_out, wait_data_ns, wait_room_ns;
    int64_t progress_at;                     /* when those came */
    int64_t rows_out_at;                     /* when rows_out last grew (0: never) */
    int64_t progress_asked_at;               /* when it was last sent PROGRESS (ask_progress; 0: never) */
    uint64_t prev_wait_data_ns, prev_wait_room_ns;
    int64_t prev_at;                         /* the sample the waits are measured from */
    double wait_data, wait_room;             /* fractions of the last interval */
    char report[TFOS_RING_REPORT_MAX + 1];   /* checked; "" none */
    int64_t report_at;                       /* when the program made it (coordinator's clock) */
    /* the report's step, and how fast it climbs (the drain step's estimate) */
    int has_step;
    long long step;
    int64_t step_at;                         /* report_at of that step */
    int64_t started_at;                      /* when its program started (STARTED) */
    double step_rate;                        /* steps per second between the last two steps seen; 0 unknown */
    /* how the node started, on the coordinator's clock (tfos__now_ms; 0:
     * not known): see "Start telemetry" in docs/DESIGN.md */
    int64_t at_agent, at_connected, at_registered, at_program, at_first_io;
    /* when it failed, as its agent said (wall clock, 0: not known): the time
     * its program wrote when it caught its failure, and when its end was seen */
    double raised_at, ended_at;
} cnode;

/* A peer that has sent its first frame (those still to authenticate are
 * the listener's). */
struct peer {
    tfos__link *link; /* NULL once dropped */
    char name[64];
    int node;        /* -1 until registered */
    int authed;
    int closing;     /* its last frame is queued: the link ends once it is written */
    int gone;        /* dropped: in the graveyard, freed after the callback */
    int standby;     /* a standby node: capacity for one more (opts.standby), counted in c->standbys */
    peer *next_dead;
};

struct tfos_coord {
    tfos_coord_opts opts;
    char *secret;
    char *checkpoint_dir;
    char address[TFOS_HOST_MAX + 16];
    tfos__loop *loop;
    int own_loop;
    tfos__timer timer;
    tfos__listener *listener;
    int state;
    int n;
    int registered;
    int standbys;          /* standby nodes connected now (opts.standby at most) */
    int generation;        /* in-place resizes so far (resize_in_place) */
    int master;            /* the node that is rank 0 now (its host and port are MASTER_ADDR/PORT) */
    int left_count;        /* nodes that left (resize_in_place) */
    int *standby_ids;      /* the executor ids standbys registered with, nstandby_ids of them */
    int nstandby_ids;
    cnode *nodes;
    peer **peers;
    int npeers;
    unsigned long long spec_bytes; /* the cluster spec frames' bytes, all nodes together */
    int done_scan;                 /* check_done's cursor: nodes before it have finished */
    int64_t hb_check_at;           /* when the heartbeats are checked next (hb_period) */
    int64_t joiners_deadline;      /* only workers that joined in place run on: when they are stopped (0: no) */
    int64_t opened_at, spec_at;    /* tfos__now_ms when it opened, when it sent the spec (0: not yet) */
    peer *graveyard;
    tfos__turns *turns;    /* the feed jobs' fair turns (core/turns.h); NULL until a feed task asks */
    int64_t reserve_deadline;
    int64_t stop_deadline;
    int64_t last_query;    /* the client's lease: when its last status query came */
    int released;          /* a client sent "release": it has read the outcome */
    tfos__warn_limit warn; /* peer-caused warnings: at most WARN_PER_WINDOW per window */
    /* drain on notice (tfos_coord_drain) */
    int draining;          /* DRAIN was sent */
    int drained;           /* ... and every tracked node exited 0 after it */
    int probing;           /* the fresh reports are asked for; the step is not sent yet */
    int drain_force;       /* drain even when no program reported a step */
    int drain_sent;        /* the step went out (not turned into a stop) */
    int64_t probe_deadline;
    double drain_grace;
    long long drain_step;  /* -1: at each program's next check (no step was reported) */
    int64_t drain_at, drain_deadline;
    char drain_reason[256];
    int failed;
    int failure_code;
    int decision;
    tfos_failure info;
    const cnode *failed_node; /* the node info names; NULL: none */
    int decided;              /* the policy recorded a decision on it */
    char failure[8192];
    tfos__coord_report_fn on_report; /* tfos__coord_on_report */
    tfos__coord_resize_fn on_resize; /* tfos__coord_on_resize */
    void *resize_user;
    void *report_user;
};

static void schedule(tfos_coord *c);
static void check_done(tfos_coord *c);
static int resize_in_place(tfos_coord *c, cnode *nd, const char *why);
static int join_in_place(tfos_coord *c, peer *p, cnode *nd, const char *host, int port, int pid, char *msg,
                         size_t len);
static void check_probe(tfos_coord *c, int timed_out);
static int64_t hb_period(const tfos_coord *c);

static const char *node_label(const cnode *nd, char *buf, size_t len)
{
    snprintf(buf, len, "%s:%d", nd->addr.job, nd->addr.index);
    return buf;
}

static int is_tracked(const cnode *nd)
{
    return strcmp(nd->addr.job, "ps") != 0;
}

/* Causes that end the attempt because one node failed: its survivors are
 * stopped with the failure grace. */
static int node_failure(int cause)
{
    return cause != TFOS_CAUSE_STOPPED && cause != TFOS_CAUSE_RESERVATION && cause != TFOS_CAUSE_FEED;
}

/* Record the first failure: its record (cause, node), its text, and the
 * policy's decision. Later failures are consequences and are only logged. */
static void set_failure(tfos_coord *c, int cause, const cnode *nd, const char *const *tail, int ntail,
                        const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void set_failure(tfos_coord *c, int cause, const cnode *nd, const char *const *tail, int ntail,
                        const char *fmt, ...)
{
    if (c->failed)
        return;
    /* set a second time only when an earlier failure takes the place of
     * the first (came_first), which said the cluster is stopping */
    int replacing = c->failed_node != NULL;
    c->failed = 1;
    c->failed_node = nd;
    c->failure_code = cause == TFOS_CAUSE_RESERVATION ? TFOS_ETIMEDOUT
                      : cause == TFOS_CAUSE_STOPPED || cause == TFOS_CAUSE_FEED ? TFOS_ESTOPPED
                                                                                : TFOS_EFAILED;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->failure, sizeof c->failure, fmt, ap);
    va_end(ap);
    tfos_failure *f = &c->info;
    memset(f, 0, sizeof *f);
    f->cause = cause;
    f->attempt = c->opts.attempt;
    f->time = nd && nd->raised_at > 0 ? nd->raised_at : nd && nd->ended_at > 0 ? nd->ended_at : tfos__wall_s();
    f->executor_id = -1;
    f->exit_code = -1;
    if (nd) {
        node_label(nd, f->node, sizeof f->node);
        snprintf(f->job, sizeof f->job, "%s", nd->addr.job);
        f->executor_id = nd->addr.executor_id;
        snprintf(f->host, sizeof f->host, "%s", nd->addr.host);
        if (cause == TFOS_CAUSE_EXIT || cause == TFOS_CAUSE_START)
            f->exit_code = nd->exit_code;
        if (cause == TFOS_CAUSE_SIGNAL)
            f->signo = nd->exit_code > 128 ? nd->exit_code - 128 : 0;
    }
    if (tail && ntail)
        tfos_failure_parse_traceback(f, tail, ntail);
    const char *nl = strchr(c->failure, '\n');
    int len = nl ? (int)(nl - c->failure) : (int)strlen(c->failure);
    snprintf(f->summary, sizeof f->summary, "%.*s", len, c->failure);
    c->decision = TFOS_RAISE;
    if (c->opts.policy) {
        char progress[96] = "";
        if (c->checkpoint_dir)
            tfos_checkpoint_progress(c->checkpoint_dir, progress, sizeof progress);
        c->decision = tfos_policy_decide(c->opts.policy, f, progress, NULL);
        c->decided = c->decision >= 0;
        if (c->decision < 0)
            c->decision = TFOS_RAISE;
    }
    if (cause != TFOS_CAUSE_STOPPED && !replacing)
        TFOS_ERROR("coordinator: %s; stopping the cluster", f->summary);
}

static peer *peer_of(const cnode *nd)
{
    return nd->peer;
}

static void send_msg(tfos_coord *c, peer *p, tfos__msg *m)
{
    (void)c;
    int rc = tfos__msg_end(m);
    if (rc == 0 && p->link)
        rc = tfos__link_send(p->link, m, NULL, 0);
    if (rc && rc != TFOS_ECLOSED)
        TFOS_WARN("coordinator: sending to %s failed: %s", p->name, tfos_strerror(rc));
    tfos__msg_fini(m);
}

/* The peer's last frame is queued: its link ends (on_close) once that is
 * written, maybe at once. */
static void finish_peer(peer *p)
{
    p->closing = 1;
    if (p->link)
        tfos__link_finish(p->link);
}

/* An ERROR frame, then the peer is dropped once it is sent. `code` is the
 * TFOS_E* kind the peer decides on (the text is for people). */
static void send_error(tfos_coord *c, peer *p, int code, const char *text)
{
    tfos__msg m;
    tfos__msg_begin(&m, TFOS_MSG_ERROR);
    tfos__msg_add(&m, "code", "%d", code);
    tfos__msg_add(&m, "message", "%s", text);
    send_msg(c, p, &m);
    finish_peer(p);
}

static void enter_stopping(tfos_coord *c);

static void drop_peer(tfos_coord *c, peer *p, const char *why)
{
    if (p->gone)
        return;
    if (why)
        tfos__warn_limited(&c->warn, "dropped peer %s: %s", p->name, why);
    p->gone = 1;
    if (p->link) { /* dropped here, not ended by the link: close it (no on_close) */
        tfos__link_set_data(p->link, NULL);
        tfos__link_close(p->link);
        p->link = NULL;
    }
    for (int i = 0; i < c->npeers; i++)
        if (c->peers[i] == p) {
            c->peers[i] = c->peers[--c->npeers];
            break;
        }
    p->next_dead = c->graveyard;
    c->graveyard = p;
    if (p->standby) {
        p->standby = 0;
        c->standbys--;
    }
    int ni = p->node;
    if (ni < 0)
        return;
    cnode *nd = &c->nodes[ni];
    nd->peer = NULL;
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
    char lost[512];
    snprintf(lost, sizeof lost, "%s (executor %d, host %s) lost contact with the coordinator: its agent died or was "
             "killed", label, nd->addr.executor_id, nd->addr.host);
    if (c->state == TFOS_COORD_RUNNING && resize_in_place(c, nd, lost)) {
        nd->state = N_EXITED;
        nd->exit_code = -1;
        snprintf(nd->exit_desc, sizeof nd->exit_desc, "agent lost");
        check_done(c);
        return;
    }
    if (c->state == TFOS_COORD_RUNNING) {
        set_failure(c, TFOS_CAUSE_AGENT_LOST, nd, NULL, 0,
                    "%s (executor %d, host %s) lost contact with the coordinator: its agent died or was killed",
                    label, nd->addr.executor_id, nd->addr.host);
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

static void bury(tfos_coord *c)
{
    while (c->graveyard) {
        peer *p = c->graveyard;
        c->graveyard = p->next_dead;
        free(p);
    }
}

static void send_stop(tfos_coord *c, cnode *nd, const char *reason, double grace)
{
    if (nd->stop_sent || !nd->peer || nd->state == N_EXITED)
        return;
    nd->stop_sent = 1;
    tfos__msg m;
    tfos__msg_begin(&m, TFOS_MSG_STOP);
    tfos__msg_add(&m, "grace_ms", "%d", (int)(grace * 1000));
    tfos__msg_add(&m, "reason", "%s", reason);
    send_msg(c, nd->peer, &m);
}

static void enter_stopping(tfos_coord *c)
{
    if (c->state == TFOS_COORD_STOPPING || c->state >= TFOS_COORD_DONE)
        return;
    int after_failure = c->failed && node_failure(c->info.cause);
    double grace = after_failure ? c->opts.failure_grace : c->opts.stop_grace;
    c->state = TFOS_COORD_STOPPING;
    c->stop_deadline = tfos__now_ms() + (int64_t)(grace * 1000) + 10000;
    for (int i = 0; i < c->n; i++)
        send_stop(c, &c->nodes[i], c->failed ? "the cluster is stopping after a failure" : "training finished",
                  grace);
}

/* Stop the cluster from whatever state it is in: while reserving, the
 * registered agents are told with an ERROR (no program runs yet); once
 * running, every agent gets a STOP. */
static void stop_cluster(tfos_coord *c, int code, const char *reason)
{
    if (c->state != TFOS_COORD_RESERVING) {
        enter_stopping(c);
        return;
    }
    for (int i = 0; i < c->n; i++)
        if (c->nodes[i].peer)
            send_error(c, c->nodes[i].peer, code, reason);
    c->state = TFOS_COORD_STOPPING;
    c->stop_deadline = tfos__now_ms() + 5000;
}

int tfos_framework_spec_form(const char *framework)
{
    if (!framework || !*framework || !strcmp(framework, "tf"))
        return TFOS_SPEC_FULL;
    if (!strcmp(framework, "torch") || !strcmp(framework, "jax"))
        return TFOS_SPEC_RANKS;
    return -1;
}

/* The compact spec (TFOS_SPEC_RANKS): the node itself, rank 0's node and
 * the counts, computed here once for all in O(N log N). generation > 0:
 * node i joins a running cluster in place, in that generation (its
 * program forms its group there). */
static void send_rank_spec(tfos_coord *c, int i, const tfos__spec_ranks *rk, int generation)
{
    tfos__msg m;
    tfos__msg_begin(&m, TFOS_MSG_SPEC);
    tfos__msg_add(&m, "self", "%d", 0);
    tfos__msg_add(&m, "attempt", "%d", c->opts.attempt);
    tfos__msg_add(&m, "coord", "%s", c->address);
    tfos__msg_add(&m, "form", "%s", "ranks");
    if (generation > 0)
        tfos__msg_add(&m, "generation", "%d", generation);
    tfos__msg_add(&m, "nodes", "%d", rk->nodes);
    tfos__msg_add(&m, "world", "%d", rk->world);
    tfos__msg_add(&m, "rank", "%d", rk->rank);
    tfos__msg_add(&m, "local_rank", "%d", rk->local_rank);
    tfos__msg_add(&m, "local_world", "%d", rk->local_world);
    tfos__msg_add(&m, "master", "%d", rk->master < 0 ? -1 : rk->master == i ? 0 : 1);
    int list[2] = {i, rk->master}, k = rk->master >= 0 && rk->master != i ? 2 : 1;
    for (int j = 0; j < k; j++) {
        const tfos__node_addr *a = &c->nodes[list[j]].addr;
        tfos__msg_add(&m, "node", "%s %d %d %s %d", a->job, a->index, a->executor_id, a->host, a->port);
    }
    c->spec_bytes += m.len;
    send_msg(c, c->nodes[i].peer, &m);
}

static void publish_spec(tfos_coord *c)
{
    TFOS_INFO("coordinator: all %d nodes registered; publishing the cluster spec (%s)", c->n,
              c->opts.spec_form == TFOS_SPEC_RANKS ? "ranks" : "every node");
    c->state = TFOS_COORD_RUNNING;
    int64_t now = tfos__now_ms();
    c->spec_at = now;
    c->hb_check_at = now + hb_period(c);
    tfos__spec_ranks *ranks = NULL;
    if (c->opts.spec_form == TFOS_SPEC_RANKS) {
        tfos__node_addr *addrs = malloc((size_t)c->n * sizeof *addrs);
        ranks = malloc((size_t)c->n * sizeof *ranks);
        for (int i = 0; addrs && i < c->n; i++)
            addrs[i] = c->nodes[i].addr;
        if (!addrs || !ranks || tfos__spec_ranks_all(addrs, c->n, ranks)) {
            free(ranks);
            ranks = NULL; /* out of memory: the full form still works */
        }
        free(addrs);
    }
    for (int i = 0; i < c->n; i++) {
        if (ranks) {
            c->nodes[i].last_heartbeat = now;
            c->nodes[i].local_rank = ranks[i].local_rank;
            c->nodes[i].local_world = ranks[i].local_world;
            send_rank_spec(c, i, &ranks[i], 0);
            continue;
        }
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
        c->spec_bytes += m.len;
        send_msg(c, nd->peer, &m);
    }
    free(ranks);
}

/* Check the mac of a peer's first frame; on failure answer with an ERROR
 * (the peer is then dropped) and return 0. `what` names the request in the log. */
static int peer_authed(tfos_coord *c, peer *p, const tfos__frame *f, const char *what)
{
    if (tfos__link_auth(p->link, f, c->secret, "cluster secret")) {
        /* the link answers with an ERROR and ends once it is written */
        tfos__warn_limited(&c->warn, "rejected %s from %s: it does not know the cluster secret", what, p->name);
        p->closing = 1;
        return 0;
    }
    p->authed = 1;
    return 1;
}

static void refuse(tfos_coord *c, peer *p, int code, const char *msg)
{
    tfos__warn_limited(&c->warn, "%s (peer %s)", msg, p->name);
    send_error(c, p, code, msg);
}

/* The agent's own times in its REGISTER, ms since it started (optional:
 * older agents send none), put on this clock as if the frame took no time
 * to arrive: a network adds its one-way latency to "register". */
static void take_start_times(const tfos_coord *c, cnode *nd, const tfos__frame *f)
{
    long long t_hello = -1, t_reg = -1;
    int64_t now = tfos__now_ms();
    nd->at_registered = now;
    if (!tfos__kv_int(f->payload, f->len, "t_register", 0, 1LL << 40, &t_reg)) {
        if (tfos__kv_int(f->payload, f->len, "t_hello", 0, t_reg, &t_hello))
            t_hello = t_reg;
        nd->at_agent = now - t_reg;
        nd->at_connected = now - (t_reg - t_hello);
        if (nd->at_agent < c->opened_at) /* an agent started before this coordinator (a restart's redial) */
            nd->at_agent = c->opened_at;
        if (nd->at_connected < nd->at_agent)
            nd->at_connected = nd->at_agent;
    }
}

static void handle_register(tfos_coord *c, peer *p, const tfos__frame *f)
{
    if (!peer_authed(c, p, f, "registration"))
        return;
    long long id, port, pid, tb_port = 0, standby = 0;
    char host[TFOS_HOST_MAX], tb[16];
    if (!tfos__kv_int(f->payload, f->len, "standby", 0, 1, &standby) && standby) {
        /* Capacity for one more node (an elastic run's launcher asked its
         * cluster manager for it): counted while it stays connected, never
         * part of this cluster. At most opts.standby of them. */
        if (c->state > TFOS_COORD_RUNNING || c->standbys >= c->opts.standby) {
            refuse(c, p, TFOS_EINVAL, "a standby node is not wanted: this cluster waits for no more capacity");
            return;
        }
        long long sid = -1;
        tfos__kv_int(f->payload, f->len, "executor_id", 0, 1 << 20, &sid);
        if (c->nstandby_ids < c->opts.standby)
            c->standby_ids[c->nstandby_ids++] = (int)sid;
        p->standby = 1;
        c->standbys++;
        TFOS_INFO("coordinator: capacity for one more node is here (a standby node from %s; %d standing by)",
                  p->name, c->standbys);
        return;
    }
    /* tb_port is optional (agents before it was added do not send it), but
     * when present it must be a port; executor_key (a Spark node's
     * executor, status JSON's "executor_key") is optional too, a name of
     * tfos__plain_name's letters under 64 bytes */
    char ekey[sizeof c->nodes[0].executor_key] = "";
    int has_tb = tfos__kv_str(f->payload, f->len, "tb_port", tb, sizeof tb) != TFOS_EINVAL;
    int kr = tfos__kv_str(f->payload, f->len, "executor_key", ekey, sizeof ekey);
    if (tfos__kv_int(f->payload, f->len, "executor_id", 0, 1 << 20, &id) ||
        tfos__kv_int(f->payload, f->len, "port", 1, 65535, &port) ||
        tfos__kv_int(f->payload, f->len, "pid", 1, 1LL << 31, &pid) ||
        tfos__kv_str(f->payload, f->len, "host", host, sizeof host) || !tfos__plain_name(host) ||
        (has_tb && tfos__kv_int(f->payload, f->len, "tb_port", 0, 65535, &tb_port)) ||
        (kr != TFOS_EINVAL && (kr || !tfos__plain_name(ekey)))) {
        refuse(c, p, TFOS_EPROTO,
               "invalid registration (executor_id, host, port and pid are required; tb_port must be a port; "
               "executor_key a name under 64 bytes)");
        return;
    }
    char msg[512];
    long long join = 0;
    if (!tfos__kv_int(f->payload, f->len, "join", 0, 1, &join) && join) {
        /* a worker taking the place of a lost one in a running cluster */
        if (id >= c->n)
            snprintf(msg, sizeof msg, "executor %lld cannot join: this cluster has %d nodes (executors 0..%d)", id,
                     c->n, c->n - 1);
        if (id >= c->n || join_in_place(c, p, &c->nodes[id], host, (int)port, (int)pid, msg, sizeof msg))
            refuse(c, p, TFOS_EINVAL, msg);
        else
            snprintf(c->nodes[id].executor_key, sizeof c->nodes[id].executor_key, "%s", ekey);
        return;
    }
    if (c->state != TFOS_COORD_RESERVING) {
        snprintf(msg, sizeof msg, "executor %lld registered after the cluster was formed", id);
        refuse(c, p, TFOS_EINVAL, msg);
        return;
    }
    if (id >= c->n) {
        snprintf(msg, sizeof msg, "executor %lld is out of range: this cluster has %d nodes (executors 0..%d)", id,
                 c->n, c->n - 1);
        refuse(c, p, TFOS_EINVAL, msg);
        return;
    }
    cnode *nd = &c->nodes[id];
    char label[48];
    node_label(nd, label, sizeof label);
    if (nd->state != N_EMPTY) {
        snprintf(msg, sizeof msg, "executor %lld (%s) is already registered by pid %d on %s; two nodes landed on "
                 "one executor", id, label, nd->agent_pid, nd->addr.host);
        refuse(c, p, TFOS_EINVAL, msg);
        return;
    }
    snprintf(nd->addr.host, sizeof nd->addr.host, "%s", host);
    nd->addr.port = (int)port;
    nd->agent_pid = (int)pid;
    nd->tb_port = (int)tb_port;
    snprintf(nd->executor_key, sizeof nd->executor_key, "%s", ekey);
    nd->state = N_REGISTERED;
    take_start_times(c, nd, f);
    nd->peer = p;
    p->node = (int)id;
    c->registered++;
    TFOS_INFO("coordinator: registered executor %lld as %s at %s:%lld (%d/%d)", id, label, host, port, c->registered,
              c->n);
    if (c->registered == c->n)
        publish_spec(c);
}

/* Is the cluster's work done but for workers that joined in place (tfos
 * run --grow-in-place) too late? Every tracked node that has not left
 * joined in place or exited 0, and one exited 0: the others ended without
 * re-forming their group with the joiners (whose group waits for them to
 * its timeout, or fails when rank 0's store goes). The joiners still
 * running; -1: not so. */
static int done_but_joiners(const tfos_coord *c)
{
    int running = 0, finished = 0;
    for (int i = 0; i < c->n; i++) {
        const cnode *nd = &c->nodes[i];
        if (!is_tracked(nd) || nd->left)
            continue;
        if (nd->state == N_EXITED && nd->exit_code == 0)
            finished++;
        else if (nd->joined)
            running += nd->state != N_EXITED;
        else
            return -1;
    }
    return finished ? running : -1;
}

static void check_done(tfos_coord *c)
{
    if (c->state != TFOS_COORD_RUNNING)
        return;
    /* nodes before done_scan are finished for good (a node that exited 0
     * stays so): each exit moves the cursor, not a scan of every node, so a
     * cluster's exits cost O(N) in all, not O(N^2) (16,384 simulated nodes
     * spent seconds here) */
    int joiners = 0;
    while (c->done_scan < c->n) {
        const cnode *nd = &c->nodes[c->done_scan];
        if (is_tracked(nd) && !nd->left && (nd->state != N_EXITED || nd->exit_code != 0)) {
            if (!nd->joined || nd->state == N_EXITED || (joiners = done_but_joiners(c)) <= 0) {
                c->joiners_deadline = 0;
                return;
            }
            /* they may be ending too, a moment behind the others: their
             * own end is waited for, JOINERS_WAIT_MS */
            int64_t now = tfos__now_ms();
            if (!c->joiners_deadline)
                c->joiners_deadline = now + JOINERS_WAIT_MS;
            if (now < c->joiners_deadline)
                return;
            break;
        }
        c->done_scan++;
    }
    if (c->draining && !c->drain_sent) {
        /* every program ended before a drain step was chosen: none wrote a
         * checkpoint at one (the notice's own signal reached them first, as
         * Slurm's scancel signals the steps with the batch shell): a stop,
         * not a drain */
        set_failure(c, TFOS_CAUSE_STOPPED, NULL, NULL, 0, "%s", c->drain_reason);
        TFOS_WARN("coordinator: stopping: %s (every program ended before a drain step was sent: not drained)",
                  c->drain_reason);
        c->draining = c->probing = 0;
        stop_cluster(c, TFOS_ESTOPPED, c->failure);
        return;
    }
    if (c->draining) {
        c->drained = 1;
        TFOS_INFO("coordinator: drained: every chief/worker/evaluator ended after its checkpoint%s, %.1f s after "
                  "the notice; stopping the rest", c->drain_step >= 0 ? " at the drain step" : "",
                  (double)(tfos__now_ms() - c->drain_at) / 1000.0);
    } else if (joiners) {
        TFOS_INFO("coordinator: every chief/worker/evaluator finished but %d that joined in place, whose group the "
                  "others had not re-formed with (their last ElasticGroup.resized() came before it joined); "
                  "stopping the rest", joiners);
    } else {
        TFOS_INFO("coordinator: every chief/worker/evaluator finished; stopping the rest");
    }
    enter_stopping(c);
}

/* The agent's EXITED "kind": how its program ended. */
static int exit_cause(const tfos__frame *f, long long code)
{
    char kind[16] = "";
    tfos__kv_str(f->payload, f->len, "kind", kind, sizeof kind);
    if (!strcmp(kind, "signal"))
        return TFOS_CAUSE_SIGNAL;
    if (!strcmp(kind, "start"))
        return TFOS_CAUSE_START;
    if (!strcmp(kind, "setup"))
        return TFOS_CAUSE_SETUP;
    if (!strcmp(kind, "owner"))
        return TFOS_CAUSE_EXECUTOR_LOST;
    if (!strcmp(kind, "hang"))
        return TFOS_CAUSE_HANG;
    if (!strcmp(kind, "exit"))
        return TFOS_CAUSE_EXIT;
    return code > 128 ? TFOS_CAUSE_SIGNAL : TFOS_CAUSE_EXIT; /* an agent that does not say */
}

static double wait_fraction(uint64_t now_ns, uint64_t prev_ns, int64_t dt_ms)
{
    if (now_ns < prev_ns || dt_ms <= 0)
        return 0;
    double f = (double)(now_ns - prev_ns) / ((double)dt_ms * 1e6);
    return f > 1 ? 1 : f;
}

/* The step of a node's report ("step=120 loss=0.31"), and the rate it
 * climbs, measured between reports whose steps differ. */
static void take_step(cnode *nd)
{
    const char *p = nd->report;
    while (p && strncmp(p, "step=", 5))
        p = (p = strchr(p, ' ')) ? p + 1 : NULL;
    if (!p)
        return;
    double v = strtod(p + 5, NULL);
    if (!isfinite(v) || v < 0 || v > 1e15)
        return;
    long long step = (long long)v;
    if (nd->has_step && step > nd->step && nd->report_at > nd->step_at)
        nd->step_rate = (double)(step - nd->step) * 1000.0 / (double)(nd->report_at - nd->step_at);
    else if (!nd->has_step && nd->started_at && nd->report_at > nd->started_at)
        /* one report so far: its step over the program's life, which
         * counts its start too, so this is low until a second report */
        nd->step_rate = (double)step * 1000.0 / (double)(nd->report_at - nd->started_at);
    else if (nd->has_step && step < nd->step)
        nd->step_rate = 0; /* it went back (a new program): the old rate says nothing */
    if (!nd->has_step || step != nd->step) {
        nd->step = step;
        nd->step_at = nd->report_at;
    }
    nd->has_step = 1;
}

/* A heartbeat's or an exit report's progress keys (agent.c add_progress).
 * The waits are fractions of the time since the sample taken at least 2 s
 * before, so one beat's jitter does not swing them. */
static void take_progress(tfos_coord *c, int node, const tfos__frame *f)
{
    cnode *nd = &c->nodes[node];
    long long v;
    const char *p = f->payload;
    size_t n = f->len;
    if (tfos__kv_int(p, n, "rows_in", 0, INT64_MAX, &v))
        return; /* no feed ring */
    int64_t now = tfos__now_ms();
    nd->has_feed = 1;
    nd->rows_in = (uint64_t)v;
    if (!tfos__kv_int(p, n, "rows_out", 0, INT64_MAX, &v)) {
        if ((uint64_t)v > nd->rows_out)
            nd->rows_out_at = now;
        nd->rows_out = (uint64_t)v;
    }
    if (!tfos__kv_int(p, n, "ring_cap", 0, INT64_MAX, &v))
        nd->ring_cap = (uint64_t)v;
    if (!tfos__kv_int(p, n, "ring_used", 0, INT64_MAX, &v))
        nd->ring_used = (uint64_t)v;
    if (!tfos__kv_int(p, n, "feed_ended", 0, 1, &v))
        nd->feed_ended = (int)v;
    if (!tfos__kv_int(p, n, "reader_gone", 0, 1, &v))
        nd->reader_gone = (int)v;
    if (!tfos__kv_int(p, n, "wait_data_ns", 0, INT64_MAX, &v))
        nd->wait_data_ns = (uint64_t)v;
    if (!tfos__kv_int(p, n, "wait_room_ns", 0, INT64_MAX, &v))
        nd->wait_room_ns = (uint64_t)v;
    if (!nd->prev_at) {
        nd->prev_at = now;
        nd->prev_wait_data_ns = nd->wait_data_ns;
        nd->prev_wait_room_ns = nd->wait_room_ns;
    } else if (now - nd->prev_at >= 2000) {
        nd->wait_data = wait_fraction(nd->wait_data_ns, nd->prev_wait_data_ns, now - nd->prev_at);
        nd->wait_room = wait_fraction(nd->wait_room_ns, nd->prev_wait_room_ns, now - nd->prev_at);
        nd->prev_at = now;
        nd->prev_wait_data_ns = nd->wait_data_ns;
        nd->prev_wait_room_ns = nd->wait_room_ns;
    }
    nd->progress_at = now;
    if (!nd->at_first_io && nd->rows_out > 0)
        nd->at_first_io = now; /* the first heartbeat that saw a row taken: within its 1 s */
    char text[TFOS_RING_REPORT_MAX + 1];
    if (tfos__kv_str(p, n, "report", text, sizeof text) == 0 && tfos__report_check(text, NULL) == 0) {
        long long age = 0;
        tfos__kv_int(p, n, "report_age_ms", 0, INT64_MAX / 2, &age);
        /* a new report: other text, or the same made later (an unchanged
         * one's make time moves by the beats' latency only) */
        int fresh = strcmp(nd->report, text) != 0 || now - age > nd->report_at + 500;
        snprintf(nd->report, sizeof nd->report, "%s", text);
        nd->report_at = now - age;
        take_step(nd);
        if (fresh && c->on_report)
            c->on_report(c->report_user, node, text, age);
        if (!nd->at_first_io || nd->report_at < nd->at_first_io)
            nd->at_first_io = nd->report_at;
    }
}

/* Is node o part of an in-place cluster's membership now (not left, not
 * ended, connected)? */
static int in_membership(const cnode *o)
{
    return is_tracked(o) && !o->left && o->state != N_EXITED && o->peer;
}

/* The membership of an in-place cluster after a resize (its generation
 * c->generation, why): rank 0 is c->master (its host and reserved port are
 * MASTER_ADDR/PORT), the others in executor order. `joiner` (a worker that
 * joined into a left slot; -1: none) is sent its cluster spec, with the
 * generation, and starts its program in it; with `members`, each of the
 * others is sent RESIZE with its new rank. The world size. */
static int send_membership(tfos_coord *c, const char *why, int joiner, int members)
{
    const cnode *m = &c->nodes[c->master];
    char master[TFOS_HOST_MAX + 16];
    tfos__format_hostport(master, sizeof master, m->addr.host, m->addr.port);
    int live = 0, rank = 1;
    for (int i = 0; i < c->n; i++)
        live += in_membership(&c->nodes[i]);
    for (int i = 0; i < c->n; i++) {
        cnode *o = &c->nodes[i];
        if (!in_membership(o))
            continue;
        int r = i == c->master ? 0 : rank++;
        if (i == joiner) {
            tfos__spec_ranks rk = {.nodes = c->n, .world = live, .rank = r, .local_rank = o->local_rank,
                                   .local_world = o->local_world, .master = c->master};
            send_rank_spec(c, i, &rk, c->generation);
            continue;
        }
        if (!members)
            continue;
        o->join_pending = 0; /* a joiner told to wait is told this membership instead */
        tfos__msg msg;
        tfos__msg_begin(&msg, TFOS_MSG_RESIZE);
        tfos__msg_add(&msg, "generation", "%d", c->generation);
        tfos__msg_add(&msg, "rank", "%d", r);
        tfos__msg_add(&msg, "world", "%d", live);
        tfos__msg_add(&msg, "master", "%s", master);
        tfos__msg_add(&msg, "reason", "%.250s", why);
        send_msg(c, o->peer, &msg);
    }
    if (members)
        TFOS_WARN("coordinator: %s: %d worker%s go on in place at world size %d (generation %d, rank 0 at %s)", why,
                  live, live == 1 ? "" : "s", live, c->generation, master);
    return live;
}

/* The restart policy's history: an in-place resize from `from` to `to`
 * nodes (no restart spent), and the launcher told (node: the one lost or
 * joined). */
static void record_resize(tfos_coord *c, int node, int from, int to, const char *why)
{
    tfos_failure f = {.cause = TFOS_CAUSE_STOPPED, .executor_id = -1, .exit_code = -1, .time = (double)time(NULL)};
    snprintf(f.summary, sizeof f.summary, "resized in place from %d to %d nodes: %.400s", from, to, why);
    if (c->opts.policy)
        tfos_policy_resize(c->opts.policy, &f);
    if (c->on_resize)
        c->on_resize(c->resize_user, node, from, to, f.summary);
}

/* An elastic torch cluster (opts.inplace_min > 0: workers only, the ranks
 * spec form): worker nd is lost (why). When at least inplace_min workers
 * are left, the cluster goes on without it, in place: nd has left, the
 * others are renumbered (send_membership; rank 0 stays rank 0 while it
 * lives) and their programs re-form their process group from memory
 * (tfos.torch.ElasticGroup). Nothing is failed and nothing restarted: the
 * policy's history has a resize. 1 when it went on so; 0: a failure as
 * ever. */
static int resize_in_place(tfos_coord *c, cnode *nd, const char *why)
{
    if (c->opts.inplace_min <= 0 || c->state != TFOS_COORD_RUNNING || c->draining || nd->left ||
        strcmp(nd->addr.job, "worker"))
        return 0;
    int live = 0, first = -1;
    for (int i = 0; i < c->n; i++) {
        const cnode *o = &c->nodes[i];
        if (o != nd && in_membership(o)) {
            live++;
            if (first < 0)
                first = i;
        }
    }
    if (live < c->opts.inplace_min || first < 0)
        return 0;
    int from = c->n - c->left_count; /* a workers-only cluster: all its nodes are workers */
    nd->left = 1;
    c->left_count++;
    c->generation++;
    if (c->master < 0 || c->nodes[c->master].left || c->nodes[c->master].state == N_EXITED)
        c->master = first;
    send_membership(c, why, -1, 1); /* nd has left: not in it */
    record_resize(c, nd->addr.executor_id, from, live, why);
    return 1;
}

/* Why the cluster grew in place with node nd, in buf. */
static const char *join_reason(const cnode *nd, char *buf, size_t len)
{
    char label[48];
    snprintf(buf, len, "%s (executor %d, host %.200s) joined where the capacity of a lost worker came back",
             node_label(nd, label, sizeof label), nd->addr.executor_id, nd->addr.host);
    return buf;
}

/* A worker registers into the slot of one that left (tfos run
 * --grow-in-place: the launcher started it with `tfos node --join` where
 * the lost one's capacity came back): the cluster grows in place. The
 * joiner gets its spec at the next generation (its program forms the
 * group there: tfos.torch.ElasticGroup); once its program is ready to form
 * (join_ready) the members get RESIZE to the larger world, and their
 * programs re-form at their next step boundary (group.resized()), taking
 * their state from rank 0 as after a loss. 0, or a refusal's message in
 * msg. */
static int join_in_place(tfos_coord *c, peer *p, cnode *nd, const char *host, int port, int pid, char *msg,
                         size_t len)
{
    char label[48];
    node_label(nd, label, sizeof label);
    if (c->opts.inplace_min <= 0 || c->state != TFOS_COORD_RUNNING || c->draining || !nd->left) {
        snprintf(msg, len, "executor %d (%s) cannot join in place: %s", nd->addr.executor_id, label,
                 c->opts.inplace_min <= 0 ? "this cluster does not resize in place"
                 : c->state != TFOS_COORD_RUNNING ? "the cluster is not running"
                 : c->draining ? "the cluster is draining"
                               : "that node has not left the cluster");
        return 1;
    }
    if (nd->peer) { /* the lost agent's connection, not yet ended: it has no slot any more */
        nd->peer->node = -1;
        finish_peer(nd->peer);
    }
    int from = c->n - c->left_count;
    snprintf(nd->addr.host, sizeof nd->addr.host, "%s", host);
    nd->addr.port = port;
    nd->agent_pid = pid;
    nd->prog_pid = 0;
    nd->left = 0;
    nd->joined = 1;
    nd->state = N_REGISTERED;
    nd->exit_code = -1;
    nd->exit_desc[0] = nd->tail[0] = nd->report[0] = nd->log_error[0] = '\0';
    nd->stop_sent = nd->has_step = nd->has_feed = nd->feed_ended = nd->reader_gone = 0;
    nd->raised_at = nd->ended_at = 0;
    nd->last_heartbeat = tfos__now_ms(); /* its start stamps stay the cluster's formation's (start telemetry) */
    nd->peer = p;
    p->node = nd->addr.executor_id;
    c->left_count--;
    c->generation++;
    if (c->done_scan > nd->addr.executor_id) /* check_done's cursor had passed the left slot */
        c->done_scan = nd->addr.executor_id;
    char why[400];
    join_reason(nd, why, sizeof why);
    /* the others go on until its program is ready to form the group
     * (join_ready): they do not wait out its start */
    int live = send_membership(c, why, nd->addr.executor_id, 0);
    nd->join_pending = 1;
    TFOS_INFO("coordinator: %s: its program starts in a world of %d (generation %d); the others re-form with it "
              "once it is ready", why, live, c->generation);
    record_resize(c, nd->addr.executor_id, from, live, why);
    return 0;
}

/* nd's program failed by itself (cause): the failure, with its last lines. */
static void node_failed(tfos_coord *c, const cnode *nd, int cause, const char *const *lines, int nlines)
{
    char label[48], pid[32] = "";
    node_label(nd, label, sizeof label);
    if (nd->prog_pid > 0) /* 0: the program never started */
        snprintf(pid, sizeof pid, ", pid %d", nd->prog_pid);
    /* a program that never started has no lines of its own: its agent's
     * reason is the description, said once */
    if (cause == TFOS_CAUSE_START && !nd->tail[0])
        set_failure(c, cause, nd, NULL, 0, "%s (executor %d, host %s) failed: %s", label, nd->addr.executor_id,
                    nd->addr.host, nd->exit_desc);
    else
        set_failure(c, cause, nd, lines, nlines, "%s (executor %d, host %s%s) failed: %s\nlast lines of %s:\n%s",
                    label, nd->addr.executor_id, nd->addr.host, pid, nd->exit_desc, label,
                    nd->tail[0] ? nd->tail : "  | (no output)\n");
}

/* Did nd, whose program failed while the cluster was stopping after another
 * node's failure, fail before that node? Then its failure is the one to
 * report: the other most likely followed from it (a peer's collective
 * broken by its end), and only its report came first. A failure counts
 * when it was the program's own: its agent had not been asked to stop it,
 * or the program caught it (TFOS_ERROR_FILE) before. Like is compared with
 * like: the times the two programs caught their failures where both wrote
 * one, else the times their agents saw them end (a catch time is early by
 * an agent's wake-up against a seen end: a peer's quick catch would seem to
 * precede the kill that caused it). Dated by the agents' clocks
 * (docs/RELIABILITY.md, "Which failure is reported"). Returns by how many
 * seconds it came first; 0: it did not. */
static double came_first(const tfos_coord *c, const cnode *nd, int cause, int stopped)
{
    const cnode *was = c->failed_node;
    int ended = c->info.cause == TFOS_CAUSE_EXIT || c->info.cause == TFOS_CAUSE_SIGNAL ||
                c->info.cause == TFOS_CAUSE_HANG;
    if (!c->failed || !was || was == nd || !ended || (cause != TFOS_CAUSE_EXIT && cause != TFOS_CAUSE_SIGNAL))
        return 0;
    if (stopped && nd->raised_at <= 0)
        return 0;
    int raised = nd->raised_at > 0 && was->raised_at > 0;
    double mine = raised ? nd->raised_at : nd->ended_at, theirs = raised ? was->raised_at : was->ended_at;
    return mine > 0 && theirs > 0 && mine < theirs ? theirs - mine : 0;
}

static void handle_exited(tfos_coord *c, peer *p, const tfos__frame *f)
{
    if (p->node < 0)
        return;
    cnode *nd = &c->nodes[p->node];
    take_progress(c, p->node, f);
    long long code = -1;
    tfos__kv_int(f->payload, f->len, "code", -1, 1 << 16, &code);
    nd->exit_code = (int)code;
    if (tfos__kv_str(f->payload, f->len, "desc", nd->exit_desc, sizeof nd->exit_desc))
        snprintf(nd->exit_desc, sizeof nd->exit_desc, "exit code %lld", code);
    /* gather tail lines: as text for people, and as lines for the traceback parser */
    size_t pos = 0, kl, vl, tl = 0;
    const char *k, *v;
    const char *lines[TFOS_FAILURE_TAIL_LINES];
    char copies[TFOS_FAILURE_TAIL_LINES][320];
    int nlines = 0;
    nd->tail[0] = '\0';
    while (tfos__kv_next(f->payload, f->len, &pos, &k, &kl, &v, &vl) == 0) {
        if (kl != 4 || memcmp(k, "tail", 4))
            continue;
        if (nlines < TFOS_FAILURE_TAIL_LINES) {
            snprintf(copies[nlines], sizeof copies[nlines], "%.*s", (int)vl, v);
            lines[nlines] = copies[nlines];
            nlines++;
        }
        int w = snprintf(nd->tail + tl, sizeof nd->tail - tl, "  | %.*s\n", (int)vl, v);
        if (w < 0 || (size_t)w >= sizeof nd->tail - tl)
            break;
        tl += (size_t)w;
    }
    int was_running = nd->state != N_EXITED;
    nd->state = N_EXITED;
    char label[48];
    node_label(nd, label, sizeof label);
    char at[32] = "";
    nd->raised_at = tfos__kv_str(f->payload, f->len, "raised_at", at, sizeof at) == 0 ? strtod(at, NULL) : 0;
    nd->ended_at = tfos__kv_str(f->payload, f->len, "ended_at", at, sizeof at) == 0 ? strtod(at, NULL) : 0;
    if (!was_running || c->state >= TFOS_COORD_DONE) /* over: a late agent only updates its node */
        return;
    /* A node that failed by itself (its agent had not been asked to stop
     * it) is a failure whatever the timing: also while the others are being
     * stopped because the trainers finished (a ps that cannot start, seen
     * just after a quick worker ended, fails the run as it would a moment
     * earlier). One stopped on request ends as it may, and so does one
     * whose agent does not say (an agent before "stopped" was sent). */
    long long stopped = 1;
    tfos__kv_int(f->payload, f->len, "stopped", 0, 1, &stopped);
    int failed_itself = code != 0 && !stopped && !c->failed;
    if ((c->state == TFOS_COORD_RUNNING && (code != 0 || !is_tracked(nd))) ||
        (c->state == TFOS_COORD_STOPPING && failed_itself)) {
        char why[1024];
        snprintf(why, sizeof why, "%s (executor %d, host %s) failed: %s", label, nd->addr.executor_id,
                 nd->addr.host, nd->exit_desc);
        if (code != 0 && nd->joined && done_but_joiners(c) >= 0) {
            /* it joined too late: the others finished the work without it */
            nd->left = 1;
            TFOS_WARN("coordinator: %s, which joined in place, ended (%s) after the others finished without "
                      "re-forming their group with it (their last ElasticGroup.resized() came before it joined): "
                      "not a failure", label, nd->exit_desc);
            check_done(c);
            return;
        }
        if (code != 0 && resize_in_place(c, nd, why)) {
            if (nd->tail[0])
                TFOS_WARN("coordinator: last lines of %s:\n%s", label, nd->tail);
            check_done(c);
            return;
        }
        if (code != 0) {
            node_failed(c, nd, exit_cause(f, code), lines, nlines);
            if (c->state == TFOS_COORD_STOPPING)
                return; /* the stop under way ends the cluster, now FAILED */
        } else {
            set_failure(c, TFOS_CAUSE_PS_EXITED, nd, NULL, 0, "%s (executor %d, host %s) exited before training "
                        "finished (%s); ps nodes must run until the workers are done",
                        label, nd->addr.executor_id, nd->addr.host, nd->exit_desc);
        }
        enter_stopping(c);
        return;
    }
    double before = code != 0 && c->state == TFOS_COORD_STOPPING ? came_first(c, nd, exit_cause(f, code), (int)stopped)
                                                                   : 0;
    if (before > 0) {
        char was[48];
        node_label(c->failed_node, was, sizeof was);
        if (c->decided)
            tfos_policy_retract(c->opts.policy);
        c->failed = 0;
        node_failed(c, nd, exit_cause(f, code), lines, nlines);
        TFOS_ERROR("coordinator: %s, %.3f s before %s's failure, which was reported first: that one most likely "
                   "followed from this one", c->info.summary, before, was);
    } else if (c->failed && c->info.cause == TFOS_CAUSE_START && code != 0 &&
               exit_cause(f, code) == TFOS_CAUSE_START)
        TFOS_INFO("coordinator: %s could not start either", label); /* the reason is said once */
    else
        TFOS_INFO("coordinator: %s %s: %s", label, c->state == TFOS_COORD_STOPPING ? "stopped" : "finished",
                  nd->exit_desc);
    check_done(c);
}

/* Answer a client with the status JSON, then drop it once that is sent. */
static void send_status(tfos_coord *c, peer *p)
{
    char *json = tfos_coord_status_json(c);
    tfos__msg m;
    tfos__msg_begin(&m, TFOS_MSG_STATUS);
    tfos__msg_add(&m, "json", "%s", json ? json : "{}");
    free(json);
    send_msg(c, p, &m);
    finish_peer(p);
}

/* A node task could not start its node: that node will never register (or
 * run), so the cluster has failed. Recorded, logged, and the cluster stopped
 * whether it is reserving or running; answered with STATUS. */
static void handle_abort(tfos_coord *c, peer *p, const tfos__frame *f)
{
    if (!peer_authed(c, p, f, "abort report"))
        return;
    long long id;
    if (tfos__kv_int(f->payload, f->len, "executor_id", 0, 1 << 20, &id) || id >= c->n) {
        char msg[160];
        snprintf(msg, sizeof msg, "invalid abort report: executor_id is missing or not in 0..%d", c->n - 1);
        refuse(c, p, TFOS_EINVAL, msg);
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
        set_failure(c, TFOS_CAUSE_SETUP, nd, NULL, 0, "%s (executor %lld) could not start: %s", label, id, text);
        stop_cluster(c, TFOS_EFAILED, c->failure);
    } else {
        const char *nl = strchr(text, '\n');
        TFOS_WARN("coordinator: %s (executor %lld) could not start: %.*s (the cluster is already %s)", label, id,
                  nl ? (int)(nl - text) : (int)strlen(text), text,
                  c->state == TFOS_COORD_STOPPING ? "stopping" : "over");
    }
    send_status(c, p);
}

static void end_feed(tfos_coord *c);

/* PROGRESS to a node's agent: its heartbeat now, not at the next beat (a
 * drain's probe, a feed turn's). The node must have a peer. */
static void ask_progress(tfos_coord *c, cnode *nd, int64_t now)
{
    tfos__msg m;
    tfos__msg_begin(&m, TFOS_MSG_PROGRESS);
    send_msg(c, peer_of(nd), &m);
    nd->progress_asked_at = now;
}

enum { TURN_PROGRESS_MS = 5 }; /* handle_turn: a node is sent PROGRESS at most this often */

/* A feed task asks whether its node's turn has come to begin a partition
 * (core/turns.h): stage, nparts, nfed, partition, node, nodes (comma
 * separated). The nodes' heartbeats say who reads (and PROGRESS asks for
 * one at once). Answered with a STATUS whose json says go, or whom it
 * waits for. Not the client's lease: feed tasks ask, not the driver. */
static void handle_turn(tfos_coord *c, peer *p, const tfos__frame *f)
{
    char stage[TFOS_TURNS_STAGE_MAX + 1] = "", list[TFOS_WIRE_MAX_PAYLOAD / 2];
    long long nparts = 0, nfed = 0, part = 0, node = 0;
    int nodes[TFOS_TURNS_MAX_NODES], nn = 0;
    const char *bad = NULL;
    if (tfos__kv_str(f->payload, f->len, "stage", stage, sizeof stage) || !stage[0])
        bad = "no stage, or one over 64 bytes";
    else if (tfos__kv_int(f->payload, f->len, "nparts", 1, TFOS_TURNS_MAX_PARTS, &nparts) ||
             tfos__kv_int(f->payload, f->len, "nfed", 0, nparts, &nfed) ||
             tfos__kv_int(f->payload, f->len, "partition", 0, nparts - 1, &part) ||
             tfos__kv_int(f->payload, f->len, "node", 0, c->n - 1, &node))
        bad = "nparts, nfed, partition or node missing or out of range";
    else if (tfos__kv_str(f->payload, f->len, "nodes", list, sizeof list))
        bad = "no nodes";
    for (char *q = list; !bad && *q;) {
        char *end;
        long v = strtol(q, &end, 10);
        if (end == q || v < 0 || v >= c->n || nn == TFOS_TURNS_MAX_NODES || (*end && *end != ','))
            bad = "nodes is not a list of this cluster's node ids";
        else
            nodes[nn++] = (int)v;
        q = *end ? end + 1 : end;
    }
    if (!bad && !nn)
        bad = "no nodes";
    if (bad) {
        char msg[160];
        snprintf(msg, sizeof msg, "invalid feed turn request: %s", bad);
        refuse(c, p, TFOS_EINVAL, msg);
        return;
    }
    /* what the heartbeats said of each node's feed */
    tfos__turn_node *info = malloc(sizeof *info * (size_t)nn);
    int64_t now = tfos__now_ms();
    for (int i = 0; info && i < nn; i++) {
        const cnode *x = &c->nodes[nodes[i]];
        info[i].rows_out = x->rows_out;
        info[i].unread = x->rows_in > x->rows_out;
        info[i].idle_ms = x->rows_out_at ? now - x->rows_out_at : -1;
        info[i].gone = x->state == N_EXITED || x->left || x->reader_gone;
    }
    tfos__turn t = {.go = 1, .behind_node = -1};
    if (!c->turns)
        c->turns = tfos__turns_new();
    if (c->turns && info) /* out of memory: it goes */
        tfos__turns_ask(c->turns, stage, (int)nparts, (int)nfed, nodes, nn, info, (int)part, (int)node, &t);
    free(info);
    /* Held for a node not heard to read this job: the heartbeats say so
     * once a second, and a job over a cached RDD may be over within one.
     * That node's agent is asked to say it now (at most every
     * TURN_PROGRESS_MS); the task asks again soon after ("asked"), and goes
     * if it now reads (one ahead of it is allowed). */
    int asked = 0;
    if (!t.go && !t.behind_reads && t.behind_node >= 0 && t.behind_node < c->n) {
        cnode *x = &c->nodes[t.behind_node];
        if (x->peer && x->state != N_EXITED) {
            if (now - x->progress_asked_at >= TURN_PROGRESS_MS)
                ask_progress(c, x, now);
            asked = 1;
        }
    }
    char json[260];
    snprintf(json, sizeof json, "{\"go\": %s, \"begun\": %d, \"behind\": %d, \"behind_begun\": %d, "
             "\"behind_reads\": %s, \"unbegun\": %d, \"asked\": %s}", t.go ? "true" : "false", t.begun,
             t.behind_node, t.behind_begun, t.behind_reads ? "true" : "false", t.unbegun, asked ? "true" : "false");
    tfos__msg m;
    tfos__msg_begin(&m, TFOS_MSG_STATUS);
    tfos__msg_add(&m, "go", "%d", t.go); /* the decision as a field; the json says why, for people */
    tfos__msg_add(&m, "json", "%s", json);
    send_msg(c, p, &m);
    finish_peer(p);
}

/* A status query, with the command it may carry (tfos_coord_command): done,
 * then answered with STATUS. Every authenticated query renews the client's
 * lease (a feed turn's does not: handle_turn). */
static void handle_query(tfos_coord *c, peer *p, const tfos__frame *f)
{
    if (!peer_authed(c, p, f, "status query"))
        return;
    char cmd[32] = "";
    tfos__kv_str(f->payload, f->len, "command", cmd, sizeof cmd);
    if (!strcmp(cmd, "feed_turn")) {
        handle_turn(c, p, f);
        return;
    }
    c->last_query = tfos__now_ms();
    if (!strcmp(cmd, "end_feed")) {
        end_feed(c);
    } else if (!strcmp(cmd, "stop")) {
        char reason[1024] = "";
        tfos__kv_str(f->payload, f->len, "reason", reason, sizeof reason);
        if (c->state < TFOS_COORD_DONE) {
            set_failure(c, TFOS_CAUSE_STOPPED, NULL, NULL, 0, "%s", reason[0] ? reason : "stopped by the client");
            TFOS_WARN("coordinator: stopping: %s", c->failure);
            stop_cluster(c, TFOS_ESTOPPED, c->failure);
        }
    } else if (!strcmp(cmd, "release")) {
        c->released = 1;
    } else if (!strcmp(cmd, "drain")) {
        /* a client that cannot call tfos_coord_drain itself (a Spark Connect
         * feed task that found capacity come back), with the default grace.
         * A drain that cannot start (one under way, no program yet, the
         * cluster over) is no error: the status says how it stands */
        char reason[256] = "";
        tfos__kv_str(f->payload, f->len, "reason", reason, sizeof reason);
        if (tfos_coord_drain(c, reason[0] ? reason : "asked by a client", 0, 0) == 0)
            TFOS_INFO("coordinator: a client asked for a drain (%s)", c->drain_reason);
    } else if (cmd[0]) {
        char msg[96];
        snprintf(msg, sizeof msg, "unknown command '%s' (end_feed, stop, release, drain, feed_turn)", cmd);
        refuse(c, p, TFOS_EINVAL, msg);
        return;
    }
    send_status(c, p);
}

/* Returns NULL to keep the peer, or a reason to drop it. */
static const char *handle_frame(tfos_coord *c, peer *p, const tfos__frame *f)
{
    if (!p->authed) {
        if (f->type == TFOS_MSG_REGISTER)
            handle_register(c, p, f);
        else if (f->type == TFOS_MSG_QUERY)
            handle_query(c, p, f);
        else if (f->type == TFOS_MSG_ABORT)
            handle_abort(c, p, f);
        else
            return "first message was not an authenticated REGISTER, QUERY or ABORT";
        return NULL;
    }
    if (p->node < 0)
        return p->standby ? "a standby node sends nothing after its registration"
                          : "unexpected message from a status client";
    cnode *nd = &c->nodes[p->node];
    switch (f->type) {
    case TFOS_MSG_HEARTBEAT: {
        nd->last_heartbeat = tfos__now_ms();
        long long ready = 0;
        if (nd->join_pending && c->state == TFOS_COORD_RUNNING &&
            !tfos__kv_int(f->payload, f->len, "join_ready", 0, 1, &ready) && ready) {
            /* the joiner's program is about to form its group: the others
             * re-form with it at their next step */
            char why[400];
            nd->join_pending = 0;
            send_membership(c, join_reason(nd, why, sizeof why), -1, 1);
        }
        take_progress(c, p->node, f);
        if (c->probing)
            check_probe(c, 0);
        return NULL;
    }
    case TFOS_MSG_STARTED: {
        long long pid = 0;
        tfos__kv_int(f->payload, f->len, "pid", 1, 1LL << 31, &pid);
        nd->prog_pid = (int)pid;
        nd->started_at = tfos__now_ms();
        if (!nd->at_program)
            nd->at_program = tfos__now_ms();
        if (nd->state == N_REGISTERED)
            nd->state = N_RUNNING;
        nd->last_heartbeat = tfos__now_ms();
        return NULL;
    }
    case TFOS_MSG_EXITED:
        handle_exited(c, p, f);
        return NULL;
    case TFOS_MSG_LOG:
        if (c->opts.on_log) {
            char line[9000] = "", dropped[32] = "0", label[48];
            tfos__kv_str(f->payload, f->len, "line", line, sizeof line);
            tfos__kv_str(f->payload, f->len, "dropped", dropped, sizeof dropped);
            c->opts.on_log(c->opts.log_user, node_label(nd, label, sizeof label), line, strtoull(dropped, NULL, 10));
        }
        return NULL;
    case TFOS_MSG_LOG_ERROR:
        if (!nd->log_error[0]) {
            char label[48];
            tfos__kv_str(f->payload, f->len, "message", nd->log_error, sizeof nd->log_error);
            TFOS_WARN("coordinator: %s %s", node_label(nd, label, sizeof label), nd->log_error);
        }
        return NULL;
    case TFOS_MSG_ERROR: {
        char text[512] = "";
        tfos__kv_str(f->payload, f->len, "message", text, sizeof text);
        char label[48];
        node_label(nd, label, sizeof label);
        if (c->state == TFOS_COORD_RUNNING || c->state == TFOS_COORD_RESERVING) {
            set_failure(c, TFOS_CAUSE_SETUP, nd, NULL, 0, "%s (executor %d, host %s): %s", label,
                        nd->addr.executor_id, nd->addr.host, text);
            enter_stopping(c);
        }
        return NULL;
    }
    default:
        return "unexpected message type from an agent";
    }
}

/* A frame from a peer: its first (the link is not yet authenticated: a
 * REGISTER, QUERY or ABORT must authenticate it) or a later one. */
static void on_peer_frame(tfos__link *k, const tfos__frame *f, void *user)
{
    tfos_coord *c = user;
    peer *p = tfos__link_data(k);
    if (!p) {
        if (c->npeers >= c->n + EXTRA_PEERS + c->opts.standby) {
            tfos__warn_limited(&c->warn, "refused %s: too many connections", tfos__link_name(k));
            tfos__link_close(k);
            return;
        }
        if (!(p = calloc(1, sizeof *p))) {
            tfos__link_close(k);
            return;
        }
        p->link = k;
        p->node = -1;
        snprintf(p->name, sizeof p->name, "%s", tfos__link_name(k));
        tfos__link_set_data(k, p);
        c->peers[c->npeers++] = p;
    }
    if (!p->closing) {
        const char *drop = handle_frame(c, p, f);
        if (drop)
            drop_peer(c, p, drop);
    }
    bury(c);
    schedule(c);
}

/* A link ended on its own: a peer that never sent a frame (refused, late,
 * evicted, broken), or one of ours (hung up, broke the protocol, or said
 * its last word). An authenticated peer that hangs up is not worth a line. */
static void on_peer_close(tfos__link *k, int rc, const char *why, void *user)
{
    tfos_coord *c = user;
    peer *p = tfos__link_data(k);
    if (!p) {
        if (why)
            tfos__warn_limited(&c->warn, "dropped peer %s: %s", tfos__link_name(k), why);
    } else {
        p->link = NULL;
        drop_peer(c, p, p->authed && rc == TFOS_ECLOSED ? NULL : why);
    }
    bury(c);
    schedule(c);
}

/* The client's lease (opts.lease_timeout) counts while the cluster forms or
 * runs. */
static int lease_running(const tfos_coord *c)
{
    return c->opts.lease_timeout > 0 && (c->state == TFOS_COORD_RESERVING || c->state == TFOS_COORD_RUNNING);
}

static int64_t lease_deadline(const tfos_coord *c)
{
    return c->last_query + (int64_t)(c->opts.lease_timeout * 1000);
}

/* Every deadline the coordinator keeps; arms nothing, acts on what is due. */
static void check_timers(tfos_coord *c)
{
    int64_t now = tfos__now_ms();
    tfos__warn_limit_flush(&c->warn, 0);
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
        set_failure(c, TFOS_CAUSE_RESERVATION, NULL, NULL, 0,
                    "reservation timed out after %g s: %d of %d nodes registered; missing: %s",
                    c->opts.reservation_timeout, c->registered, c->n, missing);
        for (int i = 0; i < c->n; i++)
            if (c->nodes[i].peer)
                send_error(c, c->nodes[i].peer, TFOS_ETIMEDOUT, c->failure);
        c->state = TFOS_COORD_STOPPING;
        c->stop_deadline = now + 5000;
    }
    if (lease_running(c) && now >= lease_deadline(c)) {
        set_failure(c, TFOS_CAUSE_STOPPED, NULL, NULL, 0,
                    "the client's lease ran out: no word from it for %g s (it was killed, or lost its "
                    "connection to the cluster); the cluster is stopped", c->opts.lease_timeout);
        TFOS_WARN("coordinator: stopping: %s", c->failure);
        stop_cluster(c, TFOS_ESTOPPED, c->failure);
    }
    if (c->state == TFOS_COORD_RUNNING && c->joiners_deadline && now >= c->joiners_deadline)
        check_done(c);
    if (c->state == TFOS_COORD_RUNNING && c->opts.heartbeat_timeout > 0 && now >= c->hb_check_at) {
        c->hb_check_at = now + hb_period(c);
        for (int i = 0; i < c->n; i++) {
            cnode *nd = &c->nodes[i];
            if (nd->state == N_EXITED || !nd->peer)
                continue;
            if (now - nd->last_heartbeat >= (int64_t)(c->opts.heartbeat_timeout * 1000)) {
                char label[48], why[512];
                snprintf(why, sizeof why, "%s (executor %d, host %s) sent no heartbeat for %g s: its agent hangs "
                         "or the host is unreachable", node_label(nd, label, sizeof label), nd->addr.executor_id,
                         nd->addr.host, c->opts.heartbeat_timeout);
                if (resize_in_place(c, nd, why)) {
                    /* gone from the cluster (exited first: its connection's
                     * end is then no loss); an agent that wakes finds its
                     * connection closed and stops its program */
                    nd->state = N_EXITED;
                    nd->exit_code = -1;
                    snprintf(nd->exit_desc, sizeof nd->exit_desc, "no heartbeat");
                    drop_peer(c, nd->peer, "left the cluster: no heartbeat");
                    nd->peer = NULL;
                    check_done(c);
                    continue;
                }
                set_failure(c, TFOS_CAUSE_HEARTBEAT, nd, NULL, 0, "%s", why);
                enter_stopping(c);
                break;
            }
        }
    }
    if (c->probing && now >= c->probe_deadline)
        check_probe(c, 1);
    if (c->state == TFOS_COORD_RUNNING && c->draining && now >= c->drain_deadline) {
        char left[2048];
        size_t ll = 0;
        for (int i = 0; i < c->n && ll < sizeof left - 64; i++) {
            const cnode *nd = &c->nodes[i];
            if (!is_tracked(nd) || nd->state == N_EXITED)
                continue;
            char label[48];
            int w = snprintf(left + ll, sizeof left - ll, "%s%s", ll ? ", " : "", node_label(nd, label, sizeof label));
            if (w > 0)
                ll += (size_t)w;
        }
        set_failure(c, TFOS_CAUSE_STOPPED, NULL, NULL, 0,
                    "drain (%s): the grace of %.0f s ended with %s still running, not at the drain step: stopped; "
                    "the run falls back to its last checkpoint", c->drain_reason,
                    (double)(c->drain_deadline - c->drain_at) / 1000.0, ll ? left : "(none)");
        TFOS_WARN("coordinator: %s", c->failure);
        enter_stopping(c);
    }
    if (c->state == TFOS_COORD_STOPPING) {
        int live = 0;
        for (int i = 0; i < c->n; i++)
            if (c->nodes[i].state != N_EXITED && c->nodes[i].peer)
                live++;
        if (live && now >= c->stop_deadline) {
            TFOS_WARN("coordinator: %d agent(s) did not confirm the stop in time; giving up on them", live);
            live = 0;
        }
        if (!live) {
            c->state = c->failed ? TFOS_COORD_FAILED : TFOS_COORD_DONE;
        }
    }
}

static void on_timer(tfos__loop *l, tfos__timer *t, void *user)
{
    (void)l;
    (void)t;
    tfos_coord *c = user;
    check_timers(c);
    bury(c);
    schedule(c);
}

/* How often the heartbeats are checked: every node's at once, a tenth of
 * the timeout (1 s at most) apart, so a node is found silent at most that
 * late. Not after every frame: a scan of every node per frame made a
 * cluster's heartbeats cost O(N^2) a second (16,384 simulated nodes kept
 * the coordinator busy for seconds after they formed). */
static int64_t hb_period(const tfos_coord *c)
{
    int64_t p = (int64_t)(c->opts.heartbeat_timeout * 100);
    return p < 1 ? 1 : p > 1000 ? 1000 : p;
}

/* Arm the one timer for the earliest deadline, or act now when one is due
 * (the STOPPING state ends as soon as its last agent is gone). */
static void schedule(tfos_coord *c)
{
    if (c->state == TFOS_COORD_STOPPING) {
        int live = 0;
        for (int i = 0; i < c->n; i++)
            live += c->nodes[i].state != N_EXITED && c->nodes[i].peer;
        if (!live) {
            check_timers(c);
            bury(c);
        }
    }
    int64_t at = INT64_MAX;
    if (c->state == TFOS_COORD_RESERVING && c->reserve_deadline < at)
        at = c->reserve_deadline;
    if (tfos__warn_limit_due(&c->warn) < at)
        at = tfos__warn_limit_due(&c->warn);
    if (c->state == TFOS_COORD_STOPPING && c->stop_deadline < at)
        at = c->stop_deadline;
    if (c->state == TFOS_COORD_RUNNING && c->draining && c->drain_deadline < at)
        at = c->drain_deadline;
    if (c->probing && c->probe_deadline < at)
        at = c->probe_deadline;
    if (lease_running(c) && lease_deadline(c) < at)
        at = lease_deadline(c);
    if (c->state == TFOS_COORD_RUNNING && c->opts.heartbeat_timeout > 0 && c->hb_check_at < at)
        at = c->hb_check_at;
    if (c->state == TFOS_COORD_RUNNING && c->joiners_deadline && c->joiners_deadline < at)
        at = c->joiners_deadline;
    if (at == INT64_MAX)
        tfos__timer_disarm(c->loop, &c->timer);
    else
        tfos__timer_arm(c->loop, &c->timer, at, on_timer, c);
}

int tfos__coord_open_on(tfos_coord **out, const tfos_coord_opts *opts, tfos__loop *loop)
{
    if (!out || !opts || !opts->secret || !*opts->secret)
        return TFOS_EINVAL;
    int n = tfos_layout_total(&opts->layout);
    if (n <= 0 || opts->layout.num_ps < 0 || opts->layout.num_workers < 0 || n > TFOS_MAX_NODES)
        return TFOS_EINVAL;
    tfos_coord *c = calloc(1, sizeof *c);
    if (!c)
        return TFOS_ENOMEM;
    c->opts = *opts;
    c->opened_at = tfos__now_ms();
    c->warn = (tfos__warn_limit){.who = "coordinator", .per_window = WARN_PER_WINDOW, .window_ms = WARN_WINDOW_MS};
    if (!c->opts.bind_host)
        c->opts.bind_host = "127.0.0.1";
    if (c->opts.standby < 0 || c->opts.standby > TFOS_MAX_NODES)
        c->opts.standby = 0;
    if (c->opts.reservation_timeout <= 0)
        c->opts.reservation_timeout = TFOS_DEFAULT_RESERVATION_TIMEOUT_SPARK;
    if (c->opts.stop_grace <= 0)
        c->opts.stop_grace = TFOS_DEFAULT_STOP_GRACE;
    if (c->opts.failure_grace < 0)
        c->opts.failure_grace = 0;
    if (c->opts.lease_timeout < 0)
        c->opts.lease_timeout = 0;
    if (c->opts.heartbeat_timeout == 0)
        c->opts.heartbeat_timeout = TFOS_DEFAULT_HEARTBEAT_TIMEOUT;
    if (c->opts.policy)
        c->opts.attempt = tfos_policy_attempt(c->opts.policy);
    if (c->opts.attempt <= 0)
        c->opts.attempt = 1;
    int rc = TFOS_ENOMEM;
    c->secret = strdup(opts->secret);
    c->checkpoint_dir = opts->checkpoint_dir ? strdup(opts->checkpoint_dir) : NULL;
    c->nodes = calloc((size_t)n, sizeof *c->nodes);
    c->peers = calloc((size_t)n + EXTRA_PEERS + (size_t)c->opts.standby, sizeof *c->peers);
    c->standby_ids = calloc((size_t)c->opts.standby + 1, sizeof *c->standby_ids);
    if (!c->secret || !c->nodes || !c->peers || !c->standby_ids || (opts->checkpoint_dir && !c->checkpoint_dir))
        goto fail;
    c->opts.secret = c->secret;
    c->opts.checkpoint_dir = c->checkpoint_dir;
    c->n = n;
    c->master = 0; /* rank 0 of a workers-only cluster (opts.inplace_min) */
    for (int i = 0; i < n; i++) {
        const char *job;
        tfos_layout_role(&opts->layout, i, &job, &c->nodes[i].addr.index);
        snprintf(c->nodes[i].addr.job, sizeof c->nodes[i].addr.job, "%s", job);
        c->nodes[i].addr.executor_id = i;
        c->nodes[i].exit_code = -1;
    }
    if (loop) {
        c->loop = loop;
    } else {
        if ((rc = tfos__loop_open(&c->loop)))
            goto fail;
        c->own_loop = 1;
    }
    char addr[TFOS_HOST_MAX + 16], err[300];
    tfos__format_hostport(addr, sizeof addr, c->opts.bind_host, opts->port);
    tfos__listen_opts lo = {.addr = addr, .backlog = BACKLOG, .max_pending = UNAUTH_MAX,
                            .grace_ms = TFOS_AUTH_GRACE_MS,
                            .cb = {on_peer_frame, on_peer_close}, .user = c};
    rc = tfos__listener_open(&c->listener, c->loop, &lo, err, sizeof err);
    if (rc) {
        int e = errno;
        TFOS_DEBUG("coordinator: %s", err);
        errno = e;
        goto fail;
    }
    snprintf(c->address, sizeof c->address, "%s", tfos__listener_address(c->listener));
    c->state = TFOS_COORD_RESERVING;
    c->reserve_deadline = tfos__now_ms() + (int64_t)(c->opts.reservation_timeout * 1000);
    c->last_query = tfos__now_ms();
    schedule(c);
    TFOS_DEBUG("coordinator: listening on %s for %d nodes", c->address, n);
    *out = c;
    return 0;
fail:
    tfos_coord_close(c);
    return rc;
}

int tfos_coord_open(tfos_coord **out, const tfos_coord_opts *opts)
{
    return tfos__coord_open_on(out, opts, NULL);
}

void tfos__coord_on_resize(tfos_coord *c, tfos__coord_resize_fn fn, void *user)
{
    c->on_resize = fn;
    c->resize_user = user;
}

void tfos__coord_on_report(tfos_coord *c, tfos__coord_report_fn fn, void *user)
{
    c->on_report = fn;
    c->report_user = user;
}

tfos__loop *tfos__coord_loop(tfos_coord *c)
{
    return c->loop;
}

int tfos_coord_step(tfos_coord *c, int timeout_ms)
{
    /* once the cluster is over nothing changes any more, but clients that
     * come to ask (a node task wanting the failure) are still answered:
     * without waiting, so callers that step until the end see no difference */
    if (c->state >= TFOS_COORD_DONE)
        timeout_ms = 0;
    tfos__loop_run(c->loop, timeout_ms);
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

void tfos_coord_fail(tfos_coord *c, int cause, const char *reason)
{
    if (c->state >= TFOS_COORD_DONE)
        return;
    if (reason) {
        set_failure(c, cause, NULL, NULL, 0, "%s", reason);
        if (cause == TFOS_CAUSE_STOPPED)
            TFOS_WARN("coordinator: stopping: %s", reason);
    }
    stop_cluster(c, cause == TFOS_CAUSE_STOPPED ? TFOS_ESTOPPED : TFOS_EFAILED, reason ? reason : "cluster stopped");
    bury(c);
    schedule(c);
}

/* The drain step: past every tracked node's estimated current step by
 * TFOS_DRAIN_LEAD_MS of its rate; -1 when none reported a step. */
static long long drain_step(const tfos_coord *c, int64_t now)
{
    long long best = -1;
    for (int i = 0; i < c->n; i++) {
        const cnode *nd = &c->nodes[i];
        if (!is_tracked(nd) || nd->state == N_EXITED || !nd->has_step)
            continue;
        double ahead = nd->step_rate * (double)(now - nd->step_at + TFOS_DRAIN_LEAD_MS) / 1000.0;
        long long s = nd->step + (long long)ceil(ahead) + 1;
        if (s > best)
            best = s;
    }
    return best;
}

/* To every chief, worker and evaluator still running: the probe (PROGRESS:
 * answer with a fresh report) or DRAIN with the step and what is left of
 * the grace. How many were sent. */
static int send_drain(tfos_coord *c, int probe, int64_t now)
{
    int sent = 0;
    for (int i = 0; i < c->n; i++) {
        cnode *nd = &c->nodes[i];
        if (!is_tracked(nd) || nd->state == N_EXITED || !nd->peer)
            continue;
        if (probe) {
            ask_progress(c, nd, now);
        } else {
            tfos__msg m;
            tfos__msg_begin(&m, TFOS_MSG_DRAIN);
            tfos__msg_add(&m, "step", "%lld", c->drain_step);
            tfos__msg_add(&m, "grace_ms", "%lld", (long long)(c->drain_deadline - now));
            tfos__msg_add(&m, "reason", "%s", c->drain_reason);
            send_msg(c, nd->peer, &m);
        }
        sent++;
    }
    return sent;
}

/* The fresh reports asked for by tfos_coord_drain are in (every tracked
 * running node's progress came after the probe) or their time is up: send
 * the drain step. */
static void check_probe(tfos_coord *c, int timed_out)
{
    int64_t now = tfos__now_ms();
    if (!c->probing || c->state != TFOS_COORD_RUNNING)
        return;
    int waiting = 0;
    for (int i = 0; i < c->n; i++) {
        const cnode *nd = &c->nodes[i];
        if (is_tracked(nd) && nd->state != N_EXITED && nd->peer && nd->has_feed && nd->progress_at < c->drain_at)
            waiting++;
    }
    if (waiting && !timed_out && now < c->probe_deadline)
        return;
    c->probing = 0;
    c->drain_step = drain_step(c, now);
    if (c->drain_step < 0 && !c->drain_force) {
        /* no program says which step it is at: none is drain-aware, and a
         * grace would only delay the stop */
        set_failure(c, TFOS_CAUSE_STOPPED, NULL, NULL, 0, "%s", c->drain_reason);
        TFOS_WARN("coordinator: stopping: %s (no program reported a step with ctx.report(step=), so none can "
                  "checkpoint at one: not drained)", c->drain_reason);
        c->draining = 0;
        stop_cluster(c, TFOS_ESTOPPED, c->failure);
        return;
    }
    c->drain_sent = 1;
    int told = send_drain(c, 0, now);
    if (c->drain_step >= 0)
        TFOS_WARN("coordinator: draining (%s): %d node(s) checkpoint at step %lld and end, within %g s",
                  c->drain_reason, told, c->drain_step, c->drain_grace);
    else
        TFOS_WARN("coordinator: draining (%s): %d node(s) checkpoint at their next check (none reported a step "
                  "with ctx.report(step=)) and end, within %g s", c->drain_reason, told, c->drain_grace);
}

int tfos_coord_drain(tfos_coord *c, const char *reason, double grace, int force)
{
    if (c->state == TFOS_COORD_RESERVING)
        return TFOS_EAGAIN; /* no program runs yet: nothing to checkpoint */
    if (c->state != TFOS_COORD_RUNNING || c->draining)
        return TFOS_EINVAL;
    int64_t now = tfos__now_ms();
    if (grace <= 0)
        grace = TFOS_DEFAULT_DRAIN_GRACE;
    c->draining = c->probing = 1;
    c->drain_force = force;
    c->drain_step = -1;
    c->drain_grace = grace;
    c->drain_at = now;
    c->probe_deadline = now + TFOS_DRAIN_PROBE_MS;
    c->drain_deadline = now + (int64_t)(grace * 1000);
    snprintf(c->drain_reason, sizeof c->drain_reason, "%s", reason && *reason ? reason : "asked");
    send_drain(c, 1, now);
    check_probe(c, 0); /* nobody to wait for (no feed rings: no reports) */
    bury(c);
    schedule(c);
    return 0;
}

int tfos__coord_standby_seen(const tfos_coord *c, int executor_id)
{
    for (int i = 0; c && i < c->nstandby_ids; i++)
        if (c->standby_ids[i] == executor_id)
            return 1;
    return 0;
}

void tfos__coord_release_standbys(tfos_coord *c)
{
    if (!c)
        return;
    /* backwards: drop_peer moves the last peer into the slot it frees */
    for (int i = c->npeers - 1; i >= 0; i--)
        if (c->peers[i]->standby)
            drop_peer(c, c->peers[i], NULL);
    bury(c);
}

int tfos__coord_stepping(const tfos_coord *c)
{
    if (!c || c->state != TFOS_COORD_RUNNING)
        return 0;
    for (int i = 0; i < c->n; i++) {
        const cnode *nd = &c->nodes[i];
        if (is_tracked(nd) && nd->state != N_EXITED && !nd->has_step)
            return 0;
    }
    return 1;
}

const char *tfos__coord_drain_reason(const tfos_coord *c)
{
    return c && c->draining ? c->drain_reason : "";
}

int tfos__coord_standbys(const tfos_coord *c)
{
    return c ? c->standbys : 0;
}

int tfos_coord_drained(const tfos_coord *c)
{
    return c->drained;
}

long long tfos_coord_drain_step(const tfos_coord *c)
{
    return c->drain_sent ? c->drain_step : -2;
}

void tfos_coord_stop(tfos_coord *c, const char *reason)
{
    tfos_coord_fail(c, TFOS_CAUSE_STOPPED, reason);
}

int tfos_coord_released(const tfos_coord *c)
{
    return c->released;
}

void tfos_coord_end_feed(tfos_coord *c)
{
    end_feed(c);
    bury(c);
}

static void end_feed(tfos_coord *c)
{
    int told = 0;
    for (int i = 0; i < c->n; i++) {
        cnode *nd = &c->nodes[i];
        if (!is_tracked(nd) || nd->state != N_RUNNING || !nd->peer)
            continue;
        tfos__msg m;
        tfos__msg_begin(&m, TFOS_MSG_END_FEED);
        send_msg(c, peer_of(nd), &m);
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

int tfos_coord_failure_info(const tfos_coord *c, tfos_failure *out)
{
    if (!c->failed)
        return TFOS_EAGAIN;
    *out = c->info;
    return 0;
}

int tfos_coord_decision(const tfos_coord *c)
{
    return c->failed ? c->decision : 0;
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
    out->has_feed = nd->has_feed;
    out->rows_in = nd->rows_in;
    out->rows_out = nd->rows_out;
    return 0;
}

/* A node's "feed" object: its input ring as its agent last saw it ("reading":
 * its program has waited on it or taken rows). */
static void node_feed_json(FILE *f, const cnode *nd)
{
    if (!nd->has_feed) {
        fprintf(f, "null");
        return;
    }
    uint64_t buffered = nd->rows_in > nd->rows_out ? nd->rows_in - nd->rows_out : 0;
    fprintf(f, "{\"rows_written\": %llu, \"rows_consumed\": %llu, \"rows_buffered\": %llu, \"ring_bytes\": %llu, "
               "\"ring_used\": %llu, \"ring_fill\": %.3f, \"wait_data\": %.3f, \"wait_trainer\": %.3f, "
               "\"ended\": %s, \"reading\": %s, \"age_s\": %.1f}",
            (unsigned long long)nd->rows_in, (unsigned long long)nd->rows_out, (unsigned long long)buffered,
            (unsigned long long)nd->ring_cap, (unsigned long long)nd->ring_used,
            nd->ring_cap ? (double)nd->ring_used / (double)nd->ring_cap : 0.0, nd->wait_data, nd->wait_room,
            nd->feed_ended ? "true" : "false", nd->wait_data_ns || nd->rows_out ? "true" : "false",
            (double)(tfos__now_ms() - nd->progress_at) / 1000.0);
}

/* ---- start telemetry -------------------------------------------------- */

/* A node's start, stamp by stamp: ms since the coordinator opened, -1 not
 * known (yet). Stamps are in order: each is at least the one before. */
enum { ST_AGENT, ST_CONNECTED, ST_REGISTERED, ST_SPEC, ST_PROGRAM, ST_FIRST_IO, ST_N };
static const char *const stamp_names[ST_N] = {"agent", "connected", "registered", "spec", "program", "first_io"};
/* phase k runs from stamp k-1 (k = 0: the coordinator's opening) to stamp k */
static const char *const phase_names[ST_N] = {"spawn", "connect", "register", "wait_cluster", "start_program",
                                              "first_io"};

static void node_stamps(const tfos_coord *c, const cnode *nd, int64_t st[ST_N])
{
    int64_t at[ST_N] = {nd->at_agent, nd->at_connected, nd->at_registered, nd->at_registered ? c->spec_at : 0,
                        nd->at_program, nd->at_first_io};
    int64_t prev = 0;
    for (int k = 0; k < ST_N; k++) {
        st[k] = at[k] ? at[k] - c->opened_at : -1;
        if (st[k] >= 0 && st[k] < prev) /* clocks of two processes: never before the stamp before */
            st[k] = prev;
        if (st[k] >= 0)
            prev = st[k];
    }
}

typedef struct phase_stat {
    int nodes;               /* nodes with both ends of the phase known */
    int64_t p50, p99, max;
    int slowest[3];          /* node indexes, slowest first; -1 none */
} phase_stat;

typedef struct dur {
    int64_t ms;
    int node;
} dur;

static int by_ms(const void *x, const void *y)
{
    const dur *a = x, *b = y;
    return (a->ms > b->ms) - (a->ms < b->ms);
}

/* Per phase: p50, p99, max over the nodes, and the three slowest. */
static int start_stats(const tfos_coord *c, phase_stat ps[ST_N])
{
    dur *d = malloc((size_t)c->n * sizeof *d);
    if (!d)
        return TFOS_ENOMEM;
    for (int k = 0; k < ST_N; k++) {
        int m = 0;
        for (int i = 0; i < c->n; i++) {
            int64_t st[ST_N];
            node_stamps(c, &c->nodes[i], st);
            int64_t from = k ? st[k - 1] : 0;
            if (st[k] >= 0 && from >= 0)
                d[m++] = (dur){st[k] - from, i};
        }
        qsort(d, (size_t)m, sizeof *d, by_ms);
        phase_stat *p = &ps[k];
        *p = (phase_stat){.nodes = m, .slowest = {-1, -1, -1}};
        if (!m)
            continue;
        p->p50 = d[(m - 1) / 2].ms;
        p->p99 = d[(int)((double)(m - 1) * 0.99)].ms;
        p->max = d[m - 1].ms;
        for (int j = 0; j < 3 && j < m; j++)
            p->slowest[j] = d[m - 1 - j].node;
    }
    free(d);
    return 0;
}

/* The phase that took longest at its slowest node, of those a node spends
 * on its own (wait_cluster is the others' slowness); -1 none known. */
static int slowest_phase(const phase_stat ps[ST_N])
{
    int best = -1;
    for (int k = 0; k < ST_N; k++)
        if (k != ST_SPEC && ps[k].nodes && (best < 0 || ps[k].max > ps[best].max))
            best = k;
    return best;
}

int tfos__coord_start_summary(const tfos_coord *c, char *buf, size_t len)
{
    phase_stat ps[ST_N];
    buf[0] = 0;
    if (start_stats(c, ps))
        return TFOS_ENOMEM;
    int k = slowest_phase(ps);
    if (k < 0)
        return TFOS_EAGAIN;
    size_t o = 0;
    o += (size_t)snprintf(buf + o, len - o, "start: spec sent %lld ms after launch", c->spec_at ?
                          (long long)(c->spec_at - c->opened_at) : -1LL);
    for (int j = 0; j < ST_N && o < len; j++)
        if (ps[j].nodes)
            o += (size_t)snprintf(buf + o, len - o, "; %s p50 %lld/p99 %lld/max %lld ms", phase_names[j], (long long)ps[j].p50, (long long)ps[j].p99, (long long)ps[j].max);
    if (o < len)
        o += (size_t)snprintf(buf + o, len - o, "; slowest phase: %s (%lld ms at", phase_names[k],
                              (long long)ps[k].max);
    for (int j = 0; j < 3 && ps[k].slowest[j] >= 0 && o < len; j++) {
        char label[48];
        node_label(&c->nodes[ps[k].slowest[j]], label, sizeof label);
        o += (size_t)snprintf(buf + o, len - o, "%s%s", j ? ", " : " ", label);
    }
    if (o < len)
        snprintf(buf + o, len - o, ")");
    return 0;
}

static void start_json(FILE *f, const tfos_coord *c)
{
    phase_stat ps[ST_N];
    if (start_stats(c, ps)) {
        fputs("null", f);
        return;
    }
    fprintf(f, "{\"spec_ms\": ");
    if (c->spec_at)
        fprintf(f, "%lld", (long long)(c->spec_at - c->opened_at));
    else
        fputs("null", f);
    fprintf(f, ", \"phases\": [");
    for (int k = 0; k < ST_N; k++) {
        fprintf(f, "%s{\"phase\": \"%s\", \"until\": \"%s\", \"nodes\": %d", k ? ", " : "", phase_names[k],
                stamp_names[k], ps[k].nodes);
        if (ps[k].nodes)
            fprintf(f, ", \"p50_ms\": %lld, \"p99_ms\": %lld, \"max_ms\": %lld", (long long)ps[k].p50,
                    (long long)ps[k].p99, (long long)ps[k].max);
        else
            fputs(", \"p50_ms\": null, \"p99_ms\": null, \"max_ms\": null", f);
        fputs(", \"slowest\": [", f);
        for (int j = 0; j < 3 && ps[k].slowest[j] >= 0; j++) {
            char label[48];
            node_label(&c->nodes[ps[k].slowest[j]], label, sizeof label);
            fprintf(f, "%s\"%s\"", j ? ", " : "", label);
        }
        fputs("]}", f);
    }
    int k = slowest_phase(ps);
    fprintf(f, "], \"slowest_phase\": ");
    if (k >= 0)
        fprintf(f, "\"%s\"}", phase_names[k]);
    else
        fputs("null}", f);
}

static void node_start_json(FILE *f, const tfos_coord *c, const cnode *nd)
{
    int64_t st[ST_N];
    node_stamps(c, nd, st);
    fputc('{', f);
    for (int k = 0; k < ST_N; k++) {
        fprintf(f, "%s\"%s\": ", k ? ", " : "", stamp_names[k]);
        if (st[k] >= 0)
            fprintf(f, "%lld", (long long)st[k]);
        else
            fputs("null", f);
    }
    fputc('}', f);
}

char *tfos_coord_status_json(const tfos_coord *c)
{
    return tfos__coord_status_json_page(c, 0, -1);
}

char *tfos__coord_status_json_page(const tfos_coord *c, int first, int last)
{
    static const char *const states[] = {"reserving", "running", "stopping", "done", "failed"};
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    fprintf(f, "{\"state\": \"%s\", \"address\": ", states[c->state]);
    tfos__json_str(f, c->address);
    fprintf(f, ", \"attempt\": %d, \"registered\": %d, \"size\": %d, \"spec_form\": \"%s\", "
               "\"spec_bytes\": %llu, \"failure\": ", c->opts.attempt, c->registered, c->n - c->left_count,
            c->opts.spec_form == TFOS_SPEC_RANKS ? "ranks" : "full", c->spec_bytes);
    tfos__json_str(f, tfos_coord_failure(c));
    fprintf(f, ", \"cause\": \"%s\", \"decision\": \"%s\", \"failure_record\": ",
            tfos_cause_name(c->failed ? c->info.cause : TFOS_CAUSE_NONE),
            !c->failed ? "" : tfos_decision_name(c->decision));
    /* the failure as the restart policy takes it (tfos_failure), for a
     * client that asks the policy itself (tfos.spark.Cluster) */
    if (c->failed) {
        fprintf(f, "{\"node\": ");
        tfos__json_str(f, c->info.node);
        fprintf(f, ", \"job\": ");
        tfos__json_str(f, c->info.job);
        fprintf(f, ", \"executor_id\": %d, \"exit_code\": %d, \"signal\": %d, \"exception\": ", c->info.executor_id,
                c->info.exit_code, c->info.signo);
        tfos__json_str(f, c->info.exc_type);
        fprintf(f, ", \"where\": ");
        tfos__json_str(f, c->info.exc_where);
        fprintf(f, ", \"summary\": ");
        tfos__json_str(f, c->info.summary);
        fputs("}", f);
    } else {
        fputs("null", f);
    }
    if (c->draining) {
        fprintf(f, ", \"drain\": {\"step\": %lld, \"drained\": %s, \"age_s\": %.1f, \"reason\": ", c->drain_step,
                c->drained ? "true" : "false", (double)(tfos__now_ms() - c->drain_at) / 1000.0);
        tfos__json_str(f, c->drain_reason);
        fputs("}", f);
    }
    /* the nodes by state, so a page of a large cluster still says how
     * all of them are */
    int counts[4] = {0}, failed = 0;
    for (int i = 0; i < c->n; i++) {
        counts[c->nodes[i].state]++;
        failed += c->nodes[i].state == N_EXITED && c->nodes[i].exit_code != 0;
    }
    fprintf(f, ", \"counts\": {");
    for (int k = 0; k < 4; k++)
        fprintf(f, "\"%s\": %d, ", node_state_names[k], counts[k]);
    fprintf(f, "\"failed\": %d}", failed);
    int paged = last >= 0;
    if (!paged)
        first = 0, last = c->n - 1;
    if (first < 0)
        first = 0;
    if (last >= c->n)
        last = c->n - 1;
    if (paged)
        fprintf(f, ", \"nodes_page\": {\"first\": %d, \"last\": %d, \"total\": %d}", first, last, c->n);
    fprintf(f, ", \"nodes\": [");
    for (int i = first; i <= last; i++) {
        const cnode *nd = &c->nodes[i];
        fprintf(f, "%s{\"executor_id\": %d, \"job\": \"%s\", \"index\": %d, \"host\": ", i > first ? ", " : "",
                nd->addr.executor_id, nd->addr.job, nd->addr.index);
        tfos__json_str(f, nd->state == N_EMPTY ? "" : nd->addr.host);
        fprintf(f, ", \"executor_key\": ");
        tfos__json_str(f, nd->state == N_EMPTY ? "" : nd->executor_key);
        fprintf(f, ", \"log_error\": ");
        tfos__json_str(f, nd->log_error);
        fprintf(f, ", \"port\": %d, \"state\": \"%s\", \"agent_pid\": %d, \"pid\": %d, \"exit_code\": %d, \"exit\": ",
                nd->state == N_EMPTY ? 0 : nd->addr.port, node_state_names[nd->state], nd->agent_pid, nd->prog_pid,
                nd->state == N_EXITED ? nd->exit_code : -1);
        tfos__json_str(f, nd->exit_desc);
        fprintf(f, ", \"tensorboard_port\": %d, \"feed\": ", nd->state == N_EMPTY ? 0 : nd->tb_port);
        node_feed_json(f, nd);
        fprintf(f, ", \"report\": ");
        tfos__report_json(f, nd->report[0] ? nd->report : NULL);
        if (nd->report[0])
            fprintf(f, ", \"report_age_s\": %.1f", (double)(tfos__now_ms() - nd->report_at) / 1000.0);
        else
            fprintf(f, ", \"report_age_s\": null");
        fprintf(f, ", \"start\": ");
        node_start_json(f, c, nd);
        fprintf(f, ", \"left\": %s}", nd->left ? "true" : "false"); /* an in-place cluster went on without it */
    }
    fprintf(f, "], \"start\": ");
    start_json(f, c);
    fputc('}', f);
    fclose(f);
    return buf;
}

void tfos_coord_close(tfos_coord *c)
{
    if (!c)
        return;
    tfos__warn_limit_flush(&c->warn, 1);
    for (int i = 0; c->peers && i < c->npeers; i++) {
        tfos__link_close(c->peers[i]->link);
        free(c->peers[i]);
    }
    bury(c);
    tfos__listener_close(c->listener);
    if (c->loop) {
        tfos__timer_disarm(c->loop, &c->timer);
        if (c->own_loop)
            tfos__loop_close(c->loop);
    }
    free(c->peers);
    free(c->standby_ids);
    free(c->nodes);
    tfos__turns_free(c->turns);
    free(c->secret);
    free(c->checkpoint_dir);
    free(c);
}
