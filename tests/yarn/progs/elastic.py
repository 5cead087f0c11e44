"""A node program of an elastic run (docs/RELIABILITY.md, "Elastic size"),
for the YARN and Slurm tests: python elastic.py OUT END FULL.

Rows carry ids. Global step s reads rows (s-1)*B .. s*B-1, and rank r of
W takes every W-th of them, so the ids a rank read at a step depend on the
world size of its attempt. Each rank appends the ids it read, one line a
step, to OUT/ids-<attempt>-<rank>. At a drain step every rank checkpoints
(rank 0 writes the step to OUT/step) and exits 0; the next attempt resumes
at the step after it, at whatever size it has. A run ends once it is at
FULL nodes and at step END or past it (rank 0 writes OUT/final): each id
up to then was read exactly once across all attempts if no step was lost
or redone: tests/support/elasticids.py says whether it was. OUT/events gets a line
"KIND ATTEMPT RANK WORLD STEP TIME" at each attempt's first step (first)
and each drain checkpoint (drain), for bench/elastic_yarn.py."""
import os
import sys
import time

B = 8


def write_whole(out, name, text):
    tmp = os.path.join(out, name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(out, name))


def event(out, kind, attempt, rank, world, step):
    with open(os.path.join(out, "events"), "a") as f:
        f.write("%s %s %d %d %d %.3f\n" % (kind, attempt, rank, world, step, time.time()))


def main(out, end, full):
    import tfos

    ctx = tfos.TFNode.get_context()
    rank, world = ctx.task_index, ctx.num_workers
    attempt = os.environ.get("TFOS_ATTEMPT", "1")
    try:
        with open(os.path.join(out, "step")) as f:
            start = int(f.read()) + 1
    except FileNotFoundError:
        start = 1
    print("attempt %s: rank %d of %d from step %d" % (attempt, rank, world, start), flush=True)
    with open(os.path.join(out, "ids-%s-%d" % (attempt, rank)), "a") as ids:
        for step in range(start, 1000000):
            ids.write(" ".join(str(i) for i in range((step - 1) * B, step * B) if i % world == rank) + "\n")
            ids.flush()
            time.sleep(0.05)
            ctx.report(step=step)
            if step == start:
                event(out, "first", attempt, rank, world, step)
            if step == start + 20:
                print("training at %d nodes" % world, flush=True)
            if ctx.should_checkpoint(step):
                if rank == 0:
                    write_whole(out, "step", "%d" % step)
                event(out, "drain", attempt, rank, world, step)
                print("checkpoint at drain step %d" % step, flush=True)
                return
            if world == full and step >= end:
                if rank == 0:
                    write_whole(out, "final", "%d" % step)
                print("done at step %d" % step, flush=True)
                return


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
