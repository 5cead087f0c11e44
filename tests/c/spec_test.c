/* spec_test.c: roles by executor id, TF_CONFIG text, torchrun/JAX variables. */
#include "check.h"
#include "core/spec.h"
#include "tfos/tfos.h"

static const char *getv(char **env, const char *name)
{
    size_t l = strlen(name);
    for (char **e = env; *e; e++)
        if (!strncmp(*e, name, l) && (*e)[l] == '=')
            return *e + l + 1;
    return NULL;
}

static void roles(void)
{
    tfos_layout l = {.num_ps = 2, .num_workers = 3, .chief = true, .evaluator = true};
    CHECK_EQ(tfos_layout_total(&l), 7);
    const char *want_job[] = {"ps", "ps", "chief", "evaluator", "worker", "worker", "worker"};
    int want_idx[] = {0, 1, 0, 0, 0, 1, 2};
    for (int i = 0; i < 7; i++) {
        const char *job;
        int idx;
        CHECK_EQ(tfos_layout_role(&l, i, &job, &idx), 0);
        CHECK_STR(job, want_job[i]);
        CHECK_EQ(idx, want_idx[i]);
    }
    const char *job;
    int idx;
    CHECK_EQ(tfos_layout_role(&l, 7, &job, &idx), TFOS_EINVAL);
    CHECK_EQ(tfos_layout_role(&l, -1, &job, &idx), TFOS_EINVAL);
}

static tfos__node_addr nodes[5] = {
    {"ps", 0, 0, "10.0.0.1", 2222},
    {"chief", 0, 1, "10.0.0.1", 2223},
    {"worker", 1, 3, "10.0.0.2", 2225},
    {"worker", 0, 2, "10.0.0.1", 2224},
    {"evaluator", 0, 4, "10.0.0.3", 2226},
};

static void tf_config(void)
{
    char *s = tfos__tf_config(nodes, 5, 2);
    CHECK_STR(s, "{\"cluster\": {\"chief\": [\"10.0.0.1:2223\"], \"worker\": [\"10.0.0.1:2224\", \"10.0.0.2:2225\"], "
                 "\"ps\": [\"10.0.0.1:2222\"], \"evaluator\": [\"10.0.0.3:2226\"]}, "
                 "\"task\": {\"type\": \"worker\", \"index\": 1}}");
    free(s);
    tfos__node_addr two[2] = {{"worker", 0, 0, "::1", 5000}, {"worker", 1, 1, "h\"x", 5001}};
    s = tfos__tf_config(two, 2, 0);
    CHECK_STR(s, "{\"cluster\": {\"worker\": [\"[::1]:5000\", \"h\\\"x:5001\"]}, \"task\": {\"type\": \"worker\", "
                 "\"index\": 0}}");
    free(s);
}

static void env_vars(void)
{
    char *base[] = {"PATH=/bin", "RANK=99", "TFOS_OLD=1", "TF_CONFIG=stale", "HOME=/root", NULL};
    tfos__ctx_env ctx = {.coord_addr = "10.0.0.9:7000", .attempt = 2, .log_dir = "/logs", .secret = "s3",
                         .cluster_id = "c0ffee", .feed_in_fd = 7, .feed_out_fd = 8};
    char **env = tfos__spec_env(base, nodes, 5, 2, &ctx); /* worker:1 on 10.0.0.2 */
    CHECK(env);
    CHECK_STR(getv(env, "PATH"), "/bin");
    CHECK(getv(env, "TFOS_OLD") == NULL);
    CHECK_STR(getv(env, "RANK"), "2"); /* chief 0, worker:0 1, worker:1 2 */
    CHECK_STR(getv(env, "WORLD_SIZE"), "3");
    CHECK_STR(getv(env, "LOCAL_RANK"), "0");
    CHECK_STR(getv(env, "LOCAL_WORLD_SIZE"), "1");
    CHECK_STR(getv(env, "MASTER_ADDR"), "10.0.0.1");
    CHECK_STR(getv(env, "MASTER_PORT"), "2223");
    CHECK_STR(getv(env, "JAX_COORDINATOR_ADDRESS"), "10.0.0.1:2223");
    CHECK_STR(getv(env, "JAX_NUM_PROCESSES"), "3");
    CHECK_STR(getv(env, "JAX_PROCESS_ID"), "2");
    CHECK_STR(getv(env, "TFOS_JOB_NAME"), "worker");
    CHECK_STR(getv(env, "TFOS_TASK_INDEX"), "1");
    CHECK_STR(getv(env, "TFOS_EXECUTOR_ID"), "3");
    CHECK_STR(getv(env, "TFOS_NUM_WORKERS"), "3");
    CHECK_STR(getv(env, "TFOS_ATTEMPT"), "2");
    CHECK_STR(getv(env, "TFOS_COORD_ADDR"), "10.0.0.9:7000");
    CHECK_STR(getv(env, "TFOS_PORT"), "2225");
    CHECK_STR(getv(env, "TFOS_CLUSTER_ID"), "c0ffee");
    CHECK_STR(getv(env, "TFOS_FEED_FDS"), "7,8");
    CHECK_STR(getv(env, "TFOS_PS_HOSTS"), "10.0.0.1:2222");                   /* TOY's ps */
    CHECK_STR(getv(env, "TFOS_WORKER_HOSTS"), "10.0.0.1:2224,10.0.0.2:2225"); /* and wk, by index */
    CHECK(strstr(getv(env, "TF_CONFIG"), "\"task\": {\"type\": \"worker\", \"index\": 1}"));
    CHECK_STR(getv(env, "TF_CPP_MIN_LOG_LEVEL"), TFOS_DEFAULT_TF_CPP_MIN_LOG_LEVEL); /* TF's INFO lines off */
    tfos__env_free(env);

    char *user_level[] = {"TF_CPP_MIN_LOG_LEVEL=0", NULL}; /* the user's own level is kept, 0 included */
    env = tfos__spec_env(user_level, nodes, 5, 2, &ctx);
    CHECK_STR(getv(env, "TF_CPP_MIN_LOG_LEVEL"), "0");
    int count = 0;
    for (char **v = env; *v; v++)
        count += !strncmp(*v, "TF_CPP_MIN_LOG_LEVEL=", 21);
    CHECK(count == 1);
    tfos__env_free(env);

    env = tfos__spec_env(base, nodes, 5, 3, &ctx); /* worker:0 on 10.0.0.1, after the chief there */
    CHECK_STR(getv(env, "RANK"), "1");
    CHECK_STR(getv(env, "LOCAL_RANK"), "1");
    CHECK_STR(getv(env, "LOCAL_WORLD_SIZE"), "2");
    tfos__env_free(env);

    env = tfos__spec_env(base, nodes, 5, 0, &ctx); /* ps: no rank of its own */
    CHECK(getv(env, "RANK") == NULL);
    CHECK_STR(getv(env, "WORLD_SIZE"), "3");
    CHECK_STR(getv(env, "TFOS_JOB_NAME"), "ps");
    tfos__env_free(env);
}

