# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The SGLang server stand-in spanning several nodes (--nnodes/--node-rank/--dist-init-addr), as SGLang 0.5.21 does it:
the ranks meet on rank 0's address, rank 0 serves the API once all have loaded, the other nodes only a dummy health
server; mismatches, a missing or lost node fail as the real one does (see the stand-in's header)."""

import json
import signal
import time

import pytest

from standin_helpers import KEY, STRAWBERRY, free_port, seed_args, wait_for


def node_args(model_dir, rank, dist_port, nnodes=2, tp="16", port=None, host="127.0.0.1", dist_host="127.0.0.1", ep="8"):
    """The seed guide's server arguments for one node of a multi-node server."""
    args = seed_args(model_dir, port or free_port(), host=host, tp_size=tp, ep_size=ep)
    return args + ["--nnodes", str(nnodes), "--node-rank", str(rank), "--dist-init-addr", "%s:%d" % (dist_host, dist_port)]


def start_node(servers, model_dir, rank, dist_port, nnodes=2, tp="16", ep="8", **env):
    """One node: 8 GPUs (the switch, unless CUDA_VISIBLE_DEVICES is given), a dist timeout of 20 s unless given."""
    if "CUDA_VISIBLE_DEVICES" not in env:
        env.setdefault("GLM_STANDIN_SGLANG_GPUS", "8")
    env.setdefault("GLM_STANDIN_SGLANG_DIST_TIMEOUT", "20")
    env.setdefault("GLM_STANDIN_SGLANG_WARMUP", "0")
    return servers(node_args(model_dir, rank, dist_port, nnodes, tp, ep=ep), **env)


@pytest.fixture
def two_nodes(servers, model_dir):
    """Rank 0 and rank 1 of a tp 16 server over two 8-GPU nodes, both up."""
    dist_port = free_port()
    head = start_node(servers, model_dir, 0, dist_port)
    worker = start_node(servers, model_dir, 1, dist_port, CUDA_VISIBLE_DEVICES="0,1,2,3,4,5,6,7")
    head.wait_ready()
    wait_for(lambda: "Dummy health check server started" in worker.out)
    return head, worker


def test_rank0_serves_only_after_rank1_joined(servers, model_dir):
    dist_port = free_port()
    head = start_node(servers, model_dir, 0, dist_port)
    wait_for(lambda: "TP0] Init torch distributed begin." in head.out)
    time.sleep(0.6)
    # waiting for rank 1 at the rendezvous: no weights loaded, the API port closed
    assert head.proc.poll() is None
    assert "Init torch distributed ends" not in head.out
    assert head.get("/v1/models", key=KEY) == (None, "")
    worker = start_node(servers, model_dir, 1, dist_port, CUDA_VISIBLE_DEVICES="0,1,2,3,4,5,6,7")
    head.wait_ready()
    status, body = head.get("/v1/models", key=KEY)
    assert status == 200 and json.loads(body)["data"][0]["id"] == "glm-5.3-flash"
    assert head.get("/v1/models")[0] == 401
    assert head.post("/v1/chat/completions", {"messages": [{"role": "user", "content": STRAWBERRY}]}, key=KEY)[0] == 200
    # weights over all 16 GPUs of both nodes: 328 GB / 16 per GPU
    wait_for(lambda: "Dummy health check server started" in worker.out)
    for out in (head.out, worker.out):
        assert "mem usage=20.50 GB." in out
    assert "TP0] max_total_num_tokens=" in head.out
    assert "TP8] Init torch distributed ends" in worker.out and "max_total_num_tokens=" not in worker.out


def test_rank1_has_no_api_only_a_dummy_health_server(servers, model_dir):
    dist_port = free_port()
    worker = start_node(servers, model_dir, 1, dist_port)
    wait_for(lambda: "TP8] Init torch distributed begin." in worker.out)
    time.sleep(0.3)
    assert worker.get("/health") == (None, "")       # nothing listens before the node has joined and loaded
    head = start_node(servers, model_dir, 0, dist_port)
    head.wait_ready()
    wait_for(lambda: worker.get("/health")[0] is not None)
    for path in ("/health", "/health_generate", "/ping"):
        assert worker.get(path) == (200, ""), path           # no key needed, no API-key middleware
    for path in ("/v1/models", "/model_info", "/metrics", "/no/such/path"):
        assert worker.get(path, key=KEY) == (404, '{"detail":"Not Found"}'), path
    assert worker.post("/v1/chat/completions", {"messages": []}, key=KEY)[0] == 404
    assert "Dummy health check server started in background thread at 127.0.0.1:%d" % worker.port in worker.out
    assert "Uvicorn running" not in worker.out and "fired up" not in worker.out
    assert "Uvicorn running on http://127.0.0.1:%d" % head.port in head.out


def test_sigterm_rank1_waits_for_rank0_then_both_stop_cleanly(two_nodes):
    head, worker = two_nodes
    worker.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: "SIGTERM received on node_rank 1; waiting for the rank-0 ShutdownReq broadcast" in worker.out)
    time.sleep(0.5)
    assert worker.proc.poll() is None and worker.get("/health")[0] == 200
    head.proc.send_signal(signal.SIGTERM)
    assert head.wait_exit(5) == 0
    assert worker.wait_exit(5) == 0
    assert "Finished server process" in head.out
    assert worker.out.count("terminated with 0") == 8
    assert head.get("/health") == (None, "") and worker.get("/health") == (None, "")


