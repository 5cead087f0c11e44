/* batcher.c: per-model queues and dynamic batching: a batch goes to the
 * server with room and the fewest batches when max_batch rows wait or the
 * oldest has waited max_delay_ms; requests past their deadline get 504. */
#include "serve/serve_int.h"

#include "platform/clock.h"

#include <stdlib.h>
#include <string.h>

/* Put one batch's requests back at the front of its model's queue. */
void tfos__serve_requeue(tfos__serve *s, flight *fl)
{
    model *m = &s->models[fl->model];
    req *last = fl->reqs;
    while (last && last->next)
        last = last->next;
    if (last) {
        last->next = m->head;
        m->head = fl->reqs;
        if (!m->tail)
            m->tail = last;
    }
    m->queued_rows += fl->rows;
    free(fl);
}

/* Put a server's batches back at the front of their queues, in order. */
void tfos__serve_requeue_server(tfos__serve *s, int server_ix)
{
    flight **pp = &s->flights;
    while (*pp) {
        flight *fl = *pp;
        if (fl->server != server_ix) {
            pp = &fl->next;
            continue;
        }
        *pp = fl->next;
        tfos__serve_requeue(s, fl);
    }
}

flight *tfos__serve_take_flight(tfos__serve *s, uint64_t id, int server_ix)
{
    for (flight **pp = &s->flights; *pp; pp = &(*pp)->next)
        if ((*pp)->id == id && (*pp)->server == server_ix) {
            flight *fl = *pp;
            *pp = fl->next;
            return fl;
        }
    return NULL;
}

/* Do two requests' inputs have the same per-row shapes (can they share a
 * batch)? */
static int same_inner(const model *m, const req *a, const req *b)
{
    if (strcmp(a->version, b->version))
        return 0;
    for (int i = 0; i < m->nin; i++)
        if (a->inner_ndim[i] != b->inner_ndim[i] ||
            memcmp(a->inner[i], b->inner[i], sizeof(uint32_t) * (size_t)a->inner_ndim[i]))
            return 0;
    return 1;
}

/* The server with room and the fewest batches that holds model mi's
 * `version` ("": any), or -1. */
static int pick_server(tfos__serve *s, int mi, const char *version)
{
    int best = -1;
    for (int i = 0; i < MAX_SERVERS; i++) {
        server *sv = &s->servers[i];
        if (sv->link && sv->ready && sv->inflight < INFLIGHT && sv->mv && sv->mv[mi].n &&
            (!version[0] || tfos__serve_holds(sv, mi, version)) && (best < 0 || sv->inflight < s->servers[best].inflight))
            best = i;
    }
    return best;
}

/* Send one batch of model m's first requests to server ix. */
static int send_batch(tfos__serve *s, int mi, int ix)
{
    model *m = &s->models[mi];
    req *first = m->head, *last = first;
    uint32_t rows = first->rows;
    while (last->next && rows + last->next->rows <= (uint32_t)s->o.max_batch && same_inner(m, first, last->next)) {
        last = last->next;
        rows += last->rows;
    }
    tfos__col cols[MAX_IO];
    memset(cols, 0, sizeof cols);
    for (int i = 0; i < m->nin; i++) {
        cols[i].name = m->in[i].name;
        cols[i].name_len = (uint16_t)strlen(m->in[i].name);
        cols[i].kind = TFOS_COL_FIXED;
        cols[i].dtype = (uint8_t)m->in[i].dtype;
        cols[i].ndim = (uint8_t)first->inner_ndim[i];
        memcpy(cols[i].shape, first->inner[i], sizeof cols[i].shape);
    }
    uint64_t total = tfos__batch_layout(rows, (uint32_t)m->nin, cols);
    if (!total)
        return -1;
    char *batch = malloc(total);
    if (!batch)
        return -1;
    tfos__batch_write_header(batch, total, rows, (uint32_t)m->nin, 0, cols);
    for (int i = 0; i < m->nin; i++) {
        char *p = batch + cols[i].data_off;
        for (req *r = first;; r = r->next) {
            memcpy(p, r->data[i], r->nbytes[i]);
            p += r->nbytes[i];
            if (r == last)
                break;
        }
    }
    /* the model, and the version asked for ("": the server's latest) */
    const char *kv[] = {"model", m->name, "version", first->version, NULL};
    flight *fl = calloc(1, sizeof *fl);
    server *sv = &s->servers[ix];
    if (!fl || tfos__serve_send(s, ix, TFOS_MSG_SERVE_BATCH, s->next_batch, kv, batch, total)) {
        free(fl);
        free(batch);
        return -1;
    }
    free(batch);
    fl->id = s->next_batch++;
    fl->server = ix;
    fl->model = mi;
    fl->reqs = first;
    fl->rows = rows;
    m->head = last->next;
    if (!m->head)
        m->tail = NULL;
    last->next = NULL;
    m->queued_rows -= rows;
    m->batches++;
    fl->next = s->flights;
    s->flights = fl;
    sv->inflight++;
    return 0;
}

