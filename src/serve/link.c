/* link.c: the model servers' and local clients' connections to the
 * front end: frames in and out, the hello, results back to their requests
 * (see serve.h for the frames). */
#include "serve/serve_int.h"

#include "core/log.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Is the local client that sent r still connected? */
int tfos__serve_client_current(const tfos__serve *s, const req *r)
{
    const server *c = &s->servers[r->client];
    return c->fd >= 0 && c->is_client && c->gen == r->client_gen;
}

/* An ERROR frame to local client ix: "STATUS {json error}". */
void tfos__serve_send_error(tfos__serve *s, int ix, uint64_t id, int status, const char *body)
{
    char head[8];
    int hl = snprintf(head, sizeof head, "%d ", status);
    if (tfos__serve_queue_frame(&s->servers[ix], TFOS_SERVE_ERROR, id, head, (size_t)hl, body, strlen(body)) == 0)
        tfos__serve_flush(s, ix);
}

int tfos__serve_queue_frame(struct server *sv, uint32_t type, uint64_t id, const void *a, size_t alen, const void *b,
                       size_t blen)
{
    size_t need = sv->out_len + FRAME_HEAD + alen + blen;
    if (need > sv->out_cap) {
        size_t cap = sv->out_cap ? sv->out_cap : 65536;
        while (cap < need)
            cap *= 2;
        char *o = realloc(sv->out, cap);
        if (!o)
            return -1;
        sv->out = o;
        sv->out_cap = cap;
    }
    char *p = sv->out + sv->out_len;
    uint32_t len = (uint32_t)(alen + blen);
    memcpy(p, &len, 4);
    memcpy(p + 4, &type, 4);
    memcpy(p + 8, &id, 8);
    memcpy(p + FRAME_HEAD, a, alen);
    if (blen)
        memcpy(p + FRAME_HEAD + alen, b, blen);
    sv->out_len = need;
    return 0;
}

void tfos__serve_drop(tfos__serve *s, int ix, const char *why)
{
    server *sv = &s->servers[ix];
    if (sv->ready && !sv->is_client)
        TFOS_WARN("model server %d (node worker:%d) left: %s; its %d batch(es) go to another", ix, sv->node, why,
                  sv->inflight);
    else if (sv->is_client && strcmp(why, "its connection closed"))
        TFOS_WARN("a local client left: %s", why);
    uint32_t gen = sv->gen + 1;
    tfos__loop_unwatch(s->loop, sv->fd);
    close(sv->fd);
    free(sv->in);
    free(sv->out);
    free(sv->mv);
    memset(sv, 0, sizeof *sv);
    sv->fd = -1;
    sv->gen = gen;
    tfos__serve_requeue_server(s, ix);
    tfos__serve_schedule(s);
}

void tfos__serve_flush(tfos__serve *s, int ix)
{
    server *sv = &s->servers[ix];
    while (sv->out_off < sv->out_len) {
        ssize_t w = send(sv->fd, sv->out + sv->out_off, sv->out_len - sv->out_off, MSG_NOSIGNAL);
        if (w < 0 && (errno == EAGAIN || errno == EINTR))
            break;
        if (w <= 0) {
            tfos__serve_drop(s, ix, strerror(errno));
            return;
        }
        sv->out_off += (size_t)w;
    }
    if (sv->out_off == sv->out_len)
        sv->out_off = sv->out_len = 0;
    tfos__loop_events(s->loop, sv->fd, TFOS_EV_READ | (sv->out_len ? TFOS_EV_WRITE : 0));
}

