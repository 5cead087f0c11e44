/* batcher.c: per-model queues and dynamic batching: a batch goes to the
 * server with room and the fewest batches when max_batch rows wait or the
 * oldest has waited max_delay_ms. Every request has one deadline
 * (--timeout): past it, it gets 504 wherever it is, in its queue or in a
 * batch on a server; a server that holds a batch longer than --timeout is
 * hung and is ended (link.c). A request that no server can take now (the
 * version it names is on none with room) never holds up the ones behind
 * it. A batch the model fails on is split in halves until the request
 * that fails is alone: only it gets the 500. */
#include "serve/serve_int.h"

#include "platform/clock.h"

#include <stdlib.h>
#include <string.h>

static int64_t hung_after_ms(const tfos__serve *s)
{
    return (int64_t)(s->o.timeout_s * 1000) + HUNG_GRACE_MS;
}

/* Put a list of requests (in order) back at the front of model m's queue;
 * those answered already (done) are freed. */
static void push_front(model *m, req *list)
{
    req *keep = NULL, *last = NULL;
    for (req *r = list, *next; r; r = next) {
        next = r->next;
        if (r->done) {
            tfos__serve_free_req(r);
            continue;
        }
        r->next = NULL;
        if (last)
            last->next = r;
        else
            keep = r;
        last = r;
        m->queued_rows += r->rows;
    }
    if (!keep)
        return;
    last->next = m->head;
    m->head = keep;
    if (!m->tail)
        m->tail = last;
}

void tfos__serve_requeue(tfos__serve *s, flight *fl)
{
    push_front(&s->models[fl->model], fl->reqs);
    free(fl);
}

