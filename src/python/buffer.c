/* buffer.c: tfos._tfos.FeedBuffer, a read-only byte buffer holding one large
 * feed record that Ring.read copied out of shared memory. Its memory comes
 * from, and goes back to, a small pool in module state. And
 * tfos._tfos.RingMapping, a read-only mapping of a whole ring that
 * Ring.read(views=True) hands out slices of. */
#include "tfosmod.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

typedef struct {
    PyObject_HEAD
    PyObject *module;
    char *mem;
    Py_ssize_t len;
    size_t cap;
    Py_ssize_t exports;
} BufferObject;

static void *pool_take(module_state *st, size_t len, size_t *cap)
{
    for (int i = 0; i < st->pool_n; i++) {
        if (st->pool_cap[i] >= len && st->pool_cap[i] <= 2 * len) {
            void *m = st->pool_mem[i];
            *cap = st->pool_cap[i];
            st->pool_bytes -= *cap;
            st->pool_mem[i] = st->pool_mem[st->pool_n - 1];
            st->pool_cap[i] = st->pool_cap[st->pool_n - 1];
            st->pool_n--;
            return m;
        }
    }
    void *m = NULL;
    *cap = (len + 4095) & ~(size_t)4095;
    if (posix_memalign(&m, 64, *cap))
        return NULL;
    return m;
}

static void pool_give(module_state *st, void *m, size_t cap)
{
    if (st && st->pool_n < POOL_SLOTS && st->pool_bytes + cap <= POOL_MAX_BYTES) {
        st->pool_mem[st->pool_n] = m;
        st->pool_cap[st->pool_n] = cap;
        st->pool_n++;
        st->pool_bytes += cap;
        return;
    }
    free(m);
}

static int Buffer_getbuffer(BufferObject *self, Py_buffer *view, int flags)
{
    if (PyBuffer_FillInfo(view, (PyObject *)self, self->mem, self->len, 1, flags) < 0)
        return -1;
    self->exports++;
    return 0;
}

static void Buffer_releasebuffer(BufferObject *self, Py_buffer *Py_UNUSED(view))
{
    self->exports--;
}

static Py_ssize_t Buffer_length(BufferObject *self)
{
    return self->len;
}

static void Buffer_dealloc(BufferObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    if (self->mem)
        pool_give(self->module ? get_state(self->module) : NULL, self->mem, self->cap);
    Py_XDECREF(self->module);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyType_Slot Buffer_slots[] = {
    {Py_tp_doc, "A read-only copy of one feed record (buffer protocol). Its memory is recycled for later records "
                "once nothing refers to it."},
    {Py_bf_getbuffer, Buffer_getbuffer},
    {Py_bf_releasebuffer, Buffer_releasebuffer},
    {Py_sq_length, Buffer_length},
    {Py_tp_dealloc, Buffer_dealloc},
    {0, NULL},
};

PyType_Spec tfos__py_buffer_spec = {
    .name = "tfos._tfos.FeedBuffer",
    .basicsize = sizeof(BufferObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Buffer_slots,
};

/* A new FeedBuffer holding a copy of data[0..len) (the copy runs without the GIL). */
PyObject *tfos__py_buffer_copy(PyObject *module, const void *data, size_t len)
{
    module_state *st = get_state(module);
    size_t cap;
    void *mem = pool_take(st, len, &cap);
    if (!mem)
        return PyErr_NoMemory();
    BufferObject *b = PyObject_New(BufferObject, st->buffer_type);
    if (!b) {
        pool_give(st, mem, cap);
        return NULL;
    }
    b->module = Py_NewRef(module);
    b->mem = mem;
    b->len = (Py_ssize_t)len;
    b->cap = cap;
    b->exports = 0;
    Py_BEGIN_ALLOW_THREADS
    memcpy(mem, data, len);
    Py_END_ALLOW_THREADS
    return (PyObject *)b;
}

/* ---- RingMapping ------------------------------------------------------------
 * A second mapping of a ring's memfd, read-only, of its own: the ring handle
 * may close (and unmap) while numpy arrays still view records through this
 * one, which is unmapped only when the last of them is gone. What the
 * bytes hold after the records were released is the producers' to write. */

typedef struct {
    PyObject_HEAD
    void *mem;
    Py_ssize_t len;
} MappingObject;

static int Mapping_getbuffer(MappingObject *self, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)self, self->mem, self->len, 1, flags);
}

static void Mapping_dealloc(MappingObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    if (self->mem)
        munmap(self->mem, (size_t)self->len);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyType_Slot Mapping_slots[] = {
    {Py_tp_doc, "A read-only mapping of a whole feed ring (buffer protocol); Ring.read(views=True) hands out "
                "memoryviews of it."},
    {Py_bf_getbuffer, Mapping_getbuffer},
    {Py_tp_dealloc, Mapping_dealloc},
    {0, NULL},
};

PyType_Spec tfos__py_mapping_spec = {
    .name = "tfos._tfos.RingMapping",
    .basicsize = sizeof(MappingObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Mapping_slots,
};

PyObject *tfos__py_mapping_new(PyObject *module, int fd)
{
    struct stat st;
    if (fstat(fd, &st))
        return PyErr_SetFromErrno(PyExc_OSError);
    void *mem = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (mem == MAP_FAILED)
        return PyErr_SetFromErrno(PyExc_OSError);
    MappingObject *m = PyObject_New(MappingObject, get_state(module)->mapping_type);
    if (!m) {
        munmap(mem, (size_t)st.st_size);
        return NULL;
    }
    m->mem = mem;
    m->len = (Py_ssize_t)st.st_size;
    return (PyObject *)m;
}
