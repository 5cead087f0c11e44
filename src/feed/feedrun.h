/* feedrun.h: the feed of one `tfos run --input` attempt, out of the launcher.
 *
 * Started once the attempt's cluster runs: CSV, JSON lines and .npy files
 * are written into the chief's and workers' input rings by a C feeder thread;
 * Arrow/Parquet files by a Python process (`python -m tfos.arrowfeed`, since
 * they need pyarrow), whose rings a short-lived observer thread attaches to
 * for the counters. Both report their end on the launcher's loop (an eventfd
 * written by the thread, the process's pidfd), never by polling. The feed's
 * live counters go to the launcher's meter (the status page) and, every 5 s,
 * to a progress line. */
#ifndef TFOS_RUN_FEEDRUN_H
#define TFOS_RUN_FEEDRUN_H
#include "core/loop.h"
#include "feed/meter.h"
#include "tfos/tfos.h"

#include <stddef.h>

typedef struct tfos__feedrun tfos__feedrun;

typedef struct tfos__feedrun_opts {
    const tfos_run_opts *run;   /* inputs, format, epochs, batch and partition rows, layout, quiet */
    const char *cluster_id;
    const char *secret;
    char **env;                 /* environment of the Arrow feeder process */
    const char *python;         /* its interpreter */
    tfos__feed_meter *meter;    /* the launcher's (it outlives the feed) */
    tfos__loop *loop;
    const struct tfos__position *resume; /* where a restarted feed resumes (feed/position.h); NULL: from the start */
    /* The feed ended by itself: failed (0/1) and, when failed, why. Called
     * from the loop. Not called after tfos__feedrun_close. */
    void (*on_end)(void *user, int failed, const char *reason);
    void *user;
} tfos__feedrun_opts;

/* Start feeding. On error err says why (one line) and nothing runs. */
int tfos__feedrun_start(tfos__feedrun **out, const tfos__feedrun_opts *o, char *err, size_t errlen);
/* Whether the feed is over (its end was reported). */
int tfos__feedrun_done(const tfos__feedrun *f);
/* Stop the feed if it still runs (bounded: the thread notices within a
 * slice; the process gets SIGTERM, then SIGKILL after 5 s), join it, fold
 * its last counts into the meter, free. NULL is a no-op. */
void tfos__feedrun_close(tfos__feedrun *f);

#endif
