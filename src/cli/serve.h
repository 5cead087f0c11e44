/* serve.h (cli): what `tfos serve` (serve.c) lends tfos yarn: its options
 * checked on the submitting host, and the command in the ApplicationMaster's
 * container. (src/serve/serve.h is the front end itself.) */
#ifndef TFOS_CLI_SERVE_H
#define TFOS_CLI_SERVE_H

/* tfos yarn serve on the submitting host: check tfos serve's options (argv)
 * as on YARN, run nothing. 0, or 2 (a usage error, reported). */
int tfos__serve_check(int argc, char **argv);

/* tfos serve in the ApplicationMaster's container (tfos yarn-am ... serve
 * ...): every model server starts in a container of its own through a
 * stand-in (src/launch/backend_yarn.c). */
typedef struct tfos__serve_am {
    const char *am_socket, *address_file, *bind, *resources;
} tfos__serve_am;
int tfos__serve_on_yarn(int argc, char **argv, const tfos__serve_am *am);

#endif
