/* serve_test.c: tfos serve's front end and batcher as a unit: a tfos__serve
 * on a loop in this thread, fake model servers and a local client speaking
 * the link over real sockets from threads of their own. Batching by
 * max_batch and by max_delay, 504 at the deadline, a dropped server's batch
 * sent again to another, a server with the wrong secret refused, and idle
 * connections that cannot keep a model server out. */
#include "check.h"
#include "core/batch.h"
#include "core/link.h"
#include "platform/clock.h"
#include "platform/net.h"
#include "serve/serve_int.h"
#include "tfos/tfos.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <unistd.h>

static const char *SECRET = "73656372657420666f72207468652073657276652074657374206f6e6c792121";
static const char *MODELS_JSON =
    "{\"models\": [{\"name\": \"m\", \"versions\": [\"1\"], \"platform\": \"test\", "
    "\"inputs\": [{\"name\": \"x\", \"datatype\": \"FP32\", \"shape\": [-1, 2]}], "
    "\"outputs\": [{\"name\": \"y\", \"datatype\": \"FP32\", \"shape\": [-1, 2]}]}]}";

static char logbuf[1 << 16];
static size_t loglen;
static pthread_mutex_t logmu = PTHREAD_MUTEX_INITIALIZER;

static void capture(int level, const char *msg, void *user)
{
    (void)level;
    (void)user;
    pthread_mutex_lock(&logmu);
    int n = snprintf(logbuf + loglen, sizeof logbuf - loglen, "%s\n", msg);
    if (n > 0 && (size_t)n < sizeof logbuf - loglen)
        loglen += (size_t)n;
    pthread_mutex_unlock(&logmu);
}

static int logged(const char *needle)
{
    pthread_mutex_lock(&logmu);
    int r = strstr(logbuf, needle) != NULL;
    pthread_mutex_unlock(&logmu);
    return r;
}

/* rows of a one-column FP32 batch, each row {v, v + 0.5}; malloc'd */
static char *make_batch(const char *name, uint32_t rows, float v, uint64_t *len)
{
    tfos__col c = {.name = name, .name_len = (uint16_t)strlen(name), .kind = TFOS_COL_FIXED, .dtype = TFOS_DT_F32,
                   .ndim = 1, .shape = {2}};
    uint64_t total = tfos__batch_layout(rows, 1, &c);
    char *b = calloc(1, total);
    tfos__batch_write_header(b, total, rows, 1, 0, &c);
    float *d = (float *)(b + c.data_off);
    for (uint32_t r = 0; r < rows; r++) {
        d[2 * r] = v + (float)r;
        d[2 * r + 1] = v + (float)r + 0.5f;
    }
    *len = total;
    return b;
}

/* ---- a fake model server: y = 2 x ----------------------------------------- */

typedef struct fake {
    const char *addr;
    const char *secret;
    int node;
    int answer;             /* 1: answer batches; 0: hang up on the first one */
    int refused;            /* the front end said ERROR (code) */
    int batches;
    uint32_t rows[64];      /* rows of each batch */
    atomic_int stop, joined, done;
} fake;

