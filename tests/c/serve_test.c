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

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
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
    int answer;             /* 1: answer batches; 0: hang up on the first one; 2: hold every batch, never answer */
    int delay_ms;           /* before each answer */
    int fail_negative;      /* fail (SERVE_FAIL) a batch that holds a negative x, as a model that raises */
    const char *models;     /* its SERVE_MODELS (NULL: MODELS_JSON, version 1) */
    int refused;            /* the front end said ERROR (code) */
    char error[300];        /* and its message */
    atomic_int batches;     /* read by the test while the thread runs */
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
    const char *models = f->models ? f->models : MODELS_JSON;
    tfos__msg_begin_data(&m, TFOS_MSG_SERVE_MODELS, 0);
    CHECK_EQ(tfos__msg_end_data(&m, strlen(models)), 0);
    CHECK_EQ(tfos__link_send(k, &m, models, strlen(models)), 0);
    tfos__msg_fini(&m);
    CHECK_EQ(tfos__link_flush_wait(k, 3000), 0);
    atomic_store(&f->joined, 1);
    while (!atomic_load(&f->stop)) {
        int rc = tfos__link_wait_frame(k, 20, &fr, NULL);
        if (rc == TFOS_ETIMEDOUT)
            continue;
        if (rc)
            break;
        if (fr.type == TFOS_MSG_ERROR) { /* dropped: why */
            long long code = 0;
            tfos__kv_int(fr.meta, fr.meta_len, "code", -100, 0, &code);
            f->refused = (int)code;
            tfos__kv_str(fr.meta, fr.meta_len, "message", f->error, sizeof f->error);
            break;
        }
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
        if (f->answer == 2) /* hung: the batch stays here */
            continue;
        if (f->delay_ms)
            usleep((useconds_t)f->delay_ms * 1000);
        int negative = 0;
        for (uint32_t i = 0; i < 2 * v.nrows; i++) {
            float xv;
            memcpy(&xv, fr.body + v.cols[0].data_off + 4 * i, 4);
            negative |= xv < 0;
        }
        if (f->fail_negative && negative) {
            static const char why[] = "ValueError: a negative x";
            tfos__msg_begin_data(&m, TFOS_MSG_SERVE_FAIL, fr.id);
            CHECK_EQ(tfos__msg_end_data(&m, strlen(why)), 0);
            CHECK_EQ(tfos__link_send(k, &m, why, strlen(why)), 0);
            CHECK_EQ(tfos__link_flush_wait(k, 3000), 0);
            tfos__msg_fini(&m);
            continue;
        }
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
    const char *version[64]; /* each request's (NULL: none named) */
    int negative;           /* this request's rows are negative (1-based; 0: none is) */
    int status[64];         /* 200, or the SERVE_FAIL's */
    char error[64][300];    /* the SERVE_FAIL's body */
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
        char *b = make_batch("x", a->rows, a->negative == i + 1 ? -1000.0f : (float)(100 * i), &len);
        tfos__msg_begin_data(&m, TFOS_MSG_SERVE_INFER, (uint64_t)i);
        tfos__msg_add(&m, "model", "%s", "m");
        tfos__msg_add(&m, "version", "%s", a->version[i] ? a->version[i] : "");
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
            snprintf(a->error[i], sizeof a->error[i], "%.*s", (int)fr.body_len, fr.body);
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

/* Start a prepared fake model server and run the front end until it has
 * joined (or been refused). */
static void fake_go(fe *e, pthread_t *t, fake *f)
{
    CHECK_EQ(pthread_create(t, NULL, fake_run, f), 0);
    int64_t deadline = tfos__now_ms() + 5000;
    while (!atomic_load(&f->joined) && !atomic_load(&f->done) && tfos__now_ms() < deadline)
        tfos__loop_run(e->loop, 5);
    /* and the front end has taken its models */
    deadline = tfos__now_ms() + 2000;
    while (atomic_load(&f->joined) && tfos__now_ms() < deadline && !tfos__serve_servers_ready(e->s))
        tfos__loop_run(e->loop, 5);
}

static void start_fake(fe *e, pthread_t *t, fake *f, const char *addr, const char *secret, int node, int answer)
{
    memset(f, 0, sizeof *f);
    f->addr = addr;
    f->secret = secret;
    f->node = node;
    f->answer = answer;
    fake_go(e, t, f);
}

static void stop_fake(fe *e, pthread_t t, fake *f)
{
    atomic_store(&f->stop, 1);
    fe_run_until(e, &f->done, 5000);
    pthread_join(t, NULL);
}

/* Run a prepared asker to its end. */
static void ask_run(fe *e, asker *a)
{
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, asker_run, a), 0);
    fe_run_until(e, &a->done, 15000);
    pthread_join(t, NULL);
}

