"""Feeder for `tfos run --input` with Arrow IPC and Parquet files (pyarrow).

The launcher runs ``python -m tfos.arrowfeed`` when every --input is
.parquet, .arrow, .feather or .ipc: record batches pass through as Arrow IPC
(no per-row work at either end), cut into partitions of --partition-rows rows
that go to the nodes in turn, every file fed --epochs times, then end-of-feed
on every node. Exits 1 with a message naming the file on bad input.
"""
import argparse
import sys

from . import _tfos
from .feed import TAG_ARROW, FeedClient, arrow_ipc


def _batches(path, batch_rows):
    import pyarrow as pa
    import pyarrow.parquet as pq
    if path.endswith(".parquet"):
        yield from pq.ParquetFile(path).iter_batches(batch_size=batch_rows)
        return
    with pa.memory_map(path) as src:
        try:
            reader = pa.ipc.open_file(src)
            batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
        except pa.ArrowInvalid:
            src.seek(0)
            batches = iter(pa.ipc.open_stream(src))
        for rb in batches:
            for off in range(0, rb.num_rows, batch_rows):
                yield rb.slice(off, batch_rows)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tfos.arrowfeed")
    ap.add_argument("--nodes", required=True, help="comma-separated executor ids")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-rows", type=int, default=1024)
    ap.add_argument("--partition-rows", type=int, default=10000)
    ap.add_argument("files", nargs="+")
    a = ap.parse_args(argv)
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        print("tfos: Arrow/Parquet input needs pyarrow in %s (pip install pyarrow)" % sys.executable,
              file=sys.stderr)
        return 1
    clients = [FeedClient(int(n)) for n in a.nodes.split(",")]
    live = list(clients)
    pid, turn, rows = 1, 0, 0
    try:
        for _ in range(a.epochs):
            for path in a.files:
                in_part, cur = 0, None
                try:
                    for rb in _batches(path, a.batch_rows):
                        if cur is None:
                            if not live:
                                break
                            cur = live[turn % len(live)]
                            turn += 1
                            cur.input.partition_begin(pid)
                        try:
                            cur.input.write(TAG_ARROW, arrow_ipc(rb), -1, rb.num_rows)
                        except _tfos.FeedClosed:
                            if not cur.input.stats()["consumer_terminated"]:
                                raise
                            live.remove(cur)  # DataFeed.terminate(): no more data for that node
                            cur = None
                            continue
                        rows += rb.num_rows
                        in_part += rb.num_rows
                        if in_part >= a.partition_rows:
                            cur.input.partition_end()
                            cur, in_part, pid = None, 0, pid + 1
                except _tfos.FeedError:
                    raise
                except Exception as exc:  # pyarrow's errors: name the file
                    print("tfos: the feed failed: %s: %s" % (path, exc), file=sys.stderr, flush=True)
                    return 1
                if cur is not None:
                    cur.input.partition_end()
                    pid += 1
        for c in live:
            c.end_feed()
    except _tfos.FeedError as exc:
        print("tfos: the feed failed: %s" % exc, file=sys.stderr, flush=True)
        return 1
    finally:
        for c in clients:
            c.close()
    print("tfos: fed %d rows (%d partitions) from Arrow/Parquet" % (rows, pid - 1), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
