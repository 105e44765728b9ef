"""python -m torchtpu.xla script.py args...: runs a PyTorch/XLA script on "tpu".

The script runs as __main__ (sys.argv = [script.py, args...]) with the
torch_xla import hook installed; `-m module args...` runs a module instead."""
import os
import runpy
import sys

USAGE = "usage: python -m torchtpu.xla (script.py | -m module) [args...]"


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or (argv[0] == "-m" and len(argv) < 2):
        print(USAGE, file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    import torchtpu.xla  # noqa: F401  the import hook
    if argv[0] == "-m":
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))  # as python script.py
        runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
