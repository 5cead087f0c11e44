/* link.c: the model servers' and local clients' links to the front end
 * (core/link.h; the frames are core/wire.h's SERVE_*, see serve.h): their
 * first frames and the slots they take, frames in and out, results back to
 * their requests.
 *
 * A peer that has not authenticated is its listener's (bounded, with a
 * deadline) and takes no slot: idle connections can never keep a model
 * server out. Model servers and local clients have slots of their own
 * kind, so clients cannot either. */
#include "serve/serve_int.h"

#include "core/log.h"
#include "platform/clock.h"
#include "platform/proc.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int tfos__serve_client_current(const tfos__serve *s, const req *r)
{
    const server *c = &s->servers[r->client];
    return c->link && c->is_client && c->gen == r->client_gen;
}

int tfos__serve_send(tfos__serve *s, int ix, int type, uint64_t id, const char *const *kv, const void *body,
                     size_t len)
{
    server *sv = &s->servers[ix];
    if (!sv->link)
        return TFOS_ECLOSED;
    tfos__msg m;
    tfos__msg_begin_data(&m, type, id);
    for (; kv && kv[0]; kv += 2)
        tfos__msg_add(&m, kv[0], "%s", kv[1]);
    int rc = tfos__msg_end_data(&m, len);
    if (rc == 0)
        rc = tfos__link_send(sv->link, &m, body, len);
    tfos__msg_fini(&m);
    if (rc == TFOS_EFULL && sv->is_client) {
        char why[96];
        snprintf(why, sizeof why, "it does not read its answers (%zu bytes wait)", tfos__link_unsent(sv->link));
        tfos__serve_drop(s, ix, why);
    }
    return rc;
}

void tfos__serve_send_error(tfos__serve *s, int ix, uint64_t id, int status, const char *body)
{
    char st[16];
    snprintf(st, sizeof st, "%d", status);
    const char *kv[] = {"status", st, NULL};
    tfos__serve_send(s, ix, TFOS_MSG_SERVE_FAIL, id, kv, body, strlen(body));
}

/* An ERROR (code, message) and the link ends once it is written. */
static void refuse(tfos__link *k, int code, const char *text)
{
    tfos__msg m;
    tfos__msg_begin(&m, TFOS_MSG_ERROR);
    tfos__msg_add(&m, "code", "%d", code);
    tfos__msg_add(&m, "message", "%s", text);
    if (tfos__msg_end(&m) == 0)
        tfos__link_send(k, &m, NULL, 0);
    tfos__msg_fini(&m);
    tfos__link_finish(k);
}

void tfos__serve_drop(tfos__serve *s, int ix, const char *why)
{
    server *sv = &s->servers[ix];
    if (sv->ready && !sv->is_client)
        TFOS_WARN("model server %d (node worker:%d) left: %s; its %d batch(es) go to another", ix, sv->node, why,
                  sv->inflight);
    /* a client's requests still waiting are nobody's: never batched */
    int waited = sv->is_client ? tfos__serve_forget_client(s, ix, sv->gen) : 0;
    if (sv->is_client && strcmp(why, "its connection closed"))
        TFOS_WARN("a local client left: %s; %d of its request(s) waited, not answered", why, waited);
    uint32_t gen = sv->gen + 1;
    if (sv->link) { /* a no-op when the link is ending on its own (we are in its on_close) */
        tfos__link_set_data(sv->link, NULL);
        /* a model server is told why (it exits, and its agent starts it
         * again) unless its link is backed up (a stopped peer: then it is
         * only closed, never kept waiting on) */
        if (!sv->is_client && tfos__link_unsent(sv->link) == 0) {
            char text[400];
            snprintf(text, sizeof text, "the front end dropped this model server: %s", why);
            refuse(sv->link, TFOS_EPROTO, text);
        } else {
            tfos__link_close(sv->link);
        }
    }
    if (sv->pidfd >= 0)
        close(sv->pidfd);
    free(sv->mv);
    memset(sv, 0, sizeof *sv);
    sv->gen = gen;
    sv->pidfd = -1;
    tfos__serve_requeue_server(s, ix);
    tfos__serve_schedule(s);
}