static void *fake_run(void *arg)
{
    fake *f = arg;
    tfos__link *k;
    char err[256];
    CHECK_EQ(tfos__link_dial(&k, f->addr, NULL, tfos__now_ms() + 3000, 0, 0, err, sizeof err), 0);
    tfos__link_set_limits(k, 1u << 30, 0);
    tfos__msg m;
    tfos__link_hello(k, &m, TFOS_MSG_SERVE_JOIN, f->secret);
    tfos__msg_add(&m, "node", "%d", f->node);
    CHECK_EQ(tfos__msg_end(&m), 0);
    CHECK_EQ(tfos__link_send(k, &m, NULL, 0), 0);
    tfos__msg_fini(&m);
    tfos__frame fr;
    CHECK_EQ(tfos__link_wait_frame(k, 3000, &fr, NULL), 0);
    if (fr.type == TFOS_MSG_ERROR) {
        long long code = 0;
        tfos__kv_int(fr.meta, fr.meta_len, "code", -100, 0, &code);
        f->refused = (int)code;
        goto out;
    }
    CHECK_EQ(fr.type, TFOS_MSG_SERVE_OK);
    tfos__msg_begin_data(&m, TFOS_MSG_SERVE_MODELS, 0);
    CHECK_EQ(tfos__msg_end_data(&m, strlen(MODELS_JSON)), 0);
    CHECK_EQ(tfos__link_send(k, &m, MODELS_JSON, strlen(MODELS_JSON)), 0);
    tfos__msg_fini(&m);
    CHECK_EQ(tfos__link_flush_wait(k, 3000), 0);
    atomic_store(&f->joined, 1);
    while (!atomic_load(&f->stop)) {
        int rc = tfos__link_wait_frame(k, 20, &fr, NULL);
        if (rc == TFOS_ETIMEDOUT)
            continue;
        if (rc)
            break;
        CHECK_EQ(fr.type, TFOS_MSG_SERVE_BATCH);
        char model[32] = "";
        CHECK_EQ(tfos__kv_str(fr.meta, fr.meta_len, "model", model, sizeof model), 0);
        CHECK_STR(model, "m");
        tfos__col cols[4];
        tfos__batch_view v;
        CHECK_EQ(tfos__batch_open(fr.body, fr.body_len, &v, cols, 4, err, sizeof err), 0);
        if (f->batches < 64)
            f->rows[f->batches] = v.nrows;
        f->batches++;
        if (!f->answer)
            break; /* hang up with the batch in hand */
        uint64_t len;
        char *out = make_batch("y", v.nrows, 0, &len);
        tfos__col oc[1];
        tfos__batch_view ov;
        CHECK_EQ(tfos__batch_open(out, len, &ov, oc, 1, err, sizeof err), 0);
        /* a body sits where its frame left it in the link's buffer: not
         * aligned, so its numbers are copied out, not cast */
        for (uint32_t i = 0; i < 2 * v.nrows; i++) {
            float xv;
            memcpy(&xv, fr.body + v.cols[0].data_off + 4 * i, 4);
            xv *= 2;
            memcpy(out + ov.cols[0].data_off + 4 * i, &xv, 4);
        }
        tfos__msg_begin_data(&m, TFOS_MSG_SERVE_RESULT, fr.id);
        tfos__msg_add(&m, "version", "%s", "1");
        CHECK_EQ(tfos__msg_end_data(&m, len), 0);
        CHECK_EQ(tfos__link_send(k, &m, out, len), 0);
        CHECK_EQ(tfos__link_flush_wait(k, 3000), 0);
        tfos__msg_fini(&m);
        free(out);
    }
out:
    tfos__link_close(k);
    atomic_store(&f->done, 1);
    return NULL;
}

/* ---- a local client: n requests of `rows` rows each, pipelined -------------- */

typedef struct asker {
    const char *addr;
    int n;
    uint32_t rows;
    int spacing_ms;         /* between requests */
    int status[64];         /* 200, or the SERVE_FAIL's */
    int right[64];          /* the answer was 2 x its own rows */
    int64_t took_ms[64];    /* from its request to its answer */
    atomic_int done;
} asker;

static void *asker_run(void *arg)
{
    asker *a = arg;
    tfos__link *k;
    char err[256];
    CHECK_EQ(tfos__link_dial(&k, a->addr, NULL, tfos__now_ms() + 3000, 0, 0, err, sizeof err), 0);
    tfos__link_set_limits(k, 1u << 30, 0);
    tfos__msg m;
    tfos__link_hello(k, &m, TFOS_MSG_SERVE_CLIENT, NULL); /* no token: the peer uid */
    CHECK_EQ(tfos__msg_end(&m), 0);
    CHECK_EQ(tfos__link_send(k, &m, NULL, 0), 0);
    tfos__msg_fini(&m);
    tfos__frame fr;
    CHECK_EQ(tfos__link_wait_frame(k, 3000, &fr, NULL), 0);
    CHECK_EQ(fr.type, TFOS_MSG_SERVE_OK);
    int64_t sent[64];
    for (int i = 0; i < a->n; i++) {
        uint64_t len;
        char *b = make_batch("x", a->rows, (float)(100 * i), &len);
        tfos__msg_begin_data(&m, TFOS_MSG_SERVE_INFER, (uint64_t)i);
        tfos__msg_add(&m, "model", "%s", "m");
        tfos__msg_add(&m, "version", "%s", "");
        CHECK_EQ(tfos__msg_end_data(&m, len), 0);
        sent[i] = tfos__now_ms();
        CHECK_EQ(tfos__link_send(k, &m, b, len), 0);
        CHECK_EQ(tfos__link_flush_wait(k, 3000), 0);
        tfos__msg_fini(&m);
        free(b);
        if (a->spacing_ms)
            usleep((useconds_t)a->spacing_ms * 1000);
    }
    for (int got = 0; got < a->n; got++) {
        CHECK_EQ(tfos__link_wait_frame(k, 10000, &fr, NULL), 0);
        int i = (int)fr.id;
        CHECK(i >= 0 && i < a->n);
        a->took_ms[i] = tfos__now_ms() - sent[i];
        if (fr.type == TFOS_MSG_SERVE_FAIL) {
            long long st = 0;
            tfos__kv_int(fr.meta, fr.meta_len, "status", 100, 599, &st);
            a->status[i] = (int)st;
            continue;
        }
        CHECK_EQ(fr.type, TFOS_MSG_SERVE_RESULT);
        a->status[i] = 200;
        char version[8] = "";
        tfos__kv_str(fr.meta, fr.meta_len, "version", version, sizeof version);
        tfos__col cols[1];
        tfos__batch_view v;
        CHECK_EQ(tfos__batch_open(fr.body, fr.body_len, &v, cols, 1, err, sizeof err), 0);
        int ok = v.nrows == a->rows && !strcmp(version, "1");
        for (uint32_t r = 0; ok && r < a->rows; r++) {
            float y[2];
            memcpy(y, fr.body + v.cols[0].data_off + 8 * r, 8);
            ok = y[0] == 2 * (float)(100 * i + (int)r) && y[1] == 2 * ((float)(100 * i + (int)r) + 0.5f);
        }
        a->right[i] = ok;
    }
    tfos__link_close(k);
    atomic_store(&a->done, 1);
    return NULL;
}

