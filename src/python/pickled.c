/* pickled.c: count the rows in one of PySpark's pickled batches without
 * unpickling it.
 *
 * A batch of an RDD that Spark holds (cached, parallelized) is the pickle
 * of a list of rows. A train()/inference() feed task used to unpickle every
 * batch in the executor's Python worker and encode its rows again for the
 * ring: 0.7 µs of the host's CPU a row of 11 numbers, more than the plain
 * job's whole Python side (issue 40). The batch can instead go into the
 * ring as it is (the node unpickles it once), but the ring counts rows per
 * record (the exactly-once feed position, the results an inference task
 * waits for): this walks the opcodes and counts the items the top-level
 * list gets, in ~20 ns a row.
 *
 * It only models the unpickler's stack depth and marks, never values. Any
 * stream it cannot be sure of is -1 (the caller unpickles the batch as
 * before): the list must be the first object (EMPTY_LIST, as protocols 1-5
 * write it), reached afterwards only by APPEND/APPENDS (never popped,
 * duplicated, fetched from the memo or built on), and the stream must end
 * at its STOP with the list alone on the stack. Pops never cross a mark,
 * as in CPython's unpickler. */
#include "pickled.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/batchbuild.h"
#include "tfosmod.h"

#define MAX_MARKS 256

typedef struct walk {
    const unsigned char *p;
    size_t n, i;
    Py_ssize_t depth;             /* objects on the stack; the list is index 0 */
    Py_ssize_t marks[MAX_MARKS];  /* depth at each open MARK */
    int nmarks;
    int memo_style;               /* 0 none yet, 1 MEMOIZE, 2 explicit PUT indices */
    uint64_t memo_next;           /* MEMOIZE's next index */
    int64_t list_memo;            /* the list's memo index, or -1 */
    Py_ssize_t count;
} walk;

static int take(walk *w, size_t k, const unsigned char **out)
{
    if (w->n - w->i < k)
        return -1;
    *out = w->p + w->i;
    w->i += k;
    return 0;
}

static uint64_t le(const unsigned char *b, int k)
{
    uint64_t v = 0;
    for (int j = k - 1; j >= 0; j--)
        v = v << 8 | b[j];
    return v;
}

/* Skip a length-prefixed argument: k bytes of little-endian length (signed
 * when sgn), then that many bytes. */
static int skip_counted(walk *w, int k, int sgn)
{
    const unsigned char *b;
    if (take(w, (size_t)k, &b) < 0)
        return -1;
    uint64_t len = le(b, k);
    if (sgn && k == 4 && (len & 0x80000000u))
        return -1;
    if (len > w->n - w->i)
        return -1;
    w->i += (size_t)len;
    return 0;
}

/* A text argument up to its newline; *num: its value as a decimal index
 * when num is not NULL (GET/PUT of protocol 0). */
static int skip_line(walk *w, int64_t *num)
{
    const unsigned char *nl = memchr(w->p + w->i, '\n', w->n - w->i);
    if (!nl)
        return -1;
    if (num) {
        const unsigned char *d = w->p + w->i;
        if (d == nl || nl - d > 9)
            return -1;
        int64_t v = 0;
        for (; d < nl; d++) {
            if (*d < '0' || *d > '9')
                return -1;
            v = v * 10 + (*d - '0');
        }
        *num = v;
    }
    w->i = (size_t)(nl - w->p) + 1;
    return 0;
}

static Py_ssize_t fence(const walk *w)
{
    return w->nmarks ? w->marks[w->nmarks - 1] : 0;
}

/* Pop k objects and push `pushes`; `target`: the op also changes the object
 * under the popped ones (BUILD, SETITEM), which must not be the list. */
static int pop_push(walk *w, Py_ssize_t k, Py_ssize_t pushes, int target)
{
    Py_ssize_t floor = fence(w) > 1 ? fence(w) : 1;
    if (w->depth - k < floor || (target && w->depth - k - 1 < floor))
        return -1;
    w->depth += pushes - k;
    return 0;
}

static int memo_put(walk *w, int style, int64_t idx)
{
    if (w->memo_style && w->memo_style != style)
        return -1;
    w->memo_style = style;
    if (w->depth < 1 || w->depth - 1 < fence(w))
        return -1;
    if (w->depth == 1)
        w->list_memo = idx;  /* the list itself */
    else if (idx == w->list_memo)
        w->list_memo = -1;  /* overwritten */
    return 0;
}

static int memo_get(walk *w, int64_t idx)
{
    if (idx == w->list_memo)
        return -1;
    w->depth++;
    return 0;
}

/* Close the innermost mark: the objects above it are consumed; the op
 * pushes `pushes` (0 or 1) and, for `appends`, adds them to the object
 * under the mark (`target`: which must not be the list unless it is
 * APPENDS). */
