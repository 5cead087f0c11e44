"""Drain on notice (issue 41): SIGTERM to `tfos run` makes every node
checkpoint at one step and end; the same command again resumes with no step
lost and every row read exactly once per epoch."""
import collections
import json
import os
import signal
import subprocess
import textwrap

from conftest import PY, pids_with, run_tfos, tfos_cli, wait_for

# Rows carry ids; a step is one batch. The checkpoint (the row ids trained
# on, the step) goes with its feed position; every 10 steps, and at the drain
# step, which ends the program (exit 0: the acknowledgement). With IGNORE=1
# the program never looks at the drain request.
PROG = textwrap.dedent('''
    import json, os, sys, time
    from tfos import TFNode
    out, run = sys.argv[2], os.environ["DRAIN_TEST_RUN"]
    ctx = TFNode.get_context()
    node = "%s-%d" % (ctx.job_name, ctx.task_index)
    ckpt = os.path.join(ctx.checkpoint_dir, "state-%s.json" % node)
    state = json.load(open(ckpt)) if os.path.exists(ckpt) else {"step": 0, "ids": []}
    def record(name, obj):
        with open(os.path.join(out, "%s.tmp" % name), "w") as f:
            json.dump(obj, f)
        os.replace(os.path.join(out, "%s.tmp" % name), os.path.join(out, name))
    record("start-%s-%s.json" % (run, node), {"step": state["step"]})
    feed = TFNode.DataFeed(ctx.mgr, True)
    step, fresh = state["step"], []
    while not feed.should_stop():
        (ids,) = feed.next_batch_arrays(50) or ([],)
        if not len(ids):
            continue
        fresh.extend(int(i) for i in ids)
        step += 1
        ctx.report(step=step)
        if step == 40:
            record("at40-%s-%s.json" % (run, node), {})
        drain = os.environ.get("IGNORE") != "1" and ctx.should_checkpoint(step)
        if drain or step % 10 == 0:
            with feed.checkpoint():
                state = {"step": step, "ids": state["ids"] + fresh}
                fresh = []
                with open(ckpt + ".tmp", "w") as f:
                    json.dump(state, f)
                os.replace(ckpt + ".tmp", ckpt)
        if drain:
            record("drained-%s-%s.json" % (run, node), {"step": step, "drain_step": ctx.drain_step()})
            sys.exit(0)
        time.sleep(0.03)
    record("final-%s-%s.json" % (run, node), {"step": step, "ids": state["ids"] + fresh})
''')