static void ask(fe *e, asker *a, const char *addr, int n, uint32_t rows, int spacing_ms)
{
    memset(a, 0, sizeof *a);
    a->addr = addr;
    a->n = n;
    a->rows = rows;
    a->spacing_ms = spacing_ms;
    ask_run(e, a);
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


static void run_ms(fe *e, int ms)
{
    int64_t deadline = tfos__now_ms() + ms;
    while (tfos__now_ms() < deadline)
        tfos__loop_run(e->loop, 5);
}

/* Issue 35, item 4: a local request naming a version no server holds is
 * answered 404 at once, as HTTP is, and never waits in the queue in front
 * of the requests behind it. */
static void a_version_no_server_holds_is_404_at_once(void)
{
    fe e;
    fe_open(&e, 8, 200, 10, NULL);
    pthread_t t;
    fake f;
    start_fake(&e, &t, &f, e.s->address, SECRET, 0, 1);
    asker a;
    memset(&a, 0, sizeof a);
    a.addr = e.s->address;
    a.n = 4;
    a.rows = 1;
    a.version[0] = "7";
    a.version[2] = "1";
    ask_run(&e, &a);
    CHECK_EQ(a.status[0], 404);
    CHECK(strstr(a.error[0], "model m has no version 7 loaded (versions: 1)"));
    for (int i = 0; i < 4; i++)
        CHECK(a.took_ms[i] < 3000); /* none waited for the 10 s deadline */
    for (int i = 1; i < 4; i++)
        CHECK(a.status[i] == 200 && a.right[i]);
    stop_fake(&e, t, &f);
    fe_close(&e);
}

static const char *MODELS_V2 =
    "{\"models\": [{\"name\": \"m\", \"versions\": [\"2\"], \"platform\": \"test\", "
    "\"inputs\": [{\"name\": \"x\", \"datatype\": \"FP32\", \"shape\": [-1, 2]}], "
    "\"outputs\": [{\"name\": \"y\", \"datatype\": \"FP32\", \"shape\": [-1, 2]}]}]}";

/* Issue 35, items 4 and 5: a model server that holds its batches (hung)
 * while another serves. Requests in its batches get 504 at their deadline,
 * not when (if ever) it answers; a request for the version only it holds
 * waits in the queue without holding up the one behind it; once it has held
 * a batch past --timeout (and the grace its own watchdog has) it is dropped
 * as hung and told why. */
static void a_hung_server_is_cut_off_at_the_deadline(void)
{
    fe e;
    fe_open(&e, 4, -1, 2, NULL);
    pthread_t th, ts;
    fake hung, steady;
    start_fake(&e, &th, &hung, e.s->address, SECRET, 0, 2);
    memset(&steady, 0, sizeof steady);
    steady.addr = e.s->address;
    steady.secret = SECRET;
    steady.node = 1;
    steady.answer = 1;
    steady.models = MODELS_V2;
    fake_go(&e, &ts, &steady);
    CHECK_EQ(tfos__serve_servers_ready(e.s), 2);
    /* two batches of version 1 on the hung server (its INFLIGHT), a third
     * waits for it, and a fourth that the other can take goes at once */
    asker a;
    memset(&a, 0, sizeof a);
    a.addr = e.s->address;
    a.n = 4;
    a.rows = 1;
    a.spacing_ms = 50;
    a.version[0] = a.version[1] = a.version[2] = "1";
    int64_t t0 = tfos__now_ms();
    ask_run(&e, &a);
    CHECK(a.status[3] == 200 && a.right[3] && a.took_ms[3] < 1000);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(a.status[i], 504);
        CHECK(a.took_ms[i] >= 1800 && a.took_ms[i] < 3500); /* at the 2 s deadline, in flight or queued */
    }
    CHECK(strstr(a.error[0], "model server worker:0 has not answered the batch holding this request"));
    CHECK_EQ(hung.batches, 2);
    /* past 2 s + the grace: dropped as hung, told why, never killed (it is
     * this process) */
    while (!atomic_load(&hung.done) && tfos__now_ms() - t0 < 8000)
        tfos__loop_run(e.loop, 5);
    CHECK(atomic_load(&hung.done));
    CHECK(tfos__now_ms() - t0 >= 3500);
    CHECK(logged("model server 0 (node worker:0) left: it has held a batch of 1 rows for"));
    CHECK(logged("past --timeout (2 s): it is hung; no longer used; its 2 batch(es) go to another"));
    CHECK_EQ(hung.refused, TFOS_EPROTO);
    CHECK(strstr(hung.error, "the front end dropped this model server: it has held a batch"));
    pthread_join(th, NULL);
    CHECK_EQ(tfos__serve_servers_ready(e.s), 1);
    /* the other goes on */
    ask(&e, &a, e.s->address, 2, 1, 0);
    CHECK(a.status[0] == 200 && a.right[0] && a.status[1] == 200 && a.right[1]);
    stop_fake(&e, ts, &steady);
    fe_close(&e);
}

