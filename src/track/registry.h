/* registry.h: MLflow's model registry for tfos serve: a models:/ URI
 * resolved to a registered version, and that version's artifacts copied
 * into a local directory that `python -m tfos.serve` loads like any other
 * version directory (docs/MODELS.md, "Serving from the registry").
 *
 * Calls block their caller for the handle's timeout per request (mlrest.h):
 * tfos serve resolves once before its loop runs, then from a thread of
 * its own (cli/serve.c). */
#ifndef TFOS_TRACK_REGISTRY_H
#define TFOS_TRACK_REGISTRY_H
#include "track/mlrest.h"

#include <stddef.h>

typedef struct tfos__registry_ref {
    char name[256];      /* the registered model */
    char alias[256];     /* models:/NAME@ALIAS; "" for models:/NAME/VERSION */
    char version[32];    /* the version named, or the one the alias points at (after resolve) */
} tfos__registry_ref;

/* "models:/NAME@ALIAS" or "models:/NAME/VERSION" into *ref. 0, or
 * TFOS_EINVAL with err saying what is wrong. */
int tfos__registry_parse(const char *uri, tfos__registry_ref *ref, char *err, size_t errlen);

/* Ask the registry which version ref names (an alias's current one, or
 * that the version named exists): ref->version. 0; TFOS_EPROTO with err
 * naming the model, alias or version that is not there and the registry's
 * address; or as tfos__mlflow_call. */
int tfos__registry_resolve(tfos__mlflow *m, tfos__registry_ref *ref, char *err, size_t errlen);

/* Copy version `version` of model `name` (its get-download-uri artifact
 * directory, recursively) to the directory dest, which must not exist:
 * into dest + ".part-<pid>" first, renamed into place when complete, so a
 * reader polling dest's parent never sees half a version. 0, or as
 * tfos__mlflow_call (TFOS_EINVAL: the artifacts are not served through
 * the tracking server, err says how to fix it), TFOS_ESYS (local files). */
int tfos__registry_fetch(tfos__mlflow *m, const char *name, const char *version, const char *dest, char *err,
                         size_t errlen);

#endif
