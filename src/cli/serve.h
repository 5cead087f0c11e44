/* serve.h (cli): what `tfos serve` (serve.c) lends tfos yarn: its options
 * checked on the submitting host, and the command in the ApplicationMaster's
 * container. (src/serve/serve.h is the front end itself.) */
#ifndef TFOS_CLI_SERVE_H
#define TFOS_CLI_SERVE_H

/* tfos yarn serve on the submitting host: check tfos serve's options (argv)
 * as on YARN, and that each models:/ model is in the registry at tracking
 * (the MLFLOW_TRACKING_URI the ApplicationMaster gets; *from_registry: 1
 * when there is one), run nothing. 0, 2 (a usage error, reported) or 1 (the
 * registry has no such model, alias or version, or cannot be reached:
 * reported, naming it). */
int tfos__serve_check(int argc, char **argv, const char *tracking, int *from_registry);

/* tfos serve in the ApplicationMaster's container (tfos yarn-am ... serve
 * ...): every model server starts in a container of its own through a
 * stand-in (src/launch/backend_yarn.c). */
typedef struct tfos__serve_am {
    const char *am_socket, *address_file, *bind, *resources;
} tfos__serve_am;
int tfos__serve_on_yarn(int argc, char **argv, const tfos__serve_am *am);

#endif
