"""TFCluster.run(quiet=True): no feed progress lines while train() feeds
(as `tfos run --quiet`); without it they are logged on the logger "tfos"."""
import sys
import time

from pyspark import cloudpickle

from tfos import TFCluster, TFNode
from tfos._spark import driver

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def slow_reader(args, ctx):
    feed = TFNode.DataFeed(ctx.mgr, True)
    while not feed.should_stop():
        feed.next_batch(10)
        time.sleep(0.02)


def progress_lines(sc, caplog, monkeypatch, **kw):
    monkeypatch.setattr(driver._Progress, "INTERVAL", 0.5)  # the driver's thread, in this process
    caplog.clear()
    cluster = TFCluster.run(sc, slow_reader, {}, 2, input_mode=TFCluster.InputMode.SPARK, reservation_timeout=60,
                            status_port=-1, **kw)
    try:
        t0 = time.monotonic()
        # 300 rows a partition: ~0.6 s each, 1.2 s a node at the least (the
        # progress lines come every 0.5 s; 800 rows once took 0.99 s)
        cluster.train(sc.parallelize(range(1200), 4))
        took = time.monotonic() - t0
    finally:
        cluster.shutdown()
    lines = [r for r in caplog.records if r.name == "tfos" and r.getMessage().startswith("feeding (attempt 1)")]
    return lines, took


def test_quiet_drops_the_feed_progress_lines(spark, caplog, monkeypatch):
    sc = spark.sparkContext
    caplog.set_level("INFO", logger="tfos")
    lines, took = progress_lines(sc, caplog, monkeypatch)
    assert took > 1.0 and lines, (took, [r.getMessage() for r in caplog.records])
    assert all(r.levelname == "INFO" for r in lines)
    assert any("cluster" in r.getMessage() and "formed" in r.getMessage() for r in caplog.records)
    lines, took = progress_lines(sc, caplog, monkeypatch, quiet=True)
    assert took > 1.0 and not lines, (took, [r.getMessage() for r in lines])
    # quiet is about the feed's progress: the cluster's own lines stay
    assert any("formed" in r.getMessage() for r in caplog.records)