/* The compact form (torch, JAX) gives every node the same rank variables as
 * the full list does, with none of the variables that list every node. */
static void ranks_form(void)
{
    static const char *const same[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                                       "MASTER_PORT", "JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES",
                                       "JAX_PROCESS_ID", "GROUP_RANK", "TFOS_NUM_NODES", "TFOS_NUM_WORKERS",
                                       "TFOS_JOB_NAME", "TFOS_TASK_INDEX", "TFOS_EXECUTOR_ID", "TFOS_HOST",
                                       "TFOS_PORT"};
    char *base[] = {"PATH=/bin", NULL};
    tfos__ctx_env ctx = {.attempt = 1, .feed_in_fd = -1, .feed_out_fd = -1};
    tfos__spec_ranks rk[5];
    CHECK_EQ(tfos__spec_ranks_all(nodes, 5, rk), 0);
    CHECK_EQ(rk[0].rank, -1); /* ps */
    CHECK_EQ(rk[1].rank, 0);  /* chief */
    CHECK_EQ(rk[3].local_rank, 1); /* worker:0 after the chief on 10.0.0.1 */
    CHECK_EQ(rk[3].local_world, 2);
    for (int self = 0; self < 5; self++) {
        char **full = tfos__spec_env(base, nodes, 5, self, &ctx);
        /* what the coordinator sends: this node, and rank 0's */
        tfos__node_addr two[2] = {nodes[self], nodes[rk[self].master]};
        tfos__spec_ranks r = rk[self];
        int n = rk[self].master == self ? 1 : 2;
        r.master = rk[self].master == self ? 0 : 1;
        char **compact = tfos__spec_env_ranks(base, two, n, 0, &r, &ctx);
        CHECK(full && compact);
        for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
            const char *a = getv(full, same[i]), *b = getv(compact, same[i]);
            if (!a != !b || (a && strcmp(a, b))) {
                fprintf(stderr, "node %d: %s is '%s' from the full spec, '%s' from the ranks\n", self, same[i],
                        a ? a : "(unset)", b ? b : "(unset)");
                exit(1);
            }
        }
        CHECK(getv(full, "TF_CONFIG") && getv(full, "TFOS_CLUSTER_SPEC"));
        CHECK(!getv(compact, "TF_CONFIG") && !getv(compact, "TFOS_CLUSTER_SPEC") &&
              !getv(compact, "TFOS_WORKER_HOSTS") && !getv(compact, "TFOS_PS_HOSTS"));
        tfos__env_free(full);
        tfos__env_free(compact);
    }
    CHECK(tfos__spec_env_ranks(base, nodes, 1, 0, &(tfos__spec_ranks){.master = 1}, &ctx) == NULL);
    CHECK_EQ(tfos_framework_spec_form(NULL), TFOS_SPEC_FULL);
    CHECK_EQ(tfos_framework_spec_form("tf"), TFOS_SPEC_FULL);
    CHECK_EQ(tfos_framework_spec_form("torch"), TFOS_SPEC_RANKS);
    CHECK_EQ(tfos_framework_spec_form("jax"), TFOS_SPEC_RANKS);
    CHECK_EQ(tfos_framework_spec_form("mxnet"), -1);
}

int main(void)
{
    RUN(roles);
    RUN(tf_config);
    RUN(env_vars);
    RUN(ranks_form);
    return 0;
}
