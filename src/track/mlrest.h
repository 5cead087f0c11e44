/* mlrest.h: MLflow's REST API, the calls both of tfos's MLflow parts make
 * (tracking: track/; the model registry: serving and tfos.models).
 *
 * A handle names one tracking server: its base URL and how to authenticate
 * to it, the way MLflow's own client reads them from the environment:
 *   MLFLOW_TRACKING_TOKEN               "Authorization: Bearer <token>"
 *   MLFLOW_TRACKING_USERNAME/_PASSWORD  HTTP basic authentication
 *   MLFLOW_TRACKING_INSECURE_TLS=true   do not verify the server's certificate
 * Credentials stay in this process: they go to the tracking server only,
 * never onto a tfos wire, argv or an error text.
 *
 * Calls block their caller for at most the handle's timeout (httpc.h):
 * callers on a loop make them from a thread of their own. One handle may
 * be used from several threads. */
#ifndef TFOS_TRACK_MLREST_H
#define TFOS_TRACK_MLREST_H
#include <jansson.h>
#include <stddef.h>

typedef struct tfos__mlflow tfos__mlflow;

/* A handle for the server at uri ("http://host:port[/prefix]" or https;
 * "databricks" and file stores are not REST servers: TFOS_EINVAL naming
 * them). timeout_ms bounds each call (0: 10 s). 0, TFOS_EINVAL (err says
 * why), TFOS_ENOMEM. Does not contact the server. */
int tfos__mlflow_open(tfos__mlflow **out, const char *uri, long timeout_ms, char *err, size_t errlen);
void tfos__mlflow_close(tfos__mlflow *m);

/* The base URL without credentials (for messages). */
const char *tfos__mlflow_shown(const tfos__mlflow *m);

/* One API call: method ("GET", "POST", "PATCH", "DELETE") on path
 * ("/api/2.0/mlflow/runs/create"; a GET's parameters in its query, escaped
 * by the caller with tfos__http_escape), body a JSON object (borrowed; NULL
 * for none). *reply (when reply is not NULL) gets the reply's JSON object,
 * owned by the caller (json_decref). 0 for a 2xx reply; TFOS_EPROTO for an
 * MLflow error reply, with its error_code and message in err and the HTTP
 * status in *status (when not NULL: 404 with RESOURCE_DOES_NOT_EXIST says
 * "no such model/alias"); TFOS_ESYS / TFOS_ETIMEDOUT when the server could
 * not be reached (err names it). */
int tfos__mlflow_call(tfos__mlflow *m, const char *method, const char *path, json_t *body, json_t **reply,
                      long *status, char *err, size_t errlen);

/* Artifacts through the server's proxy (`mlflow server --serve-artifacts`,
 * the default): artifact_path is the part of an "mlflow-artifacts:/..." URI
 * after the colon and slash ("0/<run>/artifacts/model/saved_model.pb").
 * upload PUTs a local file there; download GETs it into a local file;
 * list gives the directory's entries as the server's JSON reply
 * ({"files": [{"path", "is_dir", "file_size"}]}). 0, or as for _call. */
int tfos__mlflow_upload(tfos__mlflow *m, const char *artifact_path, const char *file, char *err, size_t errlen);
int tfos__mlflow_download(tfos__mlflow *m, const char *artifact_path, const char *file, char *err, size_t errlen);
int tfos__mlflow_list(tfos__mlflow *m, const char *artifact_dir, json_t **reply, char *err, size_t errlen);

#endif
