/* serve_int.h: what the files of tfos serve's front end share (serve.h is
 * its face to the launcher and the CLI).
 *
 * One front end, one event loop, one owner per job:
 *   frontend.c  life (open, attach, close) and the HTTP routes (/v2/...)
 *   intake.c    a request into a `req`: OIP JSON over HTTP, INFER frames
 *               from local clients; both checked against the model's signature
 *   batcher.c   per-model queues, batches to the least busy server, deadlines,
 *               requeueing the batches of a server that left
 *   link.c      the model servers' and local clients' links (core/link.h):
 *               their first frames, their frames in and out, results back
 *               to their requests
 *   models.c    what the servers said of their models: signatures, versions
 *   answers.c   answers: OIP JSON, a local client's batch, errors
 *   metrics.c   latency histograms and the /metrics lines
 * Every request is in exactly one place: a model's queue, a batch in flight
 * (on one server), or answered (freed). */
#ifndef TFOS_SERVE_SERVE_INT_H
#define TFOS_SERVE_SERVE_INT_H
#include "core/auth.h"
#include "core/batch.h"
#include "core/link.h"
#include "core/log.h"
#include "serve/oip.h"
#include "serve/serve.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#define MAX_SERVERS 64        /* model servers: slots [0, MAX_SERVERS) */
#define MAX_CLIENTS 256       /* local clients: slots [MAX_SERVERS, MAX_SLOTS), apart so they never
                               * take a model server's place */
