"""TensorBoard over a log dir on HDFS (or any URL ``tfos.fs`` reads).

    python -m tfos.tensorboard --logdir hdfs:///user/me/tb [TensorBoard's options]

TensorFlow 2.21 reads no ``hdfs://`` (its HDFS moved to tensorflow-io,
which has no build for it), so TensorBoard cannot be given the URL. This
gives it a local copy that follows the remote directory instead: every
``--sync`` seconds (default 5) the files that are new or have grown there
are fetched, a grown file by its new bytes only, appended in place, as
TensorBoard expects of event files (a file that shrank is fetched whole).
Files removed there stay here until TensorBoard ends; names that start
with ``.`` (``tfos.fs``'s uploads in progress) are skipped. The copy is a
new directory under ``$TMPDIR``, removed when this ends.

Access is ``tfos.fs``'s: on a Kerberized cluster, the container's
delegation tokens in a YARN container, else the process's Kerberos ticket
(``kinit``), fetching new tokens as they age. A local ``--logdir`` is given
to TensorBoard as it is.

TensorBoard runs as a child process; SIGTERM or SIGINT here stops it, and
this exits with its status. Programs write their summaries locally and
upload them with ``tfos.fs.Mirror(url).push()`` (docs/YARN.md).
"""

import argparse
import os
import posixpath
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from . import fs as tfs


def _rel(root, path):
    root = root.rstrip("/")
    return path[len(root):].lstrip("/") if path.startswith(root + "/") else posixpath.relpath(path, root)


def sync(url, local, sizes):
    """Bring ``local`` up to date with ``url``: new files fetched, grown
    files' new bytes appended. ``sizes`` (relative path -> size held) is
    updated. Returns the number of bytes fetched."""
    fsys, root = tfs.filesystem(url)
    if not fsys.exists(root):
        return 0
    fetched = 0
    for path, info in sorted(fsys.find(root, detail=True).items()):
        if info.get("type") == "directory":
            continue
        rel = _rel(root, path)
        if any(part.startswith(".") for part in rel.split("/")):
            continue
        size, held = int(info.get("size") or 0), sizes.get(rel)
        if held == size:
            continue
        dst = os.path.join(local, *rel.split("/"))
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if held is not None and size > held:
            data = fsys.cat_file(path, start=held, end=size)
            with open(dst, "ab") as f:
                f.write(data)
        else:
            data = fsys.cat_file(path)
            with open(dst, "wb") as f:
                f.write(data)
        fetched += len(data)
        sizes[rel] = held + len(data) if held is not None and size > held else len(data)
    return fetched


def stop_child(proc):
    """Stop a TensorBoard process: SIGTERM, and SIGKILL 10 s later."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tfos.tensorboard", description=__doc__.split("\n\n")[0],
                                 epilog="Other options go to TensorBoard.")
    ap.add_argument("--logdir", required=True, help="the log dir: hdfs://..., webhdfs://..., or a local path")
    ap.add_argument("--sync", type=float, default=5.0, help="seconds between two looks at the remote dir (5)")
    args, rest = ap.parse_known_args(argv)
    if args.sync <= 0:
        ap.error("--sync must be a positive number of seconds")
    tb = [sys.executable, "-m", "tensorboard.main"]
    if not tfs.is_remote(args.logdir):
        os.execv(sys.executable, tb + ["--logdir", tfs._local(args.logdir)] + rest)
    local = tempfile.mkdtemp(prefix="tfos-tensorboard-")
    sizes = {}
    try:
        sync(args.logdir, local, sizes)
    except Exception as e:  # the first look says what is wrong at once (no ticket, no such NameNode, ...)
        shutil.rmtree(local, ignore_errors=True)
        sys.stderr.write("tfos.tensorboard: cannot read %s: %s: %s\n" % (args.logdir, type(e).__name__, e))
        return 1
    sys.stderr.write("tfos.tensorboard: following %s in %s, every %g s\n" % (args.logdir, local, args.sync))
    child = subprocess.Popen(tb + ["--logdir", local] + rest, stdin=subprocess.DEVNULL)
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, _f: stop.append(s))
    last_error = None
    try:
        while not stop and child.poll() is None:
            deadline = time.monotonic() + args.sync
            while not stop and child.poll() is None and time.monotonic() < deadline:
                time.sleep(min(0.2, args.sync))
            if stop or child.poll() is not None:
                break
            try:
                sync(args.logdir, local, sizes)
                last_error = None
            except Exception as e:  # said once, tried again at the next look: TensorBoard keeps what it has
                msg = "%s: %s" % (type(e).__name__, e)
                if msg != last_error:
                    sys.stderr.write("tfos.tensorboard: cannot read %s (trying again in %g s): %s\n"
                                     % (args.logdir, args.sync, msg))
                last_error = msg
    finally:
        stop_child(child)
        shutil.rmtree(local, ignore_errors=True)
    code = child.returncode
    if stop:
        return 128 + stop[0]
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
