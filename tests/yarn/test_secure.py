"""tfos yarn on a Kerberized YARN + HDFS minicluster (MiniCluster.java --secure:
a MiniKdc, Kerberos authentication for every daemon, SPNEGO on the web
endpoints, block tokens, SASL on data transfer).

The cluster's HDFS delegation tokens live 20 s at most, so that a run of
~60 s outlives several of them: replacement (a new set from the
ApplicationMaster's keytab) has to work for the tests to pass. They are
renewable every 18 s: the ApplicationMaster renews the sets it holds, but
no node depends on the ResourceManager's renewal of the submitted tokens,
which comes at 90 % of the interval (1 s before expiry at 10 s: CI's
loaded machine missed it, and a kinit run's first write failed). TFOS_SECURE_STEPS=N makes
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

TOKEN_RENEW_S = 18
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


def test_a_clock_off_by_more_than_the_kdc_allows_and_an_unreachable_kdc_are_named(secure_cluster, tmp_path):
    args = ["yarn", "--principal", secure_cluster.principal, "--keytab", secure_cluster.keytab, "--workers", "1"] + \
        SMALL + ["--", sys.executable, "-c", "pass"]
    # this host's clock 15 minutes ahead of the KDC's (Debian's faketime, around the client only)
    faketime = shutil.which("faketime")
    if not faketime:
        pytest.skip("no faketime (Debian's faketime; scripts/install-deps.sh --test installs it)")
    r = subprocess.run([faketime, "-m", "-f", "+15m", TFOS] + args, capture_output=True, text=True, timeout=120,
                       env=dict(secure_cluster.env(), FAKETIME_DONT_FAKE_MONOTONIC="1"), cwd=secure_cluster.tmp_dir)
    assert r.returncode == 1, r.stdout + r.stderr
    # (Kerby's KDC answers it as a failed pre-authentication, as it does a wrong key: both are named)
    assert "this host's clock and the KDC's differ by more than the KDC allows" in r.stderr, r.stderr
    assert "has no valid key for %s" % secure_cluster.principal in r.stderr, r.stderr
    assert "set the time right" in r.stderr and "submitted" not in r.stderr, r.stderr
    # a krb5.conf whose KDC nobody answers
    conf = open(os.path.join(secure_cluster.conf_dir, "krb5.conf")).read()
    bad = re.sub(r"kdc\s*=\s*\S+", "kdc = 127.0.0.1:9", conf)
    assert bad != conf, conf
    (tmp_path / "krb5.conf").write_text(bad)
    r = subprocess.run([TFOS] + args, capture_output=True, text=True, timeout=180, cwd=secure_cluster.tmp_dir,
                       env=dict(secure_cluster.env(), KRB5_CONFIG=str(tmp_path / "krb5.conf")))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "the KDC cannot be reached" in r.stderr and "is its realm and kdc right?" in r.stderr, r.stderr


def kill_application_master(app):
    """SIGKILL the ApplicationMaster's JVM (its container's main process): a lost ApplicationMaster."""
    for pid, env in app_processes(app).items():
        if b"_01_000001" in env.split(b"CONTAINER_ID=", 1)[1].split(b"\0")[0]:
            cmd = open("/proc/%d/cmdline" % pid, "rb").read()
            if b"io.tfos.yarn.ApplicationMaster" in cmd:
                os.kill(pid, signal.SIGKILL)
                return pid
    raise AssertionError("no ApplicationMaster process of %s" % app)


def test_a_run_outlives_its_tokens_a_node_kill_and_a_lost_application_master(secure_cluster, tmp_path):
    # 2 workers checkpoint to HDFS (tfos.fs over WebHDFS, with delegation tokens) at every step, ~0.6 s
    # each, for ~50 s of steps: 2.5 maximum token lifetimes. worker:1 kills itself at step 40 (~35 s in,
    # past the submitted tokens' maximum lifetime): the new containers must get the ApplicationMaster's
    # fresh tokens, and the node resumes from its checkpoint. Then the ApplicationMaster is killed
    # (--am-attempts 2): YARN starts another, which must get live tokens of its own (the submitted ones
    # are long dead), and every node resumes from its checkpoint again
    out_path = tmp_path / "client.out"
    with open(out_path, "wb") as out:
        p = subprocess.Popen([TFOS, "yarn", "--principal", secure_cluster.principal, "--keytab",
                              secure_cluster.keytab, "--am-attempts", "2", "--workers", "2"] + SMALL +
                             ["--file", os.path.join(HERE, "progs", "steps.py"), "--env", "STEPS_TOTAL=%d" % STEPS,
                              "--env", "STEPS_NODE=worker:1", "--env", "STEPS_DO=kill9", "--env", "STEPS_AT=40",
                              "--", sys.executable, "steps.py"], env=secure_cluster.env(), cwd=secure_cluster.tmp_dir,
                             stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120 + STEPS
        while time.monotonic() < deadline and "STEPS worker:1 attempt=2" not in out_path.read_text():
            assert p.poll() is None, out_path.read_text()
            time.sleep(0.5)
        assert "STEPS worker:1 attempt=2" in out_path.read_text(), out_path.read_text()
        # both nodes checkpointed past step 40 (a fixed sleep here was too short on a loaded machine)
        while time.monotonic() < deadline and not all("STEPS worker:%d past 42" % i in out_path.read_text()
                                                      for i in (0, 1)):
            assert p.poll() is None, out_path.read_text()
            time.sleep(0.5)
        assert all("STEPS worker:%d past 42" % i in out_path.read_text() for i in (0, 1)), out_path.read_text()
        app = app_id(out_path.read_text())
        kill_application_master(app)
        assert p.wait(timeout=120 + STEPS) == 0, out_path.read_text()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=30)
    out = out_path.read_text()
    assert "tfos: the ApplicationMaster's attempt 1 of %s ended" % app in out, out
    assert "YARN started attempt 2, whose nodes start again from their checkpoints" in out, out
    lines = steps_lines(secure_cluster, app)
    assert "STEPS worker:0 done" in lines and "STEPS worker:1 done" in lines, lines
    resumed = [ln for ln in lines if ln.startswith("STEPS worker:1 attempt=2")]
    assert resumed and "from=40" in resumed[0], lines
    second = [ln for ln in lines if "_02_0" in ln and " from=" in ln]   # nodes of the second ApplicationMaster
    assert sorted(ln.split()[1] for ln in second) == ["worker:0", "worker:1"], lines
    assert all(int(re.search(r"from=(\d+)", ln).group(1)) > 40 for ln in second), second
    logs = "\n".join(text for c in secure_cluster.container_logs(app).values() for text in c.values())
    for bad in ("InvalidToken", "AccessControlException", "token is expired", "could not read fresh"):
        assert bad not in logs, logs[-4000:]
    am = [c for c in secure_cluster.container_logs(app).values() if "tfos-am:" in c.get("stderr", "")]
    assert len(am) == 2, "ApplicationMaster logs: %d" % len(am)
    renewed = sum(c["stderr"].count("tfos-am: new HDFS delegation tokens for the nodes") for c in am)
    assert renewed >= 3, [c["stderr"][-2000:] for c in am]
    assert any("tfos-am: ApplicationMaster attempt 2 (the one before was lost)" in c["stderr"] for c in am)
    # the keytab went to the ApplicationMaster's containers only
    keytabs = subprocess.run(["find", secure_cluster.tmp_dir, "-path", "*%s*" % app, "-name", "tfos.keytab"],
                             capture_output=True, text=True).stdout.split()
    ams = [app.replace("application", "container") + "_0%d_000001" % a for a in (1, 2)]
    assert keytabs and all(any(a in k for a in ams) for k in keytabs), keytabs


# writes and reads HDFS with the submitted tokens; then, once they are past their maximum lifetime (nobody
# gets new ones without a keytab), asks again and prints what it is told
KINIT_PROG = """
import time, tfos.fs
url = 'hdfs:///user/tfos/kinit-test/hello.txt'
open('hello.txt', 'w').write('written with a delegation token')
tfos.fs.put('hello.txt', url)
print('KINIT-TEST ' + tfos.fs.open(url).read().decode(), flush=True)
time.sleep(%d)
try:
    tfos.fs.open(url).read()  # (exists() would say False: fsspec's takes every error for "not there")
