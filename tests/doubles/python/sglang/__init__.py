"""Stand-in for the `sglang` package (SGLang 0.5.21) inside the test cluster's "container" steps.

STANDS FOR: `python3 -m sglang.launch_server ...` as the seed guide's serve job runs it.
WHAT IT DOES: see launch_server.py (server) and standin_args.py (the real command-line parser, rebuilt from
real_flags.json). Python 3 stdlib only, so Debian's /usr/bin/python3 runs it.
WHAT IT DOES NOT DO: load a model, use GPUs, or import anything of the real SGLang.
"""

__version__ = "0.5.21"
