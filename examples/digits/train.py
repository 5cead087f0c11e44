"""Train a small Keras classifier on scikit-learn's digits, across workers.

Run plainly (one process, TensorFlow's default strategy):

    python examples/digits/train.py

or as a cluster, one process per task, each with TF_CONFIG set as TensorFlow
documents it (tfos does this for you):

    build/tfos run --workers 2 -- python examples/digits/train.py --epochs 5

With TF_CONFIG the "chief" and "worker" tasks train together with
tf.distribute.MultiWorkerMirroredStrategy (synchronous data parallelism,
gradients all-reduced over gRPC). Each process loads the data itself and makes
the same fixed train/test split (--seed); the strategy shards every global
batch of --batch-size rows across the workers.

Roles:
  chief (or worker 0 when the cluster has no chief)
      trains, saves the model to MODEL_DIR/digits.keras, prints
      "test accuracy: 0.9778" as its last line.
  other workers
      train, save to a temporary directory that they delete at once (all
      workers must take part in the save), print "done (held-out accuracy
      0.9778)", which tfos shows as "[worker:N] done (...)".
  evaluator
      takes no part in training: waits (at most --eval-timeout seconds) for
      the chief to write a new model file, evaluates it on the held-out split
      and prints "held-out accuracy 0.9778"; exits 0 on
      timeout.
  ps
      unused by this strategy (tfos runs the ps servers itself); a program
      started as ps says so and exits 0. "ps" and "evaluator" entries are
      left out of the cluster given to the strategy (see training_cluster).

--model-dir defaults to examples/digits/model (next to this script, whatever
the current directory); a path given on the command line is relative to the
current directory. predict.py reads the same default. --model-dir and
--checkpoint-dir may be hdfs:// URLs (tfos yarn's default checkpoint dir is
one): TensorFlow 2.21 cannot write those itself, so the model and the
checkpoints are written locally and copied with tfos.fs (WebHDFS).
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import digits_data


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=5,
                   help="passes over the training split (default 5)")
    p.add_argument("--batch-size", type=int, default=64,
                   help="global batch size, split across workers (default 64)")
    p.add_argument("--model-dir", default=digits_data.DEFAULT_MODEL_DIR,
                   help="where the chief saves digits.keras "
                        "(default: the model folder next to this script)")
    p.add_argument("--seed", type=int, default=digits_data.DEFAULT_SEED,
                   help="seed for the train/test split, weights and shuffling")
    p.add_argument("--checkpoint-dir",
                   default=os.environ.get("TFOS_CHECKPOINT_DIR"),
                   help="save a checkpoint every epoch and resume from the "
                        "latest one (default: $TFOS_CHECKPOINT_DIR, which "
                        "tfos run keeps across restarts; none: no checkpoints)")
    p.add_argument("--eval-timeout", type=float, default=300.0,
                   help="evaluator only: seconds to wait for the model")
    args = p.parse_args(argv)
    if args.epochs < 1:
        p.error("--epochs must be at least 1")
    if not 1 <= args.batch_size <= 1024:
        p.error("--batch-size must be between 1 and 1024 "
                "(the training split has 1437 rows)")
    return args


def read_tf_config():
    """Returns (cluster dict, task type, task index), or (None, None, None)."""
    raw = os.environ.get("TF_CONFIG", "").strip()
    if not raw:
        return None, None, None
    conf = json.loads(raw)
    cluster = conf.get("cluster") or {}
    task = conf.get("task") or {}
    if not cluster:
        return None, None, None
    return cluster, task.get("type"), int(task.get("index", 0))


def training_cluster(cluster):
    """The part of the cluster that trains: the "chief" and "worker" jobs.

    MultiWorkerMirroredStrategy hangs if TF_CONFIG's cluster has a "ps" job:
    it then names /job:ps/task:0 the leader of TensorFlow's coordination
    service (multi_worker_util.coordination_leader, a ParameterServerStrategy
    convention), but a plain ps server such as the one tfos runs does not host
    that service, so every worker waits at start-up (TF 2.21: still waiting,
    no error, after 2.5 minutes). An "evaluator" entry is harmless (it is
    left out of the all-reduce group and of the coordination service), but
    nothing here uses it either. So the strategy gets only the training jobs.
    """
    return {job: list(cluster[job]) for job in ("chief", "worker")
            if cluster.get(job)}


def is_chief(cluster, task_type, task_index):
    if cluster is None:
        return True
    if "chief" in cluster and cluster["chief"]:
        return task_type == "chief"
    return task_type == "worker" and task_index == 0


def build_model(keras):
    return keras.Sequential([
        keras.Input(shape=(64,)),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ])


def make_dataset(tf, x, y, batch_size, seed, train):
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    if train:
        # Every worker builds the same pipeline with the same seed, so each
        # epoch's order is identical on all of them; DATA auto-sharding then
        # gives each worker a disjoint slice of every global batch. Dropping
        # the short last batch keeps every step exactly batch_size rows (the
        # loss is scaled by it); the shuffle drops different rows each epoch.
        ds = ds.shuffle(len(x), seed=seed, reshuffle_each_iteration=True)
    ds = ds.batch(batch_size, drop_remainder=train)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA)
    return ds.with_options(options).prefetch(tf.data.AUTOTUNE)


def train(tf, keras, strategy, args, chief, x_train, y_train, x_test, y_test):
    """Custom training loop; returns (model, held-out accuracy).

    Why not model.fit(): with Keras 3 (what TensorFlow 2.16+ ships, 3.15 here)
    fit() and evaluate() fail under a multi-worker
    MultiWorkerMirroredStrategy before the first step, because Keras calls
    strategy.reduce() on the whole (x, y) batch and tf.distribute's reduce()
    does not take a nested structure ("Attempt to convert a value (PerReplica
    ...) to a Tensor"; keras-team/keras#20585). The loop below is TensorFlow's
    documented custom-loop pattern for this strategy; Keras layers, losses and
    optimizers work in it (the Keras optimizer all-reduces the gradients).
    """
    global_batch = args.batch_size
    train_ds = make_dataset(tf, x_train, y_train, global_batch, args.seed,
                            train=True)
    test_ds = make_dataset(tf, x_test, y_test, global_batch, args.seed,
                           train=False)
    dist_train = strategy.experimental_distribute_dataset(train_ds)
    dist_test = strategy.experimental_distribute_dataset(test_ds)

    with strategy.scope():
        model = build_model(keras)
        optimizer = keras.optimizers.Adam(learning_rate=3e-3)
        optimizer.build(model.trainable_variables)
        epochs_done = tf.Variable(0, dtype=tf.int64, trainable=False)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(reduction=None)

    def count_correct(probs, y):
        hits = tf.equal(tf.argmax(probs, axis=-1), tf.cast(y, tf.int64))
        return tf.reduce_sum(tf.cast(hits, tf.float32))

    def replica_train_step(x, y):
        with tf.GradientTape() as tape:
            probs = model(x, training=True)
            # Sum over this replica's rows / global batch: the all-reduced
            # (summed) gradient is then the gradient of the global mean loss.
            loss = tf.nn.compute_average_loss(
                loss_fn(y, probs), global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss, count_correct(probs, y)

    @tf.function
    def train_step(batch):
        loss, correct = strategy.run(replica_train_step, args=batch)
        return (strategy.reduce("SUM", loss, axis=None),
                strategy.reduce("SUM", correct, axis=None))

    @tf.function
    def test_step(batch):
        correct = strategy.run(
            lambda x, y: count_correct(model(x, training=False), y),
            args=batch)
        return strategy.reduce("SUM", correct, axis=None)

    # Checkpoints (TensorFlow's pattern for a custom loop under
    # MultiWorkerMirroredStrategy): every worker saves, the chief into the
    # shared directory, the others into their own scratch directories; every
    # worker restores from the chief's latest. After a restart (tfos run
    # --max-restarts) training goes on from the last finished epoch.
    #
    # A checkpoint dir on HDFS (what tfos yarn gives by default): TensorFlow
    # 2.21 writes local paths only, so every worker works in a local copy
    # (tfos.fs.Mirror: pulled from HDFS here) and the chief pushes its new
    # files to HDFS after each save.
    manager = mirror = None
    if args.checkpoint_dir:
        ckpt_dir = args.checkpoint_dir
        if digits_data.is_url(ckpt_dir):
            import tfos.fs
            mirror = tfos.fs.Mirror(ckpt_dir)
            ckpt_dir = mirror.path
        ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer,
                                   epochs_done=epochs_done)
        write_dir = (ckpt_dir if chief else os.path.join(
            ckpt_dir, f".scratch-{os.environ.get('TFOS_JOB_NAME', 'w')}"
                      f"-{os.environ.get('TFOS_TASK_INDEX', '0')}"))
        manager = tf.train.CheckpointManager(ckpt, write_dir, max_to_keep=2)
        latest = tf.train.latest_checkpoint(ckpt_dir)
        if latest:
            ckpt.restore(latest)
            print(f"resumed from checkpoint {os.path.basename(latest)} after "
                  f"epoch {int(epochs_done.numpy())}", flush=True)
        else:
            print("no checkpoint yet: starting at epoch 1", flush=True)

    steps = len(x_train) // global_batch
    for epoch in range(int(epochs_done.numpy()) + 1, args.epochs + 1):
        t0 = time.monotonic()
        total_loss = total_correct = 0.0
        for batch in dist_train:
            loss, correct = train_step(batch)
            total_loss += float(loss)
            total_correct += float(correct)
        if chief:
            print(f"epoch {epoch}/{args.epochs}: "
                  f"loss {total_loss / steps:.4f}, "
                  f"train accuracy {total_correct / (steps * global_batch):.4f}"
                  f" ({time.monotonic() - t0:.2f}s)", flush=True)
        epochs_done.assign(epoch)
        if manager is not None:
            manager.save()
            if mirror is not None and chief:
                mirror.push()

    # Every worker evaluates its shard of the held-out split; the counts are
    # summed across workers, so all of them get the accuracy on all of it.
    correct = sum(float(test_step(batch)) for batch in dist_test)
    if mirror is not None:
        mirror.close()
    return model, correct / len(x_test)


def run_evaluator(keras, args):
    path = digits_data.model_path(args.model_dir)
    before = digits_data.model_stamp(path)
    deadline = time.monotonic() + args.eval_timeout
    print(f"waiting up to {args.eval_timeout:.0f}s for {path}",
          flush=True)
    while True:
        stamp = digits_data.model_stamp(path)
        if stamp is not None and stamp != before:
            break
        if time.monotonic() > deadline:
            print("no new model appeared; nothing to evaluate",
                  flush=True)
            return 0
        time.sleep(1.0)
    time.sleep(0.5)  # the chief renames a complete file into place
    with tempfile.TemporaryDirectory() as tmp:
        model = keras.models.load_model(digits_data.fetch_model(path, tmp))
    _, _, x_test, y_test = digits_data.load_split(args.seed)
    acc = digits_data.accuracy(model, x_test, y_test)
    print(f"held-out accuracy {acc:.4f}", flush=True)
    return 0


def main(argv=None):
    args = parse_args(argv)
    cluster, task_type, task_index = read_tf_config()

    if task_type == "ps":
        print("ps task: this example's strategy uses no parameter servers; "
              "exiting", flush=True)
        return 0

    import keras
    import tensorflow as tf

    if task_type == "evaluator":
        return run_evaluator(keras, args)

    if cluster is not None:
        train_cluster = training_cluster(cluster)
        if task_type not in train_cluster:
            sys.exit(f"train.py: TF_CONFIG task type {task_type!r} is not "
                     f"a training job of cluster {cluster}")
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec(train_cluster), task_type=task_type,
            task_id=task_index, rpc_layer="grpc")
        # Must be created before any other TensorFlow op runs in this process.
        strategy = tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=resolver)
    else:
        strategy = tf.distribute.get_strategy()  # default: this process only
    chief = is_chief(cluster, task_type, task_index)

    keras.utils.set_random_seed(args.seed)
    x_train, y_train, x_test, y_test = digits_data.load_split(args.seed)
    # No "worker:0:" of its own on these lines: tfos prefixes every line a
    # node prints with the node ("[worker:0] ...").
    print(f"pid {os.getpid()}, attempt "
          f"{os.environ.get('TFOS_ATTEMPT', '1')}, training on {len(x_train)} rows, "
          f"{strategy.num_replicas_in_sync} replica(s) in sync, "
          f"global batch {args.batch_size}, {args.epochs} epochs", flush=True)
    model, acc = train(tf, keras, strategy, args, chief,
                       x_train, y_train, x_test, y_test)

    # Saving: every worker calls save (TensorFlow's documented pattern for
    # MultiWorkerMirroredStrategy); only the chief's copy is kept.
    if chief:
        final = digits_data.model_path(args.model_dir)
        digits_data.save_model(model, final)  # whole or not at all; hdfs:// too
        print(f"saved model to {final}", flush=True)
        print(f"test accuracy: {acc:.4f}", flush=True)
    else:
        tmpdir = tempfile.mkdtemp(prefix=f"digits-{task_type}{task_index}-")
        try:
            model.save(os.path.join(tmpdir, digits_data.MODEL_FILE))
        finally:
            shutil.rmtree(tmpdir, ignore_errors=True)
        print(f"done (held-out accuracy {acc:.4f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
