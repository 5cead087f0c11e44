"""`python -m tfos ...` is the `tfos` command (the binary inside the package)."""
import os
import sys

from ._launch import agent_path


def main():
    exe = agent_path()
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()