/* Answer what has waited past its deadline; send what is due. */
void tfos__serve_dispatch(tfos__serve *s)
{
    int64_t now = tfos__now_ms();
    for (int mi = 0; mi < s->nmodels; mi++) {
        model *m = &s->models[mi];
        while (m->head && m->head->deadline <= now) {
            req *r = m->head;
            m->head = r->next;
            if (!m->head)
                m->tail = NULL;
            m->queued_rows -= r->rows;
            tfos__serve_fail_req(s, r, 504, "model %s: no model server answered within %g s (%d ready)", m->name,
                     s->o.timeout_s, tfos__serve_servers_ready(s));
        }
        while (m->head) {
            int due = m->queued_rows >= s->o.max_batch || s->o.max_delay_ms < 0 ||
                      now - m->head->t0 >= s->o.max_delay_ms;
            int ix = due ? pick_server(s, mi, m->head->version) : -1;
            if (ix < 0 || send_batch(s, mi, ix))
                break;
        }
    }
    tfos__serve_schedule(s);
}

static void on_timer(tfos__loop *l, tfos__timer *t, void *user)
{
    (void)l;
    (void)t;
    tfos__serve_dispatch(user);
}

/* Wake for the next delay or deadline. */
void tfos__serve_schedule(tfos__serve *s)
{
    int64_t at = INT64_MAX;
    for (int mi = 0; mi < s->nmodels; mi++) {
        const model *m = &s->models[mi];
        if (!m->head)
            continue;
        int64_t due = m->head->t0 + (s->o.max_delay_ms > 0 ? s->o.max_delay_ms : 0);
        if (due < at)
            at = due;
        for (const req *r = m->head; r; r = r->next)
            if (r->deadline < at)
                at = r->deadline;
    }
    if (at == INT64_MAX)
        tfos__timer_disarm(s->loop, &s->timer);
    else
        tfos__timer_arm(s->loop, &s->timer, at, on_timer, s);
}

/* Queue a checked request (0), or refuse it: 429 with err. */
int tfos__serve_enqueue(tfos__serve *s, req *r, char *err, size_t errlen)
{
    model *m = &s->models[r->model];
    if (m->queued_rows + r->rows > s->o.max_queue_rows && m->head) {
        m->refused++;
        snprintf(err, errlen, "model %s is busy: %lld rows wait already (--max-queue-rows %lld); try again",
                 m->name, m->queued_rows, s->o.max_queue_rows);
        return 429;
    }
    r->t0 = tfos__now_ms();
    r->deadline = r->t0 + (int64_t)(s->o.timeout_s * 1000);
    if (m->tail)
        m->tail->next = r;
    else
        m->head = r;
    m->tail = r;
    m->queued_rows += r->rows;
    m->rows += r->rows;
    tfos__serve_dispatch(s);
    return 0;
}
