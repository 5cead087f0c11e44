"""tfos yarn on a Kerberized YARN + HDFS minicluster (MiniCluster.java --secure:
a MiniKdc, Kerberos authentication for every daemon, SPNEGO on the web
endpoints, block tokens, SASL on data transfer).

The cluster's HDFS delegation tokens are renewable every 10 s and live 20 s
at most, so that a run of ~60 s outlives several of them: renewal and
replacement have to work for the tests to pass. TFOS_SECURE_STEPS=N makes
that run N steps of ~0.6 s (default 80; 340 outlives 10 token lifetimes).
"""

import json
import os
import re
import signal
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from test_yarn import HERE, SMALL, TFOS, app_id, steps_lines, tfos_yarn
from yarncluster import YarnCluster

TOKEN_RENEW_S = 10
TOKEN_MAX_S = 20
STEPS = int(os.environ.get("TFOS_SECURE_STEPS", "80"))


@pytest.fixture(scope="module")
def secure_cluster():
    cluster = YarnCluster(secure=True, token_renew_s=TOKEN_RENEW_S, token_max_s=TOKEN_MAX_S)
    cluster.start(timeout=float(os.environ.get("TFOS_YARN_START_TIMEOUT", "180")))
    try:
        yield cluster
    finally:
        cluster.stop()


def webhdfs(cluster):
    conf = open(os.path.join(cluster.conf_dir, "hdfs-site.xml")).read()
    return "http://" + re.search(r"<name>dfs.namenode.http-address</name><value>([^<]+)<", conf).group(1)


def test_webhdfs_takes_no_user_name_on_the_secure_cluster(secure_cluster):
    # what tfos.fs does with simple authentication is refused here: only SPNEGO or a delegation token
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(webhdfs(secure_cluster) + "/webhdfs/v1/?op=LISTSTATUS&user.name=tfos", timeout=30)
    assert e.value.code == 401