/* Issue 35, item 5: a batch of two requests, the first older: it gets 504
 * at its deadline while the batch runs; the slow answer that comes later
 * still gives the second its own rows. */
static void a_slow_batch_answers_who_is_still_waiting(void)
{
    fe e;
    fe_open(&e, 8, -1, 2, NULL);
    pthread_t t;
    fake f;
    start_fake(&e, &t, &f, e.s->address, SECRET, 0, 1); /* the model is known; then no server */
    stop_fake(&e, t, &f);
    asker a;
    memset(&a, 0, sizeof a);
    a.addr = e.s->address;
    a.n = 2;
    a.rows = 2;
    a.spacing_ms = 1000; /* the second a second younger */
    pthread_t at;
    CHECK_EQ(pthread_create(&at, NULL, asker_run, &a), 0);
    run_ms(&e, 1300); /* both queued */
    memset(&f, 0, sizeof f);
    f.addr = e.s->address;
    f.secret = SECRET;
    f.answer = 1;
    f.delay_ms = 1400;
    fake_go(&e, &t, &f);
    fe_run_until(&e, &a.done, 8000);
    pthread_join(at, NULL);
    CHECK_EQ(f.batches, 1);
    CHECK_EQ(f.rows[0], 4);
    CHECK_EQ(a.status[0], 504);
    CHECK(a.took_ms[0] < 2500);
    CHECK(a.status[1] == 200 && a.right[1]);
    CHECK(!logged("hung"));
    stop_fake(&e, t, &f);
    fe_close(&e);
}

/* Issue 35, item 6: one request that makes the model raise, batched with
 * seven others: the batch is split until it is alone; it alone gets the
 * 500, with the model's error, and the others their answers. */
static void one_bad_request_fails_alone(void)
{
    fe e;
    fe_open(&e, 8, 300, 10, NULL);
    pthread_t t;
    fake f;
    memset(&f, 0, sizeof f);
    f.addr = e.s->address;
    f.secret = SECRET;
    f.answer = 1;
    f.fail_negative = 1;
    fake_go(&e, &t, &f);
    asker a;
    memset(&a, 0, sizeof a);
    a.addr = e.s->address;
    a.n = 8;
    a.rows = 1;
    a.negative = 6; /* request 5 */
    ask_run(&e, &a);
    for (int i = 0; i < 8; i++)
        if (i == 5) {
            CHECK_EQ(a.status[i], 500);
            CHECK(strstr(a.error[i], "model m failed on this request (1 rows; the others batched with it were "
                                     "answered apart): ValueError: a negative x"));
        } else {
            CHECK(a.status[i] == 200 && a.right[i]);
        }
    CHECK_EQ(f.rows[0], 8);
    CHECK(f.batches > 1 && f.batches <= 2 * 8 - 1); /* halves: bounded by the requests */
    /* alone, a failing request gets its 500 at once */
    a.n = 1;
    a.negative = 1;
    memset(a.status, 0, sizeof a.status);
    atomic_store(&a.done, 0);
    ask_run(&e, &a);
    CHECK_EQ(a.status[0], 500);
    CHECK(strstr(a.error[0], "model m failed on this request (1 rows): ValueError: a negative x"));
    stop_fake(&e, t, &f);
    fe_close(&e);
}

/* ---- what a peer that has not authenticated can cost ------------------- */

static long rss_kb(void)
{
    FILE *fp = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (fp && fgets(line, sizeof line, fp))
        if (!strncmp(line, "VmRSS:", 6))
            kb = atol(line + 6);
    if (fp)
        fclose(fp);
    return kb;
}

typedef struct flood {
    const char *addr;       /* "@name" or "host:port" */
    int64_t sent;           /* bytes of the announced frame written before the front end cut it off */
    int greeted;            /* a HELLO came */
    atomic_int done;
} flood;