#define MAX_SLOTS (MAX_SERVERS + MAX_CLIENTS)
#define MAX_IO 16             /* inputs or outputs of a model */
#define FRAME_MAX (1u << 30)  /* a data frame's payload (a batch) */
#define CLIENT_MAX_OUT (64u << 20) /* a local client's answers waiting unread: then it is dropped */
#define CLIENT_MAX_HELD (64u << 20) /* a local client's requests waiting (queued or in a batch): more is 429 */
#define PENDING_MAX 16        /* peers of a listener that have not authenticated yet */
#define INFLIGHT 2            /* batches on one server at once */
#define HUNG_GRACE_MS 2000    /* a server holding a batch --timeout + this long is hung: the model server's
                               * own watchdog (at --timeout from the batch's arrival) had its chance */
#define LAT_BUCKETS 14
#define MAX_VERSIONS 8        /* versions of a model one server holds */
#define MAX_VSTATS 16         /* versions counted apart in /metrics */
#define MAX_CANARIES 16       /* names split between models (tfos__serve_canary) */
#define MAX_ARMS 4            /* models one canary name splits between */

/* A name whose requests are split between models by weight (a canary:
 * two versions of one model, each served as a model of its own). */
typedef struct canary {
    char name[128];
    int n;
    int arm[MAX_ARMS];        /* model indexes */
    long long weight[MAX_ARMS], credit[MAX_ARMS]; /* smooth weighted round robin: exact shares, interleaved */
} canary;

typedef struct tensor_spec {
    char name[128];
    int dtype;                /* TFOS_DT_* */
    int ndim;                 /* with the batch dimension */
    int64_t shape[TFOS_BATCH_MAX_DIMS + 1]; /* -1: any */
} tensor_spec;

typedef struct model {
    char name[128];
    char platform[64];
    int known;                /* metadata received from a server */
    int nin, nout;
    tensor_spec in[MAX_IO], out[MAX_IO];
    struct req *head, *tail;  /* waiting, oldest first */
    long long queued_rows;
    /* metrics */
    unsigned long long ok, failed, refused, rows, batches, local;
    struct {
        char v[32];
        unsigned long long ok;
    } vstat[MAX_VSTATS];      /* answers by the version that ran them */
    unsigned long long lat[LAT_BUCKETS + 1];
    double lat_sum_ms;
    /* served from MLflow's registry (follow.c): its models:/ URI ("": not),
     * and which registry version each version folder holds, newest last */
    char reg_uri[300];
    int nreg;
    struct {
        char folder[16], version[32];
    } reg[MAX_VSTATS];
} model;

typedef struct req {
    struct req *next;
    uint64_t http_id;
    int client;               /* -1: an HTTP request; else its client's slot (a local client) */
    uint32_t client_gen;      /* that slot's connection when it asked */
    int model;
    uint32_t rows;
    int64_t t0, deadline;
    char id[TFOS_OIP_MAX_ID + 1]; /* the request's "id", echoed */
    char version[32];         /* the version asked for; "": the server's latest */
    uint64_t want;            /* outputs asked for (bit per output); 0: all */
    uint32_t group;           /* 0; else a half of a batch that failed: only its group shares a batch with it */
    int done;                 /* answered already (504 at its deadline) while its batch ran: its rows still
                               * count in the batch's result, then it is freed */
    uint32_t inner[MAX_IO][TFOS_BATCH_MAX_DIMS]; /* per-row shape of each input */
    int inner_ndim[MAX_IO];
    void *data[MAX_IO];       /* each input's rows, the model's dtype */
    size_t nbytes[MAX_IO];
} req;

typedef struct flight {
    struct flight *next;
    uint64_t id;
    int server;
    int model;
    req *reqs;                /* in batch order */
    uint32_t rows;
    int64_t sent;             /* when it went out (tfos__now_ms) */
} flight;

typedef struct server_versions {
    int n;
    char v[MAX_VERSIONS][32]; /* the first: the one served when none is named */
} server_versions;

/* A model server or a local client that has authenticated. */
typedef struct server {
    tfos__link *link;         /* NULL: a free slot */
    int is_client;            /* a local client (predict_udf), not a model server */
    uint32_t gen;             /* bumped when the slot's connection goes */
    server_versions *mv;      /* per model: the versions this server holds */
    int ready;                /* a model server: has sent its models; a client: authenticated */
    int node;
    int inflight;
    int pidfd;                /* a model server on the Unix socket: its process, to end it when it hangs; -1 */
    int pid;
} server;

struct tfos__serve {
    tfos__loop *loop;
    tfos_serve_opts o;
    char secret[TFOS_HEX_SECRET_LEN + 1];
    char address[40];         /* "@tfos-serve-<hex>" */
    char link[300];           /* what model servers connect to: address, or "HOST:PORT" (tcp_host) */
    tfos__listener *local;    /* the abstract socket's listener */
    tfos__listener *tcp;      /* the TCP one (tfos yarn serve), or NULL */
    tfos__http *http;
    char token[80];           /* the HTTP token, which local clients give too; "": none */
    uint32_t client_max_frame; /* a local client's request: at most what HTTP takes (--max-body) */
    int nmodels;
    model *models;
    server servers[MAX_SLOTS];
    flight *flights;
    uint64_t next_batch;
    uint32_t next_group;      /* for the halves of failed batches */
    tfos__timer timer;
    canary canaries[MAX_CANARIES];
    int ncanaries;
    tfos__warn_limit warn;    /* refused peers: a few lines per 10 s, the rest summed up */
};


/* ---- answers.c ---- */

/* {"error": "<message>"}, malloc'd (NULL: out of memory). */
char *tfos__serve_error_json(const char *fmt, va_list ap);
char *tfos__serve_error_jsonf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* An error answer now, from a route: fills rs, returns 0. */
int tfos__serve_fail_now(tfos__http_resp *rs, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void tfos__serve_free_req(req *r);
/* Answer a waiting request with an error (HTTP or its local client), count
 * it, and free it. */
void tfos__serve_fail_req(tfos__serve *s, req *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The same, but r stays (its batch is on a server: marked done, freed when
 * the batch comes back or its server goes). */
void tfos__serve_fail_in_flight(tfos__serve *s, req *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* One request's OIP answer: rows [row0, row0 + r->rows) of every output
 * (malloc'd JSON; NULL: out of memory). */
char *tfos__serve_answer_json(const model *m, const char *version, const req *r, const tfos__batch_view *v,
                              const char *batch, uint32_t row0);
/* Count the answer to r, by the version that ran it; r is freed. */
void tfos__serve_count_answer(model *m, req *r, const char *version);
/* A local client's answer: its rows of every output, as a columnar batch
 * after the version. */
void tfos__serve_answer_client(tfos__serve *s, req *r, const char *version, const tfos__batch_view *v,
                               const char *batch, uint32_t row0);

/* ---- models.c ---- */

model *tfos__serve_find_model(tfos__serve *s, const char *name);
/* The canary named `name`, or NULL. */
canary *tfos__serve_find_canary(tfos__serve *s, const char *name);
/* The model a request for `name` goes to: the model of that name, or the
 * next arm of the canary of that name (each arm gets its weight's share,
 * interleaved). NULL: neither. */
model *tfos__serve_route_model(tfos__serve *s, const char *name);
/* GET /v2/models/NAME of a canary: {"name", "canary": [{"weight", "model":
 * the arm's document}]} (malloc'd). */
char *tfos__serve_canary_json(const tfos__serve *s, const canary *c);
/* A server's metadata (HELLO, or MODELS when its versions change):
 * {"models": [{name, versions, platform, inputs, outputs}]}. The newest
 * metadata gives a model its signature; the server's versions are its own.
 * 0, or -1 when some of it could not be taken. */
int tfos__serve_take_metadata(tfos__serve *s, int ix, const char *text, size_t len);
/* GET /v2/models/NAME's document (malloc'd). */
char *tfos__serve_model_json(const tfos__serve *s, const model *m);
/* Model servers connected and ready. */
int tfos__serve_servers_ready(const tfos__serve *s);
/* Does server sv hold model mi's `version`? */
int tfos__serve_holds(const server *sv, int mi, const char *version);
/* Does a ready server hold model mi's `version` ("": any does)? 1; or 0
 * with err saying which versions there are (a 404's text, the same for
 * HTTP and local clients). */
int tfos__serve_version_ready(const tfos__serve *s, int mi, const char *version, char *err, size_t errlen);
/* Every version of model mi that a ready server holds, newest first; n of
 * them into out (up to max). */
int tfos__serve_model_versions(const tfos__serve *s, int mi, char (*out)[32], int max);

/* ---- link.c ---- */

/* Is the local client that sent r still connected? */
int tfos__serve_client_current(const tfos__serve *s, const req *r);
/* A SERVE_FAIL frame to local client ix: meta status, body the JSON error. */
void tfos__serve_send_error(tfos__serve *s, int ix, uint64_t id, int status, const char *body);
/* A data frame of `type` with `id` to slot ix: meta lines from kv (key,
 * value, ..., NULL), then body. 0, or the link's error: a local client
 * that does not read its answers (its bound reached) is dropped; a broken
 * link ends on its own (then its slot is dropped). */
int tfos__serve_send(tfos__serve *s, int ix, int type, uint64_t id, const char *const *kv, const void *body,
                     size_t len);
/* Close server (or local client) ix: its batches go back to their queues. */
void tfos__serve_drop(tfos__serve *s, int ix, const char *why);
/* Model server ix holds a batch past --timeout: it is hung. Its process is
 * ended where the front end knows it (the Unix socket: its agent starts it
 * again), its link dropped, its batches sent elsewhere. */
void tfos__serve_end_hung(tfos__serve *s, int ix, const flight *late);
/* The listeners' callbacks (the abstract socket and the TCP one). */
extern const tfos__link_cb tfos__serve_link_cb;

/* ---- batcher.c ---- */

/* Queue a checked request (0), or refuse it: 429 with err. */
int tfos__serve_enqueue(tfos__serve *s, req *r, char *err, size_t errlen);
/* Answer what has waited past its deadline (queued, or in a batch on a
 * server), end the servers that hold a batch past --timeout, send what is
 * due. */
void tfos__serve_dispatch(tfos__serve *s);
/* Wake for the next delay or deadline. */
void tfos__serve_schedule(tfos__serve *s);
/* Put one batch's requests back at the front of its model's queue, in
 * order (those answered already are freed); frees fl. */
void tfos__serve_requeue(tfos__serve *s, flight *fl);
/* Put a server's batches back at the front of their queues, in order. */
void tfos__serve_requeue_server(tfos__serve *s, int server_ix);
/* Local client ix (connection gen) has gone: its queued requests are
 * freed, never batched; those in a batch on a server are marked answered
 * (their rows still run). The number of its requests that waited. */
int tfos__serve_forget_client(tfos__serve *s, int ix, uint32_t gen);
/* The batch `id` in flight on server_ix, taken off the list; NULL: none. */
flight *tfos__serve_take_flight(tfos__serve *s, uint64_t id, int server_ix);
/* A batch the model failed on (SERVE_FAIL, `error` its text): one request
 * gets a 500 naming the error; several go back to the queue as two halves,
 * each batched alone, so the request that fails is found and the others
 * are answered (frees fl). */
void tfos__serve_batch_failed(tfos__serve *s, flight *fl, const char *error, size_t len);

/* ---- intake.c ---- */

/* POST /v2/models/NAME[/versions/V]/infer: 1 (answered later), or 0 with
 * an error in rs. */
int tfos__serve_infer(tfos__serve *s, model *m, const char *version, const tfos__http_req *rq, tfos__http_resp *rs);
/* A local client's SERVE_INFER frame: meta model and version, a columnar
 * batch of the inputs. Checked as an HTTP request is; errors go back as
 * SERVE_FAIL (status, JSON). */
void tfos__serve_client_infer(tfos__serve *s, int ix, const tfos__frame *f);

/* ---- metrics.c ---- */

/* Count a request's latency (from t0) in its model's histogram. */
void tfos__serve_observe(model *m, int64_t t0);
/* The models' series, a /metrics contributor (web/status.h; user: the
 * tfos__serve). */
void tfos__serve_metrics(FILE *f, void *user);

#endif