static int to_mark(walk *w, int pushes, int target, int appends)
{
    if (!w->nmarks)
        return -1;
    Py_ssize_t m = w->marks[--w->nmarks];
    if (target) {
        if (m < 1 || m - 1 < fence(w))
            return -1;
        if (m == 1) {
            if (!appends)
                return -1;
            w->count += w->depth - m;
        }
    }
    w->depth = m + pushes;
    return 0;
}

/* An op that read its argument (rc: the read's result) and pushes one object. */
static int pushed(walk *w, int rc)
{
    if (rc < 0)
        return -1;
    w->depth++;
    return 0;
}

static int step(walk *w, unsigned char op)
{
    const unsigned char *b;
    int64_t idx;
    switch (op) {
    case 0x80: /* PROTO */
        return take(w, 1, &b);
    case 0x95: /* FRAME: its length only groups the opcodes that follow */
        return take(w, 8, &b);
    case ']': /* EMPTY_LIST */
    case 'N': case '}': case ')': case 0x88: case 0x89: case 0x8f:
        w->depth++;
        return 0;
    case 'K': case 0x82: /* BININT1, EXT1 */
        return pushed(w, take(w, 1, &b));
    case 'M': case 0x83: /* BININT2, EXT2 */
        return pushed(w, take(w, 2, &b));
    case 'J': case 0x84: /* BININT, EXT4 */
        return pushed(w, take(w, 4, &b));
    case 'G': /* BINFLOAT */
        return pushed(w, take(w, 8, &b));
    case 'T': case 0x8b: /* BINSTRING, LONG4: signed 4-byte length */
        return pushed(w, skip_counted(w, 4, 1));
    case 'X': case 'B': /* BINUNICODE, BINBYTES */
        return pushed(w, skip_counted(w, 4, 0));
    case 'U': case 'C': case 0x8c: case 0x8a: /* SHORT_BINSTRING, SHORT_BINBYTES, SHORT_BINUNICODE, LONG1 */
        return pushed(w, skip_counted(w, 1, 0));
    case 0x8d: case 0x8e: case 0x96: /* BINUNICODE8, BINBYTES8, BYTEARRAY8 */
        return pushed(w, skip_counted(w, 8, 0));
    case 'I': case 'L': case 'S': case 'V': case 'F': /* protocol 0's values */
        return pushed(w, skip_line(w, NULL));
    case 'c': /* GLOBAL: module and name lines */
        return pushed(w, skip_line(w, NULL) < 0 ? -1 : skip_line(w, NULL));
    case 'h': /* BINGET */
        if (take(w, 1, &b) < 0)
            return -1;
        return memo_get(w, b[0]);
    case 'j': /* LONG_BINGET */
        if (take(w, 4, &b) < 0)
            return -1;
        return memo_get(w, (int64_t)le(b, 4));
    case 'g': /* GET */
        if (skip_line(w, &idx) < 0)
            return -1;
        return memo_get(w, idx);
    case 0x94: /* MEMOIZE */
        return memo_put(w, 1, (int64_t)w->memo_next++);
    case 'q': /* BINPUT */
        if (take(w, 1, &b) < 0)
            return -1;
        return memo_put(w, 2, b[0]);
    case 'r': /* LONG_BINPUT */
        if (take(w, 4, &b) < 0)
            return -1;
        return memo_put(w, 2, (int64_t)le(b, 4));
    case 'p': /* PUT */
        if (skip_line(w, &idx) < 0)
            return -1;
        return memo_put(w, 2, idx);
    case 'a': /* APPEND: the list gets the item when it lies right under it */
        if (w->depth - 1 < fence(w) || w->depth < 2)
            return -1;
        if (w->depth == 2)
            w->count++;
        w->depth--;
        return 0;
    case '0': /* POP */
        return pop_push(w, 1, 0, 0);
    case 0x85: case 0x98: /* TUPLE1, READONLY_BUFFER */
        return pop_push(w, 1, 1, 0);
    case '2': /* DUP */
        return pop_push(w, 1, 2, 0);
    case 'b': /* BUILD */
        return pop_push(w, 1, 0, 1);
    case 'R': case 0x81: case 0x86: case 0x93: /* REDUCE, NEWOBJ, TUPLE2, STACK_GLOBAL */
        return pop_push(w, 2, 1, 0);
    case 's': /* SETITEM */
        return pop_push(w, 2, 0, 1);
    case 0x87: case 0x92: /* TUPLE3, NEWOBJ_EX */
        return pop_push(w, 3, 1, 0);
    case '(': /* MARK */
        if (w->depth < 1 || w->nmarks == MAX_MARKS)
            return -1;
        w->marks[w->nmarks++] = w->depth;
        return 0;
    case 'e': /* APPENDS */
        return to_mark(w, 0, 1, 1);
    case 'u': case 0x90: /* SETITEMS, ADDITEMS */
        return to_mark(w, 0, 1, 0);
    case '1': /* POP_MARK */
        return to_mark(w, 0, 0, 0);
    case 'l': case 't': case 'd': case 0x91: case 'o': /* LIST, TUPLE, DICT, FROZENSET, OBJ */
        return to_mark(w, 1, 0, 0);
    case 'i': /* INST: module and name lines */
        if (skip_line(w, NULL) < 0 || skip_line(w, NULL) < 0)
            return -1;
        return to_mark(w, 1, 0, 0);
    default: /* PERSID, BINPERSID, NEXT_BUFFER, STOP handled by the caller, unknown */
        return -1;
    }
}

