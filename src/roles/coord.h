/* coord.h: the coordinator's internal entry points (the public ones are in
 * include/tfos/tfos.h). A program that runs the coordinator beside other
 * components -- the `tfos run` launcher, the Python driver with its status
 * page -- opens it on its own loop; tfos_coord_open gives it a private one
 * that tfos_coord_step runs. */
#ifndef TFOS_ROLES_COORD_H
#define TFOS_ROLES_COORD_H
#include "core/loop.h"
#include "tfos/tfos.h"

/* tfos_coord_open on `loop` (borrowed; it must outlive the coordinator):
 * the coordinator registers its socket, its peers and its one timer there
 * and runs whenever the loop's owner runs the loop. */
int tfos__coord_open_on(tfos_coord **out, const tfos_coord_opts *opts, tfos__loop *loop);

/* Call fn(user, node, report, age_ms) on the coordinator's loop for each
 * new report a node's heartbeat or exit brings (report.h's text, checked;
 * made age_ms ago): the MLflow tracker's feed (track/tracker.h). The
 * heartbeat samples: a program reporting faster than once a beat (1 s) is
 * seen at its latest report of each beat. */
typedef void (*tfos__coord_report_fn)(void *user, int node, const char *report, long long age_ms);
void tfos__coord_on_report(tfos_coord *c, tfos__coord_report_fn fn, void *user);
/* An in-place resize (tfos_coord_opts.inplace_min): the cluster went on
 * from `from` to `to` workers, without the one of executor `node` (to <
 * from: it was lost) or with it (to > from: it joined into a lost one's
 * slot); summary is the record the coordinator added to its policy's
 * history. On the coordinator's loop. */
typedef void (*tfos__coord_resize_fn)(void *user, int node, int from, int to, const char *summary);
void tfos__coord_on_resize(tfos_coord *c, tfos__coord_resize_fn fn, void *user);

/* One line on how the nodes started (docs/DESIGN.md, "Start telemetry"):
 * each phase's p50/p99/max and the slowest phase with its slowest nodes.
 * 0, TFOS_EAGAIN (nothing known yet) or TFOS_ENOMEM. */
int tfos__coord_start_summary(const tfos_coord *c, char *buf, size_t len);
/* Standby nodes connected now (tfos_coord_opts.standby): capacity for that
 * many more nodes is there. */
int tfos__coord_standbys(const tfos_coord *c);
/* Whether a standby node registered with this executor id. */
int tfos__coord_standby_seen(const tfos_coord *c, int executor_id);
/* Hang up on every standby node: they exit 0 (the attempt is over). */
void tfos__coord_release_standbys(tfos_coord *c);
/* 1 when the cluster runs and every chief, worker and evaluator still
 * running has reported a step (ctx.report(step=)): a drain now puts them
 * all at one step. */
int tfos__coord_stepping(const tfos_coord *c);
/* Why the drain asked (tfos_coord_drain's reason), "" when none was. */
const char *tfos__coord_drain_reason(const tfos_coord *c);

/* tfos_coord_status_json with only nodes first..last (clamped to the
 * cluster) and a "nodes_page" object saying which; last < 0: every node and
 * no "nodes_page". The "counts" and "start" objects cover every node. */
char *tfos__coord_status_json_page(const tfos_coord *c, int first, int last);

/* The loop the coordinator runs on. */
tfos__loop *tfos__coord_loop(tfos_coord *c);

#endif
