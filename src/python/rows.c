/* rows.c: numpy columns to Python rows, for DataFeed.next_batch on a fed
 * RDD (TensorFlowOnSpark hands a program rows, not columns).
 *
 * What `[tuple(r) for r in zip(*(c.tolist() for c in cols))]` gives, made in
 * one pass: the values of 1-D columns of numbers and bools read through the
 * buffer protocol (numpy's tolist: bool, int, float), each row a tuple (or a
 * list). 0.17 s of every second a node spent taking 150,000 two-field rows
 * was tolist and zip (issue 40). A column it cannot read (an object array,
 * a list, 2-D, another format) is NotImplemented: the caller does it the
 * Python way. */
#include "rows.h"

#include <string.h>

#include "encode.h"

enum { K_BOOL, K_INT, K_UINT, K_FLOAT };

typedef struct col_view {
    Py_buffer b;
    int kind;
} col_view;

/* The kind of a 1-D buffer's values (its format read as the encoder reads
 * it), or -1: not ours (float16 and wider floats included). */
static int kind_of(const Py_buffer *b)
{
    int dt = b->ndim == 1 ? tfos_dtype_from_format(b->format, b->itemsize) : 0;
    const char *np = dt ? tfos__dtype_numpy(dt) : NULL;
    if (!np)
        return -1;
    switch (np[1]) {
    case 'b':
        return K_BOOL;
    case 'i':
        return K_INT;
    case 'u':
        return K_UINT;
    case 'f':
        return b->itemsize == 4 || b->itemsize == 8 ? K_FLOAT : -1;
    default:
        return -1;
    }
}

static PyObject *value_at(const col_view *c, Py_ssize_t i)
{
    const char *p = (const char *)c->b.buf + i * c->b.strides[0];
    switch (c->kind) {
    case K_BOOL:
        return PyBool_FromLong(*(const unsigned char *)p != 0);
    case K_INT: {
        long long v;
        switch (c->b.itemsize) {
        case 1: v = *(const signed char *)p; break;
        case 2: { short s; memcpy(&s, p, 2); v = s; break; }
        case 4: { int s; memcpy(&s, p, 4); v = s; break; }
        default: memcpy(&v, p, 8);
        }
        return PyLong_FromLongLong(v);
    }
    case K_UINT: {
        unsigned long long v;
        switch (c->b.itemsize) {
        case 1: v = *(const unsigned char *)p; break;
        case 2: { unsigned short s; memcpy(&s, p, 2); v = s; break; }
        case 4: { unsigned s; memcpy(&s, p, 4); v = s; break; }
        default: memcpy(&v, p, 8);
        }
        return PyLong_FromUnsignedLongLong(v);
    }
    default: {
        double v;
        if (c->b.itemsize == 4) {
            float f;
            memcpy(&f, p, 4);
            v = f;
        } else {
            memcpy(&v, p, 8);
        }
        return PyFloat_FromDouble(v);
    }
    }
}

PyObject *tfos_rows_from_columns(PyObject *Py_UNUSED(m), PyObject *args)
{
    PyObject *cols;
    Py_ssize_t lo, hi;
    int lists = 0;
    if (!PyArg_ParseTuple(args, "Onn|p", &cols, &lo, &hi, &lists))
        return NULL;
    PyObject *fast = PySequence_Fast(cols, "rows_from_columns: columns must be a sequence");
    if (!fast)
        return NULL;
    Py_ssize_t ncols = PySequence_Fast_GET_SIZE(fast);
    col_view *views = ncols > 0 ? PyMem_Calloc((size_t)ncols, sizeof *views) : NULL;
    PyObject *out = NULL;
    Py_ssize_t got = 0;
    if (ncols <= 0 || !views) {
        if (ncols > 0)
            PyErr_NoMemory();
        else
            out = Py_NewRef(Py_NotImplemented);
        goto done;
    }
    for (; got < ncols; got++) {
        PyObject *c = PySequence_Fast_GET_ITEM(fast, got);
        if (!PyObject_CheckBuffer(c) || PyObject_GetBuffer(c, &views[got].b, PyBUF_RECORDS_RO) < 0) {
            PyErr_Clear();
            out = Py_NewRef(Py_NotImplemented);
            goto done;
        }
        views[got].kind = kind_of(&views[got].b);
        if (views[got].kind < 0 || (got > 0 && views[got].b.shape[0] != views[0].b.shape[0])) {
            got++; /* released below */
            out = Py_NewRef(Py_NotImplemented);
            goto done;
        }
    }
    Py_ssize_t n = views[0].b.shape[0];
    if (lo < 0 || hi > n || lo > hi) {
        PyErr_Format(PyExc_IndexError, "rows_from_columns: rows %zd..%zd of columns of %zd", lo, hi, n);
        goto done;
    }
    /* numbers and bools hold no references, so these rows make no cycle:
     * no collection while they are made (one every 700 new rows, which in
     * a program of a large heap cost more than the rows), and the tuples
     * are not tracked (what a collection would find for them) */
    int gc_was = PyGC_Disable();
    out = PyList_New(hi - lo);
    for (Py_ssize_t i = lo; out && i < hi; i++) {
        PyObject *row = lists ? PyList_New(ncols) : PyTuple_New(ncols);
        if (!row) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i - lo, row);
        for (Py_ssize_t j = 0; j < ncols; j++) {
            PyObject *v = value_at(&views[j], i);
            if (!v) {
                Py_CLEAR(out);
                break;
            }
            if (lists)
                PyList_SET_ITEM(row, j, v);
            else
                PyTuple_SET_ITEM(row, j, v);
        }
        if (out && !lists)
            PyObject_GC_UnTrack(row);
    }
    if (gc_was)
        PyGC_Enable();
done:
    for (Py_ssize_t j = 0; j < got; j++)
        PyBuffer_Release(&views[j].b);
    PyMem_Free(views);
    Py_DECREF(fast);
    return out;
}
