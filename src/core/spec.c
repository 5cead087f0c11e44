/* spec.c: layouts, TF_CONFIG, torchrun/JAX variables, the TFOS_* context. */
#include "core/spec.h"

#include "core/json.h"
#include "platform/proc.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tfos_layout_total(const tfos_layout *l)
{
    return l->num_ps + l->num_workers + (l->chief ? 1 : 0) + (l->evaluator ? 1 : 0);
}

int tfos_layout_role(const tfos_layout *l, int id, const char **job, int *index)
{
    if (id < 0 || id >= tfos_layout_total(l))
        return TFOS_EINVAL;
    if (id < l->num_ps) {
        *job = "ps";
        *index = id;
        return 0;
    }
    id -= l->num_ps;
    if (l->chief) {
        if (id == 0) {
            *job = "chief";
            *index = 0;
            return 0;
        }
        id--;
    }
    if (l->evaluator) {
        if (id == 0) {
            *job = "evaluator";
            *index = 0;
            return 0;
        }
        id--;
    }
    *job = "worker";
    *index = id;
    return 0;
}

int tfos_layout_feed_ids(const tfos_layout *l, int *ids, int max)
{
    int n = 0, total = tfos_layout_total(l);
    for (int i = 0; i < total; i++) {
        const char *job;
        int index;
        tfos_layout_role(l, i, &job, &index);
        if (tfos__job_is_trainer(job)) {
            if (n < max)
                ids[n] = i;
            n++;
        }
    }
    return n;
}

static const char *const job_order[] = {"chief", "worker", "ps", "evaluator"};

int tfos__job_valid(const char *job)
{
    for (size_t i = 0; i < 4; i++)
        if (!strcmp(job, job_order[i]))
            return 1;
    return 0;
}

int tfos__job_is_trainer(const char *job)
{
    return !strcmp(job, "chief") || !strcmp(job, "worker");
}

/* The nodes of `job` by task index, in *slots (malloc'd; -1 where no node
 * has that index; indexes are dense 0..count-1 from the coordinator):
 * O(n), so that a node's environment costs O(n) and a cluster's O(n^2) in
 * all, not O(n^3) (1,000 nodes spent seconds here). Returns count, or -1
 * out of memory. */
static int job_slots(const tfos__node_addr *nodes, int n, const char *job, int **slots)
{
    int count = 0;
    *slots = NULL;
    for (int i = 0; i < n; i++)
        if (!strcmp(nodes[i].job, job))
            count++;
    if (!count)
        return 0;
    int *s = malloc((size_t)count * sizeof *s);
    if (!s)
        return -1;
    for (int k = 0; k < count; k++)
        s[k] = -1;
    for (int i = 0; i < n; i++)
        if (!strcmp(nodes[i].job, job) && nodes[i].index >= 0 && nodes[i].index < count && s[nodes[i].index] < 0)
            s[nodes[i].index] = i;
    *slots = s;
    return count;
}

static int cluster_json(FILE *f, const tfos__node_addr *nodes, int n)
{
    int first_job = 1;
    fputc('{', f);
    for (size_t j = 0; j < 4; j++) {
        const char *job = job_order[j];
        int *slots;
        int count = job_slots(nodes, n, job, &slots);
        if (count < 0)
            return -1;
        if (!count)
            continue;
        fprintf(f, "%s\"%s\": [", first_job ? "" : ", ", job);
        first_job = 0;
        int written = 0;
        for (int idx = 0; idx < count; idx++) {
            int i = slots[idx];
            if (i < 0)
                continue;
            char addr[TFOS_HOST_MAX + 16];
            if (strchr(nodes[i].host, ':'))
                snprintf(addr, sizeof addr, "[%s]:%d", nodes[i].host, nodes[i].port);
            else
                snprintf(addr, sizeof addr, "%s:%d", nodes[i].host, nodes[i].port);
            fputs(written++ ? ", " : "", f);
            tfos__json_str(f, addr); /* hosts come from peers: escape them */
        }
        free(slots);
        fputc(']', f);
    }
    fputc('}', f);
    return 0;
}

