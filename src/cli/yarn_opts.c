/* yarn_opts.c: tfos yarn's client options (see yarn_opts.h). */
#include "cli/yarn_opts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <unistd.h>

/* Each takes a value. */
static const char *const client_only[] = {
    "--queue",         "--name",           "--hadoop-classpath", "--am-memory",       "--worker-memory",
    "--worker-vcores", "--worker-gpus",    "--ps-memory",        "--ps-vcores",       "--ps-gpus",
    "--chief-memory",  "--chief-vcores",   "--chief-gpus",       "--evaluator-memory", "--evaluator-vcores",
    "--evaluator-gpus", "--archive",       "--file",             "--env",             "--accept-timeout",
    "--principal",     "--keytab",         "--view-acl",         "--modify-acl",      "--am-attempts",
};

int tfos__yarn_client_only(const char *arg, int *has_value)
{
    size_t n = strcspn(arg, "=");
    for (size_t i = 0; i < sizeof client_only / sizeof *client_only; i++)
        if (strlen(client_only[i]) == n && !strncmp(arg, client_only[i], n)) {
            *has_value = arg[n] == '=';
            return 1;
        }
    return 0;
}

int tfos__yarn_option_elsewhere(const char *opt)
{
    int has_value;
    if (!tfos__yarn_client_only(opt, &has_value))
        return 0;
    int role = strncmp(opt, "--queue", 7) && strncmp(opt, "--name", 6) && strncmp(opt, "--hadoop", 8) &&
               strncmp(opt, "--am-", 5) && strncmp(opt, "--archive", 9) && strncmp(opt, "--file", 6) &&
               strncmp(opt, "--env", 5) && strncmp(opt, "--accept", 8) && strncmp(opt, "--principal", 11) &&
               strncmp(opt, "--keytab", 8) && strncmp(opt, "--view-acl", 10) && strncmp(opt, "--modify-acl", 12);
    return tfos__usage_error("%s is an option of tfos yarn", role ? "--ROLE-memory/--ROLE-vcores/--ROLE-gpus" : opt);
}

/* A YARN memory size: MB, or with a unit (512m, 2g). */
static int parse_memory(const char *opt, const char *s, int *mb)
{
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (s && !errno && end != s && v > 0) {
        double scale = !*end || !strcmp(end, "m") || !strcmp(end, "M") ? 1
                       : !strcmp(end, "g") || !strcmp(end, "G")    ? 1024
                                                                    : 0;
        if (scale > 0 && v * scale >= 1 && v * scale <= (1 << 24)) {
            *mb = (int)(v * scale);
            return 0;
        }
    }
    char msg[160];
    snprintf(msg, sizeof msg, "%s takes a size in MB, or with a unit (512m, 2g), got '%%s'", opt);
    return tfos__usage_error(msg, s ? s : "");
}

const char *tfos__yarn_keytab(const char *v)
{
    static char path[PATH_MAX];
    if (!realpath(v, path) || access(path, R_OK)) {
        fprintf(stderr, "tfos yarn: --keytab %s: cannot read it: %s\n", v, strerror(errno));
        return NULL;
    }
    return path;
}

int tfos__yarn_option(tfos__yarn_cli *y, tfos__args *it, const char *a)
{
    if (!strcmp(a, "--queue"))
        return tfos__opt_need(a, y->queue = tfos__args_value(it), "a queue name") ? 2 : 1;
    if (!strcmp(a, "--name"))
        return tfos__opt_need(a, y->app_name = tfos__args_value(it), "an application name") ? 2 : 1;
    if (!strcmp(a, "--hadoop-classpath"))
        return tfos__opt_need(a, y->hadoop_classpath = tfos__args_value(it), "a classpath") ? 2 : 1;
    if (!strcmp(a, "--principal"))
        return tfos__opt_need(a, y->principal = tfos__args_value(it), "a Kerberos principal (you@REALM)") ? 2 : 1;
    if (!strcmp(a, "--view-acl") || !strcmp(a, "--modify-acl")) {
        const char *v = tfos__args_value(it);
        if (tfos__opt_need(a, v, "users and groups, as YARN takes them (\"ann,bob analysts\", \"*\")"))
            return 2;
        *(a[2] == 'v' ? &y->view_acl : &y->modify_acl) = v;
        return 1;
    }
    if (!strcmp(a, "--keytab")) {
        const char *v = tfos__args_value(it);
        if (tfos__opt_need(a, v, "a keytab file"))
            return 2;
        return (y->keytab = tfos__yarn_keytab(v)) ? 1 : 2;
    }
    if (!strcmp(a, "--am-memory"))
        return parse_memory(a, tfos__args_value(it), &y->am_memory_mb) ? 2 : 1;
    if (!strcmp(a, "--am-attempts"))
        return tfos__opt_int(a, tfos__args_value(it), 1, 100, &y->am_attempts) ? 2 : 1;
    if (!strcmp(a, "--accept-timeout"))
        return tfos__opt_secs(a, tfos__args_value(it), 0, &y->accept_timeout) ? 2 : 1;
    if (!strcmp(a, "--archive") || !strcmp(a, "--file") || !strcmp(a, "--env")) {
        const char **list = a[2] == 'a' ? y->archives : a[2] == 'f' ? y->files : y->envs;
        int *n = a[2] == 'a' ? &y->narchives : a[2] == 'f' ? &y->nfiles : &y->nenvs;
        const char *v = tfos__args_value(it);
        if (!v || !*v)
            return tfos__usage_error("%s needs a value", a);
        if (a[2] == 'e' && (!strchr(v, '=') || v[0] == '='))
            return tfos__usage_error("--env takes NAME=VALUE, got '%s'", v);
        if (*n >= 64)
            return tfos__usage_error("%s: at most 64", a);
        list[(*n)++] = v;
        return 1;
    }
    int has_value;
    if (!tfos__yarn_client_only(a, &has_value)) /* the roles' containers from here on */
        return 0;
    int role = a[2] == 'w' ? YARN_ROLE_WORKER : a[2] == 'p' ? YARN_ROLE_PS : a[2] == 'c' ? YARN_ROLE_CHIEF
                                                                            : YARN_ROLE_EVALUATOR;
    const char *what = strchr(a + 2, '-') + 1;
    if (!strcmp(what, "memory"))
        return parse_memory(a, tfos__args_value(it), &y->res_mb[role]) ? 2 : 1;
    if (!strcmp(what, "vcores"))
        return tfos__opt_int(a, tfos__args_value(it), 1, 1024, &y->res_vcores[role]) ? 2 : 1;
    return tfos__opt_int(a, tfos__args_value(it), 0, 64, &y->res_gpus[role]) ? 2 : 1;
}
