/* client.c: the coordinator's small clients: a node task that could not
 * start its node (tfos_report_abort), status queries and commands
 * (tfos_query_status, tfos_coord_command), a feed task's turn
 * (tfos_feed_turn), and the dialing they share with
 * the agent (tfos__coord_dial). Each is one bounded exchange on a link:
 * dial, first frame (QUERY or ABORT, with its mac), one answer (STATUS, or
 * ERROR with the refusal's code), hang up. */
#include "roles/client.h"

#include "core/log.h"
#include "core/spec.h"
#include "platform/clock.h"
#include "platform/net.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tfos__coord_dial(tfos__link **out, const char *addr, int64_t deadline, int retry, int greet_extra_ms, char *err,
                     size_t errlen)
{
    char host[TFOS_HOST_MAX], who[TFOS_HOST_MAX + 40];
    int port;
    *out = NULL;
    if (!addr || tfos__parse_hostport(addr, host, sizeof host, &port))
        return tfos__errf(err, errlen, TFOS_EINVAL, "bad coordinator address '%s' (want host:port)",
                          addr ? addr : "");
    snprintf(who, sizeof who, "the coordinator at %s", addr);
    return tfos__link_dial(out, addr, who, deadline, retry, greet_extra_ms, err, errlen);
}

/* Send `m` (finished here) on a dialed link and wait for the answer until
 * the deadline: a STATUS frame (left in *f, not consumed) or an ERROR from
 * the coordinator (TFOS_EAUTH when it refused the secret). */
static int client_exchange(tfos__link *k, tfos__msg *m, int64_t deadline, const char *addr, tfos__frame *f,
                           char *err, size_t errlen)
{
    int rc = tfos__msg_end(m);
    if (rc == 0)
        rc = tfos__link_send(k, m, NULL, 0);
    tfos__msg_fini(m);
    if (rc == 0)
        rc = tfos__link_flush_wait(k, tfos__ms_left(deadline, -1));
    const char *why = NULL;
    if (rc == 0)
        rc = tfos__link_wait_frame(k, tfos__ms_left(deadline, -1), f, &why);
    if (rc)
        return tfos__errf(err, errlen, rc, "no answer from the coordinator at %s: %s", addr,
                          why ? why : tfos_strerror(rc));
    if (f->type == TFOS_MSG_ERROR) {
        char text[512] = "(no message)";
        tfos__kv_str(f->meta, f->meta_len, "message", text, sizeof text);
        long long code = TFOS_EPROTO; /* the kind of refusal travels as a code, never in the text */
        if (tfos__kv_int(f->meta, f->meta_len, "code", -100, 0, &code) || code >= 0)
            code = TFOS_EPROTO;
        return tfos__errf(err, errlen, (int)code, "the coordinator at %s refused: %s", addr, text);
    }
    if (f->type != TFOS_MSG_STATUS)
        return tfos__errf(err, errlen, TFOS_EPROTO, "unexpected answer from the coordinator at %s", addr);
    return 0;
}

/* A client's start: dial the coordinator (until `deadline`) and begin its
 * first frame, of `type` with the mac; the caller adds its fields and hands
 * m to client_exchange. */
static int client_begin(tfos__link **k, tfos__msg *m, const char *addr, const char *secret, int type,
                        int64_t deadline, char *err, size_t errlen)
{
    int rc = tfos__coord_dial(k, addr, deadline, 0, 0, err, errlen);
    if (rc == 0)
        tfos__link_hello(*k, m, type, secret);
    return rc;
}

/* A client's end: its link closed, errno kept, a failure logged (debug:
 * the caller raises it) after `what`. Returns rc. */
static int client_done(tfos__link *k, int rc, const char *what, const char *err)
{
    int e = errno;
    if (rc)
        TFOS_DEBUG("%s: %s", what, err);
    tfos__link_close(k);
    errno = e;
    return rc;
}

/* The "json" of a STATUS frame, malloc'd in *out. */
static int status_json(const tfos__frame *f, const char *addr, char **out, char *err, size_t errlen)
{
    char *json = malloc((size_t)f->len + 1);
    int rc = json ? tfos__kv_str(f->meta, f->meta_len, "json", json, (size_t)f->len + 1) : TFOS_ENOMEM;
    if (rc == TFOS_ENOMEM)
        tfos__errf(err, errlen, rc, "no memory for the status");
    else if (rc == TFOS_EINVAL)
        rc = tfos__errf(err, errlen, TFOS_EPROTO, "status from the coordinator at %s without json", addr);
    if (rc)
        free(json);
    else
        *out = json;
    return rc;
}

