/* encode.h: Python rows and numpy columns to tfos columnar batches (used only
 * by the extension). A plan describes the batch; the batch is written either
 * into a new bytes object or straight into memory reserved in a ring. */
#ifndef TFOS_PY_ENCODE_H
#define TFOS_PY_ENCODE_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "core/batch.h"

typedef struct tfos_plan {
    uint32_t nrows, ncols, flags;
    tfos__col cols[64];
    int field_type[64];      /* how to read a field from a row (rows plans) */
    Py_buffer bufs[64];      /* columns plans: one buffer per column */
    int nbufs;
    PyObject *fast;          /* rows plans: PySequence_Fast of the rows */
    uint64_t total;
} tfos_plan;

/* The dtype code (core/batch.c's one table) of a buffer's PEP 3118 format
 * and item size: bool, signed or unsigned integer, float; 0 for any other. */
int tfos_dtype_from_format(const char *fmt, Py_ssize_t itemsize);

/* Build a plan for a list of rows. Raises TypeError/ValueError (naming the
 * row and field) when the rows do not fit one columnar layout. */
int tfos_plan_rows(tfos_plan *p, PyObject *rows);
/* Build a plan for [(name, array), ...] whole columns. */
int tfos_plan_columns(tfos_plan *p, PyObject *columns);
/* Write the planned batch into buf (p->total bytes). May run without the GIL
 * for column plans (pure memcpy); rows plans need the GIL. -1 with a Python
 * error set (an int beyond int64) leaves buf half-written: discard it. */
int tfos_plan_fill(tfos_plan *p, void *buf);
int tfos_plan_needs_gil(const tfos_plan *p);
void tfos_plan_release(tfos_plan *p);

#endif
