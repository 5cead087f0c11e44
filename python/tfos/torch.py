"""PyTorch on tfos: Spark's ``TorchDistributor`` on tfos's runtime, and the
feed as a ``torch.utils.data.IterableDataset``.

A TorchDistributor program changes one import::

    from tfos.torch import TorchDistributor      # was: pyspark.ml.torch.distributor

    def train(lr):
        import torch.distributed as dist
        dist.init_process_group("gloo")           # tfos set MASTER_ADDR/PORT, RANK, WORLD_SIZE
        ...
        return model.state_dict()                 # rank 0's value comes back

    state = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(train, 1e-3)

and gains what tfos gives every cluster: ports held until the program binds
them, restarts with checkpoint resume (``max_restarts``, ``TFOS_ATTEMPT``,
``TFOS_CHECKPOINT_DIR``), every rank's output live with its node name, the
status page, and a failure that names the rank and carries its traceback.

``train_on_dataframe(main, df, *args, epochs=1)`` is what TorchDistributor
keeps private: every rank reads the DataFrame's rows from its tfos feed
through :class:`FeedDataset` (Arrow batches into the node's shared-memory
ring, tensors out of it: no files, no per-row Python).

How it maps (docs/TORCH.md has the whole story):

- ``local_mode=True``: ``num_processes`` nodes on this machine (``tfos.run``,
  no Spark needed); ``local_mode=False``: one node per Spark executor, on
  ``num_processes`` executors: ``TFCluster.run`` on a classic session,
  ``tfos.spark.Cluster`` on a Spark Connect one (no SparkContext there);
  both run tfos._spark.attempts' attempt loop.
- ``run(main, *args)``: ``main`` a function (pickled with cloudpickle; rank
  0's return value is returned) or the path of a Python script run with
  ``args`` as its command line (returns None).
- ``use_gpu=True`` needs GPUs: each node sees the ones tfos or Spark gave it
  in ``CUDA_VISIBLE_DEVICES``; without any it fails at once, saying so, as
  Spark's does.
"""
import contextlib
import os
import pickle
import shutil
import sys
import tempfile
import threading
import warnings

from ._extras import require, spark_extra

# a Python without torch gets the pip command to run, not a bare
# ModuleNotFoundError (README, "Install")
require("tfos.torch", "torch")

import torch  # noqa: E402
import torch.utils.data  # noqa: E402

from . import _payload, _tfos  # noqa: E402
from ._launch import ClusterError  # noqa: E402

__all__ = ["TorchDistributor", "FeedDataset", "ElasticGroup"]

_DEFAULTS = _tfos.DEFAULTS

# FeedDataset's tensors are views of the decoded record, which nothing
# writes: torch's warning about read-only numpy arrays does not apply to them
# (the filter covers only calls made from this module).
warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning,
                        module=__name__)


def _write_result(value, path):
    """Rank 0's return value, pickled, into ``path`` (atomically)."""
    if not path or os.environ.get("RANK", "0") != "0":
        return
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(_payload.dumps(value))
    os.replace(tmp, path)


def _call(main, args):
    """Run ``main`` in a node: a function is called with ``args``; a script
    path runs as ``__main__`` with ``args`` as its command line."""
    if isinstance(main, str):
        import runpy
        saved = sys.argv
        sys.argv = [main] + [str(a) for a in args]
        try:
            runpy.run_path(main, run_name="__main__")
        finally:
            sys.argv = saved
        return None
    return main(*args)


def _spark_node(tf_args, ctx):
    """map_fun of the Spark nodes: run ``main`` and leave rank 0's value
    where the driver fetches it (see :func:`_fetch_spark_result`)."""
    main, args, result_name = tf_args
    value = _call(main, args)
    if not isinstance(main, str):
        _write_result(value, os.path.join(tempfile.gettempdir(), result_name))


def _fetch_spark_result(spark, result_name, slots):
    """Rank 0's pickled value from whichever executor ran it: a DataFrame
    job (the same on classic and Spark Connect sessions), a barrier stage of
    ``slots`` tasks, one per task slot so at least one on every executor,
    each reading and removing the file where it finds it."""
    def take(batches):
        import pyarrow as pa
        for _ in batches:
            pass
        path = os.path.join(tempfile.gettempdir(), result_name)
        # claimed by a rename, which one task wins: two tasks on one host
        # (executors sharing /tmp) both read it, and the second unlink failed
        claimed = "%s.taken-%d" % (path, os.getpid())
        value = None
        try:
            os.rename(path, claimed)
        except FileNotFoundError:
            pass
        else:
            try:
                with open(claimed, "rb") as f:
                    value = f.read()
            finally:
                os.unlink(claimed)
        yield pa.RecordBatch.from_pydict({"value": [value]}, schema=pa.schema([("value", pa.binary())]))

    rows = spark.range(0, slots, 1, slots).mapInArrow(take, "value binary", barrier=True).collect()
    found = [r["value"] for r in rows if r["value"] is not None]
    return found[0] if found else None


