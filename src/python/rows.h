/* rows.h: numpy columns to Python rows (used only by the extension). */
#ifndef TFOS_PY_ROWS_H
#define TFOS_PY_ROWS_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* rows_from_columns(columns, lo, hi, lists=False) -> [row, ...]: rows lo..hi
 * of 1-D numeric/bool columns as tuples (lists), the values numpy's tolist
 * gives; NotImplemented where a column is not one of those. */
PyObject *tfos_rows_from_columns(PyObject *m, PyObject *args);

#endif
