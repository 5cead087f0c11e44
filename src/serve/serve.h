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
 * Frames on the Unix socket: u32 payload length, u32 type, u64 id, payload
 * (little-endian). HELLO (server -> front end, id: its node): the cluster
 * secret, a newline, the models' metadata as JSON. BATCH (id: the batch):
 * u16 model name length, name, u16 version length, version, a columnar
 * batch of the inputs in the model's order. RESULT (id: the batch): a
 * columnar batch of the outputs. ERROR (id: the batch): the model's error,
 * as text. MODELS (server -> front end): its metadata again, when its
 * versions change. A server that goes away has its batches sent again to
 * another (inference is idempotent).
 *
 * Local clients (tfos.serve.predict_udf on this host) use the same socket
 * instead of HTTP: CLIENT (the HTTP token, or empty; answered CLIENT "ok"),
 * then INFER (id: the client's; the BATCH payload) answered by RESULT
 * (u16 version length, version, a columnar batch of that request's rows of
 * every output) or ERROR ("STATUS {json error}"), in any order. */
#ifndef TFOS_RUN_SERVE_H
#define TFOS_RUN_SERVE_H
#include "core/loop.h"
#include "tfos/tfos.h"
#include "web/http.h"
#include "web/status.h"

#include <stdio.h>

enum { TFOS_SERVE_HELLO = 1, TFOS_SERVE_BATCH = 2, TFOS_SERVE_RESULT = 3, TFOS_SERVE_ERROR = 4, TFOS_SERVE_MODELS = 5,
       TFOS_SERVE_CLIENT = 6, TFOS_SERVE_INFER = 7 };

typedef struct tfos__serve tfos__serve;

/* Listen for model servers that know `secret`, on an abstract Unix socket
 * (tfos__serve_address: "@NAME", what the servers get as TFOS_SERVE_ADDR),
 * and with `tcp_host` (model servers on other hosts: tfos yarn serve) on
 * TCP there too, any port; the servers' address is then "HOST:PORT". Local
 * clients (GET /v2/local) are always given the abstract socket. err says
 * why on failure. */
int tfos__serve_open(tfos__serve **out, tfos__loop *loop, const tfos_serve_opts *o, const char *secret,
                     const char *tcp_host, char *err, size_t errlen);
const char *tfos__serve_address(const tfos__serve *s);
/* Answer on h (borrowed; the launcher's HTTP server): add the /v2 routes
 * to it (bodies up to max_body), the model series to status's /metrics, and
 * take the token requests need ("" or NULL: none), local clients' too.
 * 0, or TFOS_ENOMEM, TFOS_EFULL (status has no room for more series). */
int tfos__serve_attach(tfos__serve *s, tfos__http *h, tfos__status_src *status, const char *token);
void tfos__serve_close(tfos__serve *s);

#endif
