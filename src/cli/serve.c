/* serve.c: `tfos serve`: resident model servers behind an Open Inference
 * Protocol front end, on this machine (docs/SERVING.md); and the same in
 * tfos yarn's ApplicationMaster (serve.h).
 *
 *   tfos serve --model NAME=DIR [--model ...] [--replicas N] [--port P] ...
 *
 * It composes two pieces that do not know each other: a launcher (src/launch)
 * whose nodes are the model servers (each runs `python -m tfos.serve --model
 * NAME=DIR ...`, supervised by its agent, restarted alone by it or with the
 * others by the restart policy), and the front end (src/serve) on the
 * launcher's loop, answering /v2/... on the launcher's HTTP server beside
 * the status page, its series in the page's /metrics, its address in the
 * model servers' environment (TFOS_SERVE_ADDR). */
#include "cli/serve.h"

#include "cli/commands.h"
#include "cli/common.h"
#include "core/log.h"
#include "core/spec.h"
#include "launch/launch.h"
#include "platform/fs.h"
#include "platform/webhdfs.h"
#include "serve/serve.h"
#include "track/registry.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_MODELS 64

const char tfos__serve_help[] =
    "usage: tfos serve --model NAME=DIR [--model NAME=DIR ...] [options]\n"
    "       tfos yarn serve [yarn options] --model NAME=DIR ... [options]   (the model servers in YARN\n"
    "                           containers, the front end in the ApplicationMaster's; docs/SERVING.md)\n"
    "\n"
    "Serves models over HTTP with the Open Inference Protocol (KServe v2): GET /v2/health/ready,\n"
    "GET /v2/models/NAME, POST /v2/models/NAME/infer. Requests are batched across clients and\n"
    "run by --replicas model servers (python -m tfos.serve), each a tfos node: supervised,\n"
    "restarted when it fails, on the status page (/, /status) and in /metrics on the same port.\n"
    "DIR is a TensorFlow SavedModel (its serving_default signature), or a directory of numbered\n"
    "versions of one (TensorFlow Serving's layout); any other model (PyTorch, JAX, ...) is made by\n"
    "a Python function named with --loader. Runs until Ctrl-C or SIGTERM.\n"
    "\n"
    "options:\n"
    "  -h, --help               show this help and exit\n"
    "  --model NAME=DIR         a model to serve; repeatable. DIR's highest numbered version is served\n"
    "                           and a higher one that appears is loaded, then served in its place\n"
    "  --model NAME@V=DIR       serve version V of DIR only (pinned)\n"
    "  --model NAME=models:/REG@ALIAS, --model NAME=models:/REG/VERSION\n"
    "                           a version from MLflow's model registry ($MLFLOW_TRACKING_URI); an\n"
    "                           alias is followed: where it moves is served next (docs/MODELS.md)\n"
    "  --model NAME=URI:W,URI:W  a canary: NAME's requests split by weight between registry versions,\n"
    "                           each served as NAME.ALIAS with its own /metrics series (docs/MODELS.md)\n"
    "  --registry-poll S        seconds between asking the registry where an alias points (default " TFOS__STR(TFOS_SERVE_DEFAULT_REGISTRY_POLL) ";\n"
    "                           0: never)\n"
    "  --loader NAME=MODULE:FUNCTION\n"
    "                           the model NAME is not a SavedModel: FUNCTION(version_dir) returns a\n"
    "                           tfos.serve.Model (MODULE: a module on the path, or FILE.py)\n"
    "  --poll S                 seconds between looks for new versions (default " TFOS__STR(TFOS_SERVE_DEFAULT_POLL) "; 0: never)\n"
    "  --replicas N             model servers (default 1)\n"
    "  --port P                 the HTTP port (default " TFOS__STR(TFOS_SERVE_DEFAULT_PORT) "; 0: any free port)\n"
    "  --listen ADDR            listen on ADDR instead of 127.0.0.1; beyond loopback every request\n"
    "                           needs the token (Authorization: Bearer TOKEN)\n"
    "  --token T                the token (default: $TFOS_SERVE_TOKEN; needed with --listen beyond\n"
    "                           loopback)\n"
    "  --max-batch N            rows per batch a model server runs (default " TFOS__STR(TFOS_SERVE_DEFAULT_MAX_BATCH) ")\n"
    "  --max-delay-ms MS        the longest a request waits for others to batch with (default " TFOS__STR(TFOS_SERVE_DEFAULT_MAX_DELAY_MS) ")\n"
    "  --max-queue-rows N       rows waiting per model before requests get 429 (default " TFOS__STR(TFOS_SERVE_DEFAULT_QUEUE_BATCHES) " x max-batch)\n"
    "  --timeout S              a request not answered in S seconds gets 504 (default " TFOS__STR(TFOS_SERVE_DEFAULT_TIMEOUT) ")\n"
    "  --max-body BYTES         largest request body (default 64 MiB)\n"
    "  --python PY              the model servers' interpreter (default: the python beside this\n"
    "                           tfos, else python3)\n"
    "  --max-restarts N         a model server that fails after running 5 s or more is started again\n"
    "                           alone, by its agent, up to N times each; one that fails sooner (a model\n"
    "                           that does not load) restarts them all, up to N times (default " TFOS__STR(TFOS_SERVE_DEFAULT_MAX_RESTARTS) ")\n"
    "  --log-dir D              the model servers' logs (default tfos-logs/run-<time>-<pid>)\n"
    "  --reservation-timeout S  seconds for every model server to start (default "
    "60)\n"
    "\n"
    "Options take their value as the next argument or after '=' (--port=8500).\n";