except Exception as e:
    print('EXPIRED %%s: %%s' %% (type(e).__name__, e), flush=True)
""" % (TOKEN_MAX_S + 2)


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


def sleeper(cluster, env, out_path, extra=()):
    """A running application of the test user (ticket env), once its program has printed."""
    with open(out_path, "wb") as out:
        p = subprocess.Popen([TFOS, "yarn", "--workers", "1"] + list(extra) + SMALL +
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
        # its logs too: the owner reads them (the status page's, under Kerberos), the other user is told why not
        logs = yarn_as(ticket, "logs", app)
        assert logs.returncode == 0 and "[worker:0] ACL-TEST" in logs.stdout, logs.stdout + logs.stderr
        logs = yarn_as(other, "logs", app)
        assert logs.returncode == 1 and "ACL-TEST" not in logs.stdout, logs.stdout + logs.stderr
        assert "other may not see the logs of %s, which is tfos's" % app in logs.stderr, logs.stderr
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
        logs = yarn_as(other, "logs", app)
        assert logs.returncode == 0 and "[worker:0] ACL-TEST" in logs.stdout, logs.stdout + logs.stderr
        kill = yarn_as(other, "kill", app)
        assert kill.returncode == 0 and "killed " + app in kill.stderr, kill.stderr
        assert p.wait(timeout=60) == 143
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=30)


PEER = "tfos-peer"  # a second local Unix user, made for the test below


@pytest.fixture
def peer_user():
    """(uid, gid) of a local user that is not the cluster's, made with useradd and removed after."""
    if os.getuid() != 0 or not shutil.which("useradd") or not shutil.which("setpriv"):
        pytest.skip("a second Unix user needs root, useradd and setpriv")
    import pwd
    made = False
    try:
        pw = pwd.getpwnam(PEER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", PEER],
                       check=True, timeout=30)
        made, pw = True, pwd.getpwnam(PEER)
    try:
        yield pw.pw_uid, pw.pw_gid
    finally:
        if made:
            subprocess.run(["userdel", PEER], timeout=30)