/* The cluster object, and with self >= 0 the whole TF_CONFIG around it. */
static char *config_json(const tfos__node_addr *nodes, int n, int self)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    if (self >= 0)
        fputs("{\"cluster\": ", f);
    int oom = cluster_json(f, nodes, n);
    if (self >= 0)
        fprintf(f, ", \"task\": {\"type\": \"%s\", \"index\": %d}}", nodes[self].job, nodes[self].index);
    if (fclose(f) || oom) {
        free(buf);
        return NULL;
    }
    return buf;
}

char *tfos__cluster_json(const tfos__node_addr *nodes, int n)
{
    return config_json(nodes, n, -1);
}

char *tfos__tf_config(const tfos__node_addr *nodes, int n, int self)
{
    return config_json(nodes, n, self);
}

void tfos__env_free(char **env)
{
    if (!env)
        return;
    for (char **e = env; *e; e++)
        free(*e);
    free(env);
}

/* Variables tfos owns: dropped from the inherited environment. */
static int owned_var(const char *kv)
{
    static const char *const names[] = {"TF_CONFIG", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE",
                                        "LOCAL_RANK", "LOCAL_WORLD_SIZE", "JAX_COORDINATOR_ADDRESS",
                                        "JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "GROUP_RANK", "ROLE_RANK",
                                        "ROLE_WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_NAME",
                                        "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
                                        "TORCHELASTIC_RUN_ID"};
    /* Set by whatever started the agent for its program (the Spark node
     * task, a user), not by the agent: passed through. */
    static const char *const passed[] = {"TFOS_PAYLOAD_FD", "TFOS_INPUT_MODE", "TFOS_DEFAULT_FS",
                                         "TFOS_TENSORBOARD_PORT", "TFOS_TENSORBOARD_LOGDIR",
                                         "TFOS_EXECUTOR_KEY", "TFOS_LOG_LEVEL", "TFOS_FEED_EMPTY",
                                         "TFOS_WEBHDFS", "TFOS_SERVE_ADDR", "TFOS_DRAIN_FILE",
                                         "TFOS_ERROR_FILE", "TFOS_RESIZE_FILE", "TFOS_HDFS_CREDENTIALS",
                                         "TFOS_HDFS_TOKEN_RENEW_MS", "TFOS_HDFS_TOKEN_CACHE"};
    if (!strncmp(kv, "TFOS_", 5)) {
        for (size_t i = 0; i < sizeof passed / sizeof *passed; i++) {
            size_t l = strlen(passed[i]);
            if (!strncmp(kv, passed[i], l) && kv[l] == '=')
                return 0;
        }
        return 1;
    }
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        size_t l = strlen(names[i]);
        if (!strncmp(kv, names[i], l) && kv[l] == '=')
            return 1;
    }
    return 0;
}

typedef struct envv {
    char **v;
    size_t n, cap;
    int oom;
} envv;

static void env_push(envv *e, char *s)
{
    if (!s)
        e->oom = 1;
    if (e->oom) {
        free(s);
        return;
    }
    if (e->n + 2 > e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 64;
        char **v = realloc(e->v, cap * sizeof *v);
        if (!v) {
            e->oom = 1;
            free(s);
            return;
        }
        e->v = v;
        e->cap = cap;
    }
    e->v[e->n++] = s;
    e->v[e->n] = NULL;
}