int tfos_report_abort(const char *coord_addr, const char *secret, int executor_id, const char *message,
                      int timeout_ms)
{
    if (!coord_addr || !secret || executor_id < 0 || timeout_ms < 0)
        return TFOS_EINVAL;
    if (!message)
        message = "";
    int64_t deadline = tfos__now_ms() + timeout_ms;
    tfos__link *k = NULL;
    char err[512] = "";
    tfos__msg m;
    int rc = client_begin(&k, &m, coord_addr, secret, TFOS_MSG_ABORT, deadline, err, sizeof err);
    if (rc == 0) {
        tfos__msg_add(&m, "executor_id", "%d", executor_id);
        /* one "message=" per line, cut to what a frame holds (with room for
         * the line keys and the fields above) */
        size_t room = TFOS_WIRE_MAX_PAYLOAD - 512;
        const char *line = message;
        do {
            const char *nl = strchr(line, '\n');
            size_t len = nl ? (size_t)(nl - line) : strlen(line);
            size_t take = tfos__utf8_cut(line, len, room);
            tfos__msg_add(&m, "message", "%.*s", (int)take, line);
            room = room > take + 9 ? room - take - 9 : 0;
            line = nl ? nl + 1 : NULL;
        } while (line && room > 0);
        tfos__frame f;
        rc = client_exchange(k, &m, deadline, coord_addr, &f, err, sizeof err);
    }
    char what[80];
    snprintf(what, sizeof what, "reporting that executor %d could not start", executor_id);
    return client_done(k, rc, what, err);
}

int tfos_query_status(const char *coord_addr, const char *secret, int timeout_ms, char **json_out)
{
    return tfos_coord_command(coord_addr, secret, NULL, NULL, timeout_ms, json_out);
}

int tfos_coord_command(const char *coord_addr, const char *secret, const char *command, const char *reason,
                       int timeout_ms, char **json_out)
{
    if (!json_out)
        return TFOS_EINVAL;
    *json_out = NULL;
    if (!coord_addr || !secret || timeout_ms < 0)
        return TFOS_EINVAL;
    if (command && *command && strcmp(command, "end_feed") && strcmp(command, "stop") && strcmp(command, "release") &&
        strcmp(command, "drain"))
        return TFOS_EINVAL;
    char line[1024] = "";
    if (reason) { /* one line: the frame's values end at a newline */
        size_t n = tfos__utf8_cut(reason, strlen(reason), sizeof line - 1);
        memcpy(line, reason, n);
        line[n] = '\0';
        for (char *q = line; *q; q++)
            if (*q == '\n' || *q == '\r')
                *q = ' ';
    }
    int64_t deadline = tfos__now_ms() + timeout_ms;
    tfos__link *k = NULL;
    char err[512] = "";
    tfos__msg m;
    int rc = client_begin(&k, &m, coord_addr, secret, TFOS_MSG_QUERY, deadline, err, sizeof err);
    if (rc == 0) {
        if (command && *command)
            tfos__msg_add(&m, "command", "%s", command);
        if (line[0])
            tfos__msg_add(&m, "reason", "%s", line);
        tfos__frame f;
        rc = client_exchange(k, &m, deadline, coord_addr, &f, err, sizeof err);
        if (rc == 0)
            rc = status_json(&f, coord_addr, json_out, err, sizeof err);
    }
    return client_done(k, rc, "querying the coordinator", err);
}

int tfos_feed_turn(const char *coord_addr, const char *secret, const char *stage, int nparts, int nfed,
                   const int *nodes, int nnodes, int partition, int node, int timeout_ms, int *go_out,
                   char **json_out)
{
    if (json_out)
        *json_out = NULL;
    if (!coord_addr || !secret || !stage || !nodes || nnodes < 1 || !go_out || timeout_ms < 0)
        return TFOS_EINVAL;
    *go_out = 1;
    /* the ids as one line: "0,1,5" */
    size_t cap = (size_t)nnodes * 12 + 1, len = 0;
    char *list = malloc(cap);
    if (!list)
        return TFOS_ENOMEM;
    list[0] = '\0';
    for (int i = 0; i < nnodes; i++)
        len += (size_t)snprintf(list + len, cap - len, "%s%d", i ? "," : "", nodes[i]);
    int64_t deadline = tfos__now_ms() + timeout_ms;
    tfos__link *k = NULL;
    char err[512] = "";
    tfos__msg m;
    int rc = client_begin(&k, &m, coord_addr, secret, TFOS_MSG_QUERY, deadline, err, sizeof err);
    if (rc == 0) {
        tfos__msg_add(&m, "command", "%s", "feed_turn");
        tfos__msg_add(&m, "stage", "%s", stage);
        tfos__msg_add(&m, "nparts", "%d", nparts);
        tfos__msg_add(&m, "nfed", "%d", nfed);
        tfos__msg_add(&m, "partition", "%d", partition);
        tfos__msg_add(&m, "node", "%d", node);
        tfos__msg_add(&m, "nodes", "%s", list);
        tfos__frame f;
        rc = client_exchange(k, &m, deadline, coord_addr, &f, err, sizeof err);
        char *json = NULL;
        if (rc == 0)
            rc = status_json(&f, coord_addr, &json, err, sizeof err);
        long long go = 1;
        if (rc == 0 && tfos__kv_int(f.meta, f.meta_len, "go", 0, 1, &go))
            rc = tfos__errf(err, sizeof err, TFOS_EPROTO, "feed turn from the coordinator at %s without go",
                            coord_addr);
        if (rc) {
            free(json);
        } else {
            *go_out = (int)go;
            if (json_out)
                *json_out = json;
            else
                free(json);
        }
    }
    free(list);
    return client_done(k, rc, "asking the coordinator for a feed turn", err);
}
