"""The tfos command line follows torchrun's and argparse's conventions: each
command has its own -h/--help (stdout, exit 0), the first argument of `tfos
run` that is not an option starts the program, usage errors exit 2 with one
line naming the flag, and every trainer gets torchrun's variables."""
import json
import re

import pytest

from conftest import PY, run_tfos

USER_COMMANDS = ("run", "status", "logs", "yarn", "slurm", "serve")
INTERNAL_COMMANDS = ("node", "coordinator", "guard", "yarn-am", "yarn-container")

# Writes its argv and torchrun's variables to OUT/<RANK>.json. With FAIL_FIRST
# it fails on the run's first attempt, so the cluster is formed again.
ECHO = r'''
import json, os, sys
out, mode = sys.argv[1], sys.argv[3]
if mode == "fail-first" and os.environ["TFOS_ATTEMPT"] == "1":
    sys.exit(3)
names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE", "GROUP_WORLD_SIZE",
         "ROLE_NAME", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
         "TFOS_CLUSTER_ID", "TFOS_ATTEMPT")
rec = {"argv": sys.argv[4:], "env": {k: os.environ.get(k) for k in names}}
with open(os.path.join(out, os.environ["RANK"] + ".json"), "w") as f:
    json.dump(rec, f)
'''


@pytest.fixture
def echo(tmp_path):
    path = tmp_path / "echo.py"
    path.write_text(ECHO)
    out = tmp_path / "out"
    out.mkdir()
    return str(path), out


def records(out):
    return {int(p.stem): json.loads(p.read_text()) for p in out.iterdir()}


# ---- help and version ----------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_top_level_help_lists_user_commands_only(flag):
    r = run_tfos([flag], timeout=10)
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout.startswith("usage: tfos ")
    listed = re.findall(r"^  (\w+) ", r.stdout.split("commands:\n", 1)[1].split("\n\n", 1)[0], re.M)
    assert listed == ["run", "status", "logs", "yarn", "slurm", "serve", "version"]
    for cmd in INTERNAL_COMMANDS:
        assert "tfos %s" % cmd not in r.stdout and not re.search(r"^\s+%s\b" % cmd, r.stdout, re.M)
    assert "guard" not in r.stdout and "coordinator" not in r.stdout


@pytest.mark.parametrize("cmd", USER_COMMANDS + INTERNAL_COMMANDS)
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_each_command_prints_its_own_help(cmd, flag):
    r = run_tfos([cmd, flag], timeout=10)
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout.startswith("usage: tfos %s " % cmd)
    others = [c for c in USER_COMMANDS + INTERNAL_COMMANDS if c != cmd]
    for other in others:
        assert "usage: tfos %s " % other not in r.stdout


def test_run_help_after_options_and_help_command():
    r = run_tfos(["run", "--workers", "2", "--help"], timeout=10)
    assert r.returncode == 0 and r.stdout.startswith("usage: tfos run ") and "--max-restarts" in r.stdout
    assert "--executor-id" not in r.stdout  # node's options are node's
    r2 = run_tfos(["help", "run"], timeout=10)
    assert r2.returncode == 0 and r2.stdout == r.stdout


def test_no_arguments_is_a_usage_error():
    r = run_tfos([], timeout=10)
    assert r.returncode == 2 and r.stdout == "" and r.stderr.startswith("usage: tfos ")


@pytest.mark.parametrize("args", [["-V"], ["--version"], ["version"]])
def test_version(args):
    r = run_tfos(args, timeout=10)
    assert r.returncode == 0 and r.stderr == ""
    assert re.fullmatch(r"tfos \S+ \(protocol \d+\)\n", r.stdout)


# ---- the program: the first argument that is not an option ---------------------------


def test_first_non_option_starts_the_program(tmp_path, echo, marker):
    script, out = echo
    r = run_tfos(["run", "--workers", "2", "--log-dir", str(tmp_path / "logs"), "--max-restarts=0",
                  PY, script, str(out), marker, "ok", "--epochs", "3", "-x", "--", "--workers", "9", "-h"])
    assert r.returncode == 0, r.stderr
    recs = records(out)
    assert sorted(recs) == [0, 1]
    for rec in recs.values():
        assert rec["argv"] == ["--epochs", "3", "-x", "--", "--workers", "9", "-h"]
        assert rec["env"]["WORLD_SIZE"] == "2"


def test_double_dash_still_starts_the_program(tmp_path, echo, marker):
    script, out = echo
    r = run_tfos(["run", "--workers=1", "--log-dir=%s" % (tmp_path / "logs"), "--",
                  PY, script, str(out), marker, "ok", "--help"])
    assert r.returncode == 0, r.stderr
    assert records(out)[0]["argv"] == ["--help"]


# ---- usage errors: exit 2, one line naming the flag, then the hint ---------------------