def app_processes(app):
    """{pid: environ bytes} of the processes in the application's containers (as root)."""
    tag = b"CONTAINER_ID=" + app.replace("application", "container").encode() + b"_"
    procs = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = open("/proc/%s/environ" % pid, "rb").read()
        except OSError:
            continue
        if tag in env:
            procs[int(pid)] = env
    return procs


def test_another_local_user_reads_no_secret_of_a_running_application(secure_cluster, ticket, peer_user,
                                                                      tmp_path):
    # a keytab job runs; as a second Unix user, every file of the cluster's directories that user can
    # open (made traversable, 0755, as a real cluster's are), every process's command line, and the
    # application's processes' environments are searched for the application's secrets: tfos's secret,
    # the passwords of the tokens its containers hold, the AM's token file, the keytab's bytes
    from tfos import _hdfstokens
    for k in os.listdir(secure_cluster.conf_dir):
        if k.endswith(".keytab"):  # the fixture's own keytabs, kept as an administrator keeps them
            os.chmod(os.path.join(secure_cluster.conf_dir, k), 0o600)
    os.chmod(secure_cluster.tmp_dir, 0o755)
    p, app = sleeper(secure_cluster, ticket, tmp_path / "peek.out",
                     ["--principal", secure_cluster.principal, "--keytab", secure_cluster.keytab])
    try:
        procs = app_processes(app)
        assert len(procs) >= 3, procs.keys()   # the AM (Java, tfos's coordinator) and a node
        secrets = {open(secure_cluster.keytab, "rb").read()}
        roots = [secure_cluster.tmp_dir]
        for env in procs.values():
            for var in env.split(b"\0"):
                if var.startswith(b"TFOS_SECRET="):
                    secrets.add(var.split(b"=", 1)[1])
                if var.startswith(b"TFOS_HDFS_TOKEN_FILE="):
                    path = var.split(b"=", 1)[1].decode()
                    secrets.add(open(path, "rb").read().strip())
                    roots.append(os.path.dirname(path))
        token_files = []
        for dirpath, _dirs, files in os.walk(secure_cluster.tmp_dir):
            for f in files:
                if app.split("_", 1)[1] in dirpath and (f == "container_tokens" or f.endswith(".tokens")):
                    token_files.append(os.path.join(dirpath, f))
                    for t in _hdfstokens.read_credentials(open(token_files[-1], "rb").read()):
                        secrets.add(t.password)
        assert token_files and len(secrets) >= 4, (token_files, len(secrets))
        # a control the search must find: a readable file holding one of the secrets
        planted = os.path.join(secure_cluster.tmp_dir, "planted-%s" % app)
        with open(planted, "wb") as f:
            f.write(b"x" + sorted(secrets)[0] + b"x")
        os.chmod(planted, 0o644)
        uid, gid = peer_user
        job = {"secrets": [s.hex() for s in sorted(secrets)], "roots": roots, "pids": sorted(procs)}
        r = subprocess.run(["setpriv", "--reuid=%d" % uid, "--regid=%d" % gid, "--clear-groups", "/usr/bin/python3",
                            os.path.join(HERE, "progs", "peek.py")], input=json.dumps(job),
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        seen = json.loads(r.stdout)
        assert seen["uid"] == uid
        os.unlink(planted)
        assert [w for w, _ in seen["found"]] == [planted], seen["found"]
        assert seen["files_read"] > 1 and seen["dirs_denied"] > 0 and seen["cmdlines"] > len(procs), seen
        assert seen["environs_read"] == [], seen
        # on HDFS: the staging dir's credentials are the owner's alone
        creds = "hdfs:///user/tfos/.tfos/%s/credentials" % app
        other = {"KRB5CCNAME": "FILE:%s" % (tmp_path / "other-cc")}
        subprocess.run(["kinit", "-kt", os.path.join(secure_cluster.conf_dir, "other.keytab"),
                        secure_cluster.other_principal], env=dict(secure_cluster.env(), **other), check=True,
                       timeout=30)
        read = "import sys, tfos.fs; sys.stdout.write(str(len(tfos.fs.open(sys.argv[1]).read())))"
        for env, ok in ((ticket, True), (other, False)):
            e = dict(secure_cluster.env(), **env)
            e.pop("TFOS_WEBHDFS", None)
            got = subprocess.run([sys.executable, "-c", read, creds], env=e, capture_output=True, text=True,
                                 timeout=120)
            if ok:
                assert got.returncode == 0 and int(got.stdout) > 0, got.stderr
            else:
                assert got.returncode == 1 and "Permission denied" in got.stderr, got.stdout + got.stderr
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=30)


