# Type stubs for tfos._tfos, the CPython extension (src/python/*.c). Keep in
# step with the method tables there: tests/python/test_typing.py runs mypy's
# stubtest against the built extension, so a name added in C and not here (or
# the other way round) fails the suite.
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, ClassVar, Final, TypedDict, final

from _typeshed import ReadableBuffer

VERSION: Final[str]
PROTOCOL_VERSION: Final[int]

# Coordinator.state
STATE_RESERVING: Final[int]
STATE_RUNNING: Final[int]
STATE_STOPPING: Final[int]
STATE_DONE: Final[int]
STATE_FAILED: Final[int]
# error codes (Coordinator.failure_code, strerror)
ETIMEDOUT: Final[int]
ESTOPPED: Final[int]
EFAILED: Final[int]
EEND: Final[int]
ECLOSED: Final[int]
ETOOBIG: Final[int]  # the .code of Ring.write_rows/write_columns' ValueError: the batch is larger than a record
# restart policy decisions
RESTART: Final[int]
RAISE: Final[int]
RESIZE: Final[int]
# failure causes (RestartPolicy.decide, failure_info["cause"])
CAUSE_EXIT: Final[int]
CAUSE_SIGNAL: Final[int]
CAUSE_HEARTBEAT: Final[int]
CAUSE_AGENT_LOST: Final[int]
CAUSE_EXECUTOR_LOST: Final[int]
CAUSE_START: Final[int]
CAUSE_PS_EXITED: Final[int]
CAUSE_RESERVATION: Final[int]
CAUSE_FEED: Final[int]
CAUSE_STOPPED: Final[int]
CAUSE_HANG: Final[int]
CAUSE_SETUP: Final[int]
FEED_POSITION_DIR: Final[str]
WEBHDFS_TOKEN_FIX: Final[str]  # what an error adds when the NameNode refuses a dead delegation token
# Ring roles
ROLE_OBSERVER: Final[int]
ROLE_PRODUCER: Final[int]
ROLE_CONSUMER: Final[int]
# record tags
TAG_DATA: Final[int]
TAG_PARTITION_BEGIN: Final[int]
TAG_PARTITION_END: Final[int]
TAG_PARTITION_ABORT: Final[int]
TAG_USER: Final[int]
# columnar batch flags
BATCH_FLAT_ROWS: Final[int]
BATCH_LIST_ROWS: Final[int]

class _Defaults(TypedDict):
    reservation_timeout_local: float
    reservation_timeout_spark: float
    stop_grace: float
    failure_grace: float
    heartbeat_timeout: float
    connect_timeout: float
    max_restarts: int
    feed_mb: int
    result_mb: int
    batch_rows: int
    record_bytes: int
    partition_rows: int
    client_timeout_ms: int
    heartbeat_interval_ms: int
    feed_timeout: float
    lease_timeout: float
    serve_port: int
    serve_max_restarts: int
    serve_poll: float
    serve_max_batch: int
    serve_max_delay_ms: int
    serve_queue_batches: int
    serve_timeout: float
    serve_max_body: int
    serve_client_timeout: float
    drain_grace: float

#: include/tfos/defaults.h
DEFAULTS: Final[_Defaults]

#: the one dtype table (src/core/batch.c): (code, numpy dtype string, OIP name, item size)
DTYPES: Final[tuple[tuple[int, str, str, int], ...]]

class FeedError(RuntimeError): ...
class FeedClosed(FeedError): ...
class FeedEnded(FeedError): ...

# (name, kind, dtype, shape, nrows, data_off, data_len, offsets_off)
_Column = tuple[str, str, str, tuple[int, ...], int, int, int, int]

def random_secret() -> str: ...
def check_report(pairs: Sequence[tuple[str, Any]], /) -> str: ...
def strerror(code: int, /) -> str: ...
def encode_rows(rows: Sequence[Any], /) -> bytes: ...
def encode_columns(cols: Sequence[tuple[str, Any]], /) -> bytes: ...
def rows_from_columns(columns: Sequence[Any], lo: int, hi: int, lists: bool = False, /) -> Any: ...
def pickled_list_len(buffer: ReadableBuffer, /) -> int: ...
def pickled_columns(buffer: ReadableBuffer, /) -> tuple[int, bytes] | None: ...
def decode_columns(buffer: ReadableBuffer, /) -> tuple[int, list[_Column]]: ...
def ring_create(capacity: int, /) -> int: ...
def report_abort(coord_addr: str, secret: str, executor_id: int, message: str, timeout_ms: int = 10000) -> None: ...
def query_status(coord_addr: str, secret: str, timeout_ms: int = 10000, command: str | None = None,
                 reason: str | None = None) -> str: ...
def webhdfs_kerberos_token(base: str, timeout_ms: int = ...) -> tuple[str, int]: ...
def feed_turn(coord_addr: str, secret: str, stage: str, nparts: int, nfed: int, partition: int, node: int,
              nodes: list[int], timeout_ms: int = 10000) -> str: ...