void tfos__serve_end_hung(tfos__serve *s, int ix, const flight *late)
{
    server *sv = &s->servers[ix];
    char why[400];
    int n = snprintf(why, sizeof why, "it has held a batch of %u rows for %.1f s, past --timeout (%g s): it is hung",
                     late->rows, (double)(tfos__now_ms() - late->sent) / 1000, s->o.timeout_s);
    /* the Unix socket told who it is (pinned by a pidfd: never another
     * process that took its pid); SIGKILL ends a stopped process too. Over
     * TCP the server is on another host: its own watchdog ends it (at
     * --timeout from the batch's arrival), or it waits stopped, cut off */
    if (sv->pidfd >= 0 && sv->pid != (int)getpid() && tfos__pidfd_signal(sv->pidfd, SIGKILL) == 0)
        snprintf(why + n, sizeof why - (size_t)n, "; ended it (pid %d): its agent starts it again", sv->pid);
    else
        snprintf(why + n, sizeof why - (size_t)n, "; no longer used");
    tfos__serve_drop(s, ix, why);
}

static void on_result(tfos__serve *s, int ix, const tfos__frame *f)
{
    flight *fl = tfos__serve_take_flight(s, f->id, ix);
    if (!fl) {
        tfos__serve_drop(s, ix, "it answered a batch it was not given");
        return;
    }
    s->servers[ix].inflight--;
    if (f->type == TFOS_MSG_SERVE_FAIL) {
        tfos__serve_batch_failed(s, fl, f->body, f->body_len);
        tfos__serve_dispatch(s);
        return;
    }
    model *m = &s->models[fl->model];
    tfos__col cols[MAX_IO];
    tfos__batch_view v;
    char err[256] = "", version[32] = "";
    const char *p = f->body;
    size_t len = f->body_len;
    if (tfos__kv_str(f->meta, f->meta_len, "version", version, sizeof version)) {
        tfos__serve_drop(s, ix, "it sent a result without its version");
        tfos__serve_requeue(s, fl);
        return;
    }
    int bad = 0;
    if (tfos__batch_ncols(p, len) > MAX_IO || tfos__batch_open(p, len, &v, cols, MAX_IO, err, sizeof err))
        bad = 1;
    if (!bad && v.nrows != fl->rows)
        snprintf(err, sizeof err, "the model gave %u rows for a batch of %u", v.nrows, fl->rows), bad = 1;
    for (uint32_t c = 0; !bad && c < v.ncols; c++)
        if (v.cols[c].kind != TFOS_COL_FIXED)
            snprintf(err, sizeof err, "output %.*s is not a tensor of numbers", (int)v.cols[c].name_len,
                     v.cols[c].name), bad = 1;
    uint32_t row0 = 0;
    for (req *r = fl->reqs, *next; r; r = next) {
        next = r->next;
        if (r->done) { /* answered 504 at its deadline while the batch ran */
            row0 += r->rows;
            tfos__serve_free_req(r);
            continue;
        }
        if (bad) {
            tfos__serve_fail_req(s, r, 500, "model %s's server sent a bad result: %s", m->name, err);
            continue;
        }
        if (r->client < 0) {
            char *body = tfos__serve_answer_json(m, version, r, &v, p, row0);
            tfos__http_reply(s->http, r->http_id, body ? 200 : 500, body ? "application/json" : NULL, body, 0);
        } else if (tfos__serve_client_current(s, r)) {
            tfos__serve_answer_client(s, r, version, &v, p, row0);
        }
        row0 += r->rows;
        tfos__serve_count_answer(m, r, version);
    }
    free(fl);
    tfos__serve_dispatch(s);
}

/* SERVE_MODELS: the models a server holds, first when it joins (then it is
 * ready), again when its versions change. */
static void on_models(tfos__serve *s, int ix, const tfos__frame *f)
{
    server *sv = &s->servers[ix];
    if (!sv->mv && !(sv->mv = calloc((size_t)(s->nmodels > 0 ? s->nmodels : 1), sizeof *sv->mv))) {
        tfos__serve_drop(s, ix, "out of memory");
        return;
    }
    if (tfos__serve_take_metadata(s, ix, f->body, f->body_len))
        TFOS_WARN("model server worker:%d sent metadata tfos could not read whole (or for models it was not given)",
                  sv->node);
    if (!sv->ready) {
        sv->ready = 1;
        TFOS_INFO("model server worker:%d is ready (%d ready)", sv->node, tfos__serve_servers_ready(s));
    } else {
        for (int mi = 0; mi < s->nmodels; mi++)
            if (sv->mv[mi].n)
                TFOS_INFO("model server worker:%d: model %s, version %s (of %d held)", sv->node, s->models[mi].name,
                          sv->mv[mi].v[0], sv->mv[mi].n);
    }
    tfos__serve_dispatch(s);
}

/* A free slot of a model server (is_client 0) or a local client; -1. */
static int free_slot(const tfos__serve *s, int is_client)
{
    int lo = is_client ? MAX_SERVERS : 0, hi = is_client ? MAX_SLOTS : MAX_SERVERS;
    for (int i = lo; i < hi; i++)
        if (!s->servers[i].link)
            return i;
    return -1;
}

