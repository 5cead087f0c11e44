"""What another local user can see of an application: run as that user
(tests/yarn/test_secure.py), standard library only.

stdin: {"secrets": [hex, ...], "roots": [dir, ...], "pids": [pid, ...]}.
Every file under the roots that this user can open is read and searched
for every secret; so is every process's command line (/proc/PID/cmdline,
readable by anyone), and the environment of the given pids where it can
be read at all. stdout: one JSON object saying what was read and where a
secret was found.
"""

import json
import os
import sys


def main():
    job = json.load(sys.stdin)
    secrets = [bytes.fromhex(s) for s in job["secrets"]]
    found, files_read, dirs_denied = [], 0, 0

    def search(where, data):
        for i, s in enumerate(secrets):
            if s and s in data:
                found.append([where, i])

    for root in job["roots"]:
        for dirpath, dirs, files in os.walk(root, onerror=lambda e: None):
            for d in dirs:
                if not os.access(os.path.join(dirpath, d), os.R_OK | os.X_OK):
                    dirs_denied += 1
            for name in files:
                path = os.path.join(dirpath, name)
                try:
                    with open(path, "rb") as f:
                        data = f.read(1 << 24)
                except OSError:
                    continue
                files_read += 1
                search(path, data)
    cmdlines = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                data = f.read()
        except OSError:
            continue
        cmdlines += 1
        search("/proc/%s/cmdline" % pid, data)
    environs = []
    for pid in job["pids"]:
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                search("/proc/%d/environ" % pid, f.read())
            environs.append(pid)
        except OSError:
            pass
    json.dump({"uid": os.getuid(), "found": found, "files_read": files_read, "dirs_denied": dirs_denied,
               "cmdlines": cmdlines, "environs_read": environs}, sys.stdout)


if __name__ == "__main__":
    main()
