"""How an inference RDD's results travel from Spark's Python workers to the
driver (or to a cached RDD's readers).

TensorFlowOnSpark gives a program's ``batch_results(array)`` back as the
array's items: numpy scalars for a 1-D array, 1-D arrays for a 2-D one.
Spark's default serializer pickles each of those on its own, and numpy's
reduce of a scalar costs ~2.8 us: a collect() of a million results took
four times as long as the same job's Python values. ResultsSerializer
sends a run of items that are numpy values of one dtype (and shape) as one
array, and gives back the same items: numpy scalars of that dtype, or
writable 1-D arrays. Anything else goes as a pickled list, as Spark sends it.
"""
import itertools
import pickle

from pyspark.serializers import FramedSerializer, write_int

from ..feed.codec import unpickle

#: numpy kinds sent as one array: bool, signed and unsigned ints, floats
_KINDS = frozenset("biuf")


def pack(items):
    """A picklable frame for a list of results: ("a", array) for numpy
    scalars of one type, ("s", array) for 1-D arrays of one dtype and
    length, else ("p", items)."""
    if items:
        first = items[0]
        t = type(first)
        kind = getattr(getattr(first, "dtype", None), "kind", None)
        if kind in _KINDS and all(type(x) is t for x in items):
            import numpy as np  # already loaded: the items are its
            if isinstance(first, np.generic):
                arr = np.fromiter(items, dtype=first.dtype, count=len(items))
                return ("a", arr)
            if isinstance(first, np.ndarray) and first.ndim == 1:
                dt, n = first.dtype, first.shape
                if all(x.dtype == dt and x.shape == n for x in items):
                    return ("s", np.stack(items))
    return ("p", items)


def unpack(frame):
    """The list of results a frame of :func:`pack` holds."""
    # ("a"/"s"): an unpickled array is a new, writable one: its items are
    # numpy scalars, its rows 1-D arrays (views of it, each its own row)
    return list(frame[1])


class ResultsSerializer(FramedSerializer):
    """Frames of results (see the module): the first of FIRST items, each
    next one as many as fit FRAME_BYTES at the last one's size per item,
    BATCH at most (a frame is one byte array in the JVM: large rows, such
    as embeddings, go a few at a time)."""

    FIRST = 16
    BATCH = 16384
    FRAME_BYTES = 1 << 20

    def dump_stream(self, iterator, stream):
        it = iter(iterator)
        n = min(self.FIRST, self.BATCH)
        while True:
            items = list(itertools.islice(it, n))
            if not items:
                return
            data = self.dumps(items)
            if len(data) > (1 << 31):
                raise ValueError("inference results of over 2 GB in one frame (%d of them) cannot go to Spark" %
                                 len(items))
            write_int(len(data), stream)
            stream.write(data)
            n = max(1, min(self.BATCH, len(items) * self.FRAME_BYTES // max(1, len(data))))

    def load_stream(self, stream):
        for items in FramedSerializer.load_stream(self, stream):
            yield from items

    def dumps(self, items):
        return pickle.dumps(pack(items), protocol=pickle.HIGHEST_PROTOCOL)

    def loads(self, data):
        return unpack(unpickle(data))  # the collector paused: a frame holds many rows

    def __repr__(self):
        return "ResultsSerializer()"


def with_results_serializer(rdd):
    """``rdd`` (a PipelinedRDD not yet run) writing its items with
    ResultsSerializer; returns it."""
    rdd._jrdd_deserializer = ResultsSerializer()
    return rdd
