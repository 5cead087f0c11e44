/* encode.c: encoders from Python objects into columnar batches.
 *
 * Rows: the layout comes from the first row and every other row must match
 * it. A tuple is a row of fields; a list of numbers of one Python type (all
 * int or all float) is one array field (a "flat" row); any other list is a
 * row of fields (returned as a list); anything else is a row of one field. Fields: bool, int (int64), float (float64), str, bytes, a list
 * of numbers of one type (1-D array), or an object with the buffer protocol
 * (numpy arrays and scalars: dtype and shape kept). */
#include "encode.h"

#include <string.h>

enum { F_BOOL, F_INT, F_FLOAT, F_STR, F_BYTES, F_LIST_INT, F_LIST_FLOAT, F_BUFFER };

/* The dtype code of a buffer's PEP 3118 format: the format's letter gives
 * the kind (bool, signed or unsigned integer, float) and the buffer its
 * item size; the code is the one of core/batch.c's table (the one dtype
 * table) whose numpy name has that kind and size ("<f4": kind 'f', 4
 * bytes). 0 for a format or size the table has no code for. */
int tfos_dtype_from_format(const char *fmt, Py_ssize_t itemsize)
{
    if (!fmt)
        fmt = "B"; /* PEP 3118: no format means unsigned bytes */
    if (*fmt == '<' || *fmt == '=' || *fmt == '@')
        fmt++;
    if (fmt[0] == '\0' || fmt[1] != '\0')
        return 0;
    char kind;
    if (*fmt == '?')
        kind = 'b';
    else if (strchr("bhilq", *fmt))
        kind = 'i';
    else if (strchr("BHILQ", *fmt))
        kind = 'u';
    else if (strchr("efd", *fmt))
        kind = 'f';
    else
        return 0;
    for (int dt = 1; dt <= TFOS_DT_MAX_; dt++) {
        const char *np = tfos__dtype_numpy(dt);
        if (np && np[1] == kind && tfos__dtype_size(dt) == (size_t)itemsize)
            return dt;
    }
    return 0;
}

static int list_kind(PyObject *o, Py_ssize_t *len)
{
    Py_ssize_t n = PyList_GET_SIZE(o);
    if (n == 0)
        return -1;
    PyObject *first = PyList_GET_ITEM(o, 0);
    int kind;
    if (PyLong_CheckExact(first))
        kind = F_LIST_INT;
    else if (PyFloat_CheckExact(first))
        kind = F_LIST_FLOAT;
    else
        return -1;
    for (Py_ssize_t i = 1; i < n; i++) {
        PyObject *x = PyList_GET_ITEM(o, i);
        if (kind == F_LIST_INT ? !PyLong_CheckExact(x) : !PyFloat_CheckExact(x))
            return -1;
    }
    *len = n;
    return kind;
}

static const char *type_name(int t)
{
    static const char *names[] = {"bool", "int", "float", "str", "bytes", "list of int", "list of float",
                                  "array"};
    return names[t];
}

/* Describe one field; fills col (kind/dtype/shape) and returns its F_ type. */
static int field_describe(PyObject *o, tfos__col *c, Py_ssize_t row, int idx)
{
    memset(c, 0, sizeof *c);
    if (PyBool_Check(o)) {
        c->dtype = TFOS_DT_BOOL;
        return F_BOOL;
    }
    if (PyLong_CheckExact(o)) {
        c->dtype = TFOS_DT_I64;
        return F_INT;
    }
    if (PyFloat_CheckExact(o)) {
        c->dtype = TFOS_DT_F64;
        return F_FLOAT;
    }
    if (PyUnicode_Check(o)) {
        c->kind = TFOS_COL_STR;
        return F_STR;
    }
    if (PyBytes_Check(o)) {
        c->kind = TFOS_COL_BYTES;
        return F_BYTES;
    }
    if (PyList_Check(o)) {
        Py_ssize_t n;
        int k = list_kind(o, &n);
        if (k < 0 || n > UINT32_MAX)
            goto bad;
        c->dtype = k == F_LIST_INT ? TFOS_DT_I64 : TFOS_DT_F64;
        c->ndim = 1;
        c->shape[0] = (uint32_t)n;
        return k;
    }
    if (PyObject_CheckBuffer(o)) {
        Py_buffer b;
        if (PyObject_GetBuffer(o, &b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_ND) < 0) {
            PyErr_Clear();
            goto bad;
        }
        int dt = tfos_dtype_from_format(b.format, b.itemsize);
        int ok = dt && b.ndim <= TFOS_BATCH_MAX_DIMS;
        c->dtype = (uint8_t)dt;
        c->ndim = (uint8_t)b.ndim;
        for (int d = 0; ok && d < b.ndim; d++) {
            if (b.shape[d] <= 0 || b.shape[d] > UINT32_MAX)
                ok = 0;
            else
                c->shape[d] = (uint32_t)b.shape[d];
        }
        PyBuffer_Release(&b);
        if (!ok)
            goto bad;
        return F_BUFFER;
    }
bad:
    PyErr_Format(PyExc_TypeError, "row %zd, field %d: a %.100s has no columnar encoding", row, idx,
                 Py_TYPE(o)->tp_name);
    return -1;
}