static void on_result(tfos__serve *s, int ix, uint32_t type, uint64_t id, const char *p, size_t len)
{
    flight *fl = tfos__serve_take_flight(s, id, ix);
    if (!fl) {
        tfos__serve_drop(s, ix, "it answered a batch it was not given");
        return;
    }
    s->servers[ix].inflight--;
    model *m = &s->models[fl->model];
    tfos__col cols[MAX_IO];
    tfos__batch_view v;
    char err[256] = "", version[32] = "";
    int bad = type == TFOS_SERVE_ERROR;
    if (!bad) { /* the version that ran it, then the outputs */
        uint16_t vl = 0;
        if (len >= 2)
            memcpy(&vl, p, 2);
        if (len < 2u + vl || vl >= sizeof version) {
            tfos__serve_drop(s, ix, "it sent a result without its version");
            tfos__serve_requeue(s, fl);
            return;
        }
        memcpy(version, p + 2, vl);
        p += 2 + vl;
        len -= 2u + vl;
    }
    if (!bad && (tfos__batch_ncols(p, len) > MAX_IO || tfos__batch_open(p, len, &v, cols, MAX_IO, err, sizeof err)))
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
        if (bad) {
            if (type == TFOS_SERVE_ERROR)
                tfos__serve_fail_req(s, r, 500, "model %s failed on a batch of %u rows: %.*s", m->name, fl->rows,
                         (int)(len > 900 ? 900 : len), p);
            else
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

static void on_frame(tfos__serve *s, int ix, uint32_t type, uint64_t id, const char *p, size_t len)
{
    server *sv = &s->servers[ix];
    if (!sv->ready && type == TFOS_SERVE_CLIENT) {
        /* a local client: the HTTP token, if there is one */
        if (len != strlen(s->token) || memcmp(p, s->token, len)) {
            tfos__serve_send_error(s, ix, id, 401, "{\"error\": \"this server needs its token\"}");
            return;
        }
        sv->ready = sv->is_client = 1;
        if (tfos__serve_queue_frame(sv, TFOS_SERVE_CLIENT, id, "ok", 2, NULL, 0) == 0)
            tfos__serve_flush(s, ix);
        return;
    }
    if (sv->is_client) {
        if (type == TFOS_SERVE_INFER)
            tfos__serve_client_infer(s, ix, id, p, len);
        else
            tfos__serve_drop(s, ix, "it sent a frame of an unknown type");
        return;
    }
    if (!sv->ready) {
        if (type != TFOS_SERVE_HELLO || len < TFOS_HEX_SECRET_LEN + 1 ||
            memcmp(p, s->secret, TFOS_HEX_SECRET_LEN) || p[TFOS_HEX_SECRET_LEN] != '\n') {
            tfos__serve_drop(s, ix, "it does not know the cluster secret");
            return;
        }
        if (!sv->mv && !(sv->mv = calloc((size_t)s->nmodels, sizeof *sv->mv))) {
            tfos__serve_drop(s, ix, "out of memory");
            return;
        }
        if (tfos__serve_take_metadata(s, ix, p + TFOS_HEX_SECRET_LEN + 1, len - TFOS_HEX_SECRET_LEN - 1))
            TFOS_WARN("model server %d sent metadata tfos could not read whole (or for models it was not given)",
                      ix);
        sv->ready = 1;
        sv->node = (int)id;
        TFOS_INFO("model server worker:%d is ready (%d ready)", sv->node, tfos__serve_servers_ready(s));
        tfos__serve_dispatch(s);
        return;
    }
    if (type == TFOS_SERVE_RESULT || type == TFOS_SERVE_ERROR) {
        on_result(s, ix, type, id, p, len);
    } else if (type == TFOS_SERVE_MODELS) {
        if (tfos__serve_take_metadata(s, ix, p, len))
            TFOS_WARN("model server worker:%d sent metadata tfos could not read whole", sv->node);
        for (int mi = 0; mi < s->nmodels; mi++)
            if (sv->mv[mi].n)
                TFOS_INFO("model server worker:%d: model %s, version %s (of %d held)", sv->node, s->models[mi].name,
                          sv->mv[mi].v[0], sv->mv[mi].n);
        tfos__serve_dispatch(s);
    } else
        tfos__serve_drop(s, ix, "it sent a frame of an unknown type");
}

static void on_server(tfos__loop *l, int fd, int events, void *user)
{
    (void)l;
    tfos__serve *s = user;
    int ix = -1;
    for (int i = 0; i < MAX_SERVERS && ix < 0; i++)
        if (s->servers[i].fd == fd)
            ix = i;
    if (ix < 0)
        return;
    server *sv = &s->servers[ix];
    if (events & TFOS_EV_WRITE) {
        tfos__serve_flush(s, ix);
        if (sv->fd != fd)
            return;
    }
    if (!(events & TFOS_EV_READ))
        return;
    for (;;) {
        if (sv->in_cap - sv->in_len < 65536) {
            size_t cap = sv->in_cap ? sv->in_cap * 2 : 1 << 20;
            char *b = realloc(sv->in, cap);
            if (!b) {
                tfos__serve_drop(s, ix, "out of memory");
                return;
            }
            sv->in = b;
            sv->in_cap = cap;
        }
        ssize_t r = recv(fd, sv->in + sv->in_len, sv->in_cap - sv->in_len, 0);
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            break;
        if (r <= 0) {
            tfos__serve_drop(s, ix, r == 0 ? "its connection closed" : strerror(errno));
            return;
        }
        sv->in_len += (size_t)r;
        size_t off = 0;
        while (sv->in_len - off >= FRAME_HEAD) {
            uint32_t len, type;
            uint64_t id;
            memcpy(&len, sv->in + off, 4);
            memcpy(&type, sv->in + off + 4, 4);
            memcpy(&id, sv->in + off + 8, 8);
            if (len > FRAME_MAX) {
                tfos__serve_drop(s, ix, "it sent a frame over the size limit");
                return;
            }
            if (sv->in_len - off - FRAME_HEAD < len)
                break;
            on_frame(s, ix, type, id, sv->in + off + FRAME_HEAD, len);
            if (sv->fd != fd)
                return; /* dropped while handling it */
            off += FRAME_HEAD + len;
        }
        memmove(sv->in, sv->in + off, sv->in_len - off);
        sv->in_len -= off;
    }
}

void tfos__serve_on_accept(tfos__loop *l, int lfd, int events, void *user)
{
    (void)events;
    tfos__serve *s = user;
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            return;
        int ix = -1;
        for (int i = 0; i < MAX_SERVERS && ix < 0; i++)
            if (s->servers[i].fd < 0)
                ix = i;
        if (ix < 0 || tfos__loop_watch(l, fd, TFOS_EV_READ, on_server, s)) {
            close(fd);
            continue;
        }
        if (lfd == s->tfd) { /* a model server on another host: frames go out as they are made */
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        }
        s->servers[ix].fd = fd;
    }
}