def feed_connect(cluster_id: str, executor_id: int, secret: str, timeout_ms: int = 30000, /) -> tuple[int, int, str]: ...
def keras_mode_valid(mode: str, /) -> bool: ...
def layout_roles(num_ps: int, num_workers: int, chief: bool, evaluator: bool, /) -> list[tuple[str, int]]: ...
def spawn_detached(argv: Sequence[str], env: Mapping[str, str], keep_fds: Sequence[int] = (), /) -> int: ...
def pid_alive(pid: int, /) -> bool: ...
def checkpoint_progress(dir: str, /) -> str: ...
def read_positions(checkpoint_dir: str, since: float = ..., /) -> tuple[set[int], dict[int, int]] | None: ...
# libtfos's log lines into logging (tfos._log)
def _log_install(emit: Callable[[int, str], object], /) -> None: ...
def _log_pump() -> None: ...
def _log_stop() -> None: ...
def _log_flush() -> None: ...

@final
class LocalCluster:
    """A cluster of local node agents, as `tfos run` forms it."""

    def __init__(
        self,
        argv: Sequence[str],
        agent_path: str,
        workers: int = 1,
        ps: int = 0,
        chief: bool = False,
        evaluator: bool = False,
        *,
        log_dir: str | None = None,
        reservation_timeout: float = ...,
        grace: float = ...,
        heartbeat_timeout: float = ...,
        ps_runs_program: bool = False,
        python: str | None = None,
        max_restarts: int = ...,
        checkpoint_dir: str | None = None,
        inputs: Sequence[str] | None = None,
        epochs: int = 0,
        status_port: int = 0,
        quiet: bool = False,
        keras: str | None = None,
        caller_reports: bool = False,
        mlflow: str | None = None,
        mlflow_experiment: str | None = None,
        mlflow_run_name: str | None = None,
        framework: str | None = None,
        min_nodes: int = 0,
        elastic_wait: float = 0.0,
        resize_in_place: bool = False,
        grow_in_place: bool = False,
    ) -> None: ...
    def step(self, timeout_ms: int = 100, /) -> bool: ...
    def stop(self, reason: str | None = None, signo: int = 0, /) -> None: ...
    def status(self) -> str: ...
    def close(self) -> None: ...
    @property
    def exit_code(self) -> int | None: ...
    @property
    def failure(self) -> str: ...
    @property
    def log_dir(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def address(self) -> str: ...

@final
class RestartPolicy:
    """tfos's one restart policy (tfos_policy in tfos.h)."""

    def __init__(self, max_restarts: int = ...) -> None: ...
    def render(self) -> str: ...
    def decide(
        self,
        cause: int,
        *,
        node: str = "",
        job: str = "",
        exception: str = "",
        where: str = "",
        summary: str = "",
        progress: str = "",
        exit_code: int = -1,
    ) -> int: ...
    def resize(self, cause: int, summary: str) -> None: ...
    @property
    def attempt(self) -> int: ...
    @property
    def max_restarts(self) -> int: ...
    @property
    def resizes(self) -> int: ...
    @property
    def history(self) -> list[dict[str, Any]]: ...
    @property
    def verdict(self) -> str: ...

@final
class Link:
    """One authenticated link (src/core/link.h) dialed as `role`: 'model_server'
    (key: the cluster secret) or 'serve_client' (key: the HTTP token, or None).
    The key never crosses the wire: the first frame carries HMAC(key, nonce)."""

    ERROR: ClassVar[int]
    SERVE_JOIN: ClassVar[int]
    SERVE_CLIENT: ClassVar[int]
    SERVE_OK: ClassVar[int]
    SERVE_MODELS: ClassVar[int]
    SERVE_BATCH: ClassVar[int]
    SERVE_RESULT: ClassVar[int]
    SERVE_FAIL: ClassVar[int]
    SERVE_INFER: ClassVar[int]

    def __init__(
        self,
        address: str,
        key: str | None,
        role: str,
        timeout: float = 30.0,
        fields: Mapping[str, str] | None = None,
        max_data: int = ...,
    ) -> None: ...
    def send(
        self,
        type: int,
        body: ReadableBuffer = b"",
        id: int = 0,
        meta: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> None: ...
    def recv(self, timeout: float | None = None) -> tuple[int, int, dict[str, str], bytearray] | None: ...
    def fileno(self) -> int: ...
    def close(self) -> None: ...
    def __enter__(self) -> Link: ...
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None, /
    ) -> None: ...
    @property
    def closed(self) -> bool: ...

@final
class Tracker:
    """One MLflow run for a whole tfos job (docs/MODELS.md, "Tracking")."""

    def __init__(self, uri: str, experiment: str | None = None, run_name: str | None = None) -> None: ...
    def param(self, key: str, value: str, /) -> None: ...
    def tag(self, key: str, value: str, /) -> None: ...
    def metric(self, key: str, value: float, step: int = 0, /) -> None: ...
    def report(self, rank: int, text: str, age_ms: int = 0, /) -> None: ...
    def history(self, policy: RestartPolicy, /) -> None: ...
    def figures(self, prefix: str, json: str, /) -> None: ...
    def end(self, status: str, /) -> str: ...
    def close(self) -> None: ...
    @property
    def run_id(self) -> str: ...
    @property
    def uri(self) -> str: ...

@final
class Coordinator:
    """The reservation/rendezvous server of one cluster, in this process."""

    def __init__(
        self,
        workers: int,
        secret: str,
        ps: int = 0,
        chief: bool = False,
        evaluator: bool = False,
        *,
        bind_host: str = "127.0.0.1",
        port: int = 0,
        reservation_timeout: float = ...,
        grace: float = ...,
        heartbeat_timeout: float = ...,
        attempt: int = 1,
        policy: RestartPolicy | None = None,
        checkpoint_dir: str | None = None,
        failure_grace: float = ...,
        tracker: Tracker | None = None,
        framework: str = "tf",
        resize_in_place: int = 0,
    ) -> None: ...
    def run(self) -> None: ...
    def step(self, timeout_ms: int = 100, /) -> int: ...
    def stop(self, reason: str | None = None, /) -> None: ...
    def drain(self, reason: str | None, grace: float = 0.0, force: bool = False) -> bool: ...
    def end_feed(self) -> None: ...
    def status(self) -> str: ...
    def serve_status(self, host: str = "127.0.0.1", port: int = 0) -> int: ...
    def set_status(
        self,
        *,
        attempt: int = ...,
        max_restarts: int = ...,
        partitions_refed: int = ...,
        node_log_dir: str | None = None,
        min_nodes: int = ...,
        max_nodes: int = ...,
    ) -> None: ...
    def set_feed(
        self,
        *,
        rows: int = 0,
        partitions_done: int = 0,
        partitions_expected: int = 0,
        partitions_aborted: int = 0,
        state: str = "feeding",
    ) -> None: ...
    def close(self) -> None: ...
    @property
    def address(self) -> str: ...
    @property
    def state(self) -> int: ...
    @property
    def failure(self) -> str: ...
    @property
    def failure_code(self) -> int: ...
    @property
    def failure_info(self) -> dict[str, Any] | None: ...
    @property
    def decision(self) -> int: ...
    @property
    def status_port(self) -> int: ...
    @property
    def drained(self) -> bool: ...
    @property
    def drain_step(self) -> int: ...

@final
class FeedBuffer:
    """A read-only copy of one large feed record (buffer protocol); made by Ring.read."""

    def __len__(self) -> int: ...

@final
class RingMapping:
    """A read-only mapping of a whole feed ring (buffer protocol); Ring.read(views=True) hands out memoryviews of it."""

class _RingStats(TypedDict):
    capacity: int
    used: int
    records: int
    bytes: int
    partitions_begun: int
    partitions_completed: int
    partitions_aborted: int
    producers: int
    unclean_exits: int
    consumer_pid: int
    acked: int
    consumed: int
    progress: int
    consumer_waiting: bool
    feed_ended: bool
    consumer_closed: bool
    consumer_terminated: bool

@final
class Ring:
    """A handle on a shared-memory feed ring; the fd stays the caller's."""

    def __init__(self, fd: int, role: int) -> None: ...
    def write(self, tag: int, data: ReadableBuffer, timeout_ms: int = -1, rows: int = 0, /) -> None: ...
    def write_rows(self, tag: int, rows: Sequence[Any], timeout_ms: int = -1, /) -> int: ...
    def write_columns(self, tag: int, cols: Sequence[tuple[str, Any]], timeout_ms: int = -1, /) -> int: ...
    def partition_begin(self, partition_id: int, timeout_ms: int = -1, /) -> None: ...
    def partition_end(self, timeout_ms: int = -1, /) -> None: ...
    def end_feed(self, timeout_ms: int = -1, /) -> None: ...
    def read(self, timeout_ms: int = -1, max_records: int = 64, views: bool = False, /
             ) -> list[tuple[int, int, bytes | FeedBuffer | memoryview]]: ...
    def stats(self) -> _RingStats: ...
    def wait_acked(self, target: int, timeout_ms: int = -1, /) -> None: ...
    def ack(self, n: int = 1, /) -> None: ...
    def beat(self) -> None: ...
    def count_taken(self, n: int, /) -> None: ...
    def reads_columns(self, on: bool = ..., /) -> bool: ...
    def report(self, pairs: Sequence[tuple[str, Any]], /) -> None: ...
    def shut(self) -> None: ...
    def close(self) -> None: ...
    def detach(self) -> None: ...
    @property
    def max_record(self) -> int: ...
    @property
    def views_region(self) -> tuple[int, int] | None: ...
