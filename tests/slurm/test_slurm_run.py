"""tfos run --backend slurm inside sbatch (docs/SLURM.md): the batch script
from the doc as written, the digits example on 2 tasks, a task killed
mid-run and the cluster formed again from new steps, resuming from its
checkpoint."""

import os
import re
import shutil
import signal
import time

from conftest import REPO

CLI = os.environ.get("TFOS_CLI", os.path.join(REPO, "build", "tfos"))


def doc_script():
    """The batch script in docs/SLURM.md, exactly as written."""
    with open(os.path.join(REPO, "docs", "SLURM.md")) as f:
        text = f.read()
    m = re.search(r"## The batch script.*?```bash\n(.*?)```", text, re.S)
    assert m, "docs/SLURM.md has no batch script under '## The batch script'"
    return m.group(1)


def user_env(cluster):
    """A user's shell with tfos and the venv's python first on PATH."""
    bindir = os.path.dirname(os.path.abspath(CLI))
    venv_bin = os.path.join(REPO, ".venv", "bin")
    return cluster.env(PATH=bindir + os.pathsep + venv_bin + os.pathsep + os.environ.get("PATH", ""),
                       TF_CPP_MIN_LOG_LEVEL="2")


def wait_for(ok, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = ok()
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError("no %s within %d s" % (what, timeout))


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def agent_of(cluster, executor):
    """The pid of the agent (the step's task) of executor, or None."""
    for pid, cmd in cluster.processes():
        if " node --coord " in cmd and " --executor-id %d " % executor in cmd and not cmd.startswith("srun"):
            return pid
    return None


def test_doc_script_trains_digits_on_two_tasks_and_resumes_after_a_task_is_killed(slurm_cluster, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(os.path.join(REPO, "examples", "digits"), work / "examples" / "digits",
                    ignore=shutil.ignore_patterns("model", "__pycache__"))
    script = work / "digits.sbatch"
    script.write_text(doc_script())
    # as the doc says: sbatch digits.sbatch ARGS from the directory with examples/digits
    r = slurm_cluster.run(["sbatch", "--parsable", str(script), "--epochs", "20", "--model-dir", "model"],
                          cwd=str(work), env=user_env(slurm_cluster))
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip().split(";")[0]
    out = work / ("tfos-%s.out" % job)  # the script's own --output

    # two epochs trained (a checkpoint each; worker:0 prints them): kill
    # worker:1's Slurm task, its agent
    wait_for(lambda: "[worker:0] epoch 2/20" in read(out), 90, "second epoch (%s)" % out)
    pid = agent_of(slurm_cluster, 1)
    assert pid, "no agent of executor 1 among %s" % slurm_cluster.processes()
    os.kill(pid, signal.SIGKILL)

    wait_for(lambda: not slurm_cluster.jobs(), 120, "end of job %s (%s)" % (job, out))
    text = read(out)
    # the lost node is a failure the policy restarts: new steps, same job
    assert re.search(r"starting again: attempt 2 of 3", text), text
    # both steps of both attempts ran on the allocation's two node names
    attempt2 = text[text.index("attempt 2 of 3"):]
    assert re.search(r"\[worker:0\] resumed from checkpoint", attempt2), text
    assert re.search(r"\[worker:1\] resumed from checkpoint", attempt2), text
    assert "[worker:0] test accuracy: 0." in attempt2, text
    assert "all nodes finished successfully" in text, text
    r = slurm_cluster.run(["scontrol", "show", "job", job])
    assert "JobState=COMPLETED" in r.stdout and "ExitCode=0:0" in r.stdout, r.stdout
    assert (work / "model" / "digits.keras").exists()
