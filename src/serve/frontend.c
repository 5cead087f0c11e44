/* frontend.c: tfos serve's front end (see serve.h): its life (listen,
 * attach to the HTTP server, close) and its HTTP routes, /v2/....
 *
 * Everything runs on the launcher's event loop: HTTP requests come in
 * through the route, model servers' frames through their sockets, and one
 * timer fires when the oldest waiting request's delay is up or a request's
 * deadline passes. The routes are the program's HTTP server's (web/http.h):
 * tfos__serve_attach adds /v2 and /v2/... to it, beside the status page's,
 * and the model series to the page's /metrics. */
#include "serve/serve_int.h"

#include "core/auth.h"
#include "core/log.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* /v2/models/NAME[/versions/V][/ready|/infer] */
static int model_route(tfos__serve *s, const tfos__http_req *rq, tfos__http_resp *rs)
{
    char name[128] = "", version[32] = "", rest[32] = "";
    const char *p = rq->path + strlen("/v2/models/");
    size_t n = strcspn(p, "/");
    if (!n || n >= sizeof name)
        return tfos__serve_fail_now(rs, 404, "no such path: %s", rq->path);
    memcpy(name, p, n);
    p += n;
    if (!strncmp(p, "/versions/", 10)) {
        p += 10;
        n = strcspn(p, "/");
        if (!n || n >= sizeof version)
            return tfos__serve_fail_now(rs, 404, "no such path: %s", rq->path);
        memcpy(version, p, n);
        p += n;
    }
    if (*p == '/')
        snprintf(rest, sizeof rest, "%s", p + 1);
    else if (*p)
        return tfos__serve_fail_now(rs, 404, "no such path: %s", rq->path);
    canary *c = tfos__serve_find_model(s, name) ? NULL : tfos__serve_find_canary(s, name);
    if (c && version[0]) /* each arm's versions are its own */
        return tfos__serve_fail_now(rs, 404, "%s is split between models (a canary): name a version of one of them, "
                                    "e.g. /v2/models/%s/versions/%s", name, s->models[c->arm[0]].name, version);
    if (c && !rest[0] && !strcmp(rq->method, "GET")) {
        for (int k = 0; k < c->n; k++)
            if (!s->models[c->arm[k]].known)
                return tfos__serve_fail_now(rs, 503, "model %s is loading: no model server is ready yet",
                                            s->models[c->arm[k]].name);
        rs->body = tfos__serve_canary_json(s, c);
        rs->ctype = "application/json";
        return 0;
    }
    if (c && !strcmp(rest, "ready") && !strcmp(rq->method, "GET")) {
        int ok = tfos__serve_servers_ready(s) > 0;
        for (int k = 0; k < c->n; k++)
            ok = ok && s->models[c->arm[k]].known;
        rs->status = ok ? 200 : 503;
        rs->body = strdup(ok ? "{\"ready\": true}" : "{\"ready\": false}");
        rs->ctype = "application/json";
        return 0;
    }
    /* an infer request for a canary goes to one of its models */
    model *m = !strcmp(rest, "infer") ? tfos__serve_route_model(s, name) : tfos__serve_find_model(s, name);
    if (!m)
        return tfos__serve_fail_now(rs, 404, "no model %s here", name);
    char why[512];
    if (version[0] && m->known && !tfos__serve_version_ready(s, (int)(m - s->models), version, why, sizeof why))
        return tfos__serve_fail_now(rs, 404, "%s", why);
    if (!strcmp(rest, "infer")) {
        if (strcmp(rq->method, "POST"))
            return tfos__serve_fail_now(rs, 405, "infer takes POST");
        return tfos__serve_infer(s, m, version, rq, rs);
    }
    if (strcmp(rq->method, "GET"))
        return tfos__serve_fail_now(rs, 405, "%s takes GET", rq->path);
    if (!strcmp(rest, "ready")) {
        rs->status = m->known && tfos__serve_servers_ready(s) ? 200 : 503;
        rs->body = strdup(rs->status == 200 ? "{\"ready\": true}" : "{\"ready\": false}");
        rs->ctype = "application/json";
        return 0;
    }
    if (rest[0])
        return tfos__serve_fail_now(rs, 404, "no such path: %s", rq->path);
    if (!m->known)
        return tfos__serve_fail_now(rs, 503, "model %s is loading: no model server is ready yet", name);
    rs->body = tfos__serve_model_json(s, m);
    rs->ctype = "application/json";
    return 0;
}

