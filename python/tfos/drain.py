"""Drain on notice: checkpoint at one step, then end.

A notice (SIGTERM to ``tfos run``, Slurm's ``scancel``, a Spark executor's
decommission) makes the coordinator choose one *drain step* for every
chief, worker and evaluator, past the steps they report with
``ctx.report(step=...)``, and each node's agent writes it to the file named
by ``TFOS_DRAIN_FILE`` (``step=D``; ``step=-1`` when no node reported a
step: checkpoint at the next check). A program checkpoints when it finishes
step D and exits 0; tfos then stops the rest, saves nothing more, and the
same command run again resumes from that checkpoint (docs/RELIABILITY.md,
"Drain on notice")::

    for step in range(start, steps):
        train_step()
        ctx.report(step=step)              # what the drain step is chosen from
        if ctx.should_checkpoint(step):    # True once: at the drain step
            with feed.checkpoint():        # the model and the feed position together
                save(step)
            sys.exit(0)                    # the acknowledgement

The check is one ``stat`` of a file that does not exist until a notice, so
it costs about a microsecond a step.
"""
import os
import sys

__all__ = ["drain_step", "drain_requested", "should_checkpoint", "keras_callback"]

_state = {"step": None, "done": False}


def drain_step():
    """The drain step (an int; -1: at the next check), or None while no
    drain was asked. Once known it does not change for this program."""
    if _state["step"] is not None:
        return _state["step"]
    path = os.environ.get("TFOS_DRAIN_FILE")
    if not path:
        return None
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return None
    for line in text.splitlines():
        if line.startswith("step="):
            try:
                _state["step"] = int(line[5:])
            except ValueError:
                raise RuntimeError("%s: malformed drain request %r (tfos writes step=N)" % (path, line)) from None
            return _state["step"]
    return None  # the agent writes the file whole: an empty one is not ours


def drain_requested():
    """True once a drain was asked: a loop that cannot checkpoint at a step
    (an evaluator) ends when it sees this."""
    return drain_step() is not None


def should_checkpoint(step):
    """True exactly once: when ``step`` (the step this program just
    finished, as it reports it) is the drain step. Write the checkpoint (and
    its feed position), then exit 0. A program that learns of the drain only
    after it passed the step (its reports lag far behind) gets True at once
    and a warning: its checkpoint is then at a later step than the others'."""
    d = drain_step()
    if d is None or _state["done"]:
        return False
    step = int(step)
    if d >= 0 and step < d:
        return False
    if d >= 0 and step > d:
        sys.stderr.write("tfos: this node learned of the drain at step %d, past the drain step %d: it checkpoints "
                         "now (report steps every step, ctx.report(step=), so the drain step is chosen ahead)\n"
                         % (step, d))
    _state["done"] = True
    return True


def keras_callback(save, ctx=None):
    """A Keras callback for ``model.fit``: after each batch, when
    :func:`should_checkpoint` is true for the optimizer's step
    (``model.optimizer.iterations``), it calls ``save(step)`` (write the
    checkpoint there: ``CheckpointManager.save``, ``model.save_weights``) and
    stops training; ``fit`` returns and the program exits 0. It reports the
    step on the status page too (``ctx.report(step=)``), every batch, so the
    drain step is chosen from it."""
    from .TFNode import get_context
    try:
        import tensorflow as tf
        base = tf.keras.callbacks.Callback
    except ImportError:
        import keras
        base = keras.callbacks.Callback
    ctx = ctx or get_context()

    class DrainCallback(base):
        drained = False

        def on_train_batch_end(self, batch, logs=None):
            step = int(self.model.optimizer.iterations.numpy())
            ctx.report(step=step)
            if should_checkpoint(step):
                save(step)
                self.drained = True
                self.model.stop_training = True

    return DrainCallback()