Py_ssize_t tfos__pickled_list_len(const unsigned char *p, size_t n)
{
    walk w;
    memset(&w, 0, sizeof w);
    w.p = p;
    w.n = n;
    w.list_memo = -1;
    int started = 0;
    while (w.i < w.n) {
        unsigned char op = p[w.i++];
        if (op == '.') /* STOP */
            return started && w.depth == 1 && !w.nmarks && w.i == w.n ? w.count : -1;
        if (!started) {
            /* before the list: only the protocol and a frame */
            if (op == ']')
                started = 1;
            else if (op != 0x80 && op != 0x95)
                return -1;
        }
        if (step(&w, op) < 0)
            return -1;
    }
    return -1;
}

PyObject *tfos_pickled_list_len(PyObject *Py_UNUSED(m), PyObject *arg)
{
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0)
        return NULL;
    Py_ssize_t k = tfos__pickled_list_len(b.buf, (size_t)b.len);
    PyBuffer_Release(&b);
    return PyLong_FromSsize_t(k);
}

/* ---- rows of numbers straight to columns ----------------------------------
 *
 * For a node that reads columns (the ring's reads_columns hint), a feed task
 * used to unpickle each batch and encode its rows: 0.35 µs a row of 11
 * numbers, most of it making and freeing the rows' Python objects. A batch
 * of tuples of floats, ints and bools is read here from its opcodes into
 * the columnar batch the encoder would make (same names, dtypes, values),
 * with no Python object. Anything else (another value, a nested tuple, a
 * memo reference, types that change from row to row, an int beyond int64)
 * is None: the caller unpickles and encodes as before. */

enum { V_BOOL, V_INT, V_FLOAT };

typedef struct colwalk {
    walk w;                        /* bounds and position (the stack model above is not used) */
    tfos__batch_build *b;
    int ncols;                     /* fields a row, from row 0 (0: no row yet) */
    uint8_t types[TFOS__BUILD_MAX_COLS];
    int nv;                        /* values of the row being read */
    int marks;                     /* open marks: at most 2, APPENDS's and a row's */
    uint32_t mark_rows[2];         /* rows finished when each opened */
    uint32_t pending;              /* rows finished and not yet appended to the list */
} colwalk;

static int next_op(colwalk *c)
{
    for (;;) {
        if (c->w.i >= c->w.n)
            return -1;
        int op = c->w.p[c->w.i++];
        if (op != 0x95) /* FRAME: only groups the opcodes */
            return op;
        if (c->w.n - c->w.i < 8)
            return -1;
        c->w.i += 8;
    }
}

/* One value into field c->nv of the current row: its column gets it when
 * the types agree with row 0's. */
static int push_value(colwalk *c, int type, const void *v)
{
    int j = c->nv;
    if (j >= TFOS__BUILD_MAX_COLS || (c->ncols && (j >= c->ncols || c->types[j] != type)))
        return -1;
    if (!c->ncols) {
        /* row 0: the columns are made as its values come */
        tfos__build_col *col = &c->b->cols[j];
        col->name[0] = '\0';
        col->kind = TFOS_COL_FIXED;
        col->dtype = type == V_BOOL ? TFOS_DT_BOOL : type == V_INT ? TFOS_DT_I64 : TFOS_DT_F64;
        col->ndim = 0;
        col->len = 1;
        c->types[j] = (uint8_t)type;
        c->b->ncols = j + 1;
    }
    if (tfos__batch_build_push_fixed(&c->b->cols[j], v, type == V_BOOL ? 1 : 8) < 0)
        return -1;
    c->nv++;
    return 0;
}

/* The values since the top mark (or all, with none open: TUPLE1-3) made a
 * tuple of k fields: a row, when nothing else lies in it. */
static int end_row(colwalk *c, int k, int marked)
{
    if (marked) {
        if (!c->marks || c->mark_rows[c->marks - 1] != c->pending)
            return -1;
        c->marks--;
    }
    if (c->nv != k || k == 0 || (c->ncols && k != c->ncols))
        return -1;
    c->ncols = k;
    c->nv = 0;
    c->b->nrows++;
    c->pending++;
    return 0;
}

