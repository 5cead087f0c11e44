"""TensorFlowOnSpark's ``dfutil``: Spark DataFrames to and from TFRecord
files of ``tf.train.Example``, with TFoS's type mapping.

The files are written and read with TensorFlow's own TFRecord writer and
reader, one Spark task per partition (write) or per file (read), not through
a Spark TFRecord jar: nothing has to be added to Spark's classpath, the
files are exactly what ``tf.data.TFRecordDataset`` reads, and every
filesystem TensorFlow's ``tf.io.gfile`` knows works (docs/SPARK.md, "TFRecords
from DataFrames", says why in full).

Type mapping (TFoS's): boolean and integer columns -> ``Int64List``, float and
double -> ``FloatList``, string (UTF-8) and binary -> ``BytesList``, arrays of
those numbers -> lists of them. Back: ``Int64List`` -> long, ``FloatList`` ->
double, ``BytesList`` -> string, or binary for the features named in
``binary_features``; a feature with more than one value becomes an array
column, a feature with no value None. Columns come back sorted by name.
"""
import os
import uuid

__all__ = ["loadedDF", "isLoadedDF", "saveAsTFRecords", "loadTFRecords", "toTFExample", "infer_schema",
           "fromTFExample"]

loadedDF = {}       # DataFrame made by loadTFRecords -> the path it was loaded from (as TFoS)

_FLOAT = ("float", "double")
_INT64 = ("boolean", "tinyint", "smallint", "int", "bigint", "long")
_FLOAT_LIST = tuple("array<%s>" % t for t in _FLOAT)
_INT64_LIST = tuple("array<%s>" % t for t in _INT64)


def isLoadedDF(df):
    """True when ``df`` was made by :func:`loadTFRecords` (Spark ML
    pipelines use it to read the TFRecords instead of the DataFrame)."""
    return df in loadedDF


def toTFExample(dtypes):
    """A ``mapPartitions`` function turning rows of a DataFrame whose
    ``df.dtypes`` are ``dtypes`` into ``(bytearray(serialized
    tf.train.Example), None)`` pairs, as TensorFlowOnSpark's. An unsupported
    column type raises ValueError naming the column."""
    def to_examples(rows):
        import tensorflow as tf

        def feature(name, dtype, value):
            if dtype in _FLOAT:
                return tf.train.Feature(float_list=tf.train.FloatList(value=[value]))
            if dtype in _INT64:
                return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
            if dtype == "binary":
                return tf.train.Feature(bytes_list=tf.train.BytesList(value=[bytes(value)]))
            if dtype == "string":
                return tf.train.Feature(bytes_list=tf.train.BytesList(value=[str(value).encode("utf-8")]))
            if dtype in _FLOAT_LIST:
                return tf.train.Feature(float_list=tf.train.FloatList(value=value))
            if dtype in _INT64_LIST:
                return tf.train.Feature(int64_list=tf.train.Int64List(value=value))
            raise ValueError("column %r has the type %s, which a tf.train.Example cannot hold (supported: "
                             "numbers, string, binary, arrays of numbers)" % (name, dtype))

        out = []
        for row in rows:
            features = {name: feature(name, dtype, row[name]) for name, dtype in dtypes}
            example = tf.train.Example(features=tf.train.Features(feature=features))
            out.append((bytearray(example.SerializeToString()), None))
        return out

    return to_examples


def _record_bytes(record):
    """A record as TFoS's Hadoop input gave it (``(bytes, None)``) or as
    TensorFlow's reader does (bytes)."""
    if isinstance(record, tuple):
        record = record[0]
    return bytes(record)


def infer_schema(example, binary_features=[]):
    """The DataFrame schema (a ``StructType``, fields sorted by name) for
    ``tf.train.Example`` ``example``, with TFoS's mapping (see the module)."""
    from pyspark.sql.types import ArrayType, BinaryType, DoubleType, LongType, StringType, StructField, StructType

    def sql_type(name, feature):
        if name in binary_features:
            return BinaryType()
        if feature.int64_list.value:
            values, base = feature.int64_list.value, LongType()
        elif feature.float_list.value:
            values, base = feature.float_list.value, DoubleType()
        else:
            values, base = feature.bytes_list.value, StringType()
        return ArrayType(base) if len(values) > 1 else base

    return StructType([StructField(k, sql_type(k, v), True) for k, v in sorted(example.features.feature.items())])