/* Every path under /v2 (any method: the routes say which they take, in
 * the protocol's JSON errors). */
static int serve_route(const tfos__http_req *rq, tfos__http_resp *rs, void *user)
{
    tfos__serve *s = user;
    const char *path = rq->path;
    if (!strcmp(path, "/v2/health/live") || !strcmp(path, "/v2/health/ready")) {
        int ok = !strcmp(path, "/v2/health/live") || tfos__serve_servers_ready(s) > 0;
        rs->status = ok ? 200 : 503;
        rs->body = strdup(ok ? "{\"live\": true}" : "{\"ready\": false}");
        if (ok && strstr(path, "ready")) {
            free(rs->body);
            rs->body = strdup("{\"ready\": true}");
        }
        rs->ctype = "application/json";
        return 0;
    }
    if (!strcmp(path, "/v2") || !strcmp(path, "/v2/")) {
        if (asprintf(&rs->body, "{\"name\": \"tfos\", \"version\": \"%s\", \"extensions\": []}", TFOS_VERSION) < 0)
            rs->body = NULL;
        rs->ctype = "application/json";
        return 0;
    }
    if (!strcmp(path, "/v2/local")) {
        /* where a client on this host (predict_udf) skips HTTP: the
         * abstract socket, reachable only from this host's network
         * namespace; it asks for the token too */
        if (asprintf(&rs->body, "{\"address\": \"%s\", \"max_request_bytes\": %u}", s->address,
                     s->client_max_frame) < 0)
            rs->body = NULL;
        rs->ctype = "application/json";
        return 0;
    }
    if (!strncmp(path, "/v2/models/", 11))
        return model_route(s, rq, rs);
    return tfos__serve_fail_now(rs, 404, "no such path: %s", path);
}

int tfos__serve_open(tfos__serve **out, tfos__loop *loop, const tfos_serve_opts *o, const char *secret,
                     const char *tcp_host, char *err, size_t errlen)
{
    tfos__serve *s = calloc(1, sizeof *s);
    if (!s)
        return tfos__errf(err, errlen, TFOS_ENOMEM, "out of memory");
    s->loop = loop;
    s->o = *o;
    s->o.models = NULL; /* not kept: the names are copied below */
    if (s->o.max_batch <= 0)
        s->o.max_batch = TFOS_SERVE_DEFAULT_MAX_BATCH;
    if (s->o.max_delay_ms == 0)
        s->o.max_delay_ms = TFOS_SERVE_DEFAULT_MAX_DELAY_MS;
    if (s->o.max_queue_rows <= 0)
        s->o.max_queue_rows = (long long)TFOS_SERVE_DEFAULT_QUEUE_BATCHES * s->o.max_batch;
    if (s->o.timeout_s <= 0)
        s->o.timeout_s = TFOS_SERVE_DEFAULT_TIMEOUT;
    long long body = s->o.max_body > 0 ? s->o.max_body : TFOS_SERVE_DEFAULT_MAX_BODY;
    s->client_max_frame = body < (long long)FRAME_MAX ? (uint32_t)body : FRAME_MAX;
    for (int i = 0; i < MAX_SLOTS; i++)
        s->servers[i].pidfd = -1;
    snprintf(s->secret, sizeof s->secret, "%s", secret);
    s->warn = (tfos__warn_limit){.who = "tfos serve", .per_window = 5, .window_ms = 10000};
    int rc = TFOS_ENOMEM;
    s->models = calloc((size_t)(o->nmodels > 0 ? o->nmodels : 1), sizeof *s->models);
    if (!s->models) {
        tfos__errf(err, errlen, rc, "out of memory");
        goto fail;
    }
    for (int i = 0; i < o->nmodels; i++)
        snprintf(s->models[i].name, sizeof s->models[i].name, "%s", o->models[i]);
    s->nmodels = o->nmodels;
    /* an abstract socket: no path to clean up or outgrow, but any local
     * user can connect to it (its name is in /proc/net/unix): peers of
     * another uid (root aside) are refused at accept, before a greeting,
     * and the rest are taken only once they authenticate (core/link.h) */
    char hex[17], addr[300];
    if ((rc = tfos__random_hex(hex, 8))) {
        tfos__errf(err, errlen, rc, "no random bytes for the socket's name");
        goto fail;
    }
    snprintf(s->address, sizeof s->address, "@tfos-serve-%s", hex);
    tfos__listen_opts lo = {.addr = s->address, .backlog = 64, .max_pending = PENDING_MAX, .same_user = 1,
                            .max_data = FRAME_MAX, .max_out = CLIENT_MAX_OUT, .nodelay = 1,
                            .cb = tfos__serve_link_cb, .user = s};
    char why[300];
    if ((rc = tfos__listener_open(&s->local, loop, &lo, why, sizeof why))) {
        tfos__errf(err, errlen, rc, "cannot listen for the model servers: %s", why);
        goto fail;
    }
    snprintf(s->link, sizeof s->link, "%s", s->address);
    if (tcp_host) {
        /* model servers on other hosts (tfos yarn serve): the same link on TCP */
        snprintf(addr, sizeof addr, strchr(tcp_host, ':') ? "[%s]:0" : "%s:0", tcp_host);
        lo.addr = addr;
        lo.same_user = 0; /* TCP tells no uid: the HMAC alone */
        if ((rc = tfos__listener_open(&s->tcp, loop, &lo, why, sizeof why))) {
            tfos__errf(err, errlen, rc, "cannot listen for the model servers on %s: %s", tcp_host, why);
            goto fail;
        }
        snprintf(s->link, sizeof s->link, "%s", tfos__listener_address(s->tcp));
    }
    *out = s;
    return 0;
fail:
    tfos__listener_close(s->local);
    free(s->models);
    free(s);
    return rc;
}

