/* launch.h: the launcher's internal API (launch.c): one attempt loop over a
 * backend (backend.h), one event loop, one HTTP server with the status page,
 * one restart policy. The public tfos_local_* and tfos_run_local
 * (include/tfos/tfos.h) are thin over it.
 *
 * Programs compose a launcher in three steps:
 *   1. tfos__launch_open: the loop, the HTTP server and the status page's
 *      routes on it, the policy, the log and checkpoint dirs; no agent yet;
 *   2. whatever else lives on the launcher's loop and port attaches through
 *      the accessors (tfos serve's front end: its routes on
 *      tfos__launch_http, its series on tfos__launch_status's /metrics, its
 *      address in the agents' environment with tfos__launch_setenv);
 *   3. tfos__launch_start forms the first attempt's cluster; then step (or
 *      tfos__launch_run) until the run is over, and tfos_local_close.
 * The launcher knows nothing of what attached: it is closed by whoever
 * attached it, after the run and before tfos_local_close (which then lets
 * the HTTP responses still being written finish). */
#ifndef TFOS_LAUNCH_LAUNCH_H
#define TFOS_LAUNCH_LAUNCH_H
#include "core/loop.h"
#include "launch/backend.h"
#include "tfos/tfos.h"
#include "web/http.h"
#include "web/status.h"

#include <stdbool.h>

/* What a launcher is told beyond tfos_run_opts: the options of programs
 * that build on it (tfos serve, tfos yarn's ApplicationMaster), not of a
 * `tfos run` user. Zero: tfos run's. */
typedef struct tfos__launch_opts {
    const tfos__backend_ops *backend; /* NULL: tfos__backend_local */
    const void *backend_cfg;    /* the backend's options (tfos__yarn_cfg); borrowed for the launcher's life */
    const char *bind_host;      /* the coordinator listens here (NULL: 127.0.0.1) */
    const char *address_file;   /* write "COORD_ADDR\nSTATUS_URL\n" here once both listen (first attempt) */
    const char *secret;         /* the cluster secret (hex); NULL: a fresh one */
    const char *http_token;     /* the HTTP server's token; NULL: a fresh one beyond loopback, none on it */
    int http_max_conns;         /* HTTP connections at once; 0: 64 */
    const char *http_purpose;   /* what the port serves, for the error when it cannot listen
                                 * (NULL: "the status page") */
    int respawn;                /* each agent restarts its own failed program up to this many times
                                 * (tfos_agent_opts.respawn: tfos serve's model servers); 0: off */
    bool resident;              /* the nodes run until stopped (tfos serve): a stop by a signal is how
                                 * the run ends, not a failure to report (the caller says it ended) */
} tfos__launch_opts;

/* Step 1: everything but the agents (see the top). lo may be NULL (all
 * zero). The caller owns *out (tfos_local_close). Errors are logged. */
int tfos__launch_open(tfos_local **out, const tfos_run_opts *o, const tfos__launch_opts *lo);

/* Before any node starts, for nodes on this machine (`tfos run`, `tfos
 * serve`; not tfos yarn, whose programs run in containers): what no restart
 * can fix, said once instead of once per node and attempt. The program can
 * start (tfos_program_check: it is on PATH, a python's script is there)
 * and, with ps nodes on the built-in server, its interpreter
 * (o->python, else the program's) finds tensorflow, asked without
 * importing it (tfos__python_finds: one interpreter start, where importing
 * TensorFlow takes seconds; only with ps nodes). 0, or TFOS_ESYS with errno
 * ENOENT or EACCES and one line for people in why[len]. An interpreter that
 * cannot tell within 10 s passes: the ps node then says what is wrong (exit
 * 127, reported as a start failure). */
int tfos__launch_check(const tfos_run_opts *o, char *why, size_t len);

/* The launcher's event loop: components that attach register with it. */
tfos__loop *tfos__launch_loop(tfos_local *l);
/* Its HTTP server (routes may be added until the run ends), or NULL with
 * no status page (status_port -1). */
tfos__http *tfos__launch_http(tfos_local *l);
/* Its status page's source (tfos__status_add_metrics adds to /metrics). */
tfos__status_src *tfos__launch_status(tfos_local *l);
/* The cluster secret (hex), the HTTP token ("" for none) and the status
 * page's URL ("http://HOST:PORT/", with "?token=..." when the token was
 * made here; "" without a page). Owned by l. */
const char *tfos__launch_secret(const tfos_local *l);
const char *tfos__launch_token(const tfos_local *l);
const char *tfos__launch_status_url(const tfos_local *l);
/* Set NAME=VALUE in the environment of every process the launcher starts
 * (agents, the Arrow feeder), in place of an inherited NAME; before
 * tfos__launch_start. 0, TFOS_EINVAL, TFOS_ENOMEM. */
int tfos__launch_setenv(tfos_local *l, const char *name, const char *value);
/* Step 3: form the first attempt's cluster (and write the address file).
 * Errors are logged; the launcher is then to be closed. */
int tfos__launch_start(tfos_local *l);
/* Step until the run is over (tfos_local_step), stopping it with the signal
 * once *stop_signal becomes non-zero; then, where the nodes' output is
 * forwarded (tfos yarn), keep the page up until its follower has read it
 * all (10 s at most). *exit_code: tfos_local_exit_code. */
void tfos__launch_run(tfos_local *l, volatile int *stop_signal, int *exit_code);

/* An elastic run (tfos_run_opts.min_nodes): the drain about to be asked
 * is for a notice that takes `workers` workers' capacity away (YARN named
 * their containers), so the next attempt forms without them, not waiting
 * --elastic-wait to find out. 0: it asks for every node again. */
void tfos__launch_lost(tfos_local *l, int workers);

/* Set a launcher up in tfos yarn's ApplicationMaster container
 * (backend_yarn.c): nodes through stand-ins (tfos__backend_yarn with cfg,
 * which the caller keeps while the launcher lives), the coordinator on
 * bind, and the status page too unless o->status_host is set, the
 * addresses to address_file, the secret the application's ($TFOS_SECRET). */
void tfos__launch_on_yarn(tfos_run_opts *o, tfos__launch_opts *lo, tfos__yarn_cfg *cfg, const char *exe,
                          const char *am_socket, const char *resources, const char *bind, const char *address_file);

/* Set a launcher up inside a Slurm allocation (backend_slurm.c): nodes as
 * job steps (tfos__backend_slurm with cfg, which the caller keeps while the
 * launcher lives), the coordinator on bind (an address the allocation's
 * other nodes reach this host at), and the status page too unless
 * o->status_host is set. */
void tfos__launch_on_slurm(tfos_run_opts *o, tfos__launch_opts *lo, tfos__slurm_cfg *cfg, const char *bind);

#endif