def fromTFExample(iter, binary_features=[]):
    """A ``mapPartitions`` function: serialized ``tf.train.Example`` records
    (bytes, or TFoS's ``(bytes, None)`` pairs) -> ``Row`` objects, one
    column per feature."""
    import tensorflow as tf
    from pyspark.sql import Row

    def value(name, feature):
        if feature.int64_list.value:
            values = feature.int64_list.value
        elif feature.float_list.value:
            values = feature.float_list.value
        elif name in binary_features:
            return bytearray(feature.bytes_list.value[0]) if feature.bytes_list.value else None
        else:
            return feature.bytes_list.value[0].decode("utf-8") if feature.bytes_list.value else None
        if len(values) > 1:
            return list(values)
        return values[0] if values else None

    rows = []
    for record in iter:
        example = tf.train.Example()
        example.ParseFromString(_record_bytes(record))
        rows.append(Row(**{k: value(k, v) for k, v in sorted(example.features.feature.items())}))
    return rows


def saveAsTFRecords(df, output_dir):
    """Write ``df`` as TFRecord files of ``tf.train.Example`` under
    ``output_dir`` (a path or URI ``tf.io.gfile`` knows), one
    ``part-r-NNNNN`` file per partition, then ``_SUCCESS``, as TFoS's Hadoop
    output did. Like it, refuses an ``output_dir`` that exists. Each task
    writes a temporary file and renames it into place, so a retried task
    never leaves a half-written part."""
    import tensorflow as tf
    if tf.io.gfile.exists(output_dir):
        raise FileExistsError("output directory %s already exists" % output_dir)
    tf.io.gfile.makedirs(output_dir)
    to_examples = toTFExample(df.dtypes)

    def write(index, rows):
        import tensorflow as tf
        final = "%s/part-r-%05d" % (output_dir.rstrip("/"), index)
        tmp = "%s/_temporary-%05d-%s" % (output_dir.rstrip("/"), index, uuid.uuid4().hex)
        count = 0
        with tf.io.TFRecordWriter(tmp) as writer:
            for record, _ in to_examples(rows):
                writer.write(bytes(record))
                count += 1
        tf.io.gfile.rename(tmp, final, overwrite=True)
        return [count]

    df.rdd.mapPartitionsWithIndex(write).collect()
    with tf.io.gfile.GFile("%s/_SUCCESS" % output_dir.rstrip("/"), "w") as f:
        f.write("")          # GFile creates the file on its first write


def _input_files(input_dir):
    """The data files of ``input_dir`` (a file, a directory or a glob), as
    Hadoop's input formats list them: names starting with ``_`` or ``.``
    are not data."""
    import tensorflow as tf
    if tf.io.gfile.isdir(input_dir):
        names = ["%s/%s" % (input_dir.rstrip("/"), n) for n in sorted(tf.io.gfile.listdir(input_dir))]
    else:
        names = sorted(tf.io.gfile.glob(input_dir))
    files = [n for n in names
             if not os.path.basename(n.rstrip("/")).startswith(("_", ".")) and not tf.io.gfile.isdir(n)]
    if not files:
        raise FileNotFoundError("no TFRecord files at %s" % input_dir)
    return files


def _read_records(path):
    import tensorflow as tf
    compression = "GZIP" if path.endswith(".gz") else ""
    for record in tf.data.TFRecordDataset(path, compression_type=compression).as_numpy_iterator():
        yield record


def loadTFRecords(sc, input_dir, binary_features=[]):
    """A DataFrame of the ``tf.train.Example`` records in the TFRecord files
    of ``input_dir`` (a directory, a file or a glob; ``.gz`` files are read
    as GZIP), one Spark partition per file; the schema is inferred from the
    first record (:func:`infer_schema`), string vs binary by
    ``binary_features``."""
    import tensorflow as tf
    files = _input_files(input_dir)
    first = None
    for path in files:
        for record in _read_records(path):
            first = record
            break
        if first is not None:
            break
    if first is None:
        raise ValueError("the TFRecord files at %s hold no records: there is no schema to infer" % input_dir)
    example = tf.train.Example()
    example.ParseFromString(first)
    schema = infer_schema(example, binary_features)
    rows = sc.parallelize(files, len(files)).flatMap(_read_records) \
        .mapPartitions(lambda records: fromTFExample(records, binary_features))
    df = rows.toDF(schema)
    loadedDF[df] = input_dir
    return df
