"""What the SGLang stand-in does with its environment: the kernel caches, and NCCL's choice of network.

KERNEL CACHES. SGLang 0.5.21 (srt/environ.py, class Envs): SGLANG_CACHE_DIR = EnvStr(os.path.expanduser(
"~/.cache/sglang")), and SGLANG_DG_CACHE_DIR resolved lazily to SGLANG_CACHE_DIR/deep_gemm; the JIT kernels (Triton,
TileLang, FlashInfer, Inductor, DeepGEMM) are written under them while the server starts, so that the next start
compiles less. The stand-in writes one small file in each (best effort, as a cache), so a test can see where the
server's caches went: under the job's folders, or into a container's own filesystem, gone with it.

NCCL'S NETWORK (multi-node, --nnodes > 1). The switch sglang-nccl-net (env GLM_STANDIN_SGLANG_NCCL_NET) names the
network NCCL can use between the nodes inside this container: `IB` (InfiniBand/RoCE works), `Socket` (the IB plugin
finds no device: only TCP sockets); unset: the stand-in says nothing (as before). Then, as NCCL does (read from
NVIDIA/nccl): src/transport/net_socket.cc ncclSocketInit `INFO(NCCL_INIT|NCCL_NET, "NET/Socket : Using%s", line)`
with " [i]IFNAME:ADDR<port>" per interface (L41 at 06abb3b; ncclNetSocketInit in later releases); src/init.cc
commAlloc `INFO(NCCL_INIT, "Using network %s", comm->ncclNet->name)`; src/net.cc ncclNetInit: with NCCL_NET set to a
network that cannot be used, `WARN("Error: network %s not found.", netName)` and ncclInvalidUsage (the communicator
fails: `RuntimeError: NCCL error: invalid usage`). The INFO lines appear only with NCCL_DEBUG=INFO (or TRACE), the
WARN with NCCL_DEBUG set at all (WARN or more), as NCCL's debug levels go. Without NCCL_NET, NCCL falls back to
sockets without a WARN: that silence is why serve.sbatch keeps NCCL_DEBUG=INFO on several nodes and the deploy warns.
"""

import datetime
import os
import socket
import sys

from standin_switch import switch

LEVELS = {"VERSION": 0, "WARN": 1, "INFO": 2, "ABORT": 0, "TRACE": 3}


def write_kernel_caches(rank):
    """One file in SGLANG_CACHE_DIR and in SGLANG_DG_CACHE_DIR, as the JIT compilers leave there (best effort)."""
    cache = os.environ.get("SGLANG_CACHE_DIR") or os.path.expanduser("~/.cache/sglang")
    deep_gemm = os.environ.get("SGLANG_DG_CACHE_DIR") or os.path.join(cache, "deep_gemm")
    for folder in (cache, deep_gemm):
        try:
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "glm-standin-kernels-%s" % rank), "w", encoding="utf-8") as handle:
                handle.write("compiled by the SGLang stand-in, pid %d\n" % os.getpid())
        except OSError:
            pass


def _nccl_line(level, message):
    """NCCL's log line (debug.cc): HOST:PID:TID [DEV] NCCL LEVEL message."""
    now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    sys.stdout.write("[%s] %s:%d:%d [0] NCCL %s %s\n" % (now, socket.gethostname(), os.getpid(), os.getpid(), level, message))
    sys.stdout.flush()


def nccl_network(nnodes):
    """NCCL's choice of network at communicator init on several nodes. Returns None, or an error (the final line of the
    traceback) when NCCL_NET forces a network the container cannot use."""
    usable = switch("sglang-nccl-net")
    if nnodes <= 1 or not usable:
        return None
    level = LEVELS.get((os.environ.get("NCCL_DEBUG") or "").upper(), -1)
    forced = os.environ.get("NCCL_NET") or ""
    address = socket.gethostbyname(os.environ.get("SLURMD_NODENAME") or socket.gethostname())
    if forced and forced.lower() != usable.lower():
        if level >= LEVELS["WARN"]:
            if forced.lower() == "ib" and level >= LEVELS["INFO"]:
                _nccl_line("INFO", "NET/IB : No device found.")
            _nccl_line("WARN", "Error: network %s not found." % forced)
        return "RuntimeError: NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details)"
    if level >= LEVELS["INFO"]:
        if usable.lower() == "socket":
            _nccl_line("INFO", "NET/IB : No device found.")
            _nccl_line("INFO", "NET/Socket : Using [0]eth0:%s<0>" % address)
            _nccl_line("INFO", "Using network Socket")
        else:
            _nccl_line("INFO", "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:%s<0>" % address)
            _nccl_line("INFO", "Using network IB")
    return None
