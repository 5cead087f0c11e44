/* commands.h: the tfos commands main.c dispatches to, one file each, and
 * their help texts (for `tfos help COMMAND`). Each takes the arguments after
 * its name and returns the process's exit status (2: a usage error). */
#ifndef TFOS_CLI_COMMANDS_H
#define TFOS_CLI_COMMANDS_H

int tfos__cmd_run(int argc, char **argv);            /* run.c */
int tfos__cmd_node(int argc, char **argv);           /* node.c */
int tfos__cmd_coordinator(int argc, char **argv);    /* coordinator.c */
int tfos__cmd_status(int argc, char **argv);         /* inspect.c */
int tfos__cmd_logs(int argc, char **argv);           /* inspect.c */
int tfos__cmd_serve(int argc, char **argv);          /* serve.c */
int tfos__cmd_yarn(int argc, char **argv);           /* yarn.c: also yarn serve|status|kill|logs|pack */
int tfos__cmd_yarn_pack(int argc, char **argv);      /* yarn_pack.c: tfos yarn pack */
int tfos__cmd_yarn_am(int argc, char **argv);        /* yarn_am.c (internal) */
int tfos__cmd_yarn_container(int argc, char **argv); /* yarn_container.c (internal) */
int tfos__cmd_guard(int argc, char **argv);          /* guard.c (internal) */
int tfos__cmd_slurm(int argc, char **argv);          /* slurm.c: also slurm status|logs|cancel */

extern const char tfos__run_help[], tfos__node_help[], tfos__coordinator_help[], tfos__status_help[],
    tfos__logs_help[], tfos__serve_help[], tfos__yarn_help[], tfos__yarn_am_help[], tfos__yarn_container_help[],
    tfos__guard_help[], tfos__slurm_help[];

#endif
