"""Worker 0 feeds worker 1 through worker 1's rings (FeedClient over the agent's
feed socket); worker 1 reads with TFoS's DataFeed. MODE: train | infer |
infer_arrays (worker 1 reads numpy views and answers with one 2-D array per
batch: each row comes back as that array's row, a float64 array
[2 * id, id / 2], as TensorFlowOnSpark gives it; every other partition's
results are collected as chunks, the program's arrays kept whole).
    feed_pair.py MARKER MODE NPART ROWS_PER_PART BATCH"""
import sys

from tfos import TFNode
from tfos.feed import FeedClient

marker, mode, nparts, per, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
ctx = TFNode.get_context()
if ctx.task_index == 0:
    client = FeedClient(executor_id=1)
    for p in range(1, nparts + 1):
        rows = [(p * 1000 + i, float(i) / 2, "r%d" % i) for i in range(per)]
        client.feed_partition(rows, p)
        if mode == "infer":
            res = client.collect_results(p, per, timeout=60)
            assert res == [r[0] * 2 for r in rows], (p, res[:5])
            print("partition %d: %d results in order" % (p, len(res)), flush=True)
        elif mode == "infer_arrays" and p % 2 == 0:
            import numpy as np
            chunks = client.collect_results(p, per, timeout=60, chunks=True)
            assert all(isinstance(c, np.ndarray) and c.shape[1:] == (2,) for c in chunks), (p, chunks[:1])
            assert np.concatenate(chunks).tolist() == [[r[0] * 2.0, r[0] / 2.0] for r in rows], p
            print("partition %d: %d results in order" % (p, per), flush=True)
        elif mode == "infer_arrays":
            res = client.collect_results(p, per, timeout=60)
            import numpy as np
            assert all(isinstance(row, np.ndarray) and row.dtype == np.float64 and row.shape == (2,)
                       for row in res), (p, res[:2])
            assert [row.tolist() for row in res] == [[r[0] * 2.0, r[0] / 2.0] for r in rows], (p, res[:5])
            print("partition %d: %d results in order" % (p, len(res)), flush=True)
    client.end_feed()
    client.close()
    print("fed %d partitions" % nparts, flush=True)
else:
    feed = TFNode.DataFeed(ctx.mgr, train_mode=(mode == "train"))
    seen, batches = [], []
    while not feed.should_stop():
        if mode == "infer_arrays":
            import numpy as np
            cols = feed.next_batch_arrays(batch, copy=False)
            rows = [(int(i),) for i in cols[0]] if cols else []
        else:
            rows = feed.next_batch(batch)
        if not rows:
            break
        batches.append(len(rows))
        seen.extend(r[0] for r in rows)
        if mode == "infer":
            feed.batch_results([r[0] * 2 for r in rows])
        elif mode == "infer_arrays":
            feed.batch_results(np.stack([cols[0] * 2.0, cols[0] / 2.0], axis=1))
    expect = [p * 1000 + i for p in range(1, nparts + 1) for i in range(per)]
    assert seen == expect, "rows out of order or missing: got %d of %d" % (len(seen), len(expect))
    print("consumed %d rows in %d batches, last batch %d, aborted %s" % (len(seen), len(batches), batches[-1],
                                                                          ctx.mgr.aborted), flush=True)