/* ---- the front end ------------------------------------------------------------ */

typedef struct fe {
    tfos__loop *loop;
    tfos__serve *s;
} fe;

static void fe_open(fe *e, int max_batch, int max_delay_ms, double timeout_s, const char *tcp_host)
{
    CHECK_EQ(tfos__loop_open(&e->loop), 0);
    char *names[] = {(char *)"m"};
    tfos_serve_opts o = {.models = names, .nmodels = 1, .max_batch = max_batch, .max_delay_ms = max_delay_ms,
                         .timeout_s = timeout_s};
    char err[256];
    int rc = tfos__serve_open(&e->s, e->loop, &o, SECRET, tcp_host, err, sizeof err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    CHECK_EQ(rc, 0);
    loglen = 0;
    logbuf[0] = 0;
}

static void fe_run_until(fe *e, atomic_int *flag, int ms)
{
    int64_t deadline = tfos__now_ms() + ms;
    while (!atomic_load(flag) && tfos__now_ms() < deadline)
        tfos__loop_run(e->loop, 5);
    CHECK(atomic_load(flag));
}

static void fe_close(fe *e)
{
    tfos__serve_close(e->s);
    tfos__loop_close(e->loop);
}

static void start_fake(fe *e, pthread_t *t, fake *f, const char *addr, const char *secret, int node, int answer)
{
    memset(f, 0, sizeof *f);
    f->addr = addr;
    f->secret = secret;
    f->node = node;
    f->answer = answer;
    CHECK_EQ(pthread_create(t, NULL, fake_run, f), 0);
    int64_t deadline = tfos__now_ms() + 5000;
    while (!atomic_load(&f->joined) && !atomic_load(&f->done) && tfos__now_ms() < deadline)
        tfos__loop_run(e->loop, 5);
    /* and the front end has taken its models */
    deadline = tfos__now_ms() + 2000;
    while (atomic_load(&f->joined) && tfos__now_ms() < deadline && !tfos__serve_servers_ready(e->s))
        tfos__loop_run(e->loop, 5);
}

static void stop_fake(fe *e, pthread_t t, fake *f)
{
    atomic_store(&f->stop, 1);
    fe_run_until(e, &f->done, 5000);
    pthread_join(t, NULL);
}

static void ask(fe *e, asker *a, const char *addr, int n, uint32_t rows, int spacing_ms)
{
    memset(a, 0, sizeof *a);
    a->addr = addr;
    a->n = n;
    a->rows = rows;
    a->spacing_ms = spacing_ms;
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, asker_run, a), 0);
    fe_run_until(e, &a->done, 15000);
    pthread_join(t, NULL);
}

static void batching(void)
{
    fe e;
    fe_open(&e, 8, 300, 10, NULL);
    pthread_t t;
    fake f;
    start_fake(&e, &t, &f, e.s->address, SECRET, 0, 1);
    CHECK_EQ(tfos__serve_servers_ready(e.s), 1);
    CHECK(logged("model server worker:0 is ready (1 ready)"));
    /* eight one-row requests at once: one batch of max_batch rows, at once */
    asker a;
    ask(&e, &a, e.s->address, 8, 1, 0);
    for (int i = 0; i < 8; i++)
        CHECK(a.status[i] == 200 && a.right[i]);
    CHECK_EQ(f.batches, 1);
    CHECK_EQ(f.rows[0], 8);
    for (int i = 0; i < 8; i++)
        CHECK(a.took_ms[i] < 250); /* not held for the delay */
    /* three: fewer than max_batch, so they wait out max_delay and go together */
    ask(&e, &a, e.s->address, 3, 2, 0);
    for (int i = 0; i < 3; i++)
        CHECK(a.status[i] == 200 && a.right[i] && a.took_ms[i] >= 250);
    CHECK_EQ(f.batches, 2);
    CHECK_EQ(f.rows[1], 6);
    /* a request of more rows than max_batch goes alone, whole */
    ask(&e, &a, e.s->address, 1, 20, 0);
    CHECK(a.status[0] == 200 && a.right[0]);
    CHECK_EQ(f.rows[2], 20);
    stop_fake(&e, t, &f);
    fe_close(&e);
}

