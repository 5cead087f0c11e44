/* pickled.h: the number of items in a pickled list, read from its opcodes
 * without unpickling it (used only by the extension). */
#ifndef TFOS_PY_PICKLED_H
#define TFOS_PY_PICKLED_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>

/* The number of items of the list that the pickle p[0..n) makes, counted
 * by walking its opcodes (protocols 0-5), or -1 when it cannot be told for
 * certain: not a list at the top, a truncated or malformed stream, an
 * out-of-band buffer or persistent id, the list reached other than by
 * APPEND/APPENDS (a memo reference to it, an item popped off it), marks
 * nested deeper than 256. Never reads past p + n. A count it gives is the
 * len() of what pickle.loads returns, when that succeeds. */
Py_ssize_t tfos__pickled_list_len(const unsigned char *p, size_t n);

/* pickled_list_len(buffer) -> int: the above, for a bytes-like object. */
PyObject *tfos_pickled_list_len(PyObject *m, PyObject *arg);

/* pickled_columns(buffer) -> (nrows, batch) or None: a pickled list of
 * tuples of floats, ints and bools (the same types in every row) as the
 * columnar batch encode_rows makes of those rows, read from its opcodes
 * with no Python object; None for anything else. The builder it uses lives
 * in module state (module_state.pickle_build). */
PyObject *tfos_pickled_columns(PyObject *m, PyObject *arg);

/* Free module_state.pickle_build (NULL: nothing). */
void tfos__pickled_free(void *build);

#endif
