"""tfos run --backend slurm inside sbatch (docs/SLURM.md): the batch script
from the doc as written, the digits example on 2 tasks, a task killed
mid-run and the cluster formed again from new steps, resuming from its
checkpoint."""

import os
import re
import shutil
import signal
import sys
import time

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "tests", "support"))
from elasticids import each_id_once  # noqa: E402

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


def submit(cluster, script, log, cwd):
    """sbatch the script as the user (output to log): the job id."""
    r = cluster.run(["sbatch", "--parsable", "--output", str(log), str(script)], cwd=str(cwd), env=user_env(cluster))
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().split(";")[0]


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


ELASTIC = os.path.join(REPO, "tests", "yarn", "progs", "elastic.py")


def test_an_elastic_run_forms_on_the_cpus_there_are_and_grows_when_they_are_free(slurm_cluster, tmp_path):
    """tfos run --backend slurm --min-nodes (issue 41): an allocation of 4
    CPUs, 2 of them held by another job step of the same job. The 4
    workers' steps cannot all start: after --elastic-wait the cluster forms
    with the 2 that registered (a resize, no restart spent), and 2 standby
    steps ask for the rest. Once the other step ends, they start, and the
    cluster drains and grows back to 4. Every row id is read once across
    the three attempts, and nothing is left running."""
    out = tmp_path / "out"
    out.mkdir()
    log = tmp_path / "job.out"
    script = tmp_path / "elastic.sbatch"
    script.write_text(
        "#!/bin/bash\n"
        "#SBATCH --nodes=2 --ntasks=4\n"
        "srun --exact --nodes=1 --ntasks=2 --job-name=other sleep 600 &\n"
        "until squeue -h -s -j \"$SLURM_JOB_ID\" -o %%j | grep -qx other; do sleep 0.2; done\n"
        "tfos run --backend slurm --workers 4 --min-nodes 2 --elastic-wait 5 --max-restarts 0 --log-dir %s "
        "-- python %s %s 120 4\n"
        "rc=$?\n"
        "kill %%1 2>/dev/null; wait\n"
        "exit $rc\n" % (tmp_path / "logs", ELASTIC, out))
    job = submit(slurm_cluster, script, log, tmp_path)
    wait_for(lambda: "resized from 4 to 2 nodes" in read(log) and "training at 2 nodes" in read(log), 90,
             "the cluster at 2 nodes (%s)" % log)
    steps = slurm_cluster.run(["squeue", "-h", "-s", "-j", job, "-o", "%i %j"]).stdout.split("\n")
    other = [line.split()[0] for line in steps if line.endswith(" other")]
    assert other, steps
    assert slurm_cluster.run(["scancel", other[0]]).returncode == 0
    wait_for(lambda: not slurm_cluster.jobs(), 120, "end of job %s (%s)" % (job, log))
    text = read(log)
    assert re.search(r"resized from 2 to 4 nodes: drained: capacity for 2 more nodes is back", text), text
    assert len(re.findall(r"a resize: no restart spent", text)) == 2, text
    assert "all nodes finished successfully" in text, text
    assert len(re.findall(r"\] done at step", text)) == 4, text
    # the drain to grow: both ranks of attempt 2 at one step
    drains = re.findall(r"\[worker:(\d)\] checkpoint at drain step (\d+)", text)
    assert sorted(w for w, _ in drains) == ["0", "1"] and len({s for _, s in drains}) == 1, drains
    assert each_id_once(str(out)) == ""
    r = slurm_cluster.run(["scontrol", "show", "job", job])
    assert "ExitCode=0:0" in r.stdout, r.stdout


INPLACE = os.path.join(REPO, "tests", "support", "inplace_prog.py")


def test_torch_survivors_go_on_in_place_in_job_steps_and_a_worker_joins(slurm_cluster, tmp_path):
    """tfos run --backend slurm --framework torch --resize-in-place
    --grow-in-place: 3 workers in job steps, gloo all_reduce every step
    through ElasticGroup; worker 0's program (rank 0, the store's host) is
    SIGKILLed. Workers 1 and 2 go on as ranks 0 and 1 of 2 in the same
    processes; once worker 0's step has ended, the launcher starts a new
    step in its place, which joins the running cluster (rank 1 of 3), and
    the three finish together, each step's ids summed once; the job ends
    with exit 0, no restart spent."""
    log = tmp_path / "job.out"
    script = tmp_path / "inplace.sbatch"
    steps = 200
    script.write_text(
        "#!/bin/bash\n"
        "#SBATCH --nodes=2 --ntasks=3\n"
        "exec tfos run --backend slurm --framework torch --workers 3 --min-nodes 2 --resize-in-place "
        "--grow-in-place --max-restarts 0 --log-dir %s -- python %s slurm %d 3\n" % (tmp_path / "logs", INPLACE,
                                                                                      steps))
    job = submit(slurm_cluster, script, log, tmp_path)
    wait_for(lambda: read(log).count("stepping at 3") == 3, 90, "all three ranks stepping (%s)" % log)
    pids = {int(w): int(p) for w, p in re.findall(r"\[worker:(\d)\] pid (\d+) rank \d of 3", read(log))}
    assert sorted(pids) == [0, 1, 2], read(log)
    os.kill(pids[0], signal.SIGKILL)
    wait_for(lambda: not slurm_cluster.jobs(), 120, "end of job %s (%s)" % (job, log))
    text = read(log)
    assert re.search(r"resized in place from 3 to 2 nodes: worker:0 \(executor 0, host [^)]*\) failed: signal 9",
                     text), text[-4000:]
    assert re.search(r"resized in place from 2 to 3 nodes: worker:0 \(executor 0, host [^)]*\) joined", text), \
        text[-4000:]
    assert "restarting" not in text and "all nodes finished successfully" in text, text[-4000:]
    joined = re.search(r"\[worker:0\] pid (\d+) joined as rank 1 of 3 \(generation 2\)", text)
    assert joined and int(joined.group(1)) != pids[0], text[-4000:]
    done = {int(w): (int(p), int(last), int(total)) for w, p, last, total in
            re.findall(r"\[worker:(\d)\] pid (\d+) done at world 3 after step (\d+): total (\d+)", text)}
    assert sorted(done) == [0, 1, 2], text[-4000:]
    for w, (pid, last, total) in done.items():
        assert pid == (int(joined.group(1)) if w == 0 else pids[w]) and last >= steps, (w, pid, last)
        assert total == sum(range(last * 8)), (w, last, total)
    r = slurm_cluster.run(["scontrol", "show", "job", job])
    assert "ExitCode=0:0" in r.stdout, r.stdout
