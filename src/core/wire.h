/* wire.h: the frames every tfos connection carries (core/link.h moves them).
 *
 * A frame is a 12-byte header followed by a payload:
 *   bytes 0-3  magic "TFOS"
 *   byte  4    protocol version (TFOS_PROTOCOL_VERSION)
 *   byte  5    message type (TFOS_MSG_*)
 *   bytes 6-7  reserved, must be 0
 *   bytes 8-11 payload length, big-endian, at most the receiver's limit
 * The frame's type says what its payload is:
 *   control frames (types below TFOS_MSG_DATA_FIRST_): text, lines
 *     "key=value\n", key in [a-z0-9_.], value any bytes but NUL and newline.
 *     A key may repeat (e.g. one "node=" per node). At most
 *     TFOS_WIRE_MAX_PAYLOAD bytes.
 *   data frames (TFOS_MSG_DATA_FIRST_ and up; tfos serve's batches):
 *     bytes 0-7   id (u64, big-endian): the batch's or the request's
 *     bytes 8-9   meta length M (u16, big-endian)
 *     M bytes     meta: key=value lines, as a control frame's payload
 *     the rest    body: binary (a columnar batch of core/batch.h, JSON, text)
 *     At most the receiver's data limit.
 * Nothing on the wire is ever executed or unpickled. */
#ifndef TFOS_CORE_WIRE_H
#define TFOS_CORE_WIRE_H
#include <stddef.h>
#include <stdint.h>

#define TFOS_WIRE_HEADER 12
/* Control frames are small; a peer sending more is broken or hostile. */
#define TFOS_WIRE_MAX_PAYLOAD (64 * 1024)

enum {
    TFOS_MSG_HELLO = 1,     /* coord -> peer: nonce, protocol */
    TFOS_MSG_REGISTER = 2,  /* agent -> coord: mac, executor_id, host, port, pid[, tb_port][, t_hello,
                             * t_register: ms since the agent began] */
    TFOS_MSG_SPEC = 3,      /* coord -> agent: self, attempt, coord and a node= per node; or with
                             * form=ranks: nodes, world, rank, local_rank, local_world, master and the
                             * node= of this node and of rank 0 only */
    TFOS_MSG_STARTED = 4,   /* agent -> coord: program pid */
    TFOS_MSG_EXITED = 5,    /* agent -> coord: status, exit code/signal, tail lines */
    TFOS_MSG_HEARTBEAT = 6, /* agent -> coord */
    TFOS_MSG_STOP = 7,      /* coord -> agent: stop the program (grace, reason) */
    TFOS_MSG_ERROR = 8,     /* either way: message, then the sender closes */
    TFOS_MSG_QUERY = 9,     /* client -> coord: mac; asks for STATUS */
    TFOS_MSG_STATUS = 10,   /* coord -> client: json */
    TFOS_MSG_FEED_OPEN = 11, /* producer -> agent (feed socket): mac */
    TFOS_MSG_FEED_OK = 12,   /* agent -> producer: node; the ring fds follow */
    TFOS_MSG_END_FEED = 13,  /* coord -> agent: end the node's input feed for good */
    TFOS_MSG_ABORT = 14,     /* client -> coord: mac, executor_id, message (one line each);
                              * a node could not start: fail and stop the cluster.
                              * Answered with STATUS once recorded. */
    TFOS_MSG_LOG_ERROR = 15, /* agent -> coord: message; the node's log file cannot be written */
    TFOS_MSG_LOG = 16,       /* agent -> coord: line (one line of the program's output; --forward-logs) */
    /* tfos serve (src/serve/serve.h): a model server or a local client and the front end */
    TFOS_MSG_SERVE_JOIN = 17,   /* model server -> front end (first frame): mac, node */
    TFOS_MSG_SERVE_CLIENT = 18, /* local client -> front end (first frame): mac (HMAC of the HTTP token; none
                                 * when there is no token: the Unix socket's peer uid is the check) */
    TFOS_MSG_SERVE_OK = 19,     /* front end -> either: the first frame was taken (no keys) */
    /* drain on notice (roles/coord.c tfos_coord_drain): checkpoint at one step, then end */
    TFOS_MSG_DRAIN = 20,        /* coord -> agent: step (-1: at the program's next check), grace_ms, reason
                                 * (its probe: PROGRESS) */
    /* an elastic torch cluster goes on in place without a lost worker (roles/coord.c, resize_in_place) */
    TFOS_MSG_RESIZE = 21,       /* coord -> agent: generation, rank, world, master (host:port), reason */
    /* a drain's probe and a feed turn (roles/coord.c): a node's progress now, not at its next heartbeat */
    TFOS_MSG_PROGRESS = 22,     /* coord -> agent: send a HEARTBEAT now (no keys) */
    /* 23-31: control frames to come */
    TFOS_MSG_DATA_FIRST_ = 32,  /* types from here on are data frames */
    TFOS_MSG_SERVE_MODELS = 32, /* model server -> front end: body {"models": [...]} (JSON); id 0 */
    TFOS_MSG_SERVE_BATCH = 33,  /* front end -> model server: id batch; meta model, version; body the inputs */
    TFOS_MSG_SERVE_RESULT = 34, /* model server -> front end (id batch) and front end -> local client (id its
                                 * request): meta version (the one that ran it); body the outputs */
    TFOS_MSG_SERVE_FAIL = 35,   /* the same ways: meta status (HTTP status, to a client); body the error:
                                 * the model's text from a server, {"error": ...} JSON to a client */
    TFOS_MSG_SERVE_INFER = 36,  /* local client -> front end: id its request; meta model, version; body the
                                 * inputs */
    TFOS_MSG_MAX_ = 36,
};

