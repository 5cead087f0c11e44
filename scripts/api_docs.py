"""Build the HTML API reference of tfos's public Python modules with pdoc.

`make docs` runs it into build/api; tests/python/test_api_docs.py runs it
into a temporary directory. Usage: python scripts/api_docs.py OUTDIR

The reference covers the package `tfos` and the submodules its `__all__`
names (TFCluster, TFNode, TFParallel, compat, dfutil, gpu_info, util: pdoc
follows those), and the public modules a program imports by their full
name: tfos.feed (FeedClient, DataFeed), tfos.pipeline (TFEstimator,
TFModel), tfos.torch (TorchDistributor, FeedDataset) and tfos.spark
(Cluster: Spark Connect and classic sessions). Modules whose names start with `_` are private and stay out, and
so do tfos.TFSparkNode (what runs inside Spark tasks, under
TensorFlowOnSpark's module name for programs that import it; not an API of
its own) and tfos.arrowfeed (the feeder program `tfos run` starts for
Parquet and Arrow input).

pdoc's warnings about tfos's own objects (a docstring or annotation it cannot
read) fail the build; its warnings about pyspark's own annotations, on the
members tfos.pipeline's classes inherit from pyspark.ml, are counted and
ignored: tfos cannot fix them.
"""
import os
import shutil
import subprocess
import sys

MODULES = ["tfos", "tfos.feed", "tfos.pipeline", "tfos.torch", "tfos.spark"]


def build(outdir):
    """Write the reference into outdir (emptied first); return pdoc's
    warnings about tfos's objects, then the number of the others."""
    shutil.rmtree(outdir, ignore_errors=True)
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    r = subprocess.run([sys.executable, "-m", "pdoc", "--docformat", "restructuredtext", "--no-show-source", "--footer-text",
                        "tfos API reference", "-o", outdir] + MODULES,
                       env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        raise SystemExit("api_docs: pdoc failed (exit code %d)" % r.returncode)
    warnings = [line for line in (r.stdout + r.stderr).splitlines() if line.startswith("Warn")]
    ours = [w for w in warnings if "tfos." in w.split(" (/")[0]]
    return ours, len(warnings) - len(ours)


def main(argv):
    if len(argv) != 2:
        raise SystemExit("usage: python scripts/api_docs.py OUTDIR")
    ours, others = build(argv[1])
    for w in ours:
        print(w, file=sys.stderr)
    if ours:
        raise SystemExit("api_docs: %d pdoc warning(s) about tfos's docstrings or annotations" % len(ours))
    note = " (%d pdoc warning(s) about pyspark's own annotations ignored)" % others if others else ""
    print("API reference in %s/index.html%s" % (argv[1], note))


if __name__ == "__main__":
    main(sys.argv)
