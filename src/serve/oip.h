/* oip.h: reading an Open Inference Protocol (KServe v2) infer request.
 *
 * A request is small JSON around large arrays of numbers. jansson made a
 * value (a malloc) of every number, and that was most of tfos serve's front
 * end's time (docs/BENCHMARKS.md, "Serving"). This reader checks the whole
 * body is JSON, keeps what the front end needs (the id, each input's name,
 * datatype and shape, the outputs asked for) and only the place of each
 * input's "data"; tfos__oip_numbers then reads a data array straight into
 * the model's dtype, once the datatype and shape (which may come after it)
 * are known. Nothing is allocated. */
#ifndef TFOS_RUN_OIP_H
#define TFOS_RUN_OIP_H
#include <stddef.h>
#include <stdint.h>

#define TFOS_OIP_MAX_TENSORS 16
#define TFOS_OIP_MAX_DIMS 9
#define TFOS_OIP_MAX_ID 255   /* bytes of a request's "id": a longer one is refused, not cut */

typedef struct tfos__oip_tensor {
    char name[128];
    char datatype[16];
    int has_shape, has_data, bad_shape; /* bad_shape: a dimension that is not a whole number >= 0 */
    int ndim;                          /* -1: too many dimensions */
    int64_t shape[TFOS_OIP_MAX_DIMS];
    const char *data;                  /* the "data" value's text */
    size_t data_len;
    unsigned seen;                     /* the keys read so far (a duplicate is refused) */
} tfos__oip_tensor;

typedef struct tfos__oip_request {
    char id[TFOS_OIP_MAX_ID + 1];
    int ninputs, noutputs;             /* -1: too many */
    int inputs_is_list, outputs_is_list, has_outputs;
    tfos__oip_tensor inputs[TFOS_OIP_MAX_TENSORS];
    char outputs[TFOS_OIP_MAX_TENSORS][128];  /* "" : an output without a name */
    unsigned seen;                     /* the keys read so far (a duplicate is refused) */
} tfos__oip_request;

/* Read body[0..len). 0; or, with err saying what is wrong and where (line
 * and column), -1: not JSON; -2: JSON this reader refuses: a key it reads
 * ("id", "inputs", "outputs", "parameters"; an input's "name", "datatype",
 * "shape", "data") given twice in one object, or an "id" or a name longer
 * than its field. */
int tfos__oip_parse(const char *body, size_t len, tfos__oip_request *rq, char *err, size_t errlen);

/* Read a data value (flat or nested arrays, as tfos__oip_parse checked it)
 * as n values of dtype (TFOS_DT_*) into out. 0; -1 when there are fewer
 * (*at: how many); -2 when value *at is not one of dtype (a string, an
 * object, null, a fraction for an integer type, out of its range: 1e400,
 * 1e39 for FP32, 2^64 for UINT64); -3 when there are more than n. FP32 values are the decimal rounded to double,
 * then to float (the two roundings differ from one in a rare tie). */
int tfos__oip_numbers(const char *data, size_t len, int dtype, void *out, size_t n, size_t *at);

/* A float as JSON into out (40 bytes): 9 significant digits, which read back
 * as the same float, with %g's layout; "null" for NaN and the infinities.
 * Returns the length (no NUL). */
int tfos__oip_fmt_f32(char *out, float v);

#endif