typedef struct serve_cli {
    char *names[MAX_MODELS];
    char name_buf[MAX_MODELS][104];
    char *model_args[MAX_MODELS], *loader_args[MAX_MODELS];
    int has_loader[MAX_MODELS];
    int nmodels, nloaders;
    long long replicas, port, max_batch, max_delay, queue_rows, max_body, restarts;
    double timeout, reservation, poll_s, registry_poll;
    const char *reg_uri[MAX_MODELS]; /* models:/... of a model from the registry; NULL: a DIR */
    char arm_uri[MAX_MODELS][300];   /* a canary's arms' URIs (reg_uri points here) */
    char arm_loader[MAX_MODELS][PATH_MAX + 128]; /* --loader NAME=... given for a canary: one per arm */
    /* canaries: --model NAME=URI:W,URI:W: each arm a model of its own (NAME.ALIAS), requests for NAME split */
    int ncanaries;
    struct {
        char name[104];
        int n, arm[4];
        long long weight[4];
    } canary[16];
    char dir_arg[MAX_MODELS][PATH_MAX + 512]; /* its model_args: NAME=<the local copy's dir> */
    const char *listen, *token, *python, *log_dir;
} serve_cli;

static int to_int(const char *v, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        return -1;
    *out = x;
    return 0;
}

static int is_loopback(const char *host)
{
    return !strcmp(host, "localhost") || !strncmp(host, "127.", 4) || !strcmp(host, "::1");
}

/* Parse and check argv into *v. am: on YARN (model dirs are not looked at
 * here, --listen is refused). 0, 2 (a usage error, reported) or TFOS__HELP. */