@pytest.mark.parametrize("victim", [0, 1])
def test_a_lost_node_fails_the_other(two_nodes, victim):
    lost, other = two_nodes if victim == 0 else two_nodes[::-1]
    lost.proc.kill()
    assert other.wait_exit(5) == 1
    assert "Connection closed by peer [127.0.0.1]:" in other.err
    assert "Received sigquit from a child process" in other.err


def test_rank0_alone_fails_after_the_dist_timeout(servers, model_dir):
    started = time.monotonic()
    head = start_node(servers, model_dir, 0, free_port(), GLM_STANDIN_SGLANG_DIST_TIMEOUT="1")
    assert head.wait_exit(10) == 1
    assert time.monotonic() - started >= 2.0
    assert "torch.distributed.DistStoreError: Timed out after 2 seconds waiting for clients. 8/16 clients joined." in head.err
    assert "Uvicorn running" not in head.out and "Load weight begin" not in head.out


def test_rank1_alone_fails_to_reach_rank0(servers, model_dir):
    dist_port = free_port()
    started = time.monotonic()
    worker = start_node(servers, model_dir, 1, dist_port, GLM_STANDIN_SGLANG_DIST_TIMEOUT="1")
    assert worker.wait_exit(10) == 1
    assert 1.0 <= time.monotonic() - started < 5.0         # the switch's second, not torch's 10 minutes
    assert ("torch.distributed.DistNetworkError: The client socket has timed out after 1000ms while trying to connect to "
            "(127.0.0.1, %d)." % dist_port) in worker.err
    assert "TP8] Scheduler hit an exception" in worker.err


def test_two_nodes_with_the_same_rank_fail(servers, model_dir):
    """tp 32 over 4 nodes, ranks 0, 1 and 1: rank 1 checks in twice while ranks 2 and 3 are still missing."""
    dist_port = free_port()
    nodes = [start_node(servers, model_dir, rank, dist_port, nnodes=4, tp="32") for rank in (0, 1, 1)]
    for server in nodes:
        assert server.wait_exit(10) == 1, server.out
        assert "RuntimeError: NCCL error: remote process exited or there was a network error" in server.err
    assert "NCCL WARN Bootstrap Root : rank 8 of 32 ranks has already checked in" in nodes[0].out
    assert all("NCCL WARN socketPollConnect" in server.out for server in nodes[1:])


@pytest.mark.parametrize("nnodes, tp, gpus, warning", [
    (4, "16", "8", "Bootstrap Root : rank 4 of 16 ranks has already checked in"),   # 4 per node: ranks 4-7, rank 0's own
    (2, "32", "16", "Bootstrap Root : mismatch in info from procs, nranks 16 vs 32"),
])
def test_a_node_with_other_nnodes_or_tp_fails(servers, model_dir, nnodes, tp, gpus, warning):
    dist_port = free_port()
    head = start_node(servers, model_dir, 0, dist_port)
    worker = start_node(servers, model_dir, 1, dist_port, nnodes=nnodes, tp=tp, GLM_STANDIN_SGLANG_GPUS=gpus)
    assert head.wait_exit(10) == 1 and worker.wait_exit(10) == 1
    assert "NCCL WARN " + warning in head.out
    for server in (head, worker):
        assert "RuntimeError: NCCL error: remote process exited or there was a network error" in server.err
        assert "fired up" not in server.out


