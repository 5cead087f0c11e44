/* registry_test.c: models:/ URIs (track/registry.h): the two forms taken,
 * each malformed one refused with a text saying what is taken. The calls
 * to a registry are tested against a real MLflow server in
 * tests/python/test_models.py. */
#include "check.h"
#include "track/registry.h"
#include "tfos/tfos.h"

#include <string.h>

int main(void)
{
    tfos__registry_ref r;
    char err[512];
    CHECK(tfos__registry_parse("models:/digits@production", &r, err, sizeof err) == 0);
    CHECK(!strcmp(r.name, "digits") && !strcmp(r.alias, "production") && !r.version[0]);
    CHECK(tfos__registry_parse("models:/my.model-2/13", &r, err, sizeof err) == 0);
    CHECK(!strcmp(r.name, "my.model-2") && !r.alias[0] && !strcmp(r.version, "13"));
    const char *bad[] = {"models:/digits",   "models:/digits/Production", "models:/@prod",  "models:/digits@",
                         "models:/digits/",  "models:/a/b/3",             "runs:/abc/model", "models:/d/3@x",
                         "/tmp/digits",      "models:/digits/-1",         NULL};
    for (int i = 0; bad[i]; i++) {
        err[0] = 0;
        CHECK(tfos__registry_parse(bad[i], &r, err, sizeof err) == TFOS_EINVAL);
        CHECK(strstr(err, "models:/NAME@ALIAS or models:/NAME/VERSION") != NULL);
    }
    return 0;
}
