/* meter.c: the feed meter of a `tfos run` (see meter.h). The launcher's
 * loop reads the feeder's live counters into it (tfos__feed_meter_update)
 * and the status endpoints (status.c) read it; everything runs on that one
 * thread, so neither side takes a lock. */
#include "feed/meter.h"

#include "platform/clock.h"
#include "tfos/tfos.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WIN (TFOS__FEED_RATE_WINDOW + 1)

void tfos__feed_meter_init(tfos__feed_meter *m, int64_t now_ms)
{
    memset(m, 0, sizeof *m);
    m->t0_ms = now_ms;
    m->state = "none";
    m->source = "files";
}

void tfos__feed_meter_fini(tfos__feed_meter *m)
{
    free(m->nodes);
    m->nodes = NULL;
    m->nnodes = 0;
}

static void add_counts(tfos__feed_counts *to, const tfos__feed_counts *c)
{
    to->rows += c->rows;
    to->bytes += c->bytes;
    to->records += c->records;
    to->partitions_completed += c->partitions_completed;
    to->partitions_aborted += c->partitions_aborted;
}

int tfos__feed_meter_start(tfos__feed_meter *m, const tfos__feed_progress *p, const char *source, int64_t now_ms)
{
    tfos__feed_node_meter *nodes = calloc((size_t)(p->nnodes > 0 ? p->nnodes : 1), sizeof *nodes);
    if (!nodes)
        return TFOS_ENOMEM;
    for (int i = 0; i < p->nnodes; i++) {
        snprintf(nodes[i].name, sizeof nodes[i].name, "%s", p->nodes[i].name);
        nodes[i].executor_id = p->nodes[i].executor_id;
    }
    free(m->nodes);
    m->nodes = nodes;
    m->nnodes = p->nnodes;
    add_counts(&m->base, &m->total); /* an earlier attempt's feed */
    memset(&m->total, 0, sizeof m->total);
    m->taken_at_start = m->taken;
    m->reported_in = 0; /* a new cluster's agents have not reported yet */
    m->rows_per_s = m->bytes_per_s = m->read_per_s = 0;
    m->input_bytes = m->input_bytes_read = m->rows_expected = m->partitions_expected = 0;
    memset(m->snap_read, 0, sizeof m->snap_read); /* read counts restart with the attempt */
    m->active = 1;
    m->state = "feeding";
    m->source = source;
    m->rows_counted = p->rows_counted;
    m->feed_t0_ms = m->node_since_ms = now_ms;
    m->feed_t1_ms = 0;
    if (!m->snap_n)
        m->next_sample_ms = now_ms; /* the first sample at once: the chart starts at 0 */
    return 0;
}

static const char *static_state(const char *state)
{
    static const char *const states[] = {"feeding", "done", "failed", "stopped"};
    for (int k = 0; k < 4; k++)
        if (state && !strcmp(state, states[k]))
            return states[k];
    return "feeding";
}

void tfos__feed_meter_set(tfos__feed_meter *m, const char *state, uint64_t rows, uint64_t partitions_completed,
                          uint64_t partitions_aborted, uint64_t partitions_expected, int64_t now_ms)
{
    state = static_state(state);
    int starts = !m->active || (strcmp(m->state, "feeding") && !strcmp(state, "feeding"));
    if (starts) {
        if (m->active)
            add_counts(&m->base, &m->total); /* an earlier feed of this run */
        memset(&m->total, 0, sizeof m->total);
        m->active = 1;
        m->source = "spark";
        m->taken_at_start = m->taken;
        m->rows_counted = 1;
        m->bytes_uncounted = 1;
        m->feed_t0_ms = m->node_since_ms = now_ms;
        m->feed_t1_ms = 0;
        if (!m->snap_n)
            m->next_sample_ms = now_ms;
    }
    m->total.rows = rows;
    m->total.partitions_completed = partitions_completed;
    m->total.partitions_aborted = partitions_aborted;
    m->partitions_expected = partitions_expected;
    if (strcmp(state, "feeding") && !strcmp(m->state, "feeding"))
        m->feed_t1_ms = now_ms;
    m->state = state;
    tfos__feed_meter_update(m, NULL, now_ms);
}

/* Average rate between two snapshots; counts that restart with an attempt
 * count from `since` (when they were 0). */
static double rate(uint64_t now_v, uint64_t old_v, int64_t now_t, int64_t old_t, int64_t since)
{
    if (old_t < since) {
        old_t = since;
        old_v = 0;
    }
    if (now_v < old_v || now_t <= old_t)
        return 0;
    return (double)(now_v - old_v) * 1000.0 / (double)(now_t - old_t);
}

void tfos__feed_meter_taken(tfos__feed_meter *m, uint64_t rows_out)
{
    if (rows_out < m->taken_last) /* a new cluster: its counts start at 0 */
        m->taken_base += m->taken_last;
    m->taken_last = rows_out;
    m->taken = m->taken_base + rows_out;
    m->taken_known = 1;
}