def test_no_ticket_and_no_keytab_is_refused_naming_kinit(secure_cluster):
    r = tfos_yarn(secure_cluster, ["--workers", "1"] + SMALL + ["--", sys.executable, "-c", "pass"], timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "has no Kerberos ticket: run `kinit YOU@REALM`, or pass --principal" in out, out
    assert "submitted" not in out, out


def test_keytab_of_another_principal_is_refused_naming_its_principals(secure_cluster):
    r = tfos_yarn(secure_cluster, ["--principal", "someone@EXAMPLE.COM", "--keytab", secure_cluster.keytab,
                                   "--workers", "1"] + SMALL + ["--", sys.executable, "-c", "pass"], timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "the Kerberos login of someone@EXAMPLE.COM failed" in out, out
    assert "klist -kt %s" % secure_cluster.keytab in out, out


def test_principal_without_keytab_is_a_usage_error(secure_cluster):
    r = tfos_yarn(secure_cluster, ["--principal", secure_cluster.principal, "--workers", "1", "--", "true"],
                  timeout=60)
    assert r.returncode == 2, r.stderr
    assert "--principal and --keytab go together" in r.stderr


def test_a_run_outlives_its_delegation_tokens_and_resumes_after_a_kill(secure_cluster):
    # 2 workers checkpoint to HDFS (tfos.fs over WebHDFS, with delegation tokens) at every step, ~0.6 s
    # each, for ~50 s: 2.5 maximum token lifetimes. worker:1 kills itself at step 40 (~35 s in, past the
    # submitted tokens' maximum lifetime): the new containers must get the ApplicationMaster's fresh
    # tokens, and the node resumes from its checkpoint.
    r = tfos_yarn(secure_cluster, ["--principal", secure_cluster.principal, "--keytab", secure_cluster.keytab,
                                   "--workers", "2"] + SMALL +
                  ["--file", os.path.join(HERE, "progs", "steps.py"), "--env", "STEPS_TOTAL=%d" % STEPS,
                   "--env", "STEPS_NODE=worker:1", "--env", "STEPS_DO=kill9", "--env", "STEPS_AT=40",
                   "--", sys.executable, "steps.py"], timeout=120 + STEPS)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    app = app_id(out)
    lines = steps_lines(secure_cluster, app)
    assert "STEPS worker:0 done" in lines and "STEPS worker:1 done" in lines, lines
    resumed = [ln for ln in lines if ln.startswith("STEPS worker:1 attempt=2")]
    assert resumed and "from=40" in resumed[0], lines
    logs = "\n".join(text for c in secure_cluster.container_logs(app).values() for text in c.values())
    for bad in ("InvalidToken", "AccessControlException", "token is expired", "could not read fresh"):
        assert bad not in logs, logs[-4000:]
    am = [c for c in secure_cluster.container_logs(app).values() if "tfos-am:" in c.get("stderr", "")]
    assert am, "no ApplicationMaster log"
    renewed = am[0]["stderr"].count("tfos-am: new HDFS delegation tokens for the nodes")
    assert renewed >= 3, am[0]["stderr"][-3000:]
    # the keytab went to the ApplicationMaster's container only
    keytabs = subprocess.run(["find", secure_cluster.tmp_dir, "-path", "*%s*" % app, "-name", "tfos.keytab"],
                             capture_output=True, text=True).stdout.split()
    assert keytabs and all(app.replace("application", "container") + "_01_000001" in k for k in keytabs), keytabs


KINIT_PROG = ("import tfos.fs; url = 'hdfs:///user/tfos/kinit-test/hello.txt'; "
              "open('hello.txt', 'w').write('written with a delegation token'); tfos.fs.put('hello.txt', url); "
              "print('KINIT-TEST ' + tfos.fs.open(url).read().decode(), flush=True)")


@pytest.fixture(scope="module")
def ticket(secure_cluster, tmp_path_factory):
    """A ticket cache holding the test user's ticket (kinit -kt), as {"KRB5CCNAME": ...}."""
    kinit = shutil.which("kinit")
    if not kinit:
        pytest.skip("no kinit (Debian's krb5-user; scripts/install-deps.sh --test installs it)")
    env = {"KRB5CCNAME": "FILE:%s" % (tmp_path_factory.mktemp("ticket") / "krb5cc")}
    subprocess.run([kinit, "-kt", secure_cluster.keytab, secure_cluster.principal],
                   env=dict(secure_cluster.env(), **env), check=True, timeout=30)
    return env


FS_PROG = """
import os, sys, tfos.fs
root = "hdfs:///user/tfos/fs-test"
os.makedirs("tree/sub", exist_ok=True)
open("tree/a.txt", "w").write("a")
open("tree/sub/b.txt", "w").write("b")
tfos.fs.put("tree", root)
tfos.fs.get(root, "back")
print("FS-TEST", open("back/a.txt").read(), open("back/sub/b.txt").read(), tfos.fs.exists(root + "/sub/b.txt"))
"""


def test_tfos_fs_outside_containers_uses_the_ticket(secure_cluster, ticket, tmp_path):
    # a driver or a laptop: no container token; the ticket gets a delegation token over SPNEGO
    e = dict(secure_cluster.env(), **ticket)
    e.pop("TFOS_WEBHDFS", None)
    r = subprocess.run([sys.executable, "-c", FS_PROG], env=e, cwd=tmp_path, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "FS-TEST a b True" in r.stdout, r.stdout + r.stderr
    # without a ticket: refused, naming kinit
    r = subprocess.run([sys.executable, "-c", FS_PROG], env=secure_cluster.env(), cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "OSError" in r.stderr and "run `kinit YOU@REALM`" in r.stderr, r.stderr


def sleeper(cluster, env, out_path, acls=()):
    """A running application of the test user (ticket env), once its program has printed."""
    with open(out_path, "wb") as out:
        p = subprocess.Popen([TFOS, "yarn", "--workers", "1"] + list(acls) + SMALL +
                             ["--", sys.executable, "-c", "import time; print('ACL-TEST', flush=True); "
                              "time.sleep(300)"], env=dict(cluster.env(), **env), cwd=cluster.tmp_dir,
                             stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and "[worker:0] ACL-TEST" not in out_path.read_text():
        assert p.poll() is None, out_path.read_text()
        time.sleep(0.5)
    assert "[worker:0] ACL-TEST" in out_path.read_text(), out_path.read_text()
    return p, app_id(out_path.read_text())


def test_another_user_sees_and_kills_only_what_the_owner_shares(secure_cluster, ticket, tmp_path):
    other = {"KRB5CCNAME": "FILE:%s" % (tmp_path / "other-cc")}
    subprocess.run(["kinit", "-kt", os.path.join(secure_cluster.conf_dir, "other.keytab"),
                    secure_cluster.other_principal], env=dict(secure_cluster.env(), **other), check=True,
                   timeout=30)

    def yarn_as(env, *args):
        return subprocess.run([TFOS, "yarn"] + list(args), env=dict(secure_cluster.env(), **env),
                              capture_output=True, text=True, timeout=60)

    # not shared (the default): the other user gets no tracking URL, host or diagnostics, and cannot kill it
    p, app = sleeper(secure_cluster, ticket, tmp_path / "a.out")
    try:
        mine = yarn_as(ticket, "status", app)
        assert mine.returncode == 0 and re.search(r"tracking\s+http://", mine.stdout), mine.stdout + mine.stderr
        theirs = yarn_as(other, "status", app)
        assert theirs.returncode == 0 and re.search(r"tracking\s+N/A", theirs.stdout), theirs.stdout
        assert "coordinator N/A" in theirs.stdout, theirs.stdout
        kill = yarn_as(other, "kill", app)
        assert kill.returncode == 1, kill.stdout + kill.stderr
        assert "cannot perform operation MODIFY_APP" in kill.stderr and "--modify-acl" in kill.stderr, kill.stderr
        assert p.poll() is None
        assert yarn_as(ticket, "kill", app).returncode == 0
        assert p.wait(timeout=60) == 143
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=30)
    # shared with --view-acl/--modify-acl: the other user sees it and may kill it
    p, app = sleeper(secure_cluster, ticket, tmp_path / "b.out", ["--view-acl", "other", "--modify-acl", "other"])
    try:
        theirs = yarn_as(other, "status", app)
        assert re.search(r"tracking\s+http://", theirs.stdout), theirs.stdout + theirs.stderr
        kill = yarn_as(other, "kill", app)
        assert kill.returncode == 0 and "killed " + app in kill.stderr, kill.stderr
        assert p.wait(timeout=60) == 143
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=30)


def test_a_user_logged_in_with_kinit_runs_and_asks_for_its_status(secure_cluster, ticket):
    env = ticket
    e = dict(secure_cluster.env(), **env)
    r = tfos_yarn(secure_cluster, ["--workers", "1"] + SMALL + ["--", sys.executable, "-c", KINIT_PROG], env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "[worker:0] KINIT-TEST written with a delegation token" in out, out
    app = app_id(out)
    # the ResourceManager answers the ticket's holder (aggregated logs are not tried: on a Kerberized
    # cluster the NodeManagers aggregate with Hadoop's native library, which Maven's artifacts lack)
    st = subprocess.run([TFOS, "yarn", "status", app], env=e, capture_output=True, text=True, timeout=60)
    assert st.returncode == 0 and "state       FINISHED (SUCCEEDED)" in st.stdout, st.stdout + st.stderr
    st = subprocess.run([TFOS, "yarn", "status", app], env=secure_cluster.env(), capture_output=True, text=True,
                        timeout=60)
    assert st.returncode == 1 and "has no Kerberos ticket" in st.stderr, st.stdout + st.stderr


def test_yarn_serve_loads_new_versions_from_hdfs_past_its_tokens_lifetime(secure_cluster, ticket, mlflow_server,
                                                                          monkeypatch, tmp_path):
    # model m: the model server in a container polls HDFS with delegation tokens, and a version put there
    # after the submitted tokens' maximum lifetime is loaded and served. model r (a registry's): the front
    # end in the ApplicationMaster's container writes each version to HDFS with the token the
    # ApplicationMaster hands it; a promotion after that lifetime is served too
    from test_yarn import FACTOR_LOADER
    import tfos.models
    for k, v in dict(secure_cluster.env(), **ticket).items():
        if k in ("HADOOP_CONF_DIR", "KRB5_CONFIG", "KRB5CCNAME"):
            monkeypatch.setenv(k, v)
    monkeypatch.delenv("TFOS_WEBHDFS", raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.url)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    import tfos.fs
    served = "%s/user/tfos/served/m" % secure_cluster.default_fs
    reg = "secure-%d" % int(time.time() * 1000)
    for factor in (2, 3):
        (tmp_path / str(factor)).mkdir()
        (tmp_path / str(factor) / "factor").write_text(str(factor))
        tfos.models.register(str(tmp_path / str(factor)), reg, alias="production" if factor == 2 else None)
    tfos.fs.put(str(tmp_path / "2"), served + "/1")
    (tmp_path / "factor_loader.py").write_text(FACTOR_LOADER)
    out_path = tmp_path / "client.out"
    with open(out_path, "wb") as out:
        p = subprocess.Popen([TFOS, "yarn", "serve", "--principal", secure_cluster.principal, "--keytab",
                              secure_cluster.keytab, "--worker-memory", "512m", "--am-memory", "384m", "--file",
                              str(tmp_path / "factor_loader.py"), "--loader", "m=factor_loader.py:load",
                              "--loader", "r=factor_loader.py:load", "--python", sys.executable, "--poll",
                              "0.5", "--model", "m=" + served, "--model", "r=models:/%s@production" % reg,
                              "--registry-poll", "0.5"],
                             env=dict(secure_cluster.env(), MLFLOW_TRACKING_URI=mlflow_server.url),
                             cwd=secure_cluster.tmp_dir, stdout=out, stderr=subprocess.STDOUT)

    def infer(url, v, model="m"):
        body = json.dumps({"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [v]}]}).encode()
        req = urllib.request.Request(url + "/v2/models/%s/infer" % model, data=body, method="POST")
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())["outputs"][0]["data"][0] / v

    try:
        url_re = re.compile(r"tfos yarn serve: model m: POST (http://[^/\s]+)/v2/models/m/infer")
        loaded = "[worker:0] tfos.serve: model %s version %d loaded"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not all(loaded % (m, 1) in out_path.read_text() for m in "mr"):
            assert p.poll() is None, out_path.read_text()
            time.sleep(0.5)
        text = out_path.read_text()
        assert all(loaded % (m, 1) in text for m in "mr"), text
        url = url_re.search(text).group(1)
        started = time.monotonic()
        assert infer(url, 5.0) == 2.0 and infer(url, 5.0, "r") == 2.0
        time.sleep(max(0.0, TOKEN_MAX_S + 5 - (time.monotonic() - started)))  # the first tokens are dead now
        tfos.fs.put(str(tmp_path / "3"), served + "/2")
        tfos.models.set_alias(reg, "production", "2")
        while time.monotonic() < deadline + 60 and not all(loaded % (m, 2) in out_path.read_text() for m in "mr"):
            assert p.poll() is None, out_path.read_text()
            time.sleep(0.5)
        assert all(loaded % (m, 2) in out_path.read_text() for m in "mr"), out_path.read_text()
        assert infer(url, 5.0) == 3.0 and infer(url, 5.0, "r") == 3.0
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=90) == 130, out_path.read_text()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=30)
    text = out_path.read_text()
    for bad in ("InvalidToken", "token is expired", "could not read fresh"):
        assert bad not in text, text[-3000:]
