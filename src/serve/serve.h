/* serve.h: `tfos serve`'s front end: the Open Inference Protocol (KServe
 * v2) over HTTP, dynamic batching, and the link to the model servers.
 *
 * The model servers are the cluster's nodes (supervised by their agents as
 * for tfos run); each runs `python -m tfos.serve`, which loads the models
 * and connects back to the front end's Unix socket. The front end lives in
 * the launcher, on its event loop, beside the status page (one port):
 *
 *   client --HTTP--> front end: parse, check against the model's signature,
 *                    queue; a batch goes out when max_batch rows wait or the
 *                    oldest has waited max_delay_ms
 *            frames  --> a model server with room (at most 2 batches each)
 *                    <-- the outputs, as one columnar batch (core/batch.h)
 *                    split per request, answered as OIP JSON
 *
 * The link (core/link.h: the frames of core/wire.h, the same hello as the
 * coordinator's): the front end listens on an abstract Unix socket, and
 * under tfos yarn serve on TCP too. It greets every peer with HELLO nonce;
 * the peer's first frame names its role and authenticates it:
 *   SERVE_JOIN   a model server: mac = HMAC(cluster secret, nonce), node
 *   SERVE_CLIENT a local client (tfos.serve.predict_udf on this host):
 *                mac = HMAC(HTTP token, nonce); with no token, no mac, and
 *                the Unix socket's peer must run as our uid (or root)
 * answered SERVE_OK, or ERROR (code TFOS_EAUTH; TFOS_EFULL when every place
 * of its kind is taken) and the link ends. The secret and the token never
 * cross the wire. Then data frames (u64 id, key=value meta, binary body):
 *   SERVE_MODELS (server -> front end; body: the models' metadata as JSON),
 *     first once joined (the server is then ready), again when its
 *     versions change;
 *   SERVE_BATCH (front end -> server; id: the batch; meta model, version,
 *     timeout_ms: how long it may run before the server must end itself as
 *     hung; body: a columnar batch of the inputs in the model's order), answered
 *     SERVE_RESULT (meta version: the one that ran it; body: a columnar
 *     batch of the outputs) or SERVE_FAIL (body: the model's error, text);
 *   SERVE_INFER (client -> front end; id: the client's; meta model,
 *     version; body: the inputs), answered in any order SERVE_RESULT
 *     (meta version; body: that request's rows of every output) or
 *     SERVE_FAIL (meta status: the HTTP status; body: {"error": ...}).
 * A server that goes away has its batches sent again to another (inference
 * is idempotent). Peers that have not authenticated are the listener's
 * (16 at most, the oldest evicted; 3 s; one frame of 64 KiB) and take no
 * place; model servers (64) and local clients (256) have places of their
 * own; a client's requests waiting pass 64 MiB: 429; its unread answers:
 * it is dropped. A model server dropped is told why (ERROR) when its link
 * is not backed up: it exits, and its agent starts it again. */
#ifndef TFOS_RUN_SERVE_H
#define TFOS_RUN_SERVE_H
#include "core/loop.h"
#include "platform/webhdfs.h"
#include "tfos/tfos.h"
#include "web/http.h"
#include "web/status.h"

#include <stdio.h>

typedef struct tfos__serve tfos__serve;

/* Listen for model servers that know `secret`, on an abstract Unix socket
 * (tfos__serve_address: "@NAME", what the servers get as TFOS_SERVE_ADDR),
 * and with `tcp_host` (model servers on other hosts: tfos yarn serve) on
 * TCP there too, any port; the servers' address is then "HOST:PORT". Local
 * clients (GET /v2/local) are always given the abstract socket. `loop` is
 * borrowed (it must outlive the front end). err says why on failure. */
int tfos__serve_open(tfos__serve **out, tfos__loop *loop, const tfos_serve_opts *o, const char *secret,
                     const char *tcp_host, char *err, size_t errlen);
const char *tfos__serve_address(const tfos__serve *s);
/* Answer on h (borrowed; the launcher's HTTP server): add the /v2 routes
 * to it (bodies up to max_body), the model series to status's /metrics, and
 * take the token requests need ("" or NULL: none), local clients' too.
 * 0, or TFOS_ENOMEM, TFOS_EFULL (status has no room for more series). */
int tfos__serve_attach(tfos__serve *s, tfos__http *h, tfos__status_src *status, const char *token);
void tfos__serve_close(tfos__serve *s);

/* Split requests for `name` between the models `arms` (served models of
 * their own; 2 to 4) by `weights` (> 0, relative): a canary. A request
 * naming `name` goes to one arm, each getting its weight's share; each arm
 * keeps its own /metrics series. 0; TFOS_EINVAL (err says why),
 * TFOS_EFULL (16 canaries). */
int tfos__serve_canary(tfos__serve *s, const char *name, const char *const *arms, const long long *weights, int n,
                       char *err, size_t errlen);

/* ---- follow.c: a model served from MLflow's registry ----
 *
 * --model NAME=models:/NAME@ALIAS (or models:/NAME/VERSION): the version
 * is copied into DIR/1 before the model servers start (they serve DIR as
 * any directory of versions); then, for an alias, a thread asks the
 * registry every poll_s seconds where the alias points, and when it moved
 * copies that version into DIR/<next number> (whole, then renamed), which
 * the model servers load as a new version: the old one answers until it is
 * loaded. Version folders are numbered here, in the order they were
 * fetched (a rollback to an older registry version is a newer folder);
 * which registry version each holds is handed to the front end through the
 * loop (a pipe the loop watches) and shown in /v2/models/NAME's
 * "registry". The registry is $MLFLOW_TRACKING_URI's server. */
typedef struct tfos__follow tfos__follow;
/* Resolve uri and copy its version into dir/1 (dir is made; it must not
 * hold versions): blocks, for use before the loop runs. 0, or an error
 * with err naming the model, alias or version and the registry.
 *
 * hdfs (borrowed, outliving f; NULL: none): the model servers run
 * elsewhere (tfos yarn serve) and read the folders from remote_url, an
 * hdfs:// directory (made here), instead of dir: each folder, once
 * fetched into dir, is copied there under a name they skip, renamed into
 * place, and removed from dir. Removing remote_url is the caller's. */
int tfos__follow_open(tfos__follow **out, const char *model, const char *uri, const char *dir,
                      tfos__webhdfs *hdfs, const char *remote_url, char *err, size_t errlen);
/* Tell s which registry version its first folder holds and, for an alias
 * with poll_s > 0, start following it. 0, TFOS_ESYS, TFOS_ENOMEM. */
int tfos__follow_start(tfos__follow *f, tfos__serve *s, tfos__loop *loop, double poll_s);
/* Stop the thread (waits for a fetch under way, bounded by the registry
 * calls' timeouts) and free f. NULL is a no-op. */
void tfos__follow_close(tfos__follow *f);
/* (follow.c to the front end, on the loop) model's folder `folder` holds
 * registry version `version` of `uri`. */
void tfos__serve_registry_folder(tfos__serve *s, const char *model, const char *uri, const char *folder,
                                 const char *version);

#endif
