"""The program every rank runs for ``TorchDistributor(local_mode=True).run(fn)``:

    python -m tfos._torchprog PAYLOAD RESULT

PAYLOAD holds ``(fn, args)`` pickled by the driver (cloudpickle); the rank
calls ``fn(*args)`` and rank 0 writes the pickled return value to RESULT. An
exception propagates: Python prints its traceback and exits 1, and tfos
reports the rank with those last lines.
"""
import sys


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        sys.stderr.write("usage: python -m tfos._torchprog PAYLOAD RESULT\n")
        return 2
    from . import _payload
    with open(argv[0], "rb") as f:
        fn, args = _payload.loads(f.read(), "the function")
    from .torch import _call, _write_result
    _write_result(_call(fn, args), argv[1])
    return 0


if __name__ == "__main__":
    code = main()
    if code == 0:
        from ._exit import exit_now
        exit_now(0)  # without the interpreter's teardown of torch (tfos._exit)
    sys.exit(code)