def test_a_rank_beyond_nnodes_fails_and_rank0_times_out(servers, model_dir):
    dist_port = free_port()
    head = start_node(servers, model_dir, 0, dist_port, GLM_STANDIN_SGLANG_DIST_TIMEOUT="2")
    wait_for(lambda: "Init torch distributed begin." in head.out)
    stray = start_node(servers, model_dir, 2, dist_port)
    assert stray.wait_exit(10) == 1
    assert "AssertionError" in stray.err.splitlines()      # a bare one: that node's ranks are in no group
    assert 'parallel_state.py", line 427, in __init__' in stray.err
    assert head.wait_exit(10) == 1
    assert "Timed out after 3 seconds waiting for clients. 8/16 clients joined." in head.err


@pytest.mark.parametrize("nnodes, tp, env, extra, message", [
    (3, "16", {}, [], "AssertionError: tp_size must be divisible by number of nodes"),
    (1, "16", {}, [], "tp_size * pp_size (16) exceeds the 8 GPUs visible on this node"),   # single node, as before
    (2, "16", {"GLM_STANDIN_SGLANG_GPUS": "4"}, [], "tp_size * pp_size / nnodes (8) exceeds the 4 GPUs visible on this node"),
    (2, "16", {}, ["--dist-timeout", "0"], "AssertionError: timeout must be positive"),
])
def test_start_failures(servers, model_dir, nnodes, tp, env, extra, message):
    args = node_args(model_dir, 0, free_port(), nnodes, tp) + extra
    server = servers(args, **dict({"GLM_STANDIN_SGLANG_GPUS": "8"}, **env))
    assert server.wait_exit(10) == 1
    assert message in server.err
    if nnodes == 3:   # checked in the main process, before server_args is logged
        assert "server_args=" not in server.out and "Scheduler hit an exception" not in server.err


def test_bad_dist_init_addr(servers, model_dir):
    args = node_args(model_dir, 0, 0, 2, "16")
    args[args.index("--dist-init-addr") + 1] = "127.0.0.1"
    server = servers(args, GLM_STANDIN_SGLANG_GPUS="8")
    assert server.wait_exit(10) == 1
    assert "ValueError: Missing port in address (expected host:port): '127.0.0.1'" in server.err


def test_memory_check_uses_tp_size_over_all_nodes(servers, model_dir):
    """tp 4 over two nodes: 82 GB of weights per GPU, out of memory (tp 16 over two nodes loads 20.5 GB). Both nodes
    fail; the one that gets to its memory check second may first see its peer gone (gloo's "Connection closed by
    peer", or NCCL's remote-exit error), as ranks of a real job do: seen on a busy machine (a clean-clone make test of
    a940bc6: gloo's), where both failing of the memory itself is only the usual order."""
    dist_port = free_port()
    nodes = [start_node(servers, model_dir, rank, dist_port, tp="4", ep="4") for rank in (0, 1)]
    oom = "torch.OutOfMemoryError: CUDA out of memory"
    peer_gone = ("Connection closed by peer", "RuntimeError: NCCL error: remote process exited or there was a network error")
    for server in nodes:
        assert server.wait_exit(10) == 1
    errs = [server.err for server in nodes]
    assert any(oom in err for err in errs), errs
    assert all(oom in err or any(gone in err for gone in peer_gone) for err in errs), errs


def test_node_addresses_with_host_all_interfaces(servers, model_dir):
    """Inside Slurm with --host 0.0.0.0, each node binds its own address (stand-in accommodation); the rendezvous
    address may be a host name."""
    dist_port = free_port()
    head = servers(node_args(model_dir, 0, dist_port, dist_host="localhost"), GLM_STANDIN_SGLANG_GPUS="8",
                   GLM_STANDIN_SGLANG_WARMUP="0")
    worker = servers(node_args(model_dir, 1, dist_port, host="0.0.0.0", dist_host="localhost"), GLM_STANDIN_SGLANG_GPUS="8",
                     SLURMD_NODENAME="localhost")
    head.wait_ready()
    wait_for(lambda: "Dummy health check server started in background thread at 0.0.0.0:%d" % worker.port in worker.out)
    assert "--host 0.0.0.0 on localhost: listening on 127.0.0.1:%d" % worker.port in worker.out
    assert worker.get("/health") == (200, "")
