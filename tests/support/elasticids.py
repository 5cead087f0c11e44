"""The check of an elastic run's rows (tests/yarn/progs/elastic.py): every
row id up to the final step was read exactly once across the attempts,
whatever their sizes. For the YARN and Slurm tests and bench/elastic_yarn.py."""
import collections
import os


def each_id_once(out, rows_per_step=8):
    """"" when every row id up to OUT/final's step was read exactly once
    across the attempts (OUT/ids-*); else what was wrong."""
    with open(os.path.join(out, "final")) as f:
        final = int(f.read())
    seen = []
    for name in sorted(os.listdir(out)):
        if name.startswith("ids-"):
            with open(os.path.join(out, name)) as f:
                seen += [int(i) for i in f.read().split()]
    want = final * rows_per_step
    twice = sorted(i for i, k in collections.Counter(seen).items() if k > 1)
    never = sorted(set(range(want)) - set(seen))
    if twice or never or len(seen) != want:
        return "%d ids read twice (%s), %d never read (%s), %d read of %d" % (
            len(twice), twice[:10], len(never), never[:10], len(seen), want)
    return ""