@pytest.mark.parametrize("args,flag", [
    (["run", "--bogus", "--workers", "1", "true"], "--bogus"),
    (["run", "--workers"], "--workers"),
    (["run", "--workers", "0", "true"], "--workers 0"),
    (["run", "--workers=0", "true"], "--workers 0"),
    (["run", "--workers", "5000", "true"], "--workers"),
    (["run", "--workers", "two", "true"], "--workers"),
    (["run", "--workers", "1", "--max-restarts", "-1", "true"], "--max-restarts"),
    (["run", "--workers", "1", "--grace", "0", "true"], "--grace"),
    (["run", "--workers", "1", "--status-port", "70000", "true"], "--status-port"),
    (["run", "--workers", "1", "--feed-mb", "3", "true"], "--feed-mb"),
    (["run", "--workers", "1", "--chief=yes", "true"], "--chief"),
    (["run", "--workers", "1", "--log-dir"], "--log-dir"),
    (["run", "--workers", "1000", "--ps", "1000", "true"], "--workers"),
    (["run", "--workers", "2"], "program"),
    (["run", "true"], "--workers"),
    (["coordinator", "--workers", "0"], "--workers 0"),
    (["status", "--bogus"], "--bogus"),
    (["status", "--log-dir"], "--log-dir"),
    (["logs", "--nope"], "--nope"),
    (["frobnicate"], "frobnicate"),
    (["--frobnicate"], "--frobnicate"),
])
def test_usage_errors_exit_2_with_one_line(args, flag):
    r = run_tfos(args, timeout=10)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 2, r.stderr
    assert lines[0].startswith("tfos: ") and flag in lines[0]
    cmd = args[0] if args[0] in USER_COMMANDS + INTERNAL_COMMANDS else None
    assert lines[1] == ("(tfos %s --help for usage)" % cmd if cmd else "(tfos --help for usage)")


@pytest.mark.parametrize("given,near", [
    ("--worker", "--workers"), ("--wokrers", "--workers"), ("--worker=2", "--workers"), ("--work", "--workers"),
    ("--max-restart", "--max-restarts"), ("--chef", "--chief"), ("--log_dir", "--log-dir"),
    ("--frobnicate", None),
])
def test_a_mistyped_option_gets_the_nearest_one_named(given, near):
    # as a user types it: `tfos run --worker 2 -- python train.py`
    r = run_tfos(["run", given, "2", "--", "true"], timeout=10)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 2 and lines[1] == "(tfos run --help for usage)", r.stderr
    if near:
        assert lines[0] == "tfos: unknown option '%s'; did you mean '%s'?" % (given, near), lines[0]
    else:
        assert lines[0] == "tfos: unknown option '%s'" % given, lines[0]


# ---- torchrun's variables --------------------------------------------------------------


def test_torchrun_variables_after_a_restart(tmp_path, echo, marker):
    script, out = echo
    # inherited values of the variables tfos owns are dropped, not passed on
    stale = {"GROUP_RANK": "7", "ROLE_NAME": "stale", "TORCHELASTIC_RUN_ID": "stale", "ROLE_WORLD_SIZE": "9",
             "TORCHELASTIC_RESTART_COUNT": "5", "TORCHELASTIC_MAX_RESTARTS": "9"}
    r = run_tfos(["run", "--workers", "2", "--max-restarts", "1", "--log-dir", str(tmp_path / "logs"),
                  PY, script, str(out), marker, "fail-first"], env=stale)
    assert r.returncode == 0, r.stderr
    recs = records(out)
    assert sorted(recs) == [0, 1]
    run_ids = set()
    for rank, rec in recs.items():
        env = rec["env"]
        assert env["TFOS_ATTEMPT"] == "2"
        assert env["RANK"] == env["GROUP_RANK"] == env["ROLE_RANK"] == str(rank)
        assert env["WORLD_SIZE"] == env["GROUP_WORLD_SIZE"] == env["ROLE_WORLD_SIZE"] == "2"
        assert env["LOCAL_RANK"] == str(rank)
        assert env["ROLE_NAME"] == "default"
        assert env["TORCHELASTIC_RESTART_COUNT"] == "1"
        assert env["TORCHELASTIC_MAX_RESTARTS"] == "1"
        assert env["TORCHELASTIC_RUN_ID"] and env["TORCHELASTIC_RUN_ID"] == env["TFOS_CLUSTER_ID"]
        run_ids.add(env["TORCHELASTIC_RUN_ID"])
    assert len(run_ids) == 1


def test_torchrun_variables_first_attempt(tmp_path, echo, marker):
    script, out = echo
    r = run_tfos(["run", "--workers", "1", "--chief", "--log-dir", str(tmp_path / "logs"),
                  PY, script, str(out), marker, "ok"])
    assert r.returncode == 0, r.stderr
    recs = records(out)
    assert sorted(recs) == [0, 1]
    for rank, rec in recs.items():
        env = rec["env"]
        assert env["GROUP_RANK"] == env["ROLE_RANK"] == str(rank)
        assert env["GROUP_WORLD_SIZE"] == env["ROLE_WORLD_SIZE"] == "2"
        assert env["TORCHELASTIC_RESTART_COUNT"] == "0"
        assert env["TORCHELASTIC_MAX_RESTARTS"] == "3"  # tfos run's default --max-restarts
