"""tfos on Spark: the driver's side (driver.py, cluster.py) and what runs in
Spark tasks on executors (nodes.py, feeding.py). Users import it under
TensorFlowOnSpark's names, tfos.TFCluster and tfos.TFSparkNode."""
