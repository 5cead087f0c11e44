"""A killed driver leaves nothing behind on the executors' host. Its own
module: the driver is another process, which needs the cluster's cores (the
other modules' SparkSession holds them while their module runs)."""
import json
import os
import signal
import subprocess
import sys

from tfoshelpers import read_line_starting, tfos_processes, wait_no_tfos_processes

HERE = os.path.dirname(os.path.abspath(__file__))


def test_killed_driver_leaves_nothing_behind(spark_cluster):
    conf = spark_cluster.spark_conf("tfos-killed-driver")
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               SPARK_HOME=spark_cluster.spark_home, JAVA_HOME=spark_cluster.java_home)
    driver = subprocess.Popen([sys.executable, os.path.join(HERE, "progs", "driver_sleep.py"), json.dumps(conf)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True,
                              start_new_session=True)
    try:
        line = read_line_starting(driver, "READY", 120)
        assert line, "the driver did not form its cluster"
        pids = [int(p) for p in line.split()[1:]]
        assert all(os.path.exists("/proc/%d" % p) for p in pids)
        assert tfos_processes()
    finally:
        os.killpg(driver.pid, signal.SIGKILL)  # the driver and its py4j JVM
        driver.wait(30)
    left = wait_no_tfos_processes(60)
    assert left == [], left
