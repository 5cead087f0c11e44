"""The API reference (issue 18): `make docs` builds HTML pages from the public
modules' docstrings with pdoc (scripts/api_docs.py); here the same script
builds them into a temporary directory, and the pages must exist, carry the
documented names and text, leave private modules out, and come with no pdoc
warning about tfos's own docstrings (the script fails on one)."""
import html
import os
import re
import subprocess

from conftest import PY, ROOT

PAGES = ["tfos", "tfos/TFCluster", "tfos/TFNode", "tfos/TFParallel", "tfos/feed", "tfos/compat",
         "tfos/pipeline", "tfos/dfutil", "tfos/util", "tfos/gpu_info", "tfos/torch", "tfos/spark"]


def text_of(path):
    """A page's words, without tags and with entities decoded."""
    with open(path) as f:
        page = f.read()
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page)))


def anchors(path):
    with open(path) as f:
        return set(re.findall(r'id="([A-Za-z_][\w.]*)"', f.read()))


def test_api_reference_builds_from_the_docstrings(tmp_path):
    out = tmp_path / "api"
    r = subprocess.run([PY, os.path.join(ROOT, "scripts", "api_docs.py"), str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "API reference in %s/index.html" % out in r.stdout, r.stdout

    for page in PAGES:
        assert (out / (page + ".html")).is_file(), "no page for %s: %s" % (page, sorted(os.listdir(out / "tfos")))
    made = sorted(p.name for p in (out / "tfos").iterdir())
    assert not [p for p in made if p.startswith("_")], made            # private modules stay out
    assert "TFSparkNode.html" not in made and "arrowfeed.html" not in made, made

    # The names a user looks up, as anchors of their own.
    assert {"run", "ClusterError"} <= anchors(out / "tfos.html")
    assert {"run", "TFCluster.train", "TFCluster.inference", "TFCluster.shutdown", "TFClusterError",
            "InputMode.SPARK"} <= anchors(out / "tfos" / "TFCluster.html")
    assert {"get_context", "DataFeed.next_batch", "DataFeed.next_batch_arrays", "DataFeed.should_stop",
            "DataFeed.batch_results"} <= anchors(out / "tfos" / "TFNode.html")
    assert {"FeedClient", "FeedClient.feed_partition"} <= anchors(out / "tfos" / "feed.html")
    assert {"TFEstimator", "TFModel"} <= anchors(out / "tfos" / "pipeline.html")
    assert {"TorchDistributor.run", "TorchDistributor.train_on_dataframe", "FeedDataset"} <= anchors(
        out / "tfos" / "torch.html")

    # The docstrings' text, rendered (the pages carry no source code).
    cluster = text_of(out / "tfos" / "TFCluster.html")
    assert "Start a cluster of num_executors nodes" in cluster, cluster[:2000]
    assert '"""TensorFlowOnSpark' not in cluster                         # the source is not on the page
    assert "TensorFlowOnSpark's TFCluster API on tfos's runtime" in cluster
    node = text_of(out / "tfos" / "TFNode.html")
    assert re.search(r"def\s+next_batch\s*\(\s*self\s*,\s*batch_size", node), node[:2000]
    assert "distributed TensorFlow, PyTorch and JAX" in text_of(out / "tfos.html")