static int same_layout(const tfos__col *a, const tfos__col *b)
{
    if (a->kind != b->kind || a->dtype != b->dtype || a->ndim != b->ndim)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            return 0;
    return 1;
}

/* How rows map to fields. */
enum { ROW_FLAT, ROW_TUPLE, ROW_LIST };

static int row_mode(PyObject *row)
{
    Py_ssize_t n;
    /* tuples, not their subclasses: a pyspark Row or a namedtuple goes
     * pickled, so the program gets it as it was (as under TensorFlowOnSpark,
     * and as an RDD's pickled batches passed on whole give it) */
    if (PyTuple_CheckExact(row))
        return ROW_TUPLE;
    if (PyList_Check(row) && list_kind(row, &n) < 0 && PyList_GET_SIZE(row) > 0)
        return ROW_LIST; /* e.g. [label, [features]]: a list of fields */
    return ROW_FLAT;     /* a scalar, an array, or a list of numbers of one type */
}

/* The fields of one row (borrowed) and their count, by the plan's rule. */
static PyObject *const *row_fields(PyObject *row, int mode, Py_ssize_t *n, PyObject **one)
{
    if (mode == ROW_TUPLE) {
        *n = PyTuple_GET_SIZE(row);
        return &PyTuple_GET_ITEM(row, 0);
    }
    if (mode == ROW_LIST) {
        *n = PyList_GET_SIZE(row);
        return &PyList_GET_ITEM(row, 0);
    }
    *one = row;
    *n = 1;
    return one;
}

int tfos_plan_rows(tfos_plan *p, PyObject *rows)
{
    memset(p, 0, sizeof *p);
    p->fast = PySequence_Fast(rows, "rows must be a sequence");
    if (!p->fast)
        return -1;
    Py_ssize_t nrows = PySequence_Fast_GET_SIZE(p->fast);
    if (nrows == 0 || nrows > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "a batch needs 1 to 2^32-1 rows");
        goto fail;
    }
    PyObject **items = PySequence_Fast_ITEMS(p->fast);
    PyObject *one;
    Py_ssize_t nf;
    int mode = row_mode(items[0]);
    PyObject *const *f0 = row_fields(items[0], mode, &nf, &one);
    if (nf < 1 || nf > 64) {
        PyErr_Format(PyExc_ValueError, "row 0 has %zd fields; the columnar encoding takes 1 to 64", nf);
        goto fail;
    }
    for (Py_ssize_t j = 0; j < nf; j++) {
        p->field_type[j] = field_describe(f0[j], &p->cols[j], 0, (int)j);
        if (p->field_type[j] < 0)
            goto fail;
    }
    p->nrows = (uint32_t)nrows;
    p->ncols = (uint32_t)nf;
    p->flags = mode == ROW_FLAT ? TFOS_BATCH_FLAT_ROWS : mode == ROW_LIST ? TFOS_BATCH_LIST_ROWS : 0;
    /* every row must match row 0; var columns add up their bytes */
    for (Py_ssize_t i = 0; i < nrows; i++) {
        Py_ssize_t n;
        int m = i ? row_mode(items[i]) : mode;
        if (m != mode && !(mode == ROW_FLAT && m == ROW_LIST) && !(mode == ROW_LIST && m == ROW_FLAT)) {
            PyErr_Format(PyExc_ValueError, "row %zd is a %.100s where row 0 is a %s", i, Py_TYPE(items[i])->tp_name,
                         mode == ROW_TUPLE ? "tuple" : mode == ROW_LIST ? "list of fields" : "single value");
            goto fail;
        }
        PyObject *const *f = row_fields(items[i], mode, &n, &one);
        if (n != nf || (mode == ROW_LIST && !PyList_Check(items[i]))) {
            PyErr_Format(PyExc_ValueError, "row %zd has %zd fields, row 0 has %zd", i, n, nf);
            goto fail;
        }
        for (Py_ssize_t j = 0; j < nf; j++) {
            tfos__col *c = &p->cols[j];
            int t = p->field_type[j];
            PyObject *o = f[j];
            if (t == F_STR) {
                Py_ssize_t len;
                if (!PyUnicode_Check(o) || !PyUnicode_AsUTF8AndSize(o, &len))
                    goto mismatch;
                c->data_len += (uint64_t)len;
            } else if (t == F_BYTES) {
                if (!PyBytes_Check(o))
                    goto mismatch;
                c->data_len += (uint64_t)PyBytes_GET_SIZE(o);
            } else if (i == 0) {
                continue;
            } else if (t == F_FLOAT || t == F_INT || t == F_BOOL) {
                /* scalars: the exact type check field_describe would make,
                 * without describing the field again (the per-row cost of
                 * a Spark RDD's rows of numbers) */
                if (t == F_FLOAT ? !PyFloat_CheckExact(o) : t == F_INT ? !PyLong_CheckExact(o) : !PyBool_Check(o))
                    goto mismatch;
            } else {
                tfos__col tmp;
                int t2 = field_describe(o, &tmp, i, (int)j);
                if (t2 < 0) {
                    PyErr_Clear();
                    goto mismatch;
                }
                if (t2 != t || !same_layout(&tmp, c))
                    goto mismatch;
            }
            continue;
        mismatch:
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "row %zd, field %zd: a %.100s where row 0 has a %s (a batch keeps "
                             "one type and shape per column)", i, j, Py_TYPE(o)->tp_name, type_name(t));
            goto fail;
        }
    }
    p->total = tfos__batch_layout(p->nrows, p->ncols, p->cols);
    if (!p->total) {
        PyErr_SetString(PyExc_ValueError, "batch too large for the columnar encoding");
        goto fail;
    }
    return 0;