/* A peer's first frame: SERVE_JOIN (a model server: the cluster secret's
 * mac) or SERVE_CLIENT (a local client: the HTTP token's mac; with no
 * token, the Unix socket's peer uid). Then a slot of its kind and
 * SERVE_OK. */
static void on_first(tfos__serve *s, tfos__link *k, const tfos__frame *f)
{
    int is_client = f->type == TFOS_MSG_SERVE_CLIENT;
    if (f->type != TFOS_MSG_SERVE_JOIN && !is_client) {
        tfos__warn_limited(&s->warn, "refused %s: its first frame was neither SERVE_JOIN nor SERVE_CLIENT",
                           tfos__link_name(k));
        tfos__link_close(k);
        return;
    }
    const char *key = is_client ? (s->token[0] ? s->token : NULL) : s->secret;
    if (tfos__link_auth(k, f, key, is_client ? "token" : "cluster secret")) {
        tfos__warn_limited(&s->warn, "refused %s %s: %s", is_client ? "a local client" : "a model server",
                           tfos__link_name(k), !key ? "it runs as another user"
                           : is_client ? "it does not know the token" : "it does not know the cluster secret");
        return;
    }
    int ix = free_slot(s, is_client);
    if (ix < 0) {
        tfos__warn_limited(&s->warn, "refused %s %s: all %d places are taken", is_client ? "a local client"
                           : "a model server", tfos__link_name(k), is_client ? MAX_CLIENTS : MAX_SERVERS);
        refuse(k, TFOS_EFULL, is_client ? "too many local clients: use HTTP" : "too many model servers");
        return;
    }
    server *sv = &s->servers[ix];
    long long node = 0;
    tfos__kv_int(f->meta, f->meta_len, "node", 0, 1 << 20, &node);
    sv->link = k;
    sv->is_client = is_client;
    sv->ready = is_client; /* a model server is ready once it has said what it serves */
    sv->node = (int)node;
    sv->pidfd = -1;
    tfos__link_set_data(k, sv);
    if (!is_client) {
        /* a model server's batches are bounded by INFLIGHT, not by the link */
        tfos__link_set_limits(k, FRAME_MAX, SIZE_MAX);
        /* on the Unix socket (a peer uid known), its process: a server that
         * hangs is ended by it */
        pid_t pid = 0;
        if (tfos__link_peer_uid(k) >= 0 && (sv->pidfd = tfos__peer_pidfd(tfos__link_fd(k), &pid)) >= 0)
            sv->pid = (int)pid;
    } else {
        /* a local request is at most what HTTP takes (--max-body) */
        tfos__link_set_limits(k, s->client_max_frame, CLIENT_MAX_OUT);
    }
    tfos__msg m;
    tfos__msg_begin(&m, TFOS_MSG_SERVE_OK);
    if (tfos__msg_end(&m) == 0)
        tfos__link_send(k, &m, NULL, 0);
    tfos__msg_fini(&m);
}

static void on_frame(tfos__link *k, const tfos__frame *f, void *user)
{
    tfos__serve *s = user;
    server *sv = tfos__link_data(k);
    if (!sv) {
        on_first(s, k, f);
        return;
    }
    int ix = (int)(sv - s->servers);
    if (sv->is_client) {
        if (f->type == TFOS_MSG_SERVE_INFER)
            tfos__serve_client_infer(s, ix, f);
        else
            tfos__serve_drop(s, ix, "it sent a frame of an unknown type");
        return;
    }
    if (f->type == TFOS_MSG_SERVE_RESULT || f->type == TFOS_MSG_SERVE_FAIL)
        on_result(s, ix, f);
    else if (f->type == TFOS_MSG_SERVE_MODELS)
        on_models(s, ix, f);
    else
        tfos__serve_drop(s, ix, "it sent a frame of an unknown type");
}

static void on_close(tfos__link *k, int rc, const char *why, void *user)
{
    tfos__serve *s = user;
    server *sv = tfos__link_data(k);
    if (!sv) { /* never had a slot: refused, late, evicted, or gone before a word */
        if (why)
            tfos__warn_limited(&s->warn, "dropped %s: %s", tfos__link_name(k), why);
        return;
    }
    if (!why)
        why = rc == TFOS_ECLOSED || rc == 0 ? "its connection closed" : tfos_strerror(rc);
    tfos__serve_drop(s, (int)(sv - s->servers), why);
}

const tfos__link_cb tfos__serve_link_cb = {on_frame, on_close};