void tfos__feed_meter_taken_from(tfos__feed_meter *m, const tfos_coord *c)
{
    if (!c)
        return;
    uint64_t sum = 0, in = 0;
    int any = 0;
    for (int i = 0, n = tfos_coord_node_count(c); i < n; i++) {
        tfos_node_info ni;
        if (tfos_coord_node(c, i, &ni) == 0 && ni.has_feed) {
            sum += ni.rows_out;
            in += ni.rows_in;
            any = 1;
        }
    }
    m->reported_in = in;
    if (any)
        tfos__feed_meter_taken(m, sum);
}

uint64_t tfos__feed_meter_consumed(const tfos__feed_meter *m)
{
    return m->taken > m->taken_at_start ? m->taken - m->taken_at_start : 0;
}

static void sample(tfos__feed_meter *m, int64_t now_ms)
{
    int k = m->snap_head;
    m->snap_taken[k] = m->taken;
    m->snap_t[k] = now_ms;
    m->snap_rows[k] = m->base.rows + m->total.rows;
    m->snap_bytes[k] = m->base.bytes + m->total.bytes;
    m->snap_read[k] = m->input_bytes_read;
    for (int i = 0; i < m->nnodes; i++) {
        m->nodes[i].snap_rows[k] = m->nodes[i].c.rows;
        m->nodes[i].snap_bytes[k] = m->nodes[i].c.bytes;
    }
    m->snap_head = (k + 1) % WIN;
    if (m->snap_n < WIN)
        m->snap_n++;
    int o = (k - (m->snap_n - 1) + WIN) % WIN; /* the oldest snapshot, up to WINDOW s ago */
    m->rows_per_s = rate(m->snap_rows[k], m->snap_rows[o], now_ms, m->snap_t[o], INT64_MIN);
    m->bytes_per_s = rate(m->snap_bytes[k], m->snap_bytes[o], now_ms, m->snap_t[o], INT64_MIN);
    m->read_per_s = rate(m->snap_read[k], m->snap_read[o], now_ms, m->snap_t[o], m->node_since_ms);
    m->taken_per_s = rate(m->snap_taken[k], m->snap_taken[o], now_ms, m->snap_t[o], INT64_MIN);
    for (int i = 0; i < m->nnodes; i++) {
        tfos__feed_node_meter *n = &m->nodes[i];
        n->rows_per_s = rate(n->snap_rows[k], n->snap_rows[o], now_ms, m->snap_t[o], m->node_since_ms);
        n->bytes_per_s = rate(n->snap_bytes[k], n->snap_bytes[o], now_ms, m->snap_t[o], m->node_since_ms);
    }
    tfos__feed_sample *h = &m->hist[m->hist_head];
    h->t_ms = now_ms - m->t0_ms;
    h->rows = m->snap_rows[k];
    h->bytes = m->snap_bytes[k];
    h->rows_per_s = m->rows_per_s;
    h->bytes_per_s = m->bytes_per_s;
    h->taken = m->taken;
    h->taken_per_s = m->taken_per_s;
    m->hist_head = (m->hist_head + 1) % TFOS__FEED_HISTORY;
    if (m->hist_n < TFOS__FEED_HISTORY)
        m->hist_n++;
    /* one a second; after a stall (a long step), start again from now */
    m->next_sample_ms = (now_ms - m->next_sample_ms >= 1000 ? now_ms : m->next_sample_ms) + 1000;
}

void tfos__feed_meter_update(tfos__feed_meter *m, tfos__feed_progress *p, int64_t now_ms)
{
    if (!m->active)
        return;
    if (p && p->nodes) {
        memset(&m->total, 0, sizeof m->total);
        for (int i = 0; i < m->nnodes && i < p->nnodes; i++) {
            tfos__feed_node *pn = &p->nodes[i];
            tfos__feed_counts *c = &m->nodes[i].c;
            tfos__ring *obs = atomic_load(&pn->observer);
            if (obs) {
                tfos__ring_stats st;
                tfos__ring_stats_get(obs, &st);
                c->bytes = st.bytes;
                c->records = st.records;
                c->partitions_completed = st.partitions_completed;
                c->partitions_aborted = st.partitions_aborted;
            }
            c->rows = atomic_load(&pn->rows);
            add_counts(&m->total, c);
        }
        m->input_bytes = atomic_load(&p->input_bytes);
        m->input_bytes_read = atomic_load(&p->input_bytes_read);
        m->rows_expected = atomic_load(&p->rows_expected);
        m->partitions_expected = atomic_load(&p->partitions_expected);
    }
    if (now_ms >= m->next_sample_ms)
        sample(m, now_ms);
}

void tfos__feed_meter_end(tfos__feed_meter *m, const char *state, int64_t now_ms)
{
    if (!m->active || strcmp(m->state, "feeding"))
        return;
    m->state = state;
    m->feed_t1_ms = now_ms;
}

