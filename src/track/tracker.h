/* tracker.h: one MLflow run per tfos job (--mlflow URI, mlflow=).
 *
 * The launcher (launch.c) or the Python driver (the Spark launchers,
 * python/coord.c) opens a tracker before any node starts: the run is made
 * then, so that its id can go into every node's environment
 * (MLFLOW_TRACKING_URI, MLFLOW_RUN_ID: a program's own mlflow.log_* lands in
 * the same run). Everything else -- the launch parameters, the nodes'
 * reports, the restart history, the figures at the end -- is queued and sent
 * by the tracker's own thread: queueing never blocks (a full queue drops and
 * counts), so neither the launcher's loop nor the coordinator waits on the
 * tracking server. Attempts and restarts stay inside the one run.
 *
 * Reports (ctx.report(step=, **metrics)) become metrics two ways:
 *   rank<R>/<name>  each report of the node whose executor id is R, at its step;
 *   <name>          the mean over the ranks' latest values of <name>, logged
 *                   each time the lowest rank that reports <name> reports it.
 * A report without a step gets the count of that rank's reports as its step.
 * Values that are not finite (nan, inf) are not logged (MLflow's JSON cannot
 * carry them) and are counted as such.
 *
 * A server that cannot be reached (at open or later) is warned about once;
 * the job goes on, and tfos__tracker_end says what was not logged. */
#ifndef TFOS_TRACK_TRACKER_H
#define TFOS_TRACK_TRACKER_H
#include <stddef.h>
#include <stdint.h>

typedef struct tfos__tracker tfos__tracker;

/* Open: check uri (http:// or https://; else TFOS_EINVAL with the fix in
 * err), find or make the experiment (NULL: $MLFLOW_EXPERIMENT_NAME, else
 * "Default") and make the run, named run_name (NULL: MLflow picks one), each
 * call bounded by 5 s. A server that cannot be reached or refuses is not an
 * error here: it is warned about and the tracker counts everything as not
 * logged (tfos__tracker_run_id is then ""). Starts the sender thread.
 * 0, TFOS_EINVAL, TFOS_ENOMEM, TFOS_ESYS (no thread). */
int tfos__tracker_open(tfos__tracker **out, const char *uri, const char *experiment, const char *run_name, char *err,
                       size_t errlen);

/* The run's id ("" when it could not be made) and the server's URL without
 * credentials (for MLFLOW_TRACKING_URI and messages). Owned by t. */
const char *tfos__tracker_run_id(const tfos__tracker *t);
const char *tfos__tracker_uri(const tfos__tracker *t);

/* Queue one param, tag or metric (wall_ms: epoch milliseconds; 0: now).
 * Never block; safe from any thread. Keys longer than 250 bytes and values
 * longer than 5000 are cut. */
void tfos__tracker_param(tfos__tracker *t, const char *key, const char *value);
void tfos__tracker_tag(tfos__tracker *t, const char *key, const char *value);
void tfos__tracker_metric(tfos__tracker *t, const char *key, double value, int64_t step, int64_t wall_ms);

/* One report of the node with executor id rank, in report.h's text form,
 * made age_ms ago: the metrics described at the top. */
void tfos__tracker_report(tfos__tracker *t, int rank, const char *report, int64_t age_ms);

/* The numbers of a JSON object (the status page's /status), as metrics
 * "<prefix><key>" and, one level down, "<prefix><key>.<sub>" (arrays and
 * deeper levels skipped), at step 0. */
void tfos__tracker_figures(tfos__tracker *t, const char *prefix, const char *json);

/* The restart policy's history as tags, for every launcher (launch.c,
 * the Spark attempt loop through the extension): "tfos.attempts" (the
 * current attempt), per failed attempt n "tfos.attempt.<n>.cause"
 * (tfos_cause_name), ".node", ".exception" (type at where), ".summary"
 * and ".decision" (restart or raise), and "tfos.restart_history" (the
 * policy's rendering). Tags are set again with each call (MLflow keeps the
 * last value). */
struct tfos_policy;
void tfos__tracker_history(tfos__tracker *t, const struct tfos_policy *p);

/* End the run: send what is queued (10 s at most; what is left then is
 * counted as not logged), set the run's status ("FINISHED", "FAILED" or
 * "KILLED") and stop the thread. summary[len] gets one line for people:
 * the run and what was logged, or what was not and why. Logs that line
 * too (a warning when something was not logged). Once; later calls only
 * copy the summary. */
void tfos__tracker_end(tfos__tracker *t, const char *status, char *summary, size_t len);

/* End (as "KILLED" when not ended) and free. NULL is fine. */
void tfos__tracker_close(tfos__tracker *t);

#endif