def test_a_user_logged_in_with_kinit_runs_and_asks_for_its_status(secure_cluster, ticket, tmp_path):
    env = ticket
    e = dict(secure_cluster.env(), **env)
    (tmp_path / "kinit_prog.py").write_text(KINIT_PROG)
    r = tfos_yarn(secure_cluster, ["--workers", "1", "--file", str(tmp_path / "kinit_prog.py")] + SMALL +
                  ["--", sys.executable, "kinit_prog.py"], env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "[worker:0] KINIT-TEST written with a delegation token" in out, out
    # the dead token: said, with what to do
    expired = [ln for ln in out.splitlines() if "[worker:0] EXPIRED " in ln]
    assert expired and "tfos yarn --principal P --keytab K" in expired[0], out
    assert "max-lifetime" in expired[0] and ("is expired" in expired[0] or "InvalidToken" in expired[0]), expired
    app = app_id(out)
    # the ResourceManager answers the ticket's holder (aggregated logs are not tried: the Kerberized
    # cluster cannot aggregate them, conftest.simple_cluster)
    st = subprocess.run([TFOS, "yarn", "status", app], env=e, capture_output=True, text=True, timeout=60)
    assert st.returncode == 0 and "state       FINISHED (SUCCEEDED)" in st.stdout, st.stdout + st.stderr
    st = subprocess.run([TFOS, "yarn", "status", app], env=secure_cluster.env(), capture_output=True, text=True,
                        timeout=60)
    assert st.returncode == 1 and "has no Kerberos ticket" in st.stderr, st.stdout + st.stderr
    # no ticket, a keytab: status logs in with it (before or after the application id)
    for args in (["--principal", secure_cluster.principal, "--keytab", secure_cluster.keytab, app],
                 [app, "--principal=" + secure_cluster.principal, "--keytab=" + secure_cluster.keytab]):
        st = subprocess.run([TFOS, "yarn", "status"] + args, env=secure_cluster.env(), capture_output=True,
                            text=True, timeout=60)
        assert st.returncode == 0 and "state       FINISHED (SUCCEEDED)" in st.stdout, st.stdout + st.stderr
    st = subprocess.run([TFOS, "yarn", "kill", "--principal", secure_cluster.principal, app],
                        env=secure_cluster.env(), capture_output=True, text=True, timeout=60)
    assert st.returncode == 2 and "--principal and --keytab go together" in st.stderr, st.stderr


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


def test_tensorboard_follows_event_files_on_hdfs_past_the_tokens_lifetime(secure_cluster, ticket, tmp_path):
    # --tensorboard-logdir hdfs://...: the chief's TensorBoard follows the HDFS dir (tfos.tensorboard) while
    # the program uploads its summaries there for ~1.5 token lifetimes; then TensorBoard on the driver's side,
    # with a kinit ticket, reads the same dir
    logdir = "hdfs:///user/tfos/tb-%d" % int(time.time() * 1000)
    steps = 50
    r = tfos_yarn(secure_cluster, ["--principal", secure_cluster.principal, "--keytab", secure_cluster.keytab,
                                   "--workers", "2", "--tensorboard", "--tensorboard-logdir", logdir] + SMALL +
                  ["--file", os.path.join(HERE, "progs", "tb_hdfs.py"), "--env", "TB_STEPS=%d" % steps,
                   "--env", "TB_PAUSE=0.6", "--", sys.executable, "tb_hdfs.py"], timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "[worker:0] TB-HDFS wrote %d steps" % steps in out, out
    assert "[worker:0] TB-HDFS saw %s" % ",".join(map(str, range(steps))) in out, out
    assert "[worker:1] TB-HDFS worker:1 done" in out, out
    logs = "\n".join(text for c in secure_cluster.container_logs(app_id(out)).values() for text in c.values())
    for bad in ("InvalidToken", "token is expired", "cannot read hdfs"):
        assert bad not in logs, logs[-4000:]
    # outside the cluster: a ticket, no container token
    e = dict(secure_cluster.env(), **ticket)
    e.pop("TFOS_WEBHDFS", None)
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tb = subprocess.Popen([sys.executable, "-m", "tfos.tensorboard", "--logdir", logdir, "--sync", "1", "--host",
                           "127.0.0.1", "--port", str(port)], env=e, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    try:
        url = "http://127.0.0.1:%d/data/plugin/scalars/scalars?run=train&tag=loss" % port
        deadline, seen = time.monotonic() + 90, []
        while time.monotonic() < deadline and len(seen) < steps:
            assert tb.poll() is None, tb.stdout.read()
            try:
                with urllib.request.urlopen(url, timeout=5) as resp:
                    seen = [int(s) for _, s, _ in json.loads(resp.read())]
            except OSError:
                time.sleep(0.5)
        assert seen == list(range(steps)), seen
        tb.send_signal(signal.SIGTERM)
        assert tb.wait(timeout=30) == 128 + signal.SIGTERM
        assert "tfos.tensorboard: following %s in " % logdir in tb.stdout.read()
    finally:
        if tb.poll() is None:
            tb.kill()
            tb.wait(timeout=30)
    # without a ticket: said at once, naming kinit
    e.pop("KRB5CCNAME")
    e["KRB5CCNAME"] = "FILE:%s" % (tmp_path / "none")
    r = subprocess.run([sys.executable, "-m", "tfos.tensorboard", "--logdir", logdir], env=e, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1 and "tfos.tensorboard: cannot read %s" % logdir in r.stderr, r.stderr
    assert "kinit" in r.stderr, r.stderr