double tfos__feed_meter_eta(const tfos__feed_meter *m)
{
    if (!m->active || strcmp(m->state, "feeding"))
        return -1;
    if (m->rows_counted && m->rows_expected && m->rows_per_s > 0)
        return m->rows_expected > m->total.rows ? (double)(m->rows_expected - m->total.rows) / m->rows_per_s : 0;
    if (m->input_bytes && m->read_per_s > 0)
        return m->input_bytes > m->input_bytes_read ? (double)(m->input_bytes - m->input_bytes_read) / m->read_per_s
                                                    : 0;
    /* Spark: from the partitions delivered so far */
    uint64_t done = m->total.partitions_completed;
    if (m->bytes_uncounted && m->partitions_expected && done) {
        double elapsed = (double)(tfos__now_ms() - m->feed_t0_ms) / 1000.0;
        return done < m->partitions_expected ? elapsed / (double)done * (double)(m->partitions_expected - done) : 0;
    }
    return -1;
}

static void human_bytes(double b, char *out, size_t len)
{
    if (b >= 1e9)
        snprintf(out, len, "%.2f GB", b / 1e9);
    else if (b >= 1e6)
        snprintf(out, len, "%.1f MB", b / 1e6);
    else if (b >= 1e3)
        snprintf(out, len, "%.1f kB", b / 1e3);
    else
        snprintf(out, len, "%.0f B", b);
}

static void human_secs(double s, char *out, size_t len)
{
    long v = (long)(s + 0.5);
    if (v < 90)
        snprintf(out, len, "%ld s", v);
    else if (v < 5400)
        snprintf(out, len, "%ld min %02ld s", v / 60, v % 60);
    else
        snprintf(out, len, "%ld h %02ld min", v / 3600, (v % 3600 + 30) / 60);
}

void tfos__feed_meter_line(const tfos__feed_meter *m, uint64_t partition_rows, char *buf, size_t len)
{
    const tfos__feed_counts *t = &m->total;
    char parts[64], size[32], speed[32], tail[96] = "";
    uint64_t done = t->partitions_completed;
    if (m->partitions_expected) {
        snprintf(parts, sizeof parts, "%llu/%llu", (unsigned long long)done,
                 (unsigned long long)m->partitions_expected);
    } else if (m->rows_counted && partition_rows && m->input_bytes && m->input_bytes_read && t->rows) {
        /* CSV and JSON lines are not counted in advance: estimate the rows
         * from the share of the input read so far */
        uint64_t rows = (uint64_t)((double)t->rows * (double)m->input_bytes / (double)m->input_bytes_read);
        uint64_t est = (rows + partition_rows - 1) / partition_rows;
        snprintf(parts, sizeof parts, "%llu/~%llu", (unsigned long long)done,
                 (unsigned long long)(est > done ? est : done));
    } else {
        snprintf(parts, sizeof parts, "%llu", (unsigned long long)done);
    }
    human_bytes((double)t->bytes, size, sizeof size);
    human_bytes(m->bytes_per_s, speed, sizeof speed);
    size_t n = 0;
    if (m->input_bytes)
        n += (size_t)snprintf(tail + n, sizeof tail - n, ", %.0f%% of the input read",
                              100.0 * (double)m->input_bytes_read / (double)m->input_bytes);
    double eta = tfos__feed_meter_eta(m);
    if (eta >= 0 && n < sizeof tail) {
        char e[32];
        human_secs(eta, e, sizeof e);
        snprintf(tail + n, sizeof tail - n, ", ETA %s", e);
    }
    uint64_t consumed = tfos__feed_meter_consumed(m);
    if (strcmp(m->state, "feeding") && m->rows_counted && m->taken_known) {
        int n = snprintf(buf, len, "feed: %s, %llu rows written; the trainers have consumed %llu (%.0f%%)",
                         !strcmp(m->state, "done") ? "all written" : m->state, (unsigned long long)t->rows,
                         (unsigned long long)consumed,
                         t->rows ? 100.0 * (double)consumed / (double)t->rows : 100.0);
        if (m->taken_per_s > 0 && n > 0 && (size_t)n < len)
            snprintf(buf + n, len - (size_t)n, ", %.0f rows/s", m->taken_per_s);
        return;
    }
    if (m->rows_counted && m->taken_known) {
        char c[48];
        snprintf(c, sizeof c, ", %llu consumed", (unsigned long long)consumed);
        if (strlen(tail) + strlen(c) < sizeof tail) {
            memmove(tail + strlen(c), tail, strlen(tail) + 1);
            memcpy(tail, c, strlen(c));
        }
    }
    if (m->rows_counted)
        snprintf(buf, len, "feed: partitions %s%s, %llu rows (%s), %.0f rows/s (%s/s)%s", parts,
                 t->partitions_aborted ? " (some aborted)" : "", (unsigned long long)t->rows, size, m->rows_per_s,
                 speed, tail);
    else
        snprintf(buf, len, "feed: partitions %s%s, %s, %s/s%s", parts, t->partitions_aborted ? " (some aborted)" : "",
                 size, speed, tail);
}
