"""The CPU a whole `tfos yarn` run costs the host: `tfos yarn --workers 1 --
python -c pass` on a YARN minicluster (tests/yarn/yarncluster.py, simple
authentication), for each build given, rounds alternating (the first round
only warms the page cache). CPU is the host's busy time (/proc/stat) over the
run: the client's and the ApplicationMaster's JVMs, the container, and what
the minicluster does for them.

    .venv/bin/python bench/yarn_submit.py LABEL=TFOS_BINARY:TFOS_YARN_JAR ...

e.g. this tree against an older one built in /tmp/old (cmake --build
build --target tfos_cli; mvn package in yarn/):

    .venv/bin/python bench/yarn_submit.py old=/tmp/old/build/tfos:/tmp/old/yarn/target/tfos-yarn.jar \\
        new=build/tfos:build/tfos-yarn.jar

Needs `make yarn-minicluster`. Prints the median CPU and wall seconds of each.
"""
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "yarn"))

from yarncluster import YarnCluster  # noqa: E402

ROUNDS = 4


def busy_cpu_s():
    with open("/proc/stat") as f:
        t = list(map(int, f.readline().split()[1:]))
    return (sum(t) - t[3] - t[4]) / os.sysconf("SC_CLK_TCK")


def main():
    builds = [a.split("=", 1) for a in sys.argv[1:]]
    if not builds or any(len(b) != 2 or ":" not in b[1] for b in builds):
        sys.exit(__doc__)
    cluster = YarnCluster(plain=True)
    cluster.start(timeout=180)
    res = {}
    try:
        time.sleep(5)   # the minicluster's start settles
        for rnd in range(ROUNDS):
            for label, spec in builds:
                tfos, jar = spec.split(":", 1)
                env = dict(cluster.env(), TFOS_YARN_JAR=os.path.abspath(jar))
                c0, t0 = busy_cpu_s(), time.monotonic()
                r = subprocess.run([os.path.abspath(tfos), "yarn", "--workers", "1", "--worker-memory", "256m",
                                    "--am-memory", "384m", "--", sys.executable, "-c", "pass"],
                                   env=env, cwd=cluster.tmp_dir, capture_output=True, text=True, timeout=300)
                cpu, wall = busy_cpu_s() - c0, time.monotonic() - t0
                if r.returncode:
                    sys.exit("%s: tfos yarn exited %d:\n%s" % (label, r.returncode, r.stderr[-3000:]))
                sys.stderr.write("round %d %s: cpu %.1f s, wall %.1f s\n" % (rnd, label, cpu, wall))
                if rnd:
                    res.setdefault(label, []).append((cpu, wall))
    finally:
        cluster.stop()
    for label, v in res.items():
        print("%s: cpu %.1f s (%s), wall %.1f s" % (label, statistics.median(x[0] for x in v),
                                                   ", ".join("%.1f" % x[0] for x in v),
                                                   statistics.median(x[1] for x in v)))


if __name__ == "__main__":
    main()