static int read_value(colwalk *c, int op)
{
    const unsigned char *b;
    int64_t i;
    switch (op) {
    case 'G': { /* BINFLOAT: big-endian */
        if (take(&c->w, 8, &b) < 0)
            return -1;
        uint64_t bits = 0;
        for (int k = 0; k < 8; k++)
            bits = bits << 8 | b[k];
        double d;
        memcpy(&d, &bits, 8);
        return push_value(c, V_FLOAT, &d);
    }
    case 'K':
        if (take(&c->w, 1, &b) < 0)
            return -1;
        i = b[0];
        return push_value(c, V_INT, &i);
    case 'M':
        if (take(&c->w, 2, &b) < 0)
            return -1;
        i = (int64_t)le(b, 2);
        return push_value(c, V_INT, &i);
    case 'J':
        if (take(&c->w, 4, &b) < 0)
            return -1;
        i = (int32_t)(uint32_t)le(b, 4);
        return push_value(c, V_INT, &i);
    case 0x8a: { /* LONG1: little-endian two's complement, up to 8 bytes for int64 */
        if (take(&c->w, 1, &b) < 0)
            return -1;
        int n = b[0];
        if (n > 8 || take(&c->w, (size_t)n, &b) < 0)
            return -1;
        uint64_t u = n ? le(b, n) : 0;
        if (n && n < 8 && (b[n - 1] & 0x80))
            u |= ~(uint64_t)0 << (8 * n);
        i = (int64_t)u;
        return push_value(c, V_INT, &i);
    }
    case 0x88: case 0x89: { /* NEWTRUE, NEWFALSE */
        uint8_t v = op == 0x88;
        return push_value(c, V_BOOL, &v);
    }
    default:
        return -1;
    }
}

static int walk_columns(colwalk *c)
{
    const unsigned char *b;
    int op = next_op(c);
    if (op == 0x80) {
        if (take(&c->w, 1, &b) < 0)
            return -1;
        op = next_op(c);
    }
    if (op != ']')
        return -1;
    for (;;) {
        op = next_op(c);
        switch (op) {
        case 0x94: /* MEMOIZE: of the list or a row; never fetched (GET is refused) */
            break;
        case 'q':
            if (take(&c->w, 1, &b) < 0)
                return -1;
            break;
        case 'r':
            if (take(&c->w, 4, &b) < 0)
                return -1;
            break;
        case '(':
            if (c->marks == 2 || c->nv)
                return -1;
            c->mark_rows[c->marks++] = c->pending;
            break;
        case 't':
            if (end_row(c, c->nv, 1) < 0)
                return -1;
            break;
        case 0x85: case 0x86: case 0x87: /* TUPLE1-3 */
            if (end_row(c, op - 0x84, 0) < 0)
                return -1;
            break;
        case 'e': /* APPENDS: the rows since its mark, which lies right on the list */
            if (c->marks != 1 || c->nv || c->mark_rows[0] != 0)
                return -1;
            c->marks = 0;
            c->pending = 0;
            break;
        case 'a':
            if (c->nv || c->pending != 1 || c->marks)
                return -1;
            c->pending = 0;
            break;
        case '.':
            return c->w.i == c->w.n && !c->marks && !c->nv && !c->pending && c->b->nrows ? 0 : -1;
        default:
            if (read_value(c, op) < 0)
                return -1;
        }
    }
}

PyObject *tfos_pickled_columns(PyObject *m, PyObject *arg)
{
    module_state *st = get_state(m);
    if (!st->pickle_build) {
        st->pickle_build = malloc(sizeof(tfos__batch_build));
        if (!st->pickle_build)
            return PyErr_NoMemory();
        tfos__batch_build_init(st->pickle_build);
    }
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    colwalk c;
    memset(&c.w, 0, sizeof c.w);
    c.w.p = view.buf;
    c.w.n = (size_t)view.len;
    c.b = st->pickle_build;
    c.b->ncols = 0;
    c.b->nrows = 0;
    c.ncols = c.nv = c.marks = 0;
    c.pending = 0;
    int ok = walk_columns(&c) == 0;
    PyBuffer_Release(&view);
    const void *batch = NULL;
    size_t len = 0;
    uint32_t nrows = c.b->nrows;
    if (ok && tfos__batch_build_finish(c.b, 0, &batch, &len) == 0)
        return Py_BuildValue("(Iy#)", nrows, (const char *)batch, (Py_ssize_t)len);
    /* not ours: empty the columns for the next call */
    for (int j = 0; j < TFOS__BUILD_MAX_COLS && j < c.b->ncols; j++)
        c.b->cols[j].vlen = 0;
    c.b->nrows = 0;
    Py_RETURN_NONE;
}

void tfos__pickled_free(void *build)
{
    if (build) {
        tfos__batch_build_fini(build);
        free(build);
    }
}