fail:
    Py_CLEAR(p->fast);
    return -1;
}

int tfos_plan_columns(tfos_plan *p, PyObject *columns)
{
    memset(p, 0, sizeof *p);
    PyObject *fast = PySequence_Fast(columns, "columns must be a sequence of (name, array)");
    if (!fast)
        return -1;
    Py_ssize_t nc = PySequence_Fast_GET_SIZE(fast);
    if (nc < 1 || nc > 64) {
        PyErr_Format(PyExc_ValueError, "%zd columns; the columnar encoding takes 1 to 64", nc);
        goto fail;
    }
    for (Py_ssize_t j = 0; j < nc; j++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, j);
        PyObject *name, *arr;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            PyErr_Format(PyExc_TypeError, "column %zd must be a (name, array) pair", j);
            goto fail;
        }
        name = PyTuple_GET_ITEM(item, 0);
        arr = PyTuple_GET_ITEM(item, 1);
        Py_ssize_t name_len;
        const char *nm = PyUnicode_Check(name) ? PyUnicode_AsUTF8AndSize(name, &name_len) : NULL;
        if (!nm || name_len > 65535) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "column %zd: the name must be a str", j);
            goto fail;
        }
        Py_buffer *b = &p->bufs[j];
        if (PyObject_GetBuffer(arr, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_ND) < 0)
            goto fail;
        p->nbufs = (int)j + 1;
        tfos__col *c = &p->cols[j];
        c->name = nm;
        c->name_len = (uint16_t)name_len;
        c->kind = TFOS_COL_FIXED;
        c->dtype = (uint8_t)tfos_dtype_from_format(b->format, b->itemsize);
        if (!c->dtype || b->ndim < 1 || b->ndim > TFOS_BATCH_MAX_DIMS + 1) {
            PyErr_Format(PyExc_TypeError, "column %zd ('%s'): dtype '%s' with %d dimensions has no columnar "
                         "encoding (numbers, rows along the first axis)", j, nm, b->format ? b->format : "B",
                         b->ndim);
            goto fail;
        }
        Py_ssize_t rows = b->shape[0];
        if (j == 0) {
            if (rows < 1 || rows > UINT32_MAX) {
                PyErr_Format(PyExc_ValueError, "column 0 has %zd rows", rows);
                goto fail;
            }
            p->nrows = (uint32_t)rows;
        } else if ((uint32_t)rows != p->nrows || rows < 0) {
            PyErr_Format(PyExc_ValueError, "column %zd ('%s') has %zd rows, column 0 has %u", j, nm, rows, p->nrows);
            goto fail;
        }
        c->ndim = (uint8_t)(b->ndim - 1);
        for (int d = 1; d < b->ndim; d++) {
            if (b->shape[d] < 1 || b->shape[d] > UINT32_MAX) {
                PyErr_Format(PyExc_ValueError, "column %zd ('%s'): empty or huge dimension", j, nm);
                goto fail;
            }
            c->shape[d - 1] = (uint32_t)b->shape[d];
        }
    }
    p->ncols = (uint32_t)nc;
    p->total = tfos__batch_layout(p->nrows, p->ncols, p->cols);
    if (!p->total) {
        PyErr_SetString(PyExc_ValueError, "batch too large for the columnar encoding");
        goto fail;
    }
    Py_DECREF(fast); /* names stay alive: the buffers' owners are held by the caller's list */
    p->fast = NULL;
    return 0;