/* Connect, read the greeting, announce a 1 GiB SERVE_JOIN and write up to
 * 512 MiB of it. */
static void *flood_run(void *arg)
{
    flood *fl = arg;
    int fd = -1;
    if (fl->addr[0] == '@') {
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        size_t n = strlen(fl->addr + 1);
        memcpy(sa.sun_path + 1, fl->addr + 1, n);
        CHECK_EQ(connect(fd, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)), 0);
    } else {
        char host[64];
        int port;
        CHECK_EQ(tfos__parse_hostport(fl->addr, host, sizeof host, &port), 0);
        CHECK_EQ(tfos__tcp_connect(host, port, 2000, &fd), 0);
        int flags = fcntl(fd, F_GETFL);
        fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    }
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    char hello[256];
    fl->greeted = read(fd, hello, sizeof hello) > 12 && !memcmp(hello, "TFOS", 4);
    uint8_t hdr[12] = {'T', 'F', 'O', 'S', TFOS_PROTOCOL_VERSION, TFOS_MSG_SERVE_JOIN, 0, 0, 0x40, 0, 0, 0};
    static char chunk[1 << 20];
    if (fl->greeted && write(fd, hdr, sizeof hdr) == sizeof hdr)
        while (fl->sent < (512ll << 20)) {
            ssize_t w = send(fd, chunk, sizeof chunk, MSG_NOSIGNAL);
            if (w <= 0)
                break;
            fl->sent += w;
        }
    close(fd);
    atomic_store(&fl->done, 1);
    return NULL;
}

static void announce_a_gib(fe *e, const char *addr)
{
    flood fl = {.addr = addr};
    long before = rss_kb();
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, flood_run, &fl), 0);
    fe_run_until(e, &fl.done, 20000);
    pthread_join(t, NULL);
    long grown = rss_kb() - before;
    fprintf(stderr, "a 1 GiB frame announced on %s: %lld bytes of it written, RSS grew %ld kB\n", addr,
            (long long)fl.sent, grown);
    CHECK(fl.greeted);
    CHECK(fl.sent < (64ll << 20)); /* cut off at once: the socket's buffers, not the frame */
    CHECK(grown < 16 * 1024);
    CHECK(logged("frame larger than the limit (1073741824 bytes, at most 65536 before authenticating)"));
}

/* Issue 35, item 1: an unauthenticated peer that announces a 1 GiB frame
 * is refused from the header, on the Unix socket and on TCP (tfos yarn
 * serve), and costs no memory; a peer of another uid is refused at accept,
 * before a greeting; a local client that never reads its answers is
 * dropped at its bound, the front end's memory for it bounded. */
static void unauthenticated_peers_cost_little(void)
{
    fe e;
    fe_open(&e, 4, -1, 5, "127.0.0.1");
    announce_a_gib(&e, e.s->address);
    loglen = 0;
    logbuf[0] = 0;
    announce_a_gib(&e, tfos__serve_address(e.s));
    if (geteuid() == 0) {
        /* another user (nobody): the socket is closed before any greeting */
        int p[2];
        CHECK_EQ(pipe(p), 0);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            close(p[0]);
            if (setgid(65534) || setuid(65534))
                _exit(3);
            int fd = socket(AF_UNIX, SOCK_STREAM, 0);
            struct sockaddr_un sa = {.sun_family = AF_UNIX};
            size_t n = strlen(e.s->address + 1);
            memcpy(sa.sun_path + 1, e.s->address + 1, n);
            if (connect(fd, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)))
                _exit(4);
            struct timeval tv = {.tv_sec = 5};
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            char b[64];
            ssize_t r = read(fd, b, sizeof b);
            char got = r == 0 ? 'C' : r > 0 ? 'H' : 'T'; /* closed, a hello, nothing in time */
            if (write(p[1], &got, 1) != 1)
                _exit(5);
            _exit(0);
        }
        close(p[1]);
        char got = 0;
        int64_t deadline = tfos__now_ms() + 8000;
        fcntl(p[0], F_SETFL, O_NONBLOCK);
        while (tfos__now_ms() < deadline && read(p[0], &got, 1) != 1)
            tfos__loop_run(e.loop, 5);
        int st;
        waitpid(pid, &st, 0);
        close(p[0]);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        CHECK_EQ(got, 'C');
    }
    fe_close(&e);
}

typedef struct deaf {
    const char *addr;
    int sent;               /* requests written */
    int refused;            /* the front end closed the link on it */
    atomic_int done;
} deaf;