const char *tfos__serve_address(const tfos__serve *s)
{
    return s->link;
}

int tfos__serve_attach(tfos__serve *s, tfos__http *h, tfos__status_src *status, const char *token)
{
    size_t body = s->o.max_body > 0 ? (size_t)s->o.max_body : (size_t)TFOS_SERVE_DEFAULT_MAX_BODY;
    const tfos__http_route v2 = {.path = "/v2", .fn = serve_route, .user = s, .max_body = body},
                           under = {.path = "/v2/", .prefix = 1, .fn = serve_route, .user = s, .max_body = body};
    int rc = tfos__http_add(h, &v2);
    if (!rc)
        rc = tfos__http_add(h, &under);
    if (!rc)
        rc = tfos__status_add_metrics(status, tfos__serve_metrics, s);
    if (rc)
        return rc;
    s->http = h;
    snprintf(s->token, sizeof s->token, "%s", token ? token : "");
    return 0;
}

void tfos__serve_close(tfos__serve *s)
{
    if (!s)
        return;
    for (int i = 0; i < MAX_SLOTS; i++)
        if (s->servers[i].link) {
            tfos__link_close(s->servers[i].link);
            if (s->servers[i].pidfd >= 0)
                close(s->servers[i].pidfd);
            free(s->servers[i].mv);
            memset(&s->servers[i], 0, sizeof s->servers[i]);
        }
    for (flight *fl = s->flights, *nf; fl; fl = nf) {
        nf = fl->next;
        for (req *r = fl->reqs, *nr; r; r = nr) {
            nr = r->next;
            if (r->done) /* answered already */
                tfos__serve_free_req(r);
            else
                tfos__serve_fail_req(s, r, 503, "the model server is shutting down");
        }
        free(fl);
    }
    for (int mi = 0; mi < s->nmodels; mi++)
        for (req *r = s->models[mi].head, *nr; r; r = nr) {
            nr = r->next;
            tfos__serve_fail_req(s, r, 503, "the model server is shutting down");
        }
    tfos__timer_disarm(s->loop, &s->timer);
    tfos__warn_limit_flush(&s->warn, 1);
    tfos__listener_close(s->local);
    tfos__listener_close(s->tcp);
    free(s->models);
    free(s);
}