static int serve_parse(serve_cli *v, int argc, char **argv, int am)
{
    memset(v, 0, sizeof *v);
    char **names = v->names, **model_args = v->model_args, **loader_args = v->loader_args;
    int nmodels = 0, nloaders = 0;
    long long replicas = 1, port = am ? 0 : TFOS_SERVE_DEFAULT_PORT, max_batch = 0, max_delay = 0, queue_rows = 0,
              max_body = 0, restarts = TFOS_SERVE_DEFAULT_MAX_RESTARTS;
    double timeout = 0, reservation = 0, poll_s = TFOS_SERVE_DEFAULT_POLL,
           registry_poll = TFOS_SERVE_DEFAULT_REGISTRY_POLL;
    const char *listen = NULL, *token = getenv("TFOS_SERVE_TOKEN"), *python = NULL, *log_dir = NULL;
    tfos__args it;
    tfos__args_init(&it, argc, argv);
    for (char *a; (a = tfos__args_next(&it));) {
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return TFOS__HELP;
        if (strncmp(a, "--", 2))
            return tfos__usage_error("unexpected argument '%s' (tfos serve takes options only)", a);
        char *val = tfos__args_value(&it);
        if (!val)
            return tfos__usage_error("%s needs a value", a);
        int bad = 0;
        if (!strcmp(a, "--model") && strchr(val, '=') && strchr(val, ',')) { /* a canary */
            char *e = strchr(val, '=');
            size_t nl = (size_t)(e - val);
            if (!nl || nl > 90 || strspn(val, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") < nl)
                return tfos__usage_error("--model %s: a canary's name is up to 90 letters, digits, '_', '.' and '-'",
                                         val);
            if (v->ncanaries == 16)
                return tfos__usage_error("--model %s: at most 16 canaries", val);
            int c = v->ncanaries, narms = 0;
            snprintf(v->canary[c].name, sizeof v->canary[c].name, "%.*s", (int)nl, val);
            for (int j = 0; j < nmodels; j++)
                if (!strcmp(names[j], v->canary[c].name))
                    return tfos__usage_error("--model %s: that name is given twice", v->canary[c].name);
            for (const char *p = e + 1; *p; p += *p == ',') {
                size_t al = strcspn(p, ",");
                char arm[300], why[400];
                const char *colon = memrchr(p, ':', al);
                char *end;
                long long w = colon ? strtoll(colon + 1, &end, 10) : 0;
                tfos__registry_ref ref;
                if (al >= sizeof arm || !colon || colon == p || end != p + al || w < 1 || w > 1000000)
                    return tfos__usage_error("--model %s: a canary is NAME=models:/REG@ALIAS:WEIGHT,models:/REG@ALIAS:"
                                             "WEIGHT (weights 1 to 1000000, relative)", val);
                snprintf(arm, sizeof arm, "%.*s", (int)(colon - p), p);
                if (tfos__registry_parse(arm, &ref, why, sizeof why))
                    return tfos__usage_error("--model %s (a canary's arms come from MLflow's registry)", why);
                if (narms == 4 || nmodels == MAX_MODELS)
                    return tfos__usage_error("--model %s: 2 to 4 arms, 64 models in all", val);
                int i = nmodels;
                char nm[400];
                snprintf(nm, sizeof nm, "%s.%s%s", v->canary[c].name, ref.alias[0] ? "" : "v",
                         ref.alias[0] ? ref.alias : ref.version);
                if (strspn(nm, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != strlen(nm) ||
                    strlen(nm) > 100)
                    return tfos__usage_error("--model %s: an arm is served as NAME.ALIAS, which must be up to 100 "
                                             "letters, digits, '_', '.' and '-'", nm);
                memcpy(v->name_buf[i], nm, strlen(nm) + 1);
                names[i] = v->name_buf[i];
                for (int j = 0; j < i; j++)
                    if (!strcmp(names[j], names[i]))
                        return tfos__usage_error("--model %s: that name (a canary's arm) is given twice", names[i]);
                snprintf(v->arm_uri[i], sizeof v->arm_uri[i], "%s", arm);
                v->reg_uri[i] = v->arm_uri[i];
                model_args[i] = v->arm_uri[i]; /* replaced by its local copy's dir at start */
                v->canary[c].arm[narms] = i;
                v->canary[c].weight[narms++] = w;
                nmodels++;
                p += al;
            }
            if (narms < 2)
                return tfos__usage_error("--model %s: a canary has 2 to 4 arms (URI:WEIGHT,URI:WEIGHT)", val);
            v->canary[c].n = narms;
            v->ncanaries++;
        } else if (!strcmp(a, "--model")) {
            char *e = strchr(val, '=');
            if (!e || e == val || !e[1])
                return tfos__usage_error("--model takes NAME=DIR or NAME@VERSION=DIR, not '%s'", val);
            if (nmodels == MAX_MODELS)
                return tfos__usage_error("%s: at most 64 models", a);
            size_t nl = strcspn(val, "@=");
            if (!nl || nl > 100 ||
                strspn(val, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") < nl)
                return tfos__usage_error("--model %s: a name is up to 100 letters, digits, '_', '.' and '-'", val);
            if (val[nl] == '@' && (val + nl + 1 == e || strspn(val + nl + 1, "0123456789") != (size_t)(e - val - nl - 1)))
                return tfos__usage_error("--model %s: the pinned version (NAME@VERSION=DIR) is a number", val);
            snprintf(v->name_buf[nmodels], sizeof v->name_buf[nmodels], "%.*s", (int)nl, val);
            names[nmodels] = v->name_buf[nmodels];
            for (int j = 0; j < nmodels; j++)
                if (!strcmp(names[j], names[nmodels]))
                    return tfos__usage_error("--model %s: that name is given twice", names[nmodels]);
            for (int j = 0; j < v->ncanaries; j++)
                if (!strcmp(v->canary[j].name, names[nmodels]))
                    return tfos__usage_error("--model %s: that name is given twice", names[nmodels]);
            if (!strncmp(e + 1, "models:/", 8)) { /* MLflow's registry: checked when it is asked, at start */
                if (val[nl] == '@')
                    return tfos__usage_error("--model %s: a registry version is pinned as models:/NAME/VERSION, "
                                             "not NAME@V=", val);
                tfos__registry_ref ref;
                char why[400];
                const char *colon = strrchr(e + 1, ':');
                if (colon > e + 8 && colon[1] && strspn(colon + 1, "0123456789") == strlen(colon + 1))
                    return tfos__usage_error("--model %s: a canary has 2 to 4 arms (URI:WEIGHT,URI:WEIGHT)", val);
                if (tfos__registry_parse(e + 1, &ref, why, sizeof why))
                    return tfos__usage_error("--model %s", why);
                v->reg_uri[nmodels] = e + 1;
            } else if (!am && access(e + 1, R_OK | X_OK)) { /* on YARN: a path in the containers, or a URL */
                fprintf(stderr, "tfos: --model %s: %s: %s\n", names[nmodels], e + 1, strerror(errno));
                return 2;
            }
            model_args[nmodels++] = val;
        } else if (!strcmp(a, "--loader")) {
            char *e = strchr(val, '='), *colon = e ? strrchr(e, ':') : NULL;
            if (!e || e == val || !colon || colon == e + 1 || !colon[1])
                return tfos__usage_error("--loader takes NAME=MODULE:FUNCTION (or NAME=FILE.py:FUNCTION), not '%s'",
                                         val);
            if (nloaders == MAX_MODELS)
                return tfos__usage_error("%s: at most 64 loaders", a);
            loader_args[nloaders++] = val;
        } else if (!strcmp(a, "--poll")) {
            char *end;
            poll_s = strtod(val, &end);
            bad = end == val || *end || poll_s < 0 || poll_s > 86400;
        } else if (!strcmp(a, "--registry-poll")) {
            char *end;
            registry_poll = strtod(val, &end);
            bad = end == val || *end || registry_poll < 0 || registry_poll > 86400 ||
                  (registry_poll > 0 && registry_poll < 0.1);
        } else if (!strcmp(a, "--replicas")) {
            bad = to_int(val, 1, 64, &replicas);
        } else if (!strcmp(a, "--port")) {
            bad = to_int(val, 0, 65535, &port);
        } else if (!strcmp(a, "--max-batch")) {
            bad = to_int(val, 1, 1 << 20, &max_batch);
        } else if (!strcmp(a, "--max-delay-ms")) {
            bad = to_int(val, 0, 60000, &max_delay);
            if (!bad && max_delay == 0)
                max_delay = -1; /* 0 given: no waiting (the opts' 0 is "default") */
        } else if (!strcmp(a, "--max-queue-rows")) {
            bad = to_int(val, 1, 1LL << 32, &queue_rows);
        } else if (!strcmp(a, "--max-body")) {
            bad = to_int(val, 1024, 1LL << 32, &max_body);
        } else if (!strcmp(a, "--max-restarts")) {
            bad = to_int(val, 0, 1000000, &restarts);
        } else if (!strcmp(a, "--timeout") || !strcmp(a, "--reservation-timeout")) {
            char *end;
            double d = strtod(val, &end);
            bad = end == val || *end || !(d > 0);
            *(strcmp(a, "--timeout") ? &reservation : &timeout) = d;
        } else if (!strcmp(a, "--listen")) {
            listen = val;
        } else if (!strcmp(a, "--token")) {
            token = val;
        } else if (!strcmp(a, "--python")) {
            python = val;
        } else if (!strcmp(a, "--log-dir")) {
            log_dir = val;
        } else {
            return tfos__usage_error("unknown option '%s'", a);
        }
        if (bad) {
            char msg[160];
            snprintf(msg, sizeof msg, "%s: '%%s' is out of range or not a number", a);
            return tfos__usage_error(msg, val);
        }
    }
    if (!nmodels)
        return tfos__usage_error("%s", "serve needs --model NAME=DIR");
    int *has_loader = v->has_loader;
    /* a loader named for a canary is its arms' loader: one per arm for the model servers */
    for (int j = 0; j < nloaders; j++) {
        size_t ln = strcspn(loader_args[j], "=");
        for (int c = 0; c < v->ncanaries; c++) {
            if (strlen(v->canary[c].name) != ln || strncmp(v->canary[c].name, loader_args[j], ln))
                continue;
            if (nloaders - 1 + v->canary[c].n > MAX_MODELS)
                return tfos__usage_error("%s: at most 64 loaders", "--loader");
            char *fn = loader_args[j] + ln;
            for (int k = 0; k < v->canary[c].n; k++) {
                int i = v->canary[c].arm[k];
                snprintf(v->arm_loader[i], sizeof v->arm_loader[i], "%s%s", names[i], fn);
                loader_args[k ? nloaders++ : j] = v->arm_loader[i];
            }
            break;
        }
    }
    for (int j = 0; j < nloaders; j++) {
        size_t ln = strcspn(loader_args[j], "=");
        int found = 0;
        for (int i = 0; i < nmodels; i++)
            if (strlen(names[i]) == ln && !strncmp(names[i], loader_args[j], ln)) {
                if (has_loader[i]++)
                    return tfos__usage_error("--loader %s: that model has a loader already", names[i]);
                found = 1;
            }
        if (!found)
            return tfos__usage_error("--loader %s: no --model has that name", loader_args[j]);
    }
    for (int i = 0; i < nmodels && !am; i++) { /* a pinned version must be there */
        char *pv = model_args[i] + strlen(names[i]), *e = strchr(pv, '=');
        if (*pv != '@')
            continue;
        char pb[PATH_MAX + 64];
        snprintf(pb, sizeof pb, "%s/%.*s%s", e + 1, (int)(e - pv - 1), pv + 1, has_loader[i] ? "" : "/saved_model.pb");
        if (access(pb, R_OK)) {
            fprintf(stderr, "tfos: --model %s: version %.*s is pinned, but there is no %s: %s\n", names[i],
                    (int)(e - pv - 1), pv + 1, pb, strerror(errno));
            return 2;
        }
    }
    if (am && listen)
        return tfos__usage_error("--listen %s: on YARN the models are served on the ApplicationMaster's host",
                                 listen);
    if (listen && !is_loopback(listen) && !(token && *token))
        return tfos__usage_error("--listen %s goes beyond this machine: give --token T (or $TFOS_SERVE_TOKEN), "
                                 "which every request must carry", listen);
    if (token && *token && (strlen(token) < 16 || strlen(token) > 64 || strpbrk(token, " \t\r\n&?#")))
        return tfos__usage_error("%s", "--token: 16 to 64 characters, no spaces or any of & ? #");
    v->nmodels = nmodels;
    v->nloaders = nloaders;
    v->replicas = replicas;
    v->port = port;
    v->max_batch = max_batch;
    v->max_delay = max_delay;
    v->queue_rows = queue_rows;
    v->max_body = max_body;
    v->restarts = restarts;
    v->timeout = timeout;
    v->reservation = reservation;
    v->poll_s = poll_s;
    v->registry_poll = registry_poll;
    v->listen = listen;
    v->token = token;
    v->python = python;
    v->log_dir = log_dir;
    return 0;
}

/* The model servers' program: python -m tfos.serve with the models. */
static char **server_argv(const serve_cli *v, const char *python, char *pollbuf, size_t pollsz)
{
    char **prog = calloc((size_t)(6 + 2 * v->nmodels + 2 * v->nloaders), sizeof *prog);
    if (!prog)
        return NULL;
    snprintf(pollbuf, pollsz, "%g", v->poll_s);
    int k = 0;
    prog[k++] = (char *)python;
    prog[k++] = "-m";
    prog[k++] = "tfos.serve";
    prog[k++] = "--poll-s";
    prog[k++] = pollbuf;
    for (int i = 0; i < v->nmodels; i++) {
        prog[k++] = "--model";
        prog[k++] = v->model_args[i];
    }
    for (int i = 0; i < v->nloaders; i++) {
        prog[k++] = "--loader";
        prog[k++] = v->loader_args[i];
    }
    prog[k] = NULL;
    return prog;
}

/* Attach the front end to the opened launcher l and start it; run until
 * the servers are stopped; close both. tcp: where model servers on other
 * hosts reach the front end (tfos yarn serve), NULL: this host only. The
 * exit status. */
static int serve_with(tfos_local *l, const serve_cli *v, const tfos_run_opts *o, const char *tcp,
                      tfos__follow **follow)
{
    tfos_serve_opts so = {.models = v->names, .nmodels = v->nmodels, .max_batch = (int)v->max_batch,
                          .max_delay_ms = (int)v->max_delay, .max_queue_rows = v->queue_rows,
                          .timeout_s = v->timeout, .max_body = v->max_body};
    tfos__serve *s = NULL;
    tfos__http *http = tfos__launch_http(l);
    char err[512];
    int rc = tfos__serve_open(&s, tfos__launch_loop(l), &so, tfos__launch_secret(l), tcp, err, sizeof err);
    if (rc)
        TFOS_ERROR("%s", err);
    else
        rc = tfos__serve_attach(s, http, tfos__launch_status(l), tfos__launch_token(l));
    for (int c = 0; c < v->ncanaries && !rc; c++) {
        const char *arms[4];
        for (int k = 0; k < v->canary[c].n; k++)
            arms[k] = v->names[v->canary[c].arm[k]];
        if ((rc = tfos__serve_canary(s, v->canary[c].name, arms, v->canary[c].weight, v->canary[c].n, err,
                                     sizeof err)))
            TFOS_ERROR("%s", err);
    }
    for (int i = 0; i < v->nmodels && !rc; i++)
        if (follow[i] && (rc = tfos__follow_start(follow[i], s, tfos__launch_loop(l), v->registry_poll)))
            TFOS_ERROR("model %s: cannot follow %s: %s", v->names[i], v->reg_uri[i], tfos_strerror(rc));
    if (!rc) {
        const char *host = o->status_host ? o->status_host : "127.0.0.1";
        const char *url = tfos__launch_status_url(l);
        for (int c = 0; c < v->ncanaries; c++)
            TFOS_INFO("model %s: POST http://%s:%d/v2/models/%s/infer, split between %d models (a canary)",
                      v->canary[c].name, host, tfos__http_port(http), v->canary[c].name, v->canary[c].n);
        for (int i = 0; i < v->nmodels; i++)
            TFOS_INFO("model %s: POST http://%s:%d/v2/models/%s/infer (Open Inference Protocol)%s", v->names[i],
                      host, tfos__http_port(http), v->names[i],
                      v->token && *v->token ? ", with the token"
                      : strstr(url, "?token=") ? ", with the token in the status URL"
                                               : "");
        rc = tfos__launch_setenv(l, "TFOS_SERVE_ADDR", tfos__serve_address(s));
    }
    if (!rc)
        rc = tfos__launch_start(l);
    int code = 1;
    if (!rc) {
        tfos__catch_stop_signals();
        tfos__launch_run(l, tfos__stop_flag(), &code);
        int signo = code > 128 ? code - 128 : 0;
        if (signo && tfos_policy_count(tfos_local_policy(l)) <= 1) /* how a server is stopped */
            TFOS_INFO("stopped serving (signal %d, %s); logs of the model servers are in %s", signo,
                      strsignal(signo), tfos_local_log_dir(l));
    }
    for (int i = 0; i < v->nmodels; i++) { /* before the front end they report to */
        tfos__follow_close(follow[i]);
        follow[i] = NULL;
    }
    tfos__serve_close(s); /* answers what still waits (503), before the HTTP server goes */
    tfos_local_close(l);
    if (rc) {
        fprintf(stderr, "tfos: could not start serving: %s\n", tfos_strerror(rc));
        return 1;
    }
    return code;
}

/* tfos yarn serve's HDFS dir for the registry's copies, in the
 * application's staging dir ($TFOS_YARN_STAGING, an hdfs:// URL, which the
 * client removes when the application ends), and a WebHDFS handle to write
 * it ($TFOS_WEBHDFS: both set by the client when the default FileSystem is
 * HDFS). 0, or 1 with the error printed, naming model and uri. */
static int registry_on_hdfs(tfos__webhdfs **hdfs, char *remote, size_t size, const char *model, const char *uri)
{
    const char *staging = getenv("TFOS_YARN_STAGING"), *webhdfs = getenv("TFOS_WEBHDFS");
    char err[1024];
    if (!staging || !tfos__webhdfs_path(staging) || !webhdfs || !*webhdfs) {
        fprintf(stderr, "tfos: --model %s=%s: on YARN the registry's versions reach the model servers through "
                "HDFS, but the default FileSystem is not HDFS (staging dir %s, TFOS_WEBHDFS %s): give the version's "
                "directory instead (--model %s=hdfs://... or a path in the containers)\n", model, uri,
                staging ? staging : "unset", webhdfs && *webhdfs ? webhdfs : "unset", model);
        return 1;
    }
    if ((size_t)snprintf(remote, size, "%s/tfos-registry", staging) >= size) {
        fprintf(stderr, "tfos: --model %s=%s: the staging dir's URL is too long: %s\n", model, uri, staging);
        return 1;
    }
    if (tfos__webhdfs_open(hdfs, webhdfs, 0, err, sizeof err)) {
        fprintf(stderr, "tfos: --model %s=%s: %s\n", model, uri, err);
        return 1;
    }
    return 0;
}

/* tfos serve here (am NULL) or in the ApplicationMaster's container. */
static int serve_main(int argc, char **argv, const tfos__serve_am *am)
{
    serve_cli v;
    int rc = serve_parse(&v, argc, argv, am != NULL);
    if (rc == TFOS__HELP) {
        fputs(tfos__serve_help, stdout);
        return 0;
    }
    if (rc)
        return rc;
    char exe[PATH_MAX];
    if (tfos__self_path(exe, sizeof exe)) {
        fprintf(stderr, "tfos: cannot find my own executable: %s\n", strerror(errno));
        return 1;
    }
    /* the python beside this tfos (a venv's bin), else python3 */
    const char *python = v.python;
    char beside[PATH_MAX + 16];
    if (!python) {
        snprintf(beside, sizeof beside, "%s", exe);
        char *slash = strrchr(beside, '/');
        if (slash) {
            snprintf(slash + 1, sizeof beside - (size_t)(slash + 1 - beside), "python3");
            python = access(beside, X_OK) ? "python3" : beside;
        } else {
            python = "python3";
        }
    }
    /* models from MLflow's registry: their versions copied here before any
     * model server starts (a missing model, alias or version fails now,
     * named), each then served as a directory of versions */
    tfos__follow *follow[MAX_MODELS] = {0};
    char cache[PATH_MAX] = "";
    int code = 1;
    char **prog = NULL;
    /* on YARN the model servers run in other containers: the versions go
     * to them through HDFS, in the application's staging dir (removed
     * with it when the application ends, and by us before) */
    tfos__webhdfs *hdfs = NULL;
    char remote[PATH_MAX] = "";
    for (int i = 0; i < v.nmodels; i++) {
        if (!v.reg_uri[i])
            continue;
        char err[1024], dir[PATH_MAX + 128], url[PATH_MAX + 128];
        if (am && !hdfs && registry_on_hdfs(&hdfs, remote, sizeof remote, v.names[i], v.reg_uri[i]))
            goto out;
        if (!cache[0]) {
            const char *tmp = getenv("TMPDIR");
            snprintf(cache, sizeof cache, "%s/tfos-registry-XXXXXX", tmp && *tmp ? tmp : "/tmp");
            if (!mkdtemp(cache)) {
                fprintf(stderr, "tfos: --model %s: cannot make a directory for the registry's models: %s: %s\n",
                        v.names[i], cache, strerror(errno));
                cache[0] = 0;
                goto out;
            }
        }
        snprintf(dir, sizeof dir, "%s/%s", cache, v.names[i]);
        snprintf(url, sizeof url, "%s/%s", remote, v.names[i]);
        if (tfos__follow_open(&follow[i], v.names[i], v.reg_uri[i], dir, hdfs, url, err, sizeof err)) {
            fprintf(stderr, "tfos: --model %s: %s\n", v.names[i], err);
            goto out;
        }
        snprintf(v.dir_arg[i], sizeof v.dir_arg[i], "%s=%s", v.names[i], hdfs ? url : dir);
        v.model_args[i] = v.dir_arg[i];
    }
    char pollbuf[32];
    prog = server_argv(&v, python, pollbuf, sizeof pollbuf);
    if (!prog)
        goto out;
    tfos_run_opts o = {.layout = {.num_workers = (int)v.replicas}, .argv = prog, .agent_path = exe,
                       .log_dir = v.log_dir, .reservation_timeout = v.reservation, .python = python,
                       .max_restarts = (int)v.restarts, .status_port = (int)v.port, .status_host = v.listen,
                       .quiet = true};
    tfos__launch_opts lo = {.http_token = v.token, .respawn = (int)v.restarts, .http_max_conns = 256,
                            .http_purpose = "the models", .resident = true};
    /* here (not on YARN, whose containers have their own files): model
     * servers that cannot start fail now, once, not once per server and
     * restart (python -m tfos.serve without tfos exits 1, as any failure) */
    char why[1024];
    int cannot = !am && tfos__launch_check(&o, why, sizeof why);
    if (!am && !cannot && tfos__python_finds(python, "tfos", NULL, 10000) == 0) {
        snprintf(why, sizeof why, "the model servers run python -m tfos.serve, but %.700s cannot import tfos (No "
                 "module named 'tfos'): pass --python PY with an interpreter where tfos is installed", python);
        cannot = 1;
    }
    if (cannot) {
        fprintf(stderr, "tfos: %s\ntfos: no model server was started: a program that cannot start is not "
                "retried\n", why);
        goto out;
    }
    /* in the ApplicationMaster's container: each model server in a container
     * of its own, through a stand-in (as tfos yarn-am's nodes) */
    tfos__yarn_cfg ycfg;
    if (am)
        tfos__launch_on_yarn(&o, &lo, &ycfg, exe, am->am_socket, am->resources, am->bind, am->address_file);
    tfos_local *l;
    rc = tfos__launch_open(&l, &o, &lo);
    if (rc)
        fprintf(stderr, "tfos: could not start serving: %s\n", tfos_strerror(rc));
    else
        code = serve_with(l, &v, &o, am ? am->bind : NULL, follow); /* containers elsewhere: over TCP */
out:
    for (int i = 0; i < v.nmodels; i++)
        tfos__follow_close(follow[i]);
    if (cache[0]) /* the registry's copies: this run's only */
        tfos__rm_tree(cache);
    if (hdfs) {
        char err[1024];
        if (tfos__webhdfs_delete(hdfs, tfos__webhdfs_path(remote), err, sizeof err))
            fprintf(stderr, "tfos: the registry's copies stay on HDFS until the application's staging dir goes: "
                    "%s\n", err);
        tfos__webhdfs_close(hdfs);
    }
    free(prog);
    return code;
}

int tfos__cmd_serve(int argc, char **argv)
{
    return serve_main(argc, argv, NULL);
}

int tfos__serve_on_yarn(int argc, char **argv, const tfos__serve_am *am)
{
    return serve_main(argc, argv, am);
}

/* tfos yarn serve on the submitting host: every model from the registry
 * is there, asked from here (what the ApplicationMaster asks again at
 * start), so that nothing is submitted for one that is not. */
static int check_registry(const serve_cli *v, const char *tracking, int *from_registry)
{
    for (int i = 0; i < v->nmodels; i++) {
        if (!v->reg_uri[i])
            continue;
        *from_registry = 1;
        char err[1024];
        tfos__registry_ref ref;
        tfos__mlflow *m = NULL;
        if (!tracking || !*tracking) {
            fprintf(stderr, "tfos: --model %s: %s comes from MLflow's model registry: set MLFLOW_TRACKING_URI to "
                    "its tracking server (http://HOST:PORT)\n", v->names[i], v->reg_uri[i]);
            return 2;
        }
        if (tfos__mlflow_open(&m, tracking, 30000, err, sizeof err)) {
            fprintf(stderr, "tfos: MLFLOW_TRACKING_URI: %s\n", err);
            return 2;
        }
        if (strcmp(tfos__mlflow_shown(m), tracking) && strchr(tracking, '@')) {
            tfos__mlflow_close(m);
            return tfos__usage_error("%s", "MLFLOW_TRACKING_URI: on YARN the URI goes to the ApplicationMaster's "
                                           "environment: give it without user:password@ and let the tracking "
                                           "server accept the cluster's hosts");
        }
        int rc = tfos__registry_parse(v->reg_uri[i], &ref, err, sizeof err);
        if (!rc)
            rc = tfos__registry_resolve(m, &ref, err, sizeof err);
        tfos__mlflow_close(m);
        if (rc) {
            fprintf(stderr, "tfos: --model %s: %s\n", v->names[i], err);
            return 1;
        }
    }
    static const char *const creds[] = {"MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME",
                                        "MLFLOW_TRACKING_PASSWORD"};
    for (size_t k = 0; *from_registry && k < sizeof creds / sizeof creds[0]; k++)
        if (getenv(creds[k]) && *getenv(creds[k]))
            fprintf(stderr, "tfos yarn serve: %s stays on this host: the ApplicationMaster asks the registry "
                    "without credentials (docs/MODELS.md)\n", creds[k]);
    return 0;
}

int tfos__serve_check(int argc, char **argv, const char *tracking, int *from_registry)
{
    serve_cli v;
    *from_registry = 0;
    int rc = serve_parse(&v, argc, argv, 1);
    if (rc)
        return rc == TFOS__HELP ? 0 : rc;
    return check_registry(&v, tracking, from_registry);
}