/* A local client that sends 4 MiB requests and never reads an answer. */
static void *deaf_run(void *arg)
{
    deaf *d = arg;
    tfos__link *k;
    char err[256];
    CHECK_EQ(tfos__link_dial(&k, d->addr, NULL, tfos__now_ms() + 3000, 0, 0, err, sizeof err), 0);
    tfos__msg m;
    tfos__link_hello(k, &m, TFOS_MSG_SERVE_CLIENT, NULL);
    CHECK_EQ(tfos__msg_end(&m), 0);
    CHECK_EQ(tfos__link_send(k, &m, NULL, 0), 0);
    tfos__msg_fini(&m);
    tfos__frame fr;
    CHECK_EQ(tfos__link_wait_frame(k, 3000, &fr, NULL), 0);
    CHECK_EQ(fr.type, TFOS_MSG_SERVE_OK);
    uint64_t len;
    char *b = make_batch("x", 512 * 1024, 1, &len); /* 4 MiB */
    tfos__link_set_limits(k, 0, 16 * len);
    /* its requests waiting are bounded too (64 MiB: then 429s, small), so
     * it sends until its answers unread reach theirs, however slowly the
     * model answers (under ASan, 200 requests were not enough) */
    int64_t end = tfos__now_ms() + 45000;
    for (int i = 0; tfos__now_ms() < end; i++) {
        if (i >= 32)
            usleep(10000);
        tfos__msg_begin_data(&m, TFOS_MSG_SERVE_INFER, (uint64_t)i);
        tfos__msg_add(&m, "model", "%s", "m");
        tfos__msg_add(&m, "version", "%s", "");
        CHECK_EQ(tfos__msg_end_data(&m, len), 0);
        int rc = tfos__link_send(k, &m, b, len);
        if (rc == 0)
            rc = tfos__link_flush_wait(k, 5000);
        tfos__msg_fini(&m);
        if (rc) {
            d->refused = 1;
            break;
        }
        d->sent++;
    }
    free(b);
    tfos__link_close(k);
    atomic_store(&d->done, 1);
    return NULL;
}

static void a_client_that_never_reads_is_dropped(void)
{
    fe e;
    fe_open(&e, 1 << 20, -1, 30, NULL);
    pthread_t t;
    fake f;
    start_fake(&e, &t, &f, e.s->address, SECRET, 0, 1);
    deaf d = {.addr = e.s->address};
    pthread_t dt;
    CHECK_EQ(pthread_create(&dt, NULL, deaf_run, &d), 0);
    size_t most = 0;
    int64_t deadline = tfos__now_ms() + 60000;
    while (!atomic_load(&d.done) && tfos__now_ms() < deadline) {
        tfos__loop_run(e.loop, 5);
        for (int i = MAX_SERVERS; i < MAX_SLOTS; i++)
            if (e.s->servers[i].link && tfos__link_unsent(e.s->servers[i].link) > most)
                most = tfos__link_unsent(e.s->servers[i].link);
    }
    pthread_join(dt, NULL);
    fprintf(stderr, "a deaf client: %d requests of 4 MiB sent, at most %zu bytes of answers held for it\n", d.sent,
            most);
    CHECK(d.refused);
    CHECK(most <= CLIENT_MAX_OUT + (5u << 20)); /* its bound, and the one answer that crossed it */
    CHECK(logged("a local client left: it does not read its answers"));
    /* what it left waiting is not batched: the next client's requests do
     * not queue behind up to 64 MiB of requests nobody will read (under
     * TSan on a loaded host that backlog outlasted the next client's wait) */
    CHECK(logged("of its request(s) waited, not answered"));
    CHECK(e.s->models[0].head == NULL);
    CHECK_EQ(e.s->models[0].queued_rows, 0);
    /* the front end serves on */
    asker a;
    ask(&e, &a, e.s->address, 2, 2, 0);
    CHECK(a.status[0] == 200 && a.right[0] && a.status[1] == 200 && a.right[1]);
    stop_fake(&e, t, &f);
    fe_close(&e);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    tfos_set_logger(capture, NULL);
    RUN(batching);
    RUN(deadline_and_requeue);
    RUN(refused_and_idle_peers);
    RUN(a_version_no_server_holds_is_404_at_once);
    RUN(a_hung_server_is_cut_off_at_the_deadline);
    RUN(a_slow_batch_answers_who_is_still_waiting);
    RUN(one_bad_request_fails_alone);
    RUN(unauthenticated_peers_cost_little);
    RUN(a_client_that_never_reads_is_dropped);
    return 0;
}
