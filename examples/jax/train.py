"""Data-parallel JAX training of a digits classifier on rows tfos feeds.

    python examples/digits/make_data.py /tmp/digits.npy
    build/tfos run --workers 2 --input /tmp/digits.npy --epochs 10 -- \\
        python examples/jax/train.py

Every process calls `jax.distributed.initialize()` with no arguments (tfos
set the JAX variables; `import tfos` lets JAX read all of them) and becomes
one process of a JAX cluster with one CPU device each. A jitted step runs on
a global batch sharded across the processes' devices, so the gradient of the
mean loss is the average over all processes' rows: XLA all-reduces it
(gloo on CPU). Parameters and Adam state are replicated.

Each process reads its own batches from the tfos feed (numpy arrays,
`DataFeed.next_batch_arrays`). The feed gives the processes different numbers
of rows, so a process whose feed has ended keeps taking part in the step with
an empty (all-masked) batch until no process has rows left: every step is
collective. Plain jax and numpy, a 64-128-10 MLP.
"""
import argparse
import os
import sys
import time

import numpy as np

import tfos  # noqa: F401  (first: registers tfos's JAX cluster environment)
from tfos import TFNode

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "digits"))
import digits_data  # noqa: E402  (the same held-out split as the TensorFlow examples)


def init_params(key, hidden):
    k1, k2 = jax.random.split(key)
    return {"w1": jax.random.normal(k1, (64, hidden)) * np.sqrt(2.0 / 64), "b1": jnp.zeros(hidden),
            "w2": jax.random.normal(k2, (hidden, 10)) * np.sqrt(1.0 / hidden), "b2": jnp.zeros(10)}


def logits(params, x):
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]


def make_step(lr, b1=0.9, b2=0.999, eps=1e-8):
    def loss_fn(params, x, y, mask):
        logp = jax.nn.log_softmax(logits(params, x))
        nll = -jnp.take_along_axis(logp, y[:, None], axis=1)[:, 0]
        return jnp.sum(nll * mask) / jnp.maximum(jnp.sum(mask), 1.0)

    @jax.jit
    def step(params, opt, x, y, mask):
        # x, y, mask: global arrays sharded over the processes; the sums in
        # loss_fn reduce over all of them, so grads are the global average
        rows = jnp.sum(mask)
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y, mask)
        t = opt["t"] + 1
        m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, opt["m"], grads)
        v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, opt["v"], grads)
        scale = lr * jnp.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        new = jax.tree.map(lambda p, m, v: p - scale * m / (jnp.sqrt(v) + eps), params, m, v)
        live = rows > 0  # the last step, when every feed has ended, changes nothing
        keep = lambda a, b: jax.tree.map(lambda u, w: jnp.where(live, u, w), a, b)  # noqa: E731
        return keep(new, params), {"t": jnp.where(live, t, opt["t"]), "m": keep(m, opt["m"]),
                                   "v": keep(v, opt["v"])}, loss, rows

    return step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-size", type=int, default=32, help="rows per process per step")
    ap.add_argument("--lr", type=float, default=0.003)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--seed", type=int, default=digits_data.DEFAULT_SEED)
    a = ap.parse_args()

    jax.distributed.initialize()  # no arguments: the tfos node's JAX variables
    print("jax process %d of %d, %d devices in the cluster (%d local)" % (
        jax.process_index(), jax.process_count(), jax.device_count(), jax.local_device_count()), flush=True)

    mesh = Mesh(np.array(jax.devices()), ("data",))
    rows_sharding = NamedSharding(mesh, P("data"))
    replicated = NamedSharding(mesh, P())
    params = jax.device_put(init_params(jax.random.key(a.seed), a.hidden), replicated)
    opt = jax.device_put({"t": jnp.zeros((), jnp.int32), "m": jax.tree.map(jnp.zeros_like, params),
                          "v": jax.tree.map(jnp.zeros_like, params)}, replicated)
    step = make_step(a.lr)

    feed = TFNode.DataFeed(TFNode.get_context().mgr, train_mode=True)
    n = a.batch_size
    x = np.zeros((n, 64), np.float32)  # the local batch, padded to n rows: one compiled step
    y = np.zeros(n, np.int32)
    mask = np.zeros(n, np.float32)
    steps = fed = 0
    start = time.monotonic()
    while True:
        cols = () if feed.should_stop() else feed.next_batch_arrays(n)
        k = 0
        if len(cols):
            bx, by = digits_data.feed_xy(cols)  # y is int32: cast on assignment
            k = len(by)
            x[:k], y[:k] = bx, by
        mask[:k], mask[k:] = 1.0, 0.0
        g = [jax.make_array_from_process_local_data(rows_sharding, arr) for arr in (x, y, mask)]
        params, opt, loss, rows = step(params, opt, *g)
        if float(rows) == 0:  # no process had rows: the feed has ended everywhere
            break
        fed += k
        steps += 1
        if steps % 50 == 0:
            print("step %d loss %.4f" % (steps, float(loss)), flush=True)

    _, _, x_test, y_test = digits_data.load_split(a.seed)
    host = jax.device_get(params)  # replicated: every process holds the whole model
    acc = float(np.mean(np.argmax(np.asarray(logits(host, x_test)), axis=1) == y_test))
    print("trained on %d fed rows in %d global steps, %.1f s" % (fed, steps, time.monotonic() - start), flush=True)
    print("held-out accuracy: %.4f" % acc, flush=True)


if __name__ == "__main__":
    main()