/* Is `type` one of the frames above (23-31 are not, yet)? */
static inline int tfos__wire_type_known(int type)
{
    return type >= 1 && type <= TFOS_MSG_MAX_ && (type <= TFOS_MSG_PROGRESS || type >= TFOS_MSG_DATA_FIRST_);
}

/* Is `type` a data frame's (binary payload after an id and meta)? */
static inline int tfos__wire_is_data(int type)
{
    return type >= TFOS_MSG_DATA_FIRST_;
}

typedef struct tfos__frame {
    int type;
    uint32_t len;
    const char *payload; /* the whole payload; points into the link's buffer */
    /* control frames: meta = payload (the key=value lines), body empty;
     * data frames: the id, the meta lines and the body (tfos__wire_payload) */
    uint64_t id;
    const char *meta;
    uint32_t meta_len;
    const char *body;
    size_t body_len;
} tfos__frame;

/* Check a header. Returns 0, TFOS_EAGAIN when fewer than 12 bytes are given,
 * TFOS_EPROTO (bad magic, version, type or reserved bits), TFOS_ETOOBIG. `why`
 * (may be NULL) gets a static description of the problem. */
int tfos__wire_header(const uint8_t *buf, size_t n, uint32_t max, tfos__frame *f, const char **why);

/* Check a whole frame's payload for its type and fill f's id, meta and body:
 * key=value lines for a control frame, id + meta + body for a data frame.
 * 0 or TFOS_EPROTO (`why` says what is wrong). */
int tfos__wire_payload(tfos__frame *f, const char **why);

/* Check that a payload is well-formed key=value lines. 0 or TFOS_EPROTO. */
int tfos__kv_validate(const char *p, size_t n, const char **why);
/* Iterate over lines: start with *pos = 0; returns 0 and the key/value spans,
 * or TFOS_EEND after the last one. The payload must have been validated. */
int tfos__kv_next(const char *p, size_t n, size_t *pos, const char **key, size_t *klen,
                  const char **val, size_t *vlen);
/* First value of `key` copied NUL-terminated into out. TFOS_EINVAL if absent,
 * TFOS_ETOOBIG if it does not fit. */
int tfos__kv_str(const char *p, size_t n, const char *key, char *out, size_t outlen);

/* 1 when s is a name a peer may send as a plain value (a host, a Spark
 * executor's key): not empty, and only letters, digits and . - : _. */
int tfos__plain_name(const char *s);
/* The longest prefix of s[0..len) that is at most max bytes and does not end
 * inside a UTF-8 sequence: where text is cut to fit a frame or a buffer. */
size_t tfos__utf8_cut(const char *s, size_t len, size_t max);
/* First value of `key` as a decimal integer within [lo, hi]. */
int tfos__kv_int(const char *p, size_t n, const char *key, long long lo, long long hi, long long *out);

/* A frame under construction: header and payload in one heap buffer. */
typedef struct tfos__msg {
    char *buf;
    size_t len, cap;
    int err; /* first error while building; reported by tfos__msg_end */
} tfos__msg;

void tfos__msg_begin(tfos__msg *m, int type);
/* Begin a data frame of `type` with `id`: tfos__msg_add then adds its meta
 * lines, and tfos__msg_end_data finishes it for a body of body_len bytes,
 * which the sender writes after m's bytes (tfos__link_send). */
void tfos__msg_begin_data(tfos__msg *m, int type, uint64_t id);
/* Append "key=value\n"; value is printf-formatted. Newlines and NULs in the
 * formatted value are replaced by spaces so a frame is always well-formed. */
void tfos__msg_add(tfos__msg *m, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Finish the header. Returns 0 or the first error (TFOS_ENOMEM, TFOS_ETOOBIG). */
int tfos__msg_end(tfos__msg *m);
/* Finish a data frame's meta and header for a body of body_len bytes.
 * TFOS_ETOOBIG when the meta passes 64 KiB or the payload 4 GiB. */
int tfos__msg_end_data(tfos__msg *m, uint64_t body_len);
void tfos__msg_fini(tfos__msg *m);

#endif