static void deadline_and_requeue(void)
{
    fe e;
    fe_open(&e, 4, -1, 2, NULL);
    /* a server that takes the first batch and hangs up with it */
    pthread_t t1, t2;
    fake quitter, steady;
    start_fake(&e, &t1, &quitter, e.s->address, SECRET, 0, 0);
    asker a;
    memset(&a, 0, sizeof a);
    a.addr = e.s->address;
    a.n = 1;
    a.rows = 3;
    pthread_t at;
    CHECK_EQ(pthread_create(&at, NULL, asker_run, &a), 0);
    fe_run_until(&e, &quitter.done, 5000);
    pthread_join(t1, NULL);
    CHECK_EQ(quitter.batches, 1);
    int64_t deadline = tfos__now_ms() + 2000;
    while (!logged("left: its connection closed; its 1 batch(es) go to another") && tfos__now_ms() < deadline)
        tfos__loop_run(e.loop, 5);
    CHECK(logged("model server 0 (node worker:0) left: its connection closed; its 1 batch(es) go to another"));
    CHECK_EQ(tfos__serve_servers_ready(e.s), 0);
    /* its batch went back to the queue: the next server answers it, whole */
    start_fake(&e, &t2, &steady, e.s->address, SECRET, 1, 1);
    fe_run_until(&e, &a.done, 5000);
    pthread_join(at, NULL);
    CHECK(a.status[0] == 200 && a.right[0]);
    CHECK_EQ(steady.batches, 1);
    CHECK_EQ(steady.rows[0], 3);
    stop_fake(&e, t2, &steady);
    /* no server now: a request waits out the timeout and gets 504 */
    ask(&e, &a, e.s->address, 1, 1, 0);
    CHECK_EQ(a.status[0], 504);
    CHECK(a.took_ms[0] >= 1800 && a.took_ms[0] < 6000);
    fe_close(&e);
}

#define IDLE 200 /* more than the places of either kind but local clients' */

static void refused_and_idle_peers(void)
{
    fe e;
    fe_open(&e, 4, -1, 5, "127.0.0.1");
    const char *tcp = tfos__serve_address(e.s);
    CHECK(!strncmp(tcp, "127.0.0.1:", 10));
    /* a model server with the wrong secret, over TCP: refused, never ready */
    pthread_t t;
    fake f;
    start_fake(&e, &t, &f, tcp, "0000000000000000000000000000000000000000000000000000000000000000", 0, 1);
    fe_run_until(&e, &f.done, 3000);
    pthread_join(t, NULL);
    CHECK_EQ(f.refused, TFOS_EAUTH);
    CHECK_EQ(tfos__serve_servers_ready(e.s), 0);
    CHECK(logged("does not know the cluster secret"));
    /* more idle connections than there are places, on both listeners: a
     * real model server still joins */
    char host[64];
    int port;
    CHECK_EQ(tfos__parse_hostport(tcp, host, sizeof host, &port), 0);
    int idle[IDLE];
    for (int i = 0; i < IDLE; i++) {
        CHECK_EQ(tfos__tcp_connect(host, port, 2000, &idle[i]), 0);
        if (i % 16 == 0)
            tfos__loop_run(e.loop, 0);
    }
    for (int i = 0; i < 50; i++)
        tfos__loop_run(e.loop, 2);
    start_fake(&e, &t, &f, tcp, SECRET, 3, 1);
    CHECK(atomic_load(&f.joined));
    CHECK_EQ(tfos__serve_servers_ready(e.s), 1);
    asker a;
    ask(&e, &a, e.s->address, 2, 2, 0);
    CHECK(a.status[0] == 200 && a.right[0] && a.status[1] == 200 && a.right[1]);
    stop_fake(&e, t, &f);
    for (int i = 0; i < IDLE; i++)
        close(idle[i]);
    fe_close(&e);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    tfos_set_logger(capture, NULL);
    RUN(batching);
    RUN(deadline_and_requeue);
    RUN(refused_and_idle_peers);
    return 0;
}
