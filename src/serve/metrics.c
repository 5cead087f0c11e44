/* metrics.c: tfos serve's /metrics series: requests by outcome and by
 * version, rows, batches, queue, and latency histograms; they follow the
 * status page's in /metrics (tfos__serve_attach registers them there). */
#include "serve/serve_int.h"

#include "platform/clock.h"

#include <stdlib.h>
#include <string.h>

static const double lat_bounds_ms[LAT_BUCKETS] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000};

void tfos__serve_observe(model *m, int64_t t0)
{
    double ms = (double)(tfos__now_ms() - t0);
    int b = 0;
    while (b < LAT_BUCKETS && ms > lat_bounds_ms[b])
        b++;
    m->lat[b]++;
    m->lat_sum_ms += ms;
}

void tfos__serve_metrics(FILE *f, void *user)
{
    tfos__serve *s = user;
    fprintf(f, "# HELP tfos_serve_servers_ready Model servers connected and ready.\n"
               "# TYPE tfos_serve_servers_ready gauge\ntfos_serve_servers_ready %d\n", tfos__serve_servers_ready(s));
    static const char *const heads[] = {
        "# HELP tfos_serve_requests_total Infer requests answered, by outcome (ok; failed: 4xx/5xx after "
        "queueing; refused: 429).\n# TYPE tfos_serve_requests_total counter\n",
        "# HELP tfos_serve_rows_total Rows inferred.\n# TYPE tfos_serve_rows_total counter\n",
        "# HELP tfos_serve_batches_total Batches sent to model servers.\n# TYPE tfos_serve_batches_total counter\n",
        "# HELP tfos_serve_queue_rows Rows waiting for a batch.\n# TYPE tfos_serve_queue_rows gauge\n",
        "# HELP tfos_serve_request_seconds Time from a request's arrival to its answer.\n"
        "# TYPE tfos_serve_request_seconds histogram\n",
        "# HELP tfos_serve_version_requests_total Infer requests answered, by the model version that ran them.\n"
        "# TYPE tfos_serve_version_requests_total counter\n",
        "# HELP tfos_serve_local_requests_total Infer requests taken from local clients (predict_udf on this "
        "host), not HTTP.\n# TYPE tfos_serve_local_requests_total counter\n"};
    for (int h = 0; h < 7; h++) {
        fputs(heads[h], f);
        for (int mi = 0; mi < s->nmodels; mi++) {
            const model *m = &s->models[mi];
            char lab[200];
            snprintf(lab, sizeof lab, "model=\"%s\"", m->name);
            if (h == 0)
                fprintf(f, "tfos_serve_requests_total{%s,outcome=\"ok\"} %llu\n"
                           "tfos_serve_requests_total{%s,outcome=\"failed\"} %llu\n"
                           "tfos_serve_requests_total{%s,outcome=\"refused\"} %llu\n",
                        lab, m->ok, lab, m->failed, lab, m->refused);
            else if (h == 1)
                fprintf(f, "tfos_serve_rows_total{%s} %llu\n", lab, m->rows);
            else if (h == 6)
                fprintf(f, "tfos_serve_local_requests_total{%s} %llu\n", lab, m->local);
            else if (h == 5)
                for (int k = 0; k < MAX_VSTATS && m->vstat[k].v[0]; k++)
                    fprintf(f, "tfos_serve_version_requests_total{%s,version=\"%s\"} %llu\n", lab, m->vstat[k].v,
                            m->vstat[k].ok);
            else if (h == 2)
                fprintf(f, "tfos_serve_batches_total{%s} %llu\n", lab, m->batches);
            else if (h == 3)
                fprintf(f, "tfos_serve_queue_rows{%s} %lld\n", lab, m->queued_rows);
            else if (h == 4) {
                unsigned long long cum = 0;
                for (int b = 0; b <= LAT_BUCKETS; b++) {
                    cum += m->lat[b];
                    if (b < LAT_BUCKETS)
                        fprintf(f, "tfos_serve_request_seconds_bucket{%s,le=\"%g\"} %llu\n", lab,
                                lat_bounds_ms[b] / 1000.0, cum);
                    else
                        fprintf(f, "tfos_serve_request_seconds_bucket{%s,le=\"+Inf\"} %llu\n", lab, cum);
                }
                fprintf(f, "tfos_serve_request_seconds_sum{%s} %.6f\ntfos_serve_request_seconds_count{%s} %llu\n",
                        lab, m->lat_sum_ms / 1000.0, lab, cum);
            }
        }
    }
}
