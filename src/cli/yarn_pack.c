/* yarn_pack.c: `tfos yarn pack [-o FILE] [ENV_DIR]`: a virtual environment
 * as a .tar.gz for tfos yarn --archive FILE#env (docs/YARN.md). */
#include "cli/commands.h"
#include "cli/common.h"
#include "platform/proc.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* The `home = DIR` line of a venv's pyvenv.cfg: where its python links to. */
static void venv_home(FILE *f, char *home, size_t len)
{
    char line[PATH_MAX + 32];
    home[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        char *v = line + strspn(line, " \t");
        if (strncmp(v, "home", 4) || !strchr(" \t=", v[4]))
            continue;
        v += 4 + strspn(v + 4, " \t");
        if (*v != '=')
            continue;
        v++;
        v += strspn(v, " \t");
        v[strcspn(v, "\r\n")] = '\0';
        snprintf(home, len, "%s", v);
        return;
    }
}

int tfos__cmd_yarn_pack(int argc, char **argv)
{
    const char *out = "env.tar.gz", *dir = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) {
            if (++i >= argc || !argv[i][0])
                return tfos__usage_error("%s", "yarn pack: -o needs a file name");
            out = argv[i];
        } else if (argv[i][0] == '-') {
            return tfos__usage_error("yarn pack: unknown option %s (tfos yarn pack [-o FILE] [ENV_DIR])", argv[i]);
        } else if (dir) {
            return tfos__usage_error("yarn pack takes one environment directory; '%s' is one too many", argv[i]);
        } else {
            dir = argv[i];
        }
    }
    if (!dir)
        dir = getenv("VIRTUAL_ENV");
    if (!dir || !dir[0])
        return tfos__usage_error("%s", "yarn pack needs a virtual environment: activate one, or name its "
                                       "directory (tfos yarn pack [-o FILE] ENV_DIR)");
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "%s/conda-meta", dir);
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        fprintf(stderr, "tfos yarn pack: %s is a conda environment: pack it with conda-pack "
                        "(conda pack -p %s -o %s), which rewrites the paths conda wrote into it\n", dir, dir, out);
        return 2;
    }
    snprintf(path, sizeof path, "%s/pyvenv.cfg", dir);
    FILE *cfg = fopen(path, "r");
    if (!cfg) {
        fprintf(stderr, "tfos yarn pack: %s is not a virtual environment: cannot read %s: %s\n", dir, path,
                strerror(errno));
        return 2;
    }
    char home[PATH_MAX];
    venv_home(cfg, home, sizeof home);
    fclose(cfg);

    /* tar writes a temporary file beside OUT, renamed into place when whole */
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp-%d", out, (int)getpid());
    char *tar_argv[] = {"tar", "-czf", tmp, "-C", (char *)dir, ".", NULL};
    tfos__spawn_opts so = {.argv = tar_argv, .stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1,
                           .pdeathsig = SIGTERM};
    pid_t pid;
    if (tfos__spawn(&so, &pid)) {
        fprintf(stderr, "tfos yarn pack: cannot run tar: %s\n", strerror(errno));
        return 1;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char why[64];
        tfos__describe_status(status, why, sizeof why);
        fprintf(stderr, "tfos yarn pack: tar -czf %s -C %s . failed (%s)\n", tmp, dir, why);
        unlink(tmp);
        return 1;
    }
    if (rename(tmp, out) < 0 || stat(out, &st) < 0) {
        fprintf(stderr, "tfos yarn pack: cannot move %s to %s: %s\n", tmp, out, strerror(errno));
        unlink(tmp);
        return 1;
    }
    printf("packed %s into %s (%.1f MB)\n"
           "ship it with:   tfos yarn --archive %s#env ... -- env/bin/python PROGRAM\n",
           dir, out, (double)st.st_size / 1e6, out);
    if (home[0])
        printf("its python links to the interpreter in %s: every node needs that interpreter at that path\n",
               home);
    return 0;
}
