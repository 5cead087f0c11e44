"""The fixture's cluster itself: two node names on this host, each running
a task of a two-node step (what every other test here relies on)."""


def test_a_two_node_step_runs_one_task_on_each_node_name(slurm_cluster):
    r = slurm_cluster.run(["srun", "--nodes=2", "--ntasks=2", "printenv", "SLURMD_NODENAME"])
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()) == ["n1", "n2"], r.stdout