static void env_set(envv *e, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void env_set(envv *e, const char *name, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int vl = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    size_t nl = strlen(name);
    char *s = malloc(nl + (size_t)vl + 2);
    if (s) {
        memcpy(s, name, nl);
        s[nl] = '=';
        va_start(ap, fmt);
        vsnprintf(s + nl + 1, (size_t)vl + 1, fmt, ap);
        va_end(ap);
    }
    env_push(e, s);
}

/* Rank of a trainer: chief first, then workers by index. -1 for others. */
static int trainer_rank(const tfos__node_addr *nodes, int self, int has_chief)
{
    if (!tfos__job_is_trainer(nodes[self].job))
        return -1;
    if (!strcmp(nodes[self].job, "chief"))
        return 0;
    return nodes[self].index + has_chief;
}

/* Ranks of every node: trainers by rank, and by (host, rank) for the
 * local ranks. */
typedef struct rank_key {
    const char *host;
    int rank, node;
} rank_key;

static int by_host_rank(const void *x, const void *y)
{
    const rank_key *a = x, *b = y;
    int c = strcmp(a->host, b->host);
    return c ? c : (a->rank > b->rank) - (a->rank < b->rank);
}

int tfos__spec_ranks_all(const tfos__node_addr *nodes, int n, tfos__spec_ranks *ranks)
{
    int has_chief = 0, world = 0, master = -1;
    for (int i = 0; i < n && !has_chief; i++)
        has_chief = !strcmp(nodes[i].job, "chief");
    rank_key *keys = malloc((size_t)(n > 0 ? n : 1) * sizeof *keys);
    if (!keys)
        return TFOS_ENOMEM;
    for (int i = 0; i < n; i++) {
        int r = trainer_rank(nodes, i, has_chief);
        ranks[i] = (tfos__spec_ranks){.nodes = n, .rank = r, .master = -1};
        if (r < 0)
            continue;
        if (r == 0)
            master = i;
        keys[world++] = (rank_key){nodes[i].host, r, i};
    }
    qsort(keys, (size_t)world, sizeof *keys, by_host_rank);
    for (int i = 0; i < world;) {
        int j = i;
        while (j < world && !strcmp(keys[j].host, keys[i].host))
            j++;
        for (int k = i; k < j; k++) {
            ranks[keys[k].node].local_rank = k - i;
            ranks[keys[k].node].local_world = j - i;
        }
        i = j;
    }
    /* a node that is not a trainer counts the trainers on its host (as the
     * full form does) */
    for (int i = 0; i < n; i++) {
        ranks[i].world = world;
        ranks[i].master = master;
        if (ranks[i].rank < 0) {
            rank_key probe = {nodes[i].host, -1, i};
            rank_key *lo = keys, *hi = keys + world; /* first key of this host */
            while (lo < hi) {
                rank_key *mid = lo + (hi - lo) / 2;
                if (by_host_rank(mid, &probe) < 0)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            int c = 0;
            while (lo + c < keys + world && !strcmp(lo[c].host, nodes[i].host))
                c++;
            ranks[i].local_world = c;
        }
    }
    free(keys);
    return 0;
}

static char **spec_env(char *const *base, const tfos__node_addr *nodes, int n, int self,
                       const tfos__spec_ranks *rk, int full, const tfos__ctx_env *ctx)
{
    envv e = {0};
    int tf_log_level_set = 0;
    for (char *const *b = base; b && *b; b++) {
        if (!strncmp(*b, "TF_CPP_MIN_LOG_LEVEL=", 21))
            tf_log_level_set = 1;
        if (!owned_var(*b) && !(ctx->legacy_keras && !strncmp(*b, "TF_USE_LEGACY_KERAS=", 20)))
            env_push(&e, strdup(*b));
    }
    if (ctx->legacy_keras)
        env_set(&e, "TF_USE_LEGACY_KERAS", "%s", ctx->legacy_keras);
    /* TensorFlow's INFO lines, times every node, bury the program's own
     * output; its warnings stay. The user's own setting wins. */
    if (!tf_log_level_set)
        env_set(&e, "TF_CPP_MIN_LOG_LEVEL", "%s", TFOS_DEFAULT_TF_CPP_MIN_LOG_LEVEL);

    const tfos__node_addr *me = &nodes[self];
    int world = rk->world, rank0 = rk->master, rank = rk->rank;
    int local_rank = rk->local_rank, local_world = rk->local_world;

    if (full) {
        char *tfc = tfos__tf_config(nodes, n, self);
        char *cluster = tfos__cluster_json(nodes, n);
        if (!tfc || !cluster)
            e.oom = 1;
        else {
            env_set(&e, "TF_CONFIG", "%s", tfc);
            env_set(&e, "TFOS_CLUSTER_SPEC", "%s", cluster);
        }
        free(tfc);
        free(cluster);
    }

    /* the host lists of TensorFlow-on-YARN (ps, wk), for programs that do
     * not read TF_CONFIG: HOST:PORT,... by task index; set when the job has nodes */
    static const char *const listed[][2] = {{"ps", "TFOS_PS_HOSTS"}, {"worker", "TFOS_WORKER_HOSTS"}};
    for (size_t j = 0; full && j < sizeof listed / sizeof *listed && !e.oom; j++) {
        int *slots;
        int count = job_slots(nodes, n, listed[j][0], &slots);
        if (count < 0) {
            e.oom = 1;
            break;
        }
        if (!count)
            continue;
        size_t cap = 1, len = 0;
        for (int idx = 0; idx < count; idx++)
            if (slots[idx] >= 0)
                cap += strlen(nodes[slots[idx]].host) + 8;
        char *hosts = malloc(cap);
        if (!hosts) {
            free(slots);
            e.oom = 1;
            break;
        }
        hosts[0] = '\0';
        /* by task index, up to the first missing one */
        for (int idx = 0; idx < count && slots[idx] >= 0; idx++)
            len += (size_t)snprintf(hosts + len, cap - len, "%s%s:%d", idx ? "," : "", nodes[slots[idx]].host,
                                    nodes[slots[idx]].port);
        free(slots);
        env_set(&e, listed[j][1], "%s", hosts);
        free(hosts);
    }

    env_set(&e, "TFOS_JOB_NAME", "%s", me->job);
    env_set(&e, "TFOS_TASK_INDEX", "%d", me->index);
    env_set(&e, "TFOS_EXECUTOR_ID", "%d", me->executor_id);
    env_set(&e, "TFOS_WORKER_NUM", "%d", me->executor_id);
    env_set(&e, "TFOS_NUM_WORKERS", "%d", world);
    env_set(&e, "TFOS_NUM_NODES", "%d", rk->nodes);
    env_set(&e, "TFOS_HOST", "%s", me->host);
    env_set(&e, "TFOS_PORT", "%d", me->port);
    env_set(&e, "TFOS_ATTEMPT", "%d", ctx->attempt);
    if (ctx->coord_addr)
        env_set(&e, "TFOS_COORD_ADDR", "%s", ctx->coord_addr);
    if (ctx->log_dir)
        env_set(&e, "TFOS_LOG_DIR", "%s", ctx->log_dir);
    if (ctx->secret)
        env_set(&e, "TFOS_SECRET", "%s", ctx->secret);
    if (ctx->cluster_id)
        env_set(&e, "TFOS_CLUSTER_ID", "%s", ctx->cluster_id);
    if (ctx->checkpoint_dir)
        env_set(&e, "TFOS_CHECKPOINT_DIR", "%s", ctx->checkpoint_dir);
    if (ctx->feed_in_fd >= 0 && ctx->feed_out_fd >= 0)
        env_set(&e, "TFOS_FEED_FDS", "%d,%d", ctx->feed_in_fd, ctx->feed_out_fd);
    if (ctx->port_fd > 0)
        env_set(&e, "TFOS_PORT_FD", "%d", ctx->port_fd);

    if (rank0 >= 0) {
        env_set(&e, "MASTER_ADDR", "%s", nodes[rank0].host);
        env_set(&e, "MASTER_PORT", "%d", nodes[rank0].port);
        env_set(&e, "WORLD_SIZE", "%d", world);
        env_set(&e, "JAX_COORDINATOR_ADDRESS", "%s:%d", nodes[rank0].host, nodes[rank0].port);
        env_set(&e, "JAX_NUM_PROCESSES", "%d", world);
        if (rank >= 0) {
            env_set(&e, "RANK", "%d", rank);
            env_set(&e, "LOCAL_RANK", "%d", local_rank);
            env_set(&e, "LOCAL_WORLD_SIZE", "%d", local_world);
            env_set(&e, "JAX_PROCESS_ID", "%d", rank);
            /* torchrun's elastic-agent variables: every node is its own
             * group of one process, and all trainers share one role */
            env_set(&e, "GROUP_RANK", "%d", rank);
            env_set(&e, "GROUP_WORLD_SIZE", "%d", world);
            env_set(&e, "ROLE_RANK", "%d", rank);
            env_set(&e, "ROLE_WORLD_SIZE", "%d", world);
            env_set(&e, "ROLE_NAME", "%s", "default");
            env_set(&e, "TORCHELASTIC_RESTART_COUNT", "%d", ctx->attempt > 0 ? ctx->attempt - 1 : 0);
            env_set(&e, "TORCHELASTIC_MAX_RESTARTS", "%d", ctx->max_restarts);
            if (ctx->cluster_id)
                env_set(&e, "TORCHELASTIC_RUN_ID", "%s", ctx->cluster_id);
        }
    }
    if (e.oom) {
        tfos__env_free(e.v);
        return NULL;
    }
    if (!e.v) /* empty base and nothing set cannot happen, but stay total */
        env_push(&e, strdup("TFOS_EMPTY=1"));
    return e.v;
}

char **tfos__spec_env(char *const *base, const tfos__node_addr *nodes, int n, int self, const tfos__ctx_env *ctx)
{
    tfos__spec_ranks *all = malloc((size_t)n * sizeof *all);
    if (!all || tfos__spec_ranks_all(nodes, n, all)) {
        free(all);
        return NULL;
    }
    char **env = spec_env(base, nodes, n, self, &all[self], 1, ctx);
    free(all);
    return env;
}

char **tfos__spec_env_ranks(char *const *base, const tfos__node_addr *nodes, int n, int self,
                            const tfos__spec_ranks *ranks, const tfos__ctx_env *ctx)
{
    if (n < 1 || self < 0 || self >= n || ranks->master >= n)
        return NULL;
    return spec_env(base, nodes, n, self, ranks, 0, ctx);
}

/* ---- the program's Python and its Keras ------------------------------------ */

const char *tfos__program_python(const char *python, char *const *argv)
{
    if (python && *python)
        return python;
    if (argv && argv[0]) {
        const char *base = strrchr(argv[0], '/');
        base = base ? base + 1 : argv[0];
        if (!strncmp(base, "python", 6))
            return argv[0];
    }
    const char *env = getenv("TFOS_PYTHON");
    return env && *env ? env : "python3";
}

int tfos__keras_mode_valid(const char *mode)
{
    static const char *const modes[] = {"env", "auto", "legacy", "3"};
    if (!mode)
        return 0;
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
        if (!strcmp(mode, modes[i]))
            return 0;
    return -1;
}

static const char *env_get(char *const *env, const char *name)
{
    size_t l = strlen(name);
    for (char *const *e = env; e && *e; e++)
        if (!strncmp(*e, name, l) && (*e)[l] == '=')
            return *e + l + 1;
    return NULL;
}

/* TFOS_HAS_TF_KERAS=1|0: the answer, from a launcher that runs the
 * program's own interpreter with its sys.path (TFCluster's node tasks ask
 * importlib there, in a millisecond); -1: not given. */
static int known_tf_keras(char *const *env)
{
    const char *v = env_get(env, "TFOS_HAS_TF_KERAS");
    return v && (!strcmp(v, "1") || !strcmp(v, "0")) ? *v - '0' : -1;
}

/* "auto" keeps the user's own TF_USE_LEGACY_KERAS, when set. */
static int user_chose_keras(char *const *env)
{
    const char *set = env_get(env, "TF_USE_LEGACY_KERAS");
    return set && *set;
}

static int needs_probe(const char *mode, char *const *env)
{
    if (!mode || known_tf_keras(env) >= 0)
        return 0;
    return !strcmp(mode, "legacy") || (!strcmp(mode, "auto") && !user_chose_keras(env));
}

/* Start a Python that tells whether `python` finds the top-level package
 * `module` (without importing it: a few tens of ms) by its exit code: 0
 * yes, 3 no. */
static pid_t spawn_probe(const char *python, const char *module, char *const *env)
{
    char *argv[] = {(char *)python, "-c",
                    "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec(sys.argv[1]) else 3)",
                    (char *)module, NULL};
    int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    tfos__spawn_opts so = {.argv = argv, .envp = env, .stdin_fd = -1, .stdout_fd = devnull, .stderr_fd = devnull,
                           .pdeathsig = SIGKILL};
    pid_t pid;
    int rc = tfos__spawn(&so, &pid);
    if (devnull >= 0)
        close(devnull);
    return rc ? -1 : pid;
}

void tfos__keras_probe_start(tfos__keras_probe *p, const char *mode, const char *python, char *const *env)
{
    memset(p, 0, sizeof *p);
    if (needs_probe(mode, env) && (p->pid = spawn_probe(python, "tf_keras", env)) < 0)
        p->pid = 0; /* tfos__keras_resolve tries again */
}

int tfos__keras_probe_reaped(tfos__keras_probe *p, pid_t pid, int status)
{
    if (!p || p->pid <= 0 || pid != p->pid || p->done)
        return 0;
    p->done = 1;
    p->status = status;
    return 1;
}

/* Whether `python` finds the tf_keras package: 1 yes, 0 no, -1 could not
 * tell (the interpreter would not start or took over 30 s). From `p`'s probe
 * where one was started, else from one started now. */
static int has_tf_keras(const char *python, char *const *env, tfos__keras_probe *p)
{
    int known = known_tf_keras(env);
    if (known >= 0)
        return known;
    tfos__keras_probe now;
    if (!p || p->pid <= 0) {
        p = &now;
        memset(p, 0, sizeof *p);
        if ((p->pid = spawn_probe(python, "tf_keras", env)) < 0)
            return -1;
    }
    if (!p->done) {
        int status = 0;
        if (tfos__wait_pid(p->pid, 30000, &status)) {
            kill(p->pid, SIGKILL);
            tfos__wait_pid(p->pid, 5000, &status);
            p->done = 1;
            p->status = -1;
            return -1;
        }
        p->done = 1;
        p->status = status;
    }
    if (p->status < 0)
        return -1;
    if (WIFEXITED(p->status) && WEXITSTATUS(p->status) == 0)
        return 1;
    return WIFEXITED(p->status) && WEXITSTATUS(p->status) == 3 ? 0 : -1;
}

int tfos__python_finds(const char *python, const char *module, char *const *env, int timeout_ms)
{
    pid_t pid = spawn_probe(python, module, env);
    if (pid < 0)
        return -1;
    int status = 0;
    if (tfos__wait_pid(pid, timeout_ms, &status)) {
        kill(pid, SIGKILL);
        tfos__wait_pid(pid, 5000, &status);
        return -1;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 1;
    return WIFEXITED(status) && WEXITSTATUS(status) == 3 ? 0 : -1;
}

int tfos__keras_resolve(const char *mode, const char *python, char *const *env, tfos__keras_probe *probe,
                        const char **value, char *err, size_t errlen)
{
    *value = NULL;
    if (!mode || !strcmp(mode, "env"))
        return 0;
    if (!strcmp(mode, "3")) {
        *value = "0";
        return 0;
    }
    if (!strcmp(mode, "auto")) {
        if (user_chose_keras(env))
            return 0;
        if (has_tf_keras(python, env, probe) == 1)
            *value = "1";
        return 0;
    }
    if (!strcmp(mode, "legacy")) {
        int has = has_tf_keras(python, env, probe);
        if (has == 0) {
            snprintf(err, errlen,
                     "--keras legacy: the tf_keras package (Keras 2) is not installed for %s: "
                     "pip install tf-keras (the version of your tensorflow), or use --keras 3",
                     python);
            return TFOS_EINVAL;
        }
        *value = "1"; /* has == -1: the program will say what is wrong with its Python */
        return 0;
    }
    snprintf(err, errlen, "--keras: unknown mode '%s' (env, auto, legacy or 3)", mode);
    return TFOS_EINVAL;
}