fail:
    for (int j = 0; j < p->nbufs; j++)
        PyBuffer_Release(&p->bufs[j]);
    p->nbufs = 0;
    Py_DECREF(fast);
    return -1;
}

int tfos_plan_needs_gil(const tfos_plan *p)
{
    return p->fast != NULL;
}

static int int_overflow(uint32_t row)
{
    PyErr_Format(PyExc_OverflowError, "row %u: an int outside the int64 range", row);
    return -1;
}

static int fill_field(tfos__col *c, int t, PyObject *o, uint8_t *dst, uint32_t row, uint64_t *var_pos, uint8_t *base)
{
    int ovf = 0;
    switch (t) {
    case F_BOOL:
        dst[row] = o == Py_True;
        break;
    case F_INT: {
        int64_t v = PyLong_AsLongLongAndOverflow(o, &ovf);
        if (ovf)
            return int_overflow(row);
        memcpy(dst + 8 * (size_t)row, &v, 8);
        break;
    }
    case F_FLOAT: {
        double v = PyFloat_AS_DOUBLE(o);
        memcpy(dst + 8 * (size_t)row, &v, 8);
        break;
    }
    case F_LIST_INT: {
        Py_ssize_t n = PyList_GET_SIZE(o);
        int64_t *out = (int64_t *)(void *)(dst + 8 * (size_t)row * (size_t)n);
        for (Py_ssize_t k = 0; k < n; k++) {
            out[k] = PyLong_AsLongLongAndOverflow(PyList_GET_ITEM(o, k), &ovf);
            if (ovf)
                return int_overflow(row);
        }
        break;
    }
    case F_LIST_FLOAT: {
        Py_ssize_t n = PyList_GET_SIZE(o);
        double *out = (double *)(void *)(dst + 8 * (size_t)row * (size_t)n);
        for (Py_ssize_t k = 0; k < n; k++)
            out[k] = PyFloat_AS_DOUBLE(PyList_GET_ITEM(o, k));
        break;
    }
    case F_BUFFER: {
        Py_buffer b;
        size_t per = (size_t)tfos__col_row_elems(c) * tfos__dtype_size(c->dtype);
        if (PyObject_GetBuffer(o, &b, PyBUF_C_CONTIGUOUS) == 0) {
            memcpy(dst + per * row, b.buf, per);
            PyBuffer_Release(&b);
        }
        break;
    }
    case F_STR:
    case F_BYTES: {
        Py_ssize_t len = 0;
        const char *s = t == F_STR ? PyUnicode_AsUTF8AndSize(o, &len) : PyBytes_AS_STRING(o);
        if (t == F_BYTES)
            len = PyBytes_GET_SIZE(o);
        memcpy(base + c->data_off + *var_pos, s, (size_t)len);
        *var_pos += (uint64_t)len;
        uint64_t end = *var_pos;
        memcpy(base + c->offsets_off + 8 * ((size_t)row + 1), &end, 8);
        break;
    }
    }
    return 0;
}

int tfos_plan_fill(tfos_plan *p, void *buf)
{
    uint8_t *b = buf;
    tfos__batch_write_header(buf, p->total, p->nrows, p->ncols, p->flags, p->cols);
    if (!p->fast) {
        for (uint32_t j = 0; j < p->ncols; j++)
            memcpy(b + p->cols[j].data_off, p->bufs[j].buf, p->cols[j].data_len);
        return 0;
    }
    uint64_t var_pos[64] = {0};
    for (uint32_t j = 0; j < p->ncols; j++)
        if (p->cols[j].kind != TFOS_COL_FIXED)
            memset(b + p->cols[j].offsets_off, 0, 8);
    PyObject **items = PySequence_Fast_ITEMS(p->fast);
    int mode = (p->flags & TFOS_BATCH_FLAT_ROWS) ? ROW_FLAT : (p->flags & TFOS_BATCH_LIST_ROWS) ? ROW_LIST : ROW_TUPLE;
    for (uint32_t i = 0; i < p->nrows; i++) {
        PyObject *one;
        Py_ssize_t n;
        PyObject *const *f = row_fields(items[i], mode, &n, &one);
        for (uint32_t j = 0; j < p->ncols; j++)
            if (fill_field(&p->cols[j], p->field_type[j], f[j], b + p->cols[j].data_off, i, &var_pos[j], b))
                return -1;
    }
    return 0;
}

void tfos_plan_release(tfos_plan *p)
{
    for (int j = 0; j < p->nbufs; j++)
        PyBuffer_Release(&p->bufs[j]);
    p->nbufs = 0;
    Py_CLEAR(p->fast);
}
