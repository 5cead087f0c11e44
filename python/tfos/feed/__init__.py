"""The data feed: batches of rows from producers into the trainers, through
each node's shared-memory rings (tfos._tfos.Ring, C).

A node owns two rings: *input* (producers -> the program) and *output* (the
program's inference results -> the producer). The program inherits both
(``TFOS_FEED_FDS``); producers on the same machine get them from the node
agent's feed socket (:class:`FeedClient`).

Records on the input ring carry *batches* of rows, never one row per record:

- ``TAG_COLUMNS``: tfos's columnar batch (encoded in C, decoded to numpy
  arrays with no per-row work), for rows of numbers, strings, bytes and
  fixed-shape arrays;
- ``TAG_PICKLE``: a pickled list of rows, for anything else (local only: the
  ring never leaves the machine and only processes of the same user holding
  the cluster secret can attach);
- ``TAG_ARROW``: an Arrow IPC stream of one record batch (pyarrow).

Partitions are framed by PARTITION_BEGIN/END records; a partition whose
producer died midway is followed by PARTITION_ABORT and counts as not
delivered: the producer side feeds it again, from where the ring's copy
stopped when the re-feed reaches the same ring (exactly once), else whole
(at-least-once). The program sees neither the death nor the re-feed.

One job per module: ``codec`` (records <-> bytes, Arrow columns -> numpy),
``consumer`` (FeedManager, DataFeed), ``positions`` (feed positions beside
checkpoints), ``prefetch`` (Prefetcher) and ``producer`` (FeedClient).
Programs import the names from ``tfos.feed`` itself, as before the split
(tfos's own modules may import from the modules).
"""
from .. import _tfos
# every name tfos.feed had when it was one file and that other modules,
# tests or benchmarks use, private ones included (tests/python/test_feed.py
# checks the list)
from .codec import (TAG_ARROW, TAG_COLUMNS, TAG_PICKLE, TAG_RESULTS, ColumnError, _decode_columns,  # noqa: F401
                    arrow_ipc, arrow_to_numpy, encode_rows, write_rows)
from .consumer import DataFeed, FeedManager, get_manager  # noqa: F401
from .positions import POSITION_DIR, hold_stop, read_positions, save_position  # noqa: F401
from .prefetch import Prefetcher  # noqa: F401
from .producer import FeedClient, ResultsMissing  # noqa: F401

FeedError = _tfos.FeedError
FeedClosed = _tfos.FeedClosed
FeedEnded = _tfos.FeedEnded

__all__ = ["FeedManager", "FeedClient", "FeedError", "FeedClosed", "FeedEnded", "ResultsMissing", "get_manager",
           "hold_stop"]