def _is_connect(spark):
    """Whether ``spark`` is a Spark Connect session (no SparkContext)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


class TorchDistributor(object):
    """Spark's ``pyspark.ml.torch.distributor.TorchDistributor`` on tfos.

    Same constructor and ``run``; tfos's options are keywords after them:
    ``max_restarts`` (re-form the cluster after a rank fails, this many
    times; programs resume from ``TFOS_CHECKPOINT_DIR``), ``checkpoint_dir``
    (kept across restarts), ``log_dir`` (every rank's log; local mode),
    ``status_port`` (0: any free port, -1: no status page), ``quiet`` (no
    feed progress lines) and ``spark`` (the SparkSession for
    ``local_mode=False``; default: the active one), ``mlflow`` and
    ``mlflow_experiment`` (each run() one MLflow run on that tracking
    server, every rank's ``ctx.report`` in it: docs/MODELS.md,
    "Tracking"), ``min_nodes`` and ``elastic_wait`` (an elastic run on a
    classic session: fewer ranks, down to ``min_nodes``, when executors go,
    and back up when they return; each resize re-forms the ranks at the new
    ``WORLD_SIZE`` from the drained checkpoint: docs/RELIABILITY.md,
    "Elastic size"), ``resize_in_place`` (with ``min_nodes``, for ``run``
    without a DataFrame: a lost rank's survivors go on in their processes,
    their group re-formed by :class:`ElasticGroup`; docs/RELIABILITY.md,
    "Torch survivors in place"), ``grow_in_place`` (with it: a rank
    started again in a lost one's place, where Spark has a free task slot,
    joins the running ranks, which look for it with
    ``ElasticGroup.resized()``). ``local_mode=False``
    runs on a classic session (TFCluster: the coordinator in this driver)
    and on a Spark Connect session (tfos.spark.Cluster: the coordinator on
    an executor, every step a Spark job; no status page, ``status_port``
    does not apply; ``quiet`` drops its progress lines).
    """

    def __init__(self, num_processes=1, local_mode=True, use_gpu=True, _ssl_conf=None, *,
                 max_restarts=_DEFAULTS["max_restarts"], checkpoint_dir=None, log_dir=None, status_port=0,
                 quiet=False, spark=None, mlflow=None, mlflow_experiment=None, min_nodes=None, elastic_wait=30.0,
                 resize_in_place=False, grow_in_place=False):
        if not isinstance(num_processes, int) or isinstance(num_processes, bool) or num_processes < 1:
            raise ValueError("TorchDistributor: num_processes must be a positive int, got %r" % (num_processes,))
        self.num_processes = num_processes
        self.local_mode = bool(local_mode)
        self.use_gpu = bool(use_gpu)
        self.max_restarts = max(0, int(max_restarts))
        self.checkpoint_dir = checkpoint_dir
        self.log_dir = log_dir
        self.status_port = int(status_port)
        self.quiet = bool(quiet)
        self.spark = spark
        self.mlflow = {"mlflow": mlflow, "mlflow_experiment": mlflow_experiment}
        if min_nodes is not None and (local_mode or not 1 <= int(min_nodes) <= num_processes):
            raise ValueError("TorchDistributor: min_nodes=%r needs local_mode=False (executors that come and go) and "
                             "1 <= min_nodes <= num_processes=%d" % (min_nodes, num_processes))
        self.elastic = {} if min_nodes is None else {"min_nodes": int(min_nodes), "elastic_wait": float(elastic_wait)}
        if resize_in_place:
            if min_nodes is None or int(min_nodes) >= num_processes:
                raise ValueError("TorchDistributor: resize_in_place=True needs min_nodes below num_processes=%d"
                                 % num_processes)
            self.elastic["resize_in_place"] = True
        if grow_in_place:
            if not resize_in_place:
                raise ValueError("TorchDistributor: grow_in_place=True replaces a rank lost in place: give "
                                 "resize_in_place=True too")
            self.elastic["grow_in_place"] = True
        self.cluster = None  # the last Spark run's TFCluster, or tfos.spark.Cluster over Connect (status, history)

    # -- checks
    def _check_main(self, main):
        if isinstance(main, str):
            if not os.path.isfile(main):
                raise FileNotFoundError("TorchDistributor.run: the training script %s does not exist" % main)
        elif not callable(main):
            raise TypeError("TorchDistributor.run: train_object must be a function or the path of a Python "
                            "script, got %s" % type(main).__name__)

    def _check_gpus(self):
        if not self.use_gpu:
            return
        if self.local_mode:
            from . import gpu_info
            if not gpu_info.is_gpu_available():
                raise RuntimeError("TorchDistributor(use_gpu=True, local_mode=True): this machine has no GPU "
                                   "(nvidia-smi finds none); pass use_gpu=False to train on CPUs")
            return
        spark = self._session()
        conf = spark.conf if _is_connect(spark) else spark.sparkContext.getConf()
        if not conf.get("spark.task.resource.gpu.amount", None):
            raise RuntimeError("TorchDistributor(use_gpu=True, local_mode=False): spark.task.resource.gpu.amount "
                               "is not set, so Spark gives the tasks no GPU; set it (and the executors' GPU "
                               "resources) or pass use_gpu=False")

    def _session(self):
        if self.spark is not None:
            return self.spark
        from pyspark.sql import SparkSession
        spark = SparkSession.getActiveSession()
        if spark is None:
            raise RuntimeError("TorchDistributor(local_mode=False) needs a SparkSession: create one first "
                               "(SparkSession.builder...getOrCreate()) or pass spark=")
        return spark

    # -- running
    def run(self, train_object, *args):
        """Run ``train_object`` on ``num_processes`` ranks and wait for the
        end. A function's rank-0 return value is returned; a script returns
        None. A failed rank raises :class:`tfos.ClusterError` (on Spark its
        subclass ``TFClusterError``) naming the rank, with its traceback."""
        self._check_main(train_object)
        self._check_gpus()
        if self.local_mode:
            return self._run_local(train_object, args)
        return self._run_spark(train_object, args, None, 1)

    def train_on_dataframe(self, train_object, df, *args, epochs=1, feed_timeout=_DEFAULTS["feed_timeout"]):
        """Run ``train_object`` on the ranks while Spark feeds them ``df``
        (``epochs`` times): in each rank, :class:`FeedDataset` yields its
        share of the rows as tensors. Needs ``local_mode=False``. A partition
        whose rank fails is fed again after the restart (at-least-once)."""
        self._check_main(train_object)
        if self.local_mode:
            raise ValueError("TorchDistributor.train_on_dataframe needs local_mode=False: the DataFrame's rows "
                             "stream from the executors that compute them into the ranks on those executors")
        if self.elastic.get("resize_in_place"):
            raise ValueError("TorchDistributor(resize_in_place=True) is for run(): a lost rank's share of the "
                             "DataFrame's partitions would not be read again; leave resize_in_place out to restart "
                             "the ranks at the new size instead")
        self._check_gpus()
        return self._run_spark(train_object, args, df, int(epochs), feed_timeout)

    def _run_local(self, main, args):
        from ._launch import run as run_local
        if self.log_dir is not None:
            os.makedirs(self.log_dir, exist_ok=True)
        # the pickled function and rank 0's value (beside the logs when there is a log dir)
        work = tempfile.mkdtemp(prefix="tfos-torch-", dir=None if self.log_dir is None else str(self.log_dir))
        try:
            if isinstance(main, str):
                argv = [sys.executable, main] + [str(a) for a in args]
                result = None
            else:
                payload = os.path.join(work, "payload.pkl")
                with open(payload, "wb") as f:
                    f.write(_payload.dumps((main, args)))
                result = os.path.join(work, "result.pkl")
                argv = [sys.executable, "-m", "tfos._torchprog", payload, result]
            run_local(argv, workers=self.num_processes, log_dir=self.log_dir, max_restarts=self.max_restarts,
                      checkpoint_dir=self.checkpoint_dir, status_port=self.status_port, quiet=self.quiet,
                      framework="torch", **self.mlflow)
            if result is None or not os.path.exists(result):
                return None
            with open(result, "rb") as f:
                return pickle.load(f)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _run_spark(self, main, args, df, epochs, feed_timeout=_DEFAULTS["feed_timeout"]):
        require("TorchDistributor(local_mode=False)", "pyspark",
                extra=spark_extra(self.spark) if self.spark is not None else None)
        import uuid
        spark = self._session()
        require("TorchDistributor(local_mode=False)", "pyarrow", extra=spark_extra(spark))
        result_name = "tfos-torch-result-%s.pkl" % uuid.uuid4().hex[:12]
        payload = (main, tuple(args), result_name)
        if _is_connect(spark):
            self._run_session(spark, payload, df, epochs, feed_timeout)
            # tfos.spark.Cluster: one executor per node, one task slot each;
            # an elastic cluster that ended small: the executors there are now
            eng = self.cluster._engine
            slots = max(1, eng.usable_executors()) if eng.below_size else self.num_processes
        else:
            slots = self._run_classic(spark.sparkContext, payload, df, epochs, feed_timeout)
        if isinstance(main, str):
            return None
        data = _fetch_spark_result(spark, result_name, slots)
        return None if data is None else pickle.loads(data)

    def _run_classic(self, sc, payload, df, epochs, feed_timeout):
        """The ranks as a TFCluster (the driver engine: the coordinator in
        this process); returns the task slots that reach every executor."""
        from ._spark import cluster as spark_cluster
        from ._spark.driver import _executor_count, live_task_slots
        mode = spark_cluster.InputMode.SPARK if df is not None else spark_cluster.InputMode.TENSORFLOW
        cluster = spark_cluster.run(sc, _spark_node, payload, self.num_processes, input_mode=mode,
                                    max_restarts=self.max_restarts, checkpoint_dir=self.checkpoint_dir,
                                    status_port=self.status_port, quiet=self.quiet, keras="env", framework="torch",
                                    **self.mlflow, **self.elastic)
        self.cluster = cluster
        try:
            if df is not None:
                cluster.train(df, epochs, feed_timeout=feed_timeout)
        finally:
            cluster.shutdown()  # raises the failure (with its traceback) if a rank failed
        # a barrier job as wide as every task slot reaches every executor;
        # no wider than the slots alive now (an executor lost for good
        # under an elastic run: a wider barrier job would fail)
        return live_task_slots(sc) or max(self.num_processes, _executor_count(sc), sc.defaultParallelism)

    def _run_session(self, spark, payload, df, epochs, feed_timeout):
        """The ranks as a tfos.spark.Cluster (the session engine: the
        coordinator on an executor, reached by Spark jobs; works over Spark
        Connect). A rank's failure re-forms the cluster while the policy
        allows, fed (train_on_dataframe: the feed resumes) or not (run: the
        ranks resume from TFOS_CHECKPOINT_DIR); raised as TFClusterError."""
        from ._spark.driver import TFClusterError
        from .spark import Cluster
        if self.elastic.get("resize_in_place"):
            raise TFClusterError("TorchDistributor(resize_in_place=True) runs on a classic SparkSession: over Spark "
                                 "Connect the ranks form in a barrier stage, where one lost task ends every other; "
                                 "leave resize_in_place out (a lost rank then restarts the ranks at the smaller size)")
        elastic = {k: v for k, v in self.elastic.items() if k in ("min_nodes", "elastic_wait")}
        cluster = Cluster(spark, _spark_node, payload, self.num_processes, max_restarts=self.max_restarts,
                          checkpoint_dir=self.checkpoint_dir, keras="env", quiet=self.quiet, framework="torch",
                          **self.mlflow, **elastic)
        # ranks that read no feed (run): the keepalive looks for capacity come back
        cluster.grow_unfed = df is None
        self.cluster = cluster
        try:
            cluster.start()
            try:
                if df is not None:
                    cluster.train(df, epochs, feed_timeout=feed_timeout)
                # fed: the feed is over, nothing to restart for; else the
                # ranks read their own data and a failure re-forms them
                cluster._run_to_end(259200, restart=df is None)
            except BaseException as exc:
                cluster.stop("TorchDistributor.run raised %s" % type(exc).__name__)
                raise
        except ClusterError as exc:
            if isinstance(exc, TFClusterError):
                raise
            raise TFClusterError(str(exc)) from exc

class FeedDataset(torch.utils.data.IterableDataset):
    """This node's tfos feed as an iterable of batches of tensors, for
    ``torch.utils.data.DataLoader(FeedDataset(64), batch_size=None)``.

    Each item is a tuple of tensors, one per column (a dict by column name
    with ``as_dict=True``), of up to ``batch_size`` rows; numeric columns
    become tensors that share the memory numpy decoded the batch into (no
    copy; string columns stay numpy object arrays). Iteration ends when the
    feed ends: every epoch the producer fed, in order, one stream. Under
    ``tfos run --input`` the feed is the input files; on Spark it is the
    DataFrame of ``TorchDistributor.train_on_dataframe``.

    One reader per node: use it in the rank's own process (DataLoader's
    ``num_workers=0``); a DataLoader worker process cannot read the node's
    ring and says so. ``feed`` is the ``DataFeed`` underneath (created on
    first use); ``with feed.checkpoint(): <save>`` makes a restart
    resume the feed where the checkpoint stands.

    ``prefetch=N``: batches read ahead, N at most, by a background thread
    (:class:`tfos.feed.Prefetcher`) that waits on the ring without the GIL,
    so the training loop does not wait for its reads; the feed position of
    a checkpoint is still that of the last batch the loop took. While it
    runs, call only ``checkpoint()``, ``save_position()`` and ``terminate()``
    on ``feed``. The default, 0, reads on the training thread: on a machine
    whose cores the training already uses, the thread's share of the GIL
    cost more than it saved (docs/BENCHMARKS.md, 2 cores: 0.84-0.99 of
    training from memory with prefetch=2, 1.06-1.14 without); use it where
    cores are free, as beside a GPU.

    ``device`` (a ``torch.device`` or its name): batches arrive as tensors
    on it, copied straight from the ring's records into them (no tensor in
    host memory between; string columns stay numpy). On a CUDA device the
    ring's mapping is page-locked and registered with CUDA (the ring's
    pinned mode, as ``DataLoader(pin_memory=True)`` gives pinned batches):
    the copies are DMA on a stream of their own, issued by the read-ahead
    thread with ``prefetch``, and each batch's tensors are ready on the
    stream current when the loop takes it (it waits for their copy, not the
    host). Where CUDA refuses the registration (say, a driver without
    read-only host registration) the copies run from pageable memory, as
    ``.to(device)`` would, and a line on stderr says so. Leave the
    DataLoader's ``pin_memory`` off: the batches are on the device already.
    """

    def __init__(self, batch_size, as_dict=False, timeout=None, prefetch=0, device=None):
        super().__init__()
        if int(batch_size) < 1:
            raise ValueError("FeedDataset: batch_size must be at least 1, got %r" % (batch_size,))
        if int(prefetch) < 0:
            raise ValueError("FeedDataset: prefetch must be >= 0, got %r" % (prefetch,))
        self.batch_size = int(batch_size)
        self.as_dict = bool(as_dict)
        self.timeout = timeout
        self.prefetch = int(prefetch)
        self.device = None if device is None else torch.device(device)
        if self.device is not None and self.device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("FeedDataset(device=%r): torch sees no CUDA device on this host "
                               "(torch.cuda.is_available() is False); pass device=None (or 'cpu') here"
                               % str(self.device))
        self.feed = None
        self._prefetcher = None
        self._to_device = None

    @staticmethod
    def _tensor(a):
        return a if a.dtype == object else torch.from_numpy(a)

    def __iter__(self):
        if torch.utils.data.get_worker_info() is not None:
            raise RuntimeError("FeedDataset reads this node's tfos feed and must be iterated in the rank's own "
                               "process: use DataLoader(..., num_workers=0)")
        if self.feed is None:
            from .feed import DataFeed, Prefetcher
            self.feed = DataFeed(train_mode=True, timeout=self.timeout)
            if self.device is not None:
                self._to_device = _ToDevice(self.feed, self.batch_size, self.as_dict, self.device)
            if self.prefetch:
                self._prefetcher = Prefetcher(self.feed, self.batch_size, self.as_dict, self.prefetch,
                                              read=self._to_device, views=self._to_device is not None)
        while True:
            if self._prefetcher is not None:
                batch = self._prefetcher.get()       # None at the end
            elif self._to_device is not None:
                batch = self._to_device()            # None at the end
            else:                                    # () or {} at the end
                batch = self.feed.next_batch_arrays(self.batch_size, as_dict=self.as_dict) or None
            if batch is None:
                if self._to_device is not None:
                    self._to_device.close()
                return
            if self._to_device is not None:
                yield self._to_device.hand_out(batch)
            elif self.as_dict:
                yield {k: self._tensor(v) for k, v in batch.items()}
            else:
                yield tuple(self._tensor(v) for v in batch)


class _ToDevice(object):
    """FeedDataset(device=)'s reads: each call takes one batch as views into
    the ring's records (``feed._take(copy=False)``) and copies them, record
    by record, into new tensors on ``device`` (a batch across records is
    joined there). On CUDA the copies go on a stream of their own from the
    ring's mapping, registered with CUDA (pinned): DMA, asynchronous. A read
    of the ring lets producers write over the records read before, so the
    copies from them are waited for (by the host; usually over by then)
    before the next read: before the next call's, and before one in the
    middle of a batch (``_take``'s ``before_read``). Returns a _Batch, or
    None at the end of the feed."""

    PORTABLE, READ_ONLY = 1, 8  # cudaHostRegisterPortable, cudaHostRegisterReadOnly
    ALREADY = 712               # cudaErrorHostMemoryAlreadyRegistered

    def __init__(self, feed, batch_size, as_dict, device):
        self.feed, self.batch_size, self.as_dict = feed, int(batch_size), as_dict
        self.device = device
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device) if self.cuda else None
        self.copied = None     # CUDA event: the last batch's copies are done
        self.region = None     # (address, length) registered with CUDA by this reader
        self.pinned = False    # whether the ring's mapping is registered with CUDA (by this reader or another)
        self._cols = None      # the batch being copied: per column, a tensor of batch_size rows or numpy pieces
        self._parts = 0        # its parts copied so far
        self._rows = 0         # and their rows
        if self.cuda:
            self.region = self._register(feed.mgr.input.views_region)

    def _register(self, region):
        """Page-lock and register the ring's read-only mapping with CUDA; the
        region registered, or None (said on stderr) where CUDA refused it."""
        if region is None:
            return None
        rc = self._cudart("cudaHostRegister", region[0], region[1], self.PORTABLE | self.READ_ONLY)
        self.pinned = rc in (0, self.ALREADY)
        if rc == 0:
            return region
        if rc != self.ALREADY:  # registered by another reader of this ring: pinned, not ours to undo
            sys.stderr.write("tfos: feed: CUDA did not register the ring's %d bytes as pinned memory (cudaError "
                             "%d): its copies to %s go from pageable memory\n" % (region[1], rc, self.device))
        return None

    def _cudart(self, name, *args):
        """A CUDA runtime call's error code (0: success), the call made on a
        thread of its own: an error stays CUDA's last error on the calling
        thread, where torch would take it for a later kernel's."""
        out = {}

        def call():
            with torch.cuda.device(self.device):
                out["rc"] = int(getattr(torch.cuda.cudart(), name)(*args))
        t = threading.Thread(target=call, name="tfos-feed-pin")
        t.start()
        t.join()
        return out.get("rc", -1)

    def close(self):
        """The feed ended: wait for the last copies, then unregister the ring."""
        self._wait()
        if self.region is not None:
            region, self.region = self.region, None
            self._cudart("cudaHostUnregister", region[0])

    def _wait(self):
        if self.copied is not None:
            self.copied.synchronize()
            self.copied = None

    def _copy(self, parts):
        """Issue the copies of the batch's parts not copied yet."""
        parts = parts[self._parts:]
        if not parts:
            return
        with warnings.catch_warnings():
            # the views are read-only: torch warns of that once, and only reads them
            warnings.simplefilter("ignore", UserWarning)
            with torch.cuda.stream(self.stream) if self.cuda else contextlib.nullcontext():
                if self._cols is None:
                    self._cols = []
                    for a in parts[0][0]:
                        if a.dtype == object:
                            self._cols.append([])   # strings stay numpy
                        else:
                            t = torch.from_numpy(a)
                            self._cols.append(torch.empty((self.batch_size,) + tuple(t.shape[1:]), dtype=t.dtype,
                                                          device=self.device))
                at = self._rows
                for cols, _ in parts:
                    n = len(cols[0])
                    for dst, a in zip(self._cols, cols):
                        if isinstance(dst, list):
                            dst.append(a.copy())
                        else:
                            dst[at:at + n].copy_(torch.from_numpy(a), non_blocking=self.cuda)
                    at += n
                if self.cuda:
                    self.copied = self.stream.record_event()
        self._parts += len(parts)
        self._rows = at

    def _before_read(self, parts):
        self._copy(parts)
        self._wait()

    def __call__(self):
        self._wait()  # the records of the last batch may be written over once we read on
        self._cols, self._parts, self._rows = None, 0, 0
        parts, got = self.feed._take(self.batch_size, columns=True, copy=False, before_read=self._before_read)
        if not parts:
            return None
        self._copy(parts)
        names = parts[0][1] or ["c%d" % i for i in range(len(self._cols))]
        cols = []
        for c in self._cols:
            if isinstance(c, list):
                import numpy as np
                cols.append(c[0] if len(c) == 1 else np.concatenate(c))
            else:
                cols.append(c if got == self.batch_size else c[:got])
        self._cols = None
        return _Batch(dict(zip(names, cols)) if self.as_dict else tuple(cols), self.copied)

    def hand_out(self, batch):
        """The batch's columns for the training loop: on CUDA its stream
        waits for their copies, and they are marked as used on it (the
        caching allocator then keeps their memory until its work is done)."""
        if self.cuda:
            current = torch.cuda.current_stream(self.device)
            if batch.copied is not None:  # (None: waited for by the host already)
                current.wait_event(batch.copied)
            for c in (batch.cols.values() if self.as_dict else batch.cols):
                if isinstance(c, torch.Tensor):
                    c.record_stream(current)  # allocated on the copy stream
        return batch.cols


class _Batch(object):
    __slots__ = ("cols", "copied")

    def __init__(self, cols, copied):
        self.cols, self.copied = cols, copied

    def __len__(self):
        return 1  # a batch (the Prefetcher's end test: None or empty)


def _await_listener(addr, port, timeout):
    """Wait (up to ``timeout`` s, in 10 ms turns) until addr:port accepts a
    connection: a TCPStore client that dials a new rank 0 before its store
    listens backs off for most of a second. Past the wait, TCPStore itself
    says what it could not reach."""
    import socket
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((addr, port), timeout=1.0).close()
            return
        except OSError:
            time.sleep(0.01)


#: the reason in the membership file of a worker that joined in place
#: (its agent writes it: src/roles/agent.c, the SPEC with a generation)
_JOINED = "joined in place"


class ElasticGroup(object):
    """The default ``torch.distributed`` process group of a node of
    ``tfos run --framework torch --min-nodes M --resize-in-place``, kept
    across a resize: when a worker is lost, the others' processes go on and
    re-form the group at the new world size from what they hold in memory
    (docs/RELIABILITY.md, "Torch survivors in place")::

        group = ElasticGroup()                    # dist.init_process_group from tfos's RANK, WORLD_SIZE, MASTER_*
        while step < steps:
            try:
                train_step(step, group.rank, group.world)   # its collectives
            except group.errors:                  # a peer was lost in a collective
                group.rejoin()                    # the new rank and world size; the step is done again
                continue
            step += 1

    With ``--grow-in-place`` a worker started in a lost one's place joins
    the running cluster: its ``ElasticGroup()`` forms the group at the
    generation it joined (``joined`` is then True), and the members must
    re-form with it at a step boundary and hand it the state::

        group = ElasticGroup()
        if group.joined:                          # started in a lost worker's place
            state = take_state(group)             # dist.broadcast from rank 0, as after rejoin()
        while step < steps:
            if group.resized():                   # a worker joined (or was lost)
                group.rejoin()
                state = take_state(group)
            ...

    ``rank`` and ``world`` are the node's place now; ``generation`` counts
    the resizes it went through. The group's store is a ``TCPStore`` at rank
    0's reserved port, kept while rank 0 lives; each generation's group is
    under its own prefix of it (a new rank 0 serves a new store at its own
    reserved port). ``rejoin(timeout)`` waits up to ``timeout`` seconds for
    the coordinator's word (it comes within a heartbeat of the loss) and
    raises ``TimeoutError`` naming what it waited for: the cluster then
    failed instead, and the program should end (it is restarted from its
    checkpoint, as without this helper). A run not started with
    ``--resize-in-place`` never resizes in place: ``rejoin`` then raises at
    once.
    """

    #: what a collective raises when a peer is lost (gloo and NCCL raise
    #: RuntimeError or its subclass DistBackendError)
    errors = (RuntimeError,)

    def __init__(self, backend="gloo", timeout=60.0):
        import datetime

        import torch.distributed as dist

        self._dist = dist
        self.backend = backend
        self.timeout = datetime.timedelta(seconds=float(timeout))
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.generation = 0
        self._file = os.environ.get("TFOS_RESIZE_FILE", "")
        self._store = None
        self._store_at = None
        info = self._read()
        #: this process joined a running cluster in a lost worker's place
        #: (tfos run --grow-in-place): it takes its state from rank 0
        self.joined = bool(info) and info["reason"] == _JOINED
        if not info:
            self._form(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
            return
        # a membership given before the program formed its group: the one it
        # joined (its agent wrote it before the program started), or a
        # resize since its start; the environment follows it, as in rejoin()
        self.generation, self.rank, self.world = info["generation"], info["rank"], info["world"]
        host, _, port = info["master"].rpartition(":")
        os.environ.update(RANK=str(self.rank), WORLD_SIZE=str(self.world), MASTER_ADDR=host.strip("[]"),
                          MASTER_PORT=port)
        if self.joined:
            # ready to form: the agent tells the coordinator, which only now
            # has the others re-form with this process (they went on meanwhile)
            with open(self._file + ".ready", "w"):
                pass
        try:
            self._form(host.strip("[]"), int(port))
        except self.errors as e:
            if not self.joined:
                raise
            raise TimeoutError("ElasticGroup: joined the cluster in place as rank %d of %d (generation %d), but "
                               "the other workers did not re-form the group with it (within %.0f s, or they "
                               "ended: %s): their programs must call group.resized() at each step and rejoin() "
                               "when it is True (tfos run --grow-in-place, docs/RELIABILITY.md)"
                               % (self.rank, self.world, self.generation, self.timeout.total_seconds(), e)) from e

    def _form(self, addr, port):
        dist = self._dist
        if self._store_at != (addr, port):
            # rank 0 serves the store; the others dial it (the rank 0 of a
            # generation after its predecessor was lost serves a new one)
            if self.rank != 0:
                _await_listener(addr, port, self.timeout.total_seconds())
            self._store = dist.TCPStore(addr, port, None, self.rank == 0, self.timeout, wait_for_workers=False)
            self._store_at = (addr, port)
        store = dist.PrefixStore("tfos-generation-%d" % self.generation, self._store)
        dist.init_process_group(self.backend, store=store, rank=self.rank, world_size=self.world, timeout=self.timeout)

    def _read(self):
        """The coordinator's last word: {generation, rank, world, master,
        reason}, or None."""
        if not self._file:
            return None
        try:
            with open(self._file) as f:
                text = f.read()
        except FileNotFoundError:
            return None
        info = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
        try:
            return {"generation": int(info["generation"]), "rank": int(info["rank"]), "world": int(info["world"]),
                    "master": info["master"], "reason": info.get("reason", "")}
        except (KeyError, ValueError):
            return None  # being written: the agent writes it whole, so this is an old format

    def resized(self):
        """True when the cluster has resized since this node last formed
        its group: call ``rejoin()``."""
        info = self._read()
        return bool(info and info["generation"] > self.generation)

    def _end_group(self):
        """Destroy the broken group, closing its connections now: a peer
        still waiting in the collective on this rank (not on the lost one)
        then fails at once instead of at the group's timeout. The error
        being handled holds the group in its traceback's frames (the
        collective's locals), so they are cleared first."""
        import traceback

        tb = sys.exc_info()[2]
        if tb is not None:
            traceback.clear_frames(tb)
        del tb
        try:
            self._dist.destroy_process_group()
        except Exception:  # noqa: BLE001 -- a group broken by the lost peer may not end cleanly
            pass

    def rejoin(self, timeout=60.0):
        """Wait (up to ``timeout`` s) for the cluster's new membership,
        then re-form the group in it: returns ``(rank, world)``. The
        environment's RANK, WORLD_SIZE and MASTER_* follow the new group."""
        import time

        if not self._file:
            raise TimeoutError("ElasticGroup.rejoin: this node has no TFOS_RESIZE_FILE: start it with tfos run "
                               "--resize-in-place (and --min-nodes, --framework torch)")
        deadline = time.monotonic() + timeout
        self._end_group()  # at once: a peer waiting on this rank learns of the break now
        info = self._read()
        while not (info and info["generation"] > self.generation):
            if time.monotonic() >= deadline:
                raise TimeoutError("ElasticGroup.rejoin: no new membership from the coordinator within %.0f s "
                                   "(generation %d, %s): the cluster failed instead of resizing in place"
                                   % (timeout, self.generation, self._file))
            time.sleep(0.02)
            info = self._read()
        host, _, port = info["master"].rpartition(":")
        self.generation, self.rank, self.world = info["generation"], info["rank"], info["world"]
        # what reads the environment after this (the program, tfos's own
        # "rank 0 returns the value") sees the group it is now in
        os.environ.update(RANK=str(self.rank), WORLD_SIZE=str(self.world), MASTER_ADDR=host.strip("[]"),
                          MASTER_PORT=port)
        self._form(host.strip("[]"), int(port))
        return self.rank, self.world