def test_sigterm_drains_at_one_step_and_the_same_command_resumes_with_nothing_lost(tmp_path, marker):
    import numpy as np
    n, epochs = 12000, 2
    data = tmp_path / "ids.npy"
    np.save(data, np.arange(n, dtype=np.int64))
    prog = tmp_path / "drain.py"
    prog.write_text(PROG)
    out = tmp_path / "out"
    out.mkdir()
    ckpt = tmp_path / "ckpt1"

    def command(log, *extra, ckpt=ckpt):
        return ["run", "--workers", "2", "--input", str(data), "--epochs", str(epochs), "--partition-rows", "250",
                "--batch-rows", "50", "--checkpoint-dir", str(ckpt), "--log-dir", str(tmp_path / log), *extra,
                "--", PY, str(prog), marker, str(out)]

    def sigterm_at_step_40(run, log, *extra, **env_extra):
        env = dict(os.environ, PYTHONUNBUFFERED="1", DRAIN_TEST_RUN=run, **env_extra)
        p = subprocess.Popen([tfos_cli()] + command(log, *extra, ckpt=tmp_path / ("ckpt" + run)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env)
        try:
            assert wait_for(lambda: all((out / ("at40-%s-worker-%d.json" % (run, i))).exists() for i in (0, 1)), 60)
            p.send_signal(signal.SIGTERM)
            _, err = p.communicate(timeout=60)
        finally:
            p.kill()
            p.wait()
        return p.returncode, err

    # 1. SIGTERM mid-epoch: both ranks checkpoint at the coordinator's drain step and exit 0; tfos run exits 75
    rc, err = sigterm_at_step_40("1", "logs1")
    assert rc == 75, err[-3000:]
    assert "draining (interrupted by signal 15" in err and "drained: every node wrote its checkpoint" in err, err[-3000:]
    drained = [json.loads((out / ("drained-1-worker-%d.json" % i)).read_text()) for i in (0, 1)]
    assert "checkpoint at step " in err, err[-3000:]
    announced = int(err.split("checkpoint at step ")[1].split()[0])
    assert drained[0]["step"] == drained[1]["step"] == announced > 40, (drained, announced)
    assert all(d["drain_step"] == announced for d in drained)
    assert (ckpt / "tfos-feed-position" / "drained").exists()

    # 2. the same command again: it starts at the drained step (no step redone) and feeds only what was not read
    r = run_tfos(command("logs2"), timeout=120, env={"DRAIN_TEST_RUN": "2"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "resuming a drained run" in r.stderr and "resumes the feed where the checkpoint stands" in r.stderr
    for i in (0, 1):
        assert json.loads((out / ("start-2-worker-%d.json" % i)).read_text())["step"] == announced
    counts = collections.Counter()
    for i in (0, 1):
        final = json.loads((out / ("final-2-worker-%d.json" % i)).read_text())
        counts.update(final["ids"])
        assert final["step"] >= announced
    wrong = {k: c for k, c in counts.items() if c != epochs}
    missing = [k for k in range(n) if k not in counts]
    assert not missing and not wrong, (missing[:5], list(wrong.items())[:5])
    assert not (ckpt / "tfos-feed-position" / "drained").exists()   # finished: the next run starts afresh

    # 3. a program that ignores the request is stopped at the grace's end: exit 143, its last checkpoint stands
    rc, err = sigterm_at_step_40("3", "logs3", "--drain-grace", "1", IGNORE="1")
    assert rc == 143, err[-3000:]
    assert "the grace of 1 s ended with worker:0, worker:1 still running" in err, err[-3000:]
    assert not list(out.glob("drained-3-*"))
    assert wait_for(lambda: not pids_with(marker), 10)


KERAS_PROG = textwrap.dedent('''
    import os, sys
    import numpy as np
    import tensorflow as tf
    import tfos.drain

    class Ctx(object):
        reported = []
        def report(self, step=None, **kw):
            self.reported.append(step)

    saved = []
    ctx = Ctx()
    cb = tfos.drain.keras_callback(saved.append, ctx=ctx)
    model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.zeros((64, 2), np.float32)
    model.fit(x, x[:, :1], batch_size=4, epochs=3, verbose=0, callbacks=[cb])
    print("saved", saved, "reported", ctx.reported[-1], "drained", cb.drained,
          "iterations", int(model.optimizer.iterations.numpy()))
''')


def test_keras_callback_saves_at_the_drain_step_and_stops_fit(tmp_path):
    drain_file = tmp_path / "worker-0.drain"
    drain_file.write_text("step=7\ngrace_ms=25000\nreason=test\n")   # as the agent writes it
    prog = tmp_path / "keras_drain.py"
    prog.write_text(KERAS_PROG)
    r = subprocess.run([PY, str(prog)], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, TFOS_DRAIN_FILE=str(drain_file), TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == 0, r.stderr[-3000:]
    # 16 batches an epoch, 3 epochs: fit stopped at step 7, where it saved once
    assert "saved [7] reported 7 drained True iterations 7" in r.stdout, (r.stdout, r.stderr[-2000:])


STEPPER = ("import sys, time\n"
           "from tfos import TFNode\n"
           "ctx = TFNode.get_context()\n"
           "step = 0\n"
           "while step < 100000:\n"
           "    step += 1\n"
           "    ctx.report(step=step)\n"
           "    if ctx.should_checkpoint(step):\n"
           "        print('checkpoint at step', step, flush=True)\n"
           "        sys.exit(0)\n"
           "    time.sleep(0.01)\n"
           "sys.exit(3)\n")


def test_a_driver_coordinator_drains_its_nodes(marker):
    """The drain a Spark driver asks for (Coordinator.drain, on an executor's
    decommission): every node of a driver-side coordinator, with real agents,
    checkpoints at the one step it announces, and the cluster ends DONE."""
    import json
    import uuid
    import tfos._tfos as t
    from test_runtime_spark_bits import finish, nodes, start_agent, step_until, wait_done
    secret, cid = t.random_secret(), "c" + uuid.uuid4().hex[:10]
    coord = t.Coordinator(2, secret, reservation_timeout=60)
    agents = [start_agent(coord, secret, i, marker, STEPPER, "--cluster-id", cid) for i in (0, 1)]
    try:
        assert not coord.drain("too early")   # nothing runs yet: the caller stops instead
        assert step_until(coord, lambda: all((n["report"] or {}).get("step", 0) >= 20 for n in nodes(coord)), 60)
        assert coord.drain("executor 1 is decommissioned", 30)
        assert not coord.drain("again")       # one drain at a time
        wait_done(coord)
        step = coord.drain_step
        assert coord.drained and step > 20
        # the first drain's reason, not the refused one's
        assert json.loads(coord.status())["drain"] == {"step": step, "drained": True,
                                                       "age_s": json.loads(coord.status())["drain"]["age_s"],
                                                       "reason": "executor 1 is decommissioned"}
    finally:
        outs = finish(agents)
        coord.close()
    for rc, out, err in outs:
        assert rc == 0, err
        assert "checkpoint at step %d\n" % step in out, out   # both ranks, at the announced step
