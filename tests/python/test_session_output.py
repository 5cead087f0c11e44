"""The Cluster client's reading of the nodes' output after a feed job
(tfos.spark.Cluster, show_output): the feed tasks stat their executor's node
logs, and the client runs its logs job only when one grew past what it has
shown. The jobs themselves run on real Spark in tests/spark; here, the choice."""
import json

from tfos._spark import session
from tfos._spark.client import SessionEngine
from tfos._spark.nodes import NodeSpec, executor_key


class JobsRecorded(object):
    """Stands for the SparkSession: records each job the engine starts and
    fails it (read_output then gives up quietly, as on a session going away)."""

    def __init__(self):
        self.jobs = 0

    def range(self, *args):
        self.jobs += 1
        raise RuntimeError("no Spark here")


def engine_with_logs(tmp_path, output=True):
    spec = NodeSpec("c0ffee", "00" * 32, None, {"num_ps": 0, "num_workers": 2, "chief": False, "evaluator": False},
                    1, b"", False, 30.0)
    spec.grace = 5.0  # as Cluster sets it
    eng = SessionEngine(JobsRecorded(), spec, 2, 30.0, str(tmp_path), output=output)
    eng.logs = {0: ["k0", str(tmp_path / "worker-0.log"), 120, "worker:0"],
                1: ["k1", str(tmp_path / "worker-1.log"), 40, "worker:1"]}
    eng.released = True  # no status query before the read
    return eng


def test_a_forced_read_runs_its_job_only_when_a_log_grew(tmp_path):
    eng = engine_with_logs(tmp_path)
    eng.read_output(force=True, sizes={0: 120, 1: 40})  # nothing past what was shown
    eng.read_output(force=True, sizes={})                # no task saw a log
    eng.read_output(force=True, sizes={7: 5000})         # not a node of this cluster
    assert eng.spark.jobs == 0
    eng.read_output(force=True, sizes={0: 120, 1: 41})   # worker:1 wrote a byte more
    assert eng.spark.jobs == 1
    eng.read_output(force=True)                          # a failed feed job: no sizes, always read
    assert eng.spark.jobs == 2


def test_no_output_shown_no_paths_to_stat(tmp_path):
    eng = engine_with_logs(tmp_path, output=False)
    assert eng.log_paths() == {}
    eng.read_output(force=True)
    assert eng.spark.jobs == 0
    assert engine_with_logs(tmp_path).log_paths() == {"k0": [(0, str(tmp_path / "worker-0.log"))],
                                                      "k1": [(1, str(tmp_path / "worker-1.log"))]}


def test_feed_tasks_stat_the_logs_of_their_own_executor(tmp_path):
    mine, other = tmp_path / "worker-0.log", tmp_path / "worker-1.log"
    mine.write_bytes(b"hello\n" * 7)
    other.write_bytes(b"x\n")
    logs = {executor_key(): [(0, str(mine)), (2, str(tmp_path / "gone.log"))], "elsewhere": [(1, str(other))]}
    assert json.loads(session._log_sizes(logs)) == {"0": 42}  # a missing file is left out
    assert json.loads(session._log_sizes(None)) == {}