void tfos__serve_requeue_server(tfos__serve *s, int server_ix)
{
    /* the list is newest first: taken off in that order and each put at
     * the front, the oldest batch ends up first */
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

/* The requests of model m's queue that `pick` chooses, taken off it (the
 * rest keep their order): a list, in queue order. */
static req *take_from_queue(model *m, int (*pick)(const req *, const void *), const void *arg)
{
    req *taken = NULL, **ttail = &taken;
    for (req **pp = &m->head, *prev = NULL; *pp;) {
        req *r = *pp;
        if (!pick(r, arg)) {
            prev = r;
            pp = &r->next;
            continue;
        }
        *pp = r->next;
        if (m->tail == r)
            m->tail = prev;
        m->queued_rows -= r->rows;
        r->next = NULL;
        *ttail = r;
        ttail = &r->next;
    }
    return taken;
}

typedef struct client_key {
    int ix;
    uint32_t gen;
} client_key;

static int of_client(const req *r, const void *arg)
{
    const client_key *k = arg;
    return r->client == k->ix && r->client_gen == k->gen;
}

static int past_deadline(const req *r, const void *arg)
{
    return r->deadline <= *(const int64_t *)arg;
}

int tfos__serve_forget_client(tfos__serve *s, int ix, uint32_t gen)
{
    int n = 0;
    client_key key = {ix, gen};
    for (int mi = 0; mi < s->nmodels; mi++)
        for (req *r = take_from_queue(&s->models[mi], of_client, &key), *next; r; r = next) {
            next = r->next;
            tfos__serve_free_req(r);
            n++;
        }
    /* a batch on a server runs on (the server cannot be told to drop a
     * part of it); its answer to this client is thrown away */
    for (flight *fl = s->flights; fl; fl = fl->next)
        for (req *r = fl->reqs; r; r = r->next)
            if (!r->done && r->client == ix && r->client_gen == gen) {
                r->done = 1;
                n++;
            }
    return n;
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

static uint32_t new_group(tfos__serve *s)
{
    if (!++s->next_group) /* 0 is no group */
        ++s->next_group;
    return s->next_group;
}

void tfos__serve_batch_failed(tfos__serve *s, flight *fl, const char *error, size_t len)
{
    model *m = &s->models[fl->model];
    int live = 0;
    for (req *r = fl->reqs; r; r = r->next)
        live += !r->done;
    int shown = (int)(len > 900 ? 900 : len);
    if (live <= 1) {
        for (req *r = fl->reqs, *next; r; r = next) {
            next = r->next;
            if (r->done)
                tfos__serve_free_req(r);
            else if (r->group)
                tfos__serve_fail_req(s, r, 500, "model %s failed on this request (%u rows; the others batched with "
                                     "it were answered apart): %.*s", m->name, r->rows, shown, error);
            else
                tfos__serve_fail_req(s, r, 500, "model %s failed on this request (%u rows): %.*s", m->name, r->rows,
                                     shown, error);
        }
        free(fl);
        return;
    }
    /* two halves, each its own group (batched alone), back at the front:
     * at most 2 n - 1 batches find the failing requests among n */
    uint32_t g1 = new_group(s), g2 = new_group(s);
    int k = 0;
    for (req *r = fl->reqs; r; r = r->next)
        if (!r->done)
            r->group = k++ < (live + 1) / 2 ? g1 : g2;
    tfos__serve_requeue(s, fl);
}

/* Can requests a and b share a batch: the same version asked for, the same
 * group, the same per-row shapes? */
static int compatible(const model *m, const req *a, const req *b)
{
    if (strcmp(a->version, b->version) || a->group != b->group)
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

/* Take model m's batch that starts with `first` off its queue: first, and
 * after it the requests that can share its batch, in order, while they fit
 * in max_batch rows (a larger first goes alone). Requests that cannot share
 * it are stepped over and keep their places. */
static req *take_batch(tfos__serve *s, model *m, req *first, uint32_t *rows_out)
{
    req *batch = NULL, **btail = &batch, *prev = NULL;
    uint32_t rows = 0;
    for (req **pp = &m->head; *pp;) {
        req *r = *pp;
        int take = r == first || (batch && compatible(m, first, r));
        if (take && r != first && rows + r->rows > (uint32_t)s->o.max_batch)
            break;
        if (!take) {
            prev = r;
            pp = &r->next;
            continue;
        }
        *pp = r->next; /* off the queue */
        if (m->tail == r)
            m->tail = prev;
        r->next = NULL;
        *btail = r;
        btail = &r->next;
        rows += r->rows;
        m->queued_rows -= r->rows;
        if (rows >= (uint32_t)s->o.max_batch)
            break;
    }
    *rows_out = rows;
    return batch;
}

/* Send model mi's batch that starts with `first` to server ix. 0, or -1
 * (nothing taken off the queue). */
static int send_batch(tfos__serve *s, int mi, int ix, req *first)
{
    model *m = &s->models[mi];
    flight *fl = calloc(1, sizeof *fl);
    if (!fl)
        return -1;
    uint32_t rows;
    req *reqs = take_batch(s, m, first, &rows);
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
    char *batch = total ? malloc(total) : NULL;
    if (batch) {
        tfos__batch_write_header(batch, total, rows, (uint32_t)m->nin, 0, cols);
        for (int i = 0; i < m->nin; i++) {
            char *p = batch + cols[i].data_off;
            for (req *r = reqs; r; r = r->next) {
                memcpy(p, r->data[i], r->nbytes[i]);
                p += r->nbytes[i];
            }
        }
    }
    /* the model, the version asked for ("": the server's latest), and how
     * long the server has before it must end itself as hung */
    char left[24];
    snprintf(left, sizeof left, "%lld", (long long)(s->o.timeout_s * 1000));
    const char *kv[] = {"model", m->name, "version", first->version, "timeout_ms", left, NULL};
    if (!batch || tfos__serve_send(s, ix, TFOS_MSG_SERVE_BATCH, s->next_batch, kv, batch, total)) {
        free(batch);
        free(fl);
        push_front(m, reqs);
        return -1;
    }
    free(batch);
    fl->id = s->next_batch++;
    fl->server = ix;
    fl->model = mi;
    fl->reqs = reqs;
    fl->rows = rows;
    fl->sent = tfos__now_ms();
    m->batches++;
    fl->next = s->flights;
    s->flights = fl;
    s->servers[ix].inflight++;
    return 0;
}

/* Model mi's first request (oldest first) that a server can take now, and
 * the server; NULL when there is none. A request naming a version on no
 * server with room is stepped over (it waits, within its deadline), so it
 * never holds up those behind it. */
static req *first_placeable(tfos__serve *s, int mi, int *ix)
{
    char blocked[8][32];
    int nblocked = 0;
    for (req *r = s->models[mi].head; r; r = r->next) {
        int seen = 0;
        for (int k = 0; k < nblocked && !seen; k++)
            seen = !strcmp(blocked[k], r->version);
        if (seen)
            continue;
        if ((*ix = pick_server(s, mi, r->version)) >= 0)
            return r;
        if (!r->version[0])
            return NULL; /* no server has room at all */
        if (nblocked < 8)
            snprintf(blocked[nblocked++], sizeof blocked[0], "%s", r->version);
    }
    return NULL;
}

/* Requests in batches on servers that are past their deadline: 504 now,
 * the rest of the batch runs on. */
static void expire_in_flight(tfos__serve *s, int64_t now)
{
    for (flight *fl = s->flights; fl; fl = fl->next)
        for (req *r = fl->reqs; r; r = r->next)
            if (!r->done && r->deadline <= now)
                tfos__serve_fail_in_flight(s, r, 504, "model %s: model server worker:%d has not answered the batch "
                                           "holding this request in %.1f s (--timeout %g s)", s->models[fl->model].name,
                                           s->servers[fl->server].node, (double)(now - fl->sent) / 1000,
                                           s->o.timeout_s);
}

/* Servers that hold a batch past --timeout (and the grace their own
 * watchdog has): hung. */
static void end_hung_servers(tfos__serve *s, int64_t now)
{
    for (;;) {
        const flight *late = NULL;
        for (const flight *fl = s->flights; fl && !late; fl = fl->next)
            if (now - fl->sent >= hung_after_ms(s))
                late = fl;
        if (!late)
            return;
        tfos__serve_end_hung(s, late->server, late); /* its flights leave the list */
    }
}

void tfos__serve_dispatch(tfos__serve *s)
{
    int64_t now = tfos__now_ms();
    expire_in_flight(s, now);
    end_hung_servers(s, now);
    for (int mi = 0; mi < s->nmodels; mi++) {
        model *m = &s->models[mi];
        /* those past their deadline leave the queue first, then are
         * answered: an answer can drop its client (it does not read),
         * which frees that client's requests still in the queue */
        for (req *r = take_from_queue(m, past_deadline, &now), *next; r; r = next) {
            next = r->next;
            if (r->version[0] && !tfos__serve_version_ready(s, mi, r->version, NULL, 0))
                tfos__serve_fail_req(s, r, 504, "model %s: no model server holding version %s answered within %g s "
                                     "(%d ready)", m->name, r->version, s->o.timeout_s, tfos__serve_servers_ready(s));
            else
                tfos__serve_fail_req(s, r, 504, "model %s: no model server answered within %g s (%d ready)", m->name,
                                     s->o.timeout_s, tfos__serve_servers_ready(s));
        }
        for (;;) {
            int ix;
            req *r = m->head ? first_placeable(s, mi, &ix) : NULL;
            if (!r)
                break;
            int due = m->queued_rows >= s->o.max_batch || s->o.max_delay_ms < 0 ||
                      now - r->t0 >= s->o.max_delay_ms || r->group;
            if (!due || send_batch(s, mi, ix, r))
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
    for (const flight *fl = s->flights; fl; fl = fl->next) {
        if (fl->sent + hung_after_ms(s) < at)
            at = fl->sent + hung_after_ms(s);
        for (const req *r = fl->reqs; r; r = r->next)
            if (!r->done && r->deadline < at)
                at = r->deadline;
    }
    if (at == INT64_MAX)
        tfos__timer_disarm(s->loop, &s->timer);
    else
        tfos__timer_arm(s->loop, &s->timer, at, on_timer, s);
}

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
