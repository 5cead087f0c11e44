"""tfos.dfutil on the real Spark cluster: DataFrame -> TFRecords ->
DataFrame round trip with TFoS's type mapping, and loadTFRecords on files
TensorFlow's own writer made."""
import os

import pytest

tf = pytest.importorskip("tensorflow")

from pyspark.sql.types import (ArrayType, BinaryType, DoubleType, LongType, StringType, StructField,  # noqa: E402
                               StructType)

from tfos import dfutil  # noqa: E402

# the types TFoS's mapping brings back as they went in (long, double, string,
# binary, arrays of 2+ longs/doubles); columns in name order, as they come back
SCHEMA = StructType([
    StructField("a_int", LongType()),
    StructField("b_float", DoubleType()),
    StructField("c_str", StringType()),
    StructField("d_bin", BinaryType()),
    StructField("e_ints", ArrayType(LongType())),
    StructField("f_floats", ArrayType(DoubleType())),
])


def _rows(n):
    # floats exactly representable in float32 (TFRecords hold FloatList)
    return [(i, i * 0.25, u"row %d \u00e9" % i, bytearray([i % 256, 0, 255, 7]), [i, -i, 2 ** 40 + i],
             [i * 0.5, -1.5]) for i in range(n)]


def test_round_trip_int_float_string_binary_arrays(spark, tmp_path):
    df = spark.createDataFrame(_rows(50), SCHEMA).repartition(3)
    out = str(tmp_path / "tfr")
    dfutil.saveAsTFRecords(df, out)
    names = sorted(os.listdir(out))
    assert names == ["_SUCCESS", "part-r-00000", "part-r-00001", "part-r-00002"]
    with pytest.raises(FileExistsError):
        dfutil.saveAsTFRecords(df, out)

    back = dfutil.loadTFRecords(spark.sparkContext, out, binary_features=["d_bin"])
    assert back.schema == SCHEMA
    assert dfutil.isLoadedDF(back) and not dfutil.isLoadedDF(df)
    got = sorted(tuple(r) for r in back.collect())
    want = sorted(tuple(r) for r in df.collect())
    assert got == want
    assert len(got) == 50

    # the files are plain TFRecords: TensorFlow reads them
    n = 0
    for name in names[1:]:
        for record in tf.data.TFRecordDataset(os.path.join(out, name)):
            ex = tf.train.Example.FromString(record.numpy())
            assert set(ex.features.feature) == set(SCHEMA.names)
            n += 1
    assert n == 50


def test_load_files_tensorflow_wrote(spark, tmp_path):
    d = tmp_path / "tfwritten"
    d.mkdir()
    for part in range(2):
        with tf.io.TFRecordWriter(str(d / ("data-%d.tfrecord" % part))) as w:
            for i in range(part * 10, part * 10 + 10):
                ex = tf.train.Example(features=tf.train.Features(feature={
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
                    "x": tf.train.Feature(float_list=tf.train.FloatList(value=[i, 0.5, 2.0])),
                    "name": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"n%d" % i])),
                    "raw": tf.train.Feature(bytes_list=tf.train.BytesList(value=[bytes([i, 200])])),
                }))
                w.write(ex.SerializeToString())
    (d / "_SUCCESS").write_text("")                   # not data: skipped, as Hadoop does
    with tf.io.TFRecordWriter(str(d / "more.gz"), options="GZIP") as w:
        ex = tf.train.Example(features=tf.train.Features(feature={
            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[99])),
            "x": tf.train.Feature(float_list=tf.train.FloatList(value=[1, 2, 3])),
            "name": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"gz"])),
            "raw": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"\x00"])),
        }))
        w.write(ex.SerializeToString())

    df = dfutil.loadTFRecords(spark.sparkContext, str(d), binary_features=["raw"])
    assert df.schema == StructType([StructField("label", LongType()), StructField("name", StringType()),
                                    StructField("raw", BinaryType()), StructField("x", ArrayType(DoubleType()))])
    rows = sorted((r.label, r.name, bytes(r.raw), r.x) for r in df.collect())
    want = sorted([(i, "n%d" % i, bytes([i, 200]), [float(i), 0.5, 2.0]) for i in range(20)]
                  + [(99, "gz", b"\x00", [1.0, 2.0, 3.0])])
    assert rows == want
    assert df.rdd.getNumPartitions() == 3


def test_unsupported_column_type_names_the_column(spark, tmp_path):
    df = spark.createDataFrame([({"k": 1},)], "m map<string,int>")
    with pytest.raises(Exception, match="column 'm' has the type map<string,int>"):
        dfutil.saveAsTFRecords(df, str(tmp_path / "bad"))


def test_infer_schema_and_examples_in_process():
    ex = tf.train.Example(features=tf.train.Features(feature={
        "one": tf.train.Feature(int64_list=tf.train.Int64List(value=[1])),
        "many": tf.train.Feature(int64_list=tf.train.Int64List(value=[1, 2])),
        "f": tf.train.Feature(float_list=tf.train.FloatList(value=[0.5])),
        "s": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"x"])),
        "b": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"\x01"])),
    }))
    schema = dfutil.infer_schema(ex, binary_features=["b"])
    assert [(f.name, f.dataType) for f in schema] == [
        ("b", BinaryType()), ("f", DoubleType()), ("many", ArrayType(LongType())), ("one", LongType()),
        ("s", StringType())]
    (row,) = dfutil.fromTFExample([(bytearray(ex.SerializeToString()), None)], binary_features=["b"])
    assert row.asDict() == {"b": bytearray(b"\x01"), "f": 0.5, "many": [1, 2], "one": 1, "s": "x"}
    (row2,) = dfutil.fromTFExample([ex.SerializeToString()], binary_features=["b"])
    assert row2 == row
    to = dfutil.toTFExample([("i", "int"), ("d", "double"), ("s", "string"), ("xs", "array<float>")])
    ((data, none),) = to([{"i": 3, "d": 1.5, "s": "t", "xs": [1.0, 2.0]}])
    assert none is None and isinstance(data, bytearray)
    back = tf.train.Example.FromString(bytes(data)).features.feature
    assert back["i"].int64_list.value == [3] and back["d"].float_list.value == [1.5]
    assert back["s"].bytes_list.value == [b"t"] and back["xs"].float_list.value == [1.0, 2.0]
