"""Stand-in for `python3 -m sglang.launch_server` (SGLang 0.5.21) on an 8-GPU H100 node.

STANDS FOR: the SGLang server the seed guide's serve job starts in the container.
WHAT IT DOES:
- parses the command line with the REAL parser's table (standin_args.py): unknown flags and bad choices
  exit 2 with `sglang serve: error: ...`; --config FILE.yaml is merged like the real one (CLI wins);
- logs like the real one, on stdout, one flushed line at a time:
  `server_args={'model_path': ..., 'api_key': 'THE KEY IN CLEAR', ...}` (0.5.21 logs the resolved dict),
  weight loading, `max_total_num_tokens=N, chunked_prefill_size=N, max_prefill_tokens=N, max_running_requests=N,
  context_len=N, available_gpu_mem=X GB`, uvicorn's lines and `The server is fired up and ready to roll!`;
- fails at start the way the real one does: model dir without config.json (OSError), a shard of the index's
  weight_map missing (FileNotFoundError), no visible GPU, tp-size * pp-size above the visible GPUs
  (CUDA_VISIBLE_DEVICES) or not dividing the 64 attention heads, ep-size not dividing tp-size,
  --context-length above the model's 202752, weights that do not fit (328 GB over tp-size H100s of 79.19 GiB:
  tp-size below 8 runs out of memory), --mem-fraction-static too low for a KV cache or too high for CUDA graphs,
  an FP8/FP4 --kv-cache-dtype (this model has no FP8 KV cache kernel on Hopper), port already in use;
- serves HTTP with the real routes' behaviour (stdlib ThreadingHTTPServer): /health, /health_generate, /ready
  (503 while warming up, 200 when ready), /metrics (only with --enable-metrics, like the real one; else 404),
  /v1/models, /model_info, /server_info (and their deprecated aliases /get_model_info, /get_server_info, GET only),
  /v1/chat/completions (also "stream": true), /generate. With an API key
  every path except those starting /health, /ready, /metrics needs `Authorization: Bearer KEY`, else 401
  {"error":"Unauthorized"} (orjson's compact form, as the real one sends it);
- stops cleanly on SIGTERM/SIGINT (scancel): uvicorn's shutdown lines, exit 0. A SIGTERM while the model is
  still loading ends the process at once with status 143, as the real one (no handler installed yet) does.
READINESS (read from sglang/srt/entrypoints/http_server.py): the real server loads the model in its scheduler
processes BEFORE uvicorn starts, so the port refuses connections for the whole load (minutes for 328 GB);
then uvicorn listens, a warm-up thread sends /model_info and a 1-token /generate, and only then do /health and
/ready turn from 503 to 200 and the log says "fired up". /v1/models already answers 200 (with the key) during that
warm-up. The stand-in keeps both phases: sglang-load seconds with the port closed, then sglang-warmup seconds
listening with /health 503.
STAND-IN ACCOMMODATION: all cluster nodes share one machine, so with --host 0.0.0.0 and SLURMD_NODENAME set and
resolvable (socket.gethostbyname, e.g. node1 -> 127.0.0.11 in /etc/hosts) it binds that node's address instead
(and logs it), so two nodes can both listen on port 30000.
- /model_info and /server_info with 0.5.21's keys (sglang 0.5.21 wheel, srt/entrypoints/http_server.py L780-874):
  /server_info is the resolved server args (api_key included: it needs the key, like every route but /health*,
  /ready*, /metrics*; srt/utils/auth.py L98-151) with launch_command (here: the argv after the --config merge),
  the scheduler's status, max_total_num_tokens, max_req_input_len, startup_time, internal_states (one per DP rank),
  version "0.5.21", frontend "python", kv_events null. SGLang's Model Gateway reads it when a worker registers;
- /metrics: the families glm.serve reads, with SGLang 0.5.21's names, types, labels and buckets (standin_metrics.py,
  which cites the source); the warm-up request counts, /health does not;
- /health and /health_generate as entrypoints/http_server.py L699-777: 503 with an empty body while starting or
  shutting down; once up, a 1-token probe, then whole seconds (at least 1) until the scheduler sends any output:
  at once when idle, else the running requests' next output (streamed: every token; not: every 50 tokens or at the
  end); 503 after SGLANG_HEALTH_CHECK_TIMEOUT (20) s (standin_health.py, which cites the source); /ready: at once;
- the weights' progress: tqdm's bar on stderr, written as tqdm writes it into a log ("Multi-thread loading shards"
  by default, "Loading safetensors checkpoint shards" when the flags select the single-thread loader; standin_tqdm.py);
- /metrics with --enable-priority-scheduling: priority="" on the totals, a series per priority (standin_metrics.py);
- tool calls as --tool-call-parser glm47 makes them (entrypoints/openai/serving_chat.py, function_call/
  glm47_moe_detector.py): with "tools" and tool_choice not "none", the canned model answers a user message with a
  call of the first tool (the named one with a named tool_choice), written the way GLM writes it,
  `<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>`, then parsed as the glm47 detector does
  (values of string-typed parameters kept as text, others read as JSON): message.tool_calls
  [{"id": "call_<24 hex>", "index": i, "type": "function", "function": {"name", "arguments": JSON string}}],
  content "" and finish_reason "tool_calls"; streamed as one delta with id and name and "arguments": "", then
  argument fragments (id and name null). A last message from a tool gets a text answer that quotes the result.
  Without --tool-call-parser the raw markup stays in content (tool_calls null, finish_reason "stop").
  tool_choice "required" with no tools, or a named tool missing from tools: HTTP 400 as the real one.
MULTI-NODE (--nnodes N --node-rank R --dist-init-addr HOST:PORT; read from the 0.5.21 wheel, paths under srt/, and
torch 2.13, the version 0.5.21 pins; torch's messages below were reproduced by running torch 2.13 here with gloo):
- flags (arg_groups/fields/parallel.py L29-44): nnodes 1, node_rank 0, dist_init_addr (alias --nccl-init-addr) and
  dist_timeout None. The one up-front check is validation_hook.py L95-99, run in the main process (engine.py L1101)
  before server_args is logged (L1124): `AssertionError: tp_size must be divisible by number of nodes` (tp*pp % nnodes),
  a main-process traceback, exit 1. Nothing checks node_rank < nnodes or that --dist-init-addr is given.
- per node: tp_size * pp_size / nnodes schedulers on GPUs tp_rank % tp_size_per_node (engine.py L899-910, L1940-1971);
  the stand-in checks that count against the visible GPUs (the real one fails in set_device, bootstrap.py L127-139);
  the memory check divides the 328 GB by the whole --tp-size. Scheduler lines carry the node's first TP rank (TP8 on
  rank 1 of 2; scheduler.py L5999-6011); max_total_num_tokens=... is logged by TP0 only (scheduler.py L1228-1237).
- the ranks meet in torch.distributed.init_process_group("tcp://" + dist_init_addr, world_size=tp*pp, timeout=
  dist_timeout) (bootstrap.py L217-232, L288-317; parallel_state.py L2454-2510); without --dist-init-addr each node uses
  its own --host and a random port (so the nodes never meet). Rank 0 hosts torch's TCPStore; the others connect,
  retrying, until the timeout: `torch.distributed.DistNetworkError: The client socket has timed out after 1000ms while
  trying to connect to (HOST, PORT).` (with c10d's two log lines). Rank 0 waits for every rank:
  `torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. 8/16 clients joined.` (whole
  seconds past the timeout); a node that joined waits for rank 0 the same time: `DistStoreError: wait timeout after
  600000ms, keys: ...` (key as torch printed it with gloo). The timeout: --dist-timeout, else torch's default for nccl,
  10 min (distributed_c10d.py L1848-1849, L836-849); --dist-timeout <= 0: `AssertionError: timeout must be positive`
  (parallel_state.py L2479-2482). Port taken on rank 0: `DistNetworkError: The server socket has failed to listen ...`.
- a bad --dist-init-addr: NetworkAddress.parse's ValueError in the scheduler (bootstrap.py L226, utils/network.py L441-555).
- mismatches are not checked up front; NCCL's bootstrap root (in rank 0's process) refuses a rank that checked in twice
  (two processes with one --node-rank, or a different --nnodes giving overlapping ranks) and a different world size
  (--tp-size): rank 0 logs `NCCL WARN Bootstrap Root : rank 8 of 32 ranks has already checked in` / `... mismatch in
  info from procs, nranks 16 vs 32, ...`, the others `NCCL WARN socketPollConnect: ... exceeded error retry count after
  35 attempts`, and every rank fails in ncclCommInitRank: `RuntimeError: NCCL error: remote process exited or there was
  a network error` (pynccl.py L122, pynccl_wrapper.py L458-461). Modelled on a captured SGLang multi-node log (public
  GitHub text) showing exactly that; there the failure comes ~60 s after the WARN (NCCL's connect retries), here at once.
  --node-rank >= nnodes gives world ranks outside the world (engine.py L1940-1971: rank 2 of 2 is pp_rank 1), in no
  group: a bare `AssertionError` (parallel_state.py L418-428) on that node, after it reached the store.
- a node_rank >= 1 runs only schedulers (engine.py L1172-1223, http_server.py L2909-2911): no tokenizer, no HTTP API,
  but a dummy health server on --host:--port (utils/common.py L3519-3579: /ping, /health, /health_generate 200 empty,
  /metrics with --enable-metrics, nothing else, no API key, no access log), logged as `Dummy health check server started
  in background thread at HOST:PORT`. SIGTERM there only logs `SIGTERM received on node_rank 1; waiting for the rank-0
  ShutdownReq broadcast to stop the schedulers.` (Slurm's KillWait SIGKILL is the backstop); when rank 0 stops, its
  ShutdownReq (tokenizer_manager.py L3339-3340, scheduler.py L5893-5896) ends the node's schedulers, which logs
  `Scheduler or DataParallelController PID terminated with 0` per scheduler (engine.py L960-966), exit 0.
- rank 0 serves HTTP only once every node has loaded (its schedulers' start-up collectives span all ranks).
- a lost node: the schedulers broadcast the received requests over the gloo CPU group every loop (request_receiver.py
  L170-221), so the other side fails at once: `RuntimeError: [.../gloo/transport/tcp/pair.cc:553] Connection closed by
  peer [IP]:PORT. ...`, exit 1; a node that never finishes loading: gloo's `Timed out waiting 600000ms for recv ...`.
STAND-IN ACCOMMODATIONS (multi-node): one TCP connection per node to rank 0's --dist-init-addr stands for the store
and the collectives (hello with rank/nnodes/tp/pp, go, ready, shutdown); rank 0 listens on the address named in
--dist-init-addr (the node's own), not on every interface, so that servers of different "nodes" can share a port
(so an address naming another node of the shared machine still meets, where the real ones would time out); the
stand-in is one process, a SIGTERM to it stands for one to the main process only (under Slurm the schedulers get it
too); NCCL's and c10d's log line formats (and the file:line inside them) are copied from logs, not from a pinned source.
WHAT IT DOES NOT DO: run a model (answers are canned: the strawberry question gets "3"), tokenize (token counts are
word counts), images, LoRA, pipeline parallelism across nodes beyond the rank arithmetic, or any of the real
resolution pipeline beyond the checks above.

SWITCHES: environment variable first, else a file of that name in ${GLM_STANDIN_CONTROL:-/var/lib/glm-cluster/control}
(the file's content is the value):
  file sglang-load     env GLM_STANDIN_SGLANG_LOAD     seconds of model loading, port closed (default 1)
  file sglang-warmup   env GLM_STANDIN_SGLANG_WARMUP   seconds of warm-up, listening, /health 503 (default 2)
  file sglang-fail     env GLM_STANDIN_SGLANG_FAIL     `oom`: CUDA out of memory at start, exit 1;
                                                       `fp8`: the FP8 KV cache error, exit 1
  file sglang-gpus     env GLM_STANDIN_SGLANG_GPUS     number of visible GPUs; default: the count in
                                                       CUDA_VISIBLE_DEVICES, else 0 inside a Slurm job (no
                                                       --gres=gpu) and 8 outside one
  file sglang-decode   env GLM_STANDIN_SGLANG_DECODE   seconds each generation request takes before it answers
                                                       (the decoding a real model does; counted as running in
                                                       /metrics meanwhile; default 0)
  file sglang-dist-timeout  env GLM_STANDIN_SGLANG_DIST_TIMEOUT  multi-node: seconds the ranks wait for each other
                                                       (connect, all joined, all loaded); default --dist-timeout,
                                                       else 600 (torch's nccl default); this switch wins over both
  file sglang-nccl-net  env GLM_STANDIN_SGLANG_NCCL_NET   multi-node: the network NCCL can use in this container, `IB`
                                                       or `Socket` (standin_env.py: NCCL's lines, NCCL_NET forcing)
"""

import datetime
import errno
import json
import math
import os
import shlex
import signal
import socket
import sys
import threading
import time
import traceback
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sglang.standin_args import prepare_server_args
from sglang.standin_env import nccl_network, write_kernel_caches
from sglang.standin_metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE, Metrics
from sglang.standin_tqdm import SINGLE_THREAD, Bar, bar_desc
from sglang.standin_health import Outputs, wait_healthy
from standin_switch import switch

GPU_TOTAL_GIB = 79.19          # what torch reports for an 80 GB H100
WEIGHTS_GB = 328.0             # GLM-5.3-Flash in FP8
ATTENTION_HEADS = 64
MODEL_CONTEXT_LEN = 202752
KV_TOKENS_PER_GB = 52000       # BF16 MLA/DSA cache of this model, per GPU (made up, plausible)
ARCHITECTURE = "GlmMoeDsaForCausalLM"
FP8_KV_DTYPES = ("fp8_e5m2", "fp8_e4m3", "mxfp8")
FP4_KV_DTYPES = ("nvfp4", "fp4_mx_block16")
SRC = "/sgl-workspace/sglang/python/sglang/srt"

_PRINT_LOCK = threading.Lock()


def seconds(name, default):
    try:
        return max(0.0, float(switch(name, default)))
    except ValueError:
        return default


def log(message, rank=None):
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    prefix = "[%s %s]" % (stamp, rank) if rank else "[%s]" % stamp
    with _PRINT_LOCK:
        sys.stdout.write("%s %s\n" % (prefix, message))
        sys.stdout.flush()


def uvicorn_log(message, level="INFO"):
    log("%s %s" % ((level + ":").ljust(9), message))


class StartupError(Exception):
    """A start-up failure: (traceback frames, final line)."""

    def __init__(self, final, frames=()):
        super().__init__(final)
        self.final = final
        self.frames = frames


def die(error, rank="TP0", at_once=False):
    """Print a scheduler traceback as the real server does, then exit 1 (at_once: os._exit, from any thread)."""
    with _PRINT_LOCK:
        sys.stdout.flush()
        lines = ["[%s %s] Scheduler hit an exception: Traceback (most recent call last):" %
                 (datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S"), rank)]
        for path, line, func, code in error.frames:
            lines.append('  File "%s", line %d, in %s' % (path if path.startswith("/") else SRC + "/" + path, line, func))
            lines.append("    " + code)
        lines.append(error.final)
        lines.append("")
        lines.append("[%s] Received sigquit from a child process. It usually means the child failed." %
                     datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S"))
        sys.stderr.write("\n".join(lines) + "\n")
        sys.stderr.flush()
    if at_once:
        os._exit(1)  # pylint: disable=protected-access
    sys.exit(1)


SCHEDULER_FRAMES = [
    ("managers/scheduler.py", 3122, "run_scheduler_process",
     "scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)"),
    ("managers/scheduler.py", 402, "__init__", "self.init_model_worker()"),
    ("managers/tp_worker.py", 247, "__init__", "self.model_runner = ModelRunner("),
    ("model_executor/model_runner.py", 418, "__init__", "self.initialize(min_per_gpu_memory)"),
]


def oom_error(tried_gib, free_gib):
    used = GPU_TOTAL_GIB - free_gib
    return StartupError(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate %.2f GiB. GPU 0 has a total capacity of %.2f GiB "
        "of which %.2f GiB is free. Including non-PyTorch memory, this process has %.2f GiB memory in use. Of the "
        "allocated memory %.2f GiB is allocated by PyTorch, and 312.50 MiB is reserved by PyTorch but unallocated. If "
        "reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
        "fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html"
        "#environment-variables)" % (tried_gib, GPU_TOTAL_GIB, free_gib, used, used - 0.9),
        SCHEDULER_FRAMES + [
            ("model_executor/model_runner.py", 1261, "load_model", "self.model = self.loader.load_model("),
            ("model_loader/loader.py", 702, "load_model", "model = _initialize_model(model_config, self.load_config)"),
        ])


def fp8_error(kv_dtype):
    return StartupError(
        "ValueError: FP8 KV cache (--kv-cache-dtype %s) is not supported for %s on Hopper (sm90): the DSA attention "
        "backends (tilelang, flashmla_sparse) have no FP8 KV cache kernel for this model on this GPU. Use "
        "--kv-cache-dtype bfloat16 (or auto)." % (kv_dtype, ARCHITECTURE),
        SCHEDULER_FRAMES + [
            ("model_executor/model_runner.py", 1705, "init_attention_backends", "self.attn_backend = self._get_attention_backend()"),
            ("layers/attention/dsa_backend.py", 311, "__init__", "raise ValueError("),
        ])


def visible_gpus():
    forced = switch("sglang-gpus")
    if forced is not None and forced.isdigit():
        return int(forced)
    devices = os.environ.get("CUDA_VISIBLE_DEVICES")
    if devices is not None:
        return len([d for d in devices.split(",") if d.strip() not in ("", "-1")])
    return 0 if os.environ.get("SLURM_JOB_ID") else 8


def read_model(args):
    """config.json and the shard list, or a StartupError like transformers' / safetensors' own."""
    path = args.model_path
    config_path = os.path.join(path, "config.json")
    if not os.path.isfile(config_path):
        raise StartupError(
            "OSError: Can't load the configuration of '%s'. If you were trying to load it from "
            "'https://huggingface.co/models', make sure you don't have a local directory with the same name. Otherwise, "
            "make sure '%s' is the correct path to a directory containing a config.json file" % (path, path),
            [("utils/hf_transformers_utils.py", 612, "get_config", "config = AutoConfig.from_pretrained(")])
    try:
        with open(config_path, encoding="utf-8") as handle:
            config = json.load(handle)
    except ValueError as exc:
        raise StartupError("json.decoder.JSONDecodeError: %s" % exc,
                           [("utils/hf_transformers_utils.py", 612, "get_config", "config = AutoConfig.from_pretrained(")]) from exc
    shards = []
    index_path = os.path.join(path, "model.safetensors.index.json")
    if os.path.isfile(index_path):
        with open(index_path, encoding="utf-8") as handle:
            shards = sorted(set(json.load(handle).get("weight_map", {}).values()))
    else:
        shards = sorted(name for name in os.listdir(path) if name.endswith(".safetensors"))
    if not shards:
        raise StartupError("RuntimeError: Cannot find any model weights with `%s`" % path,
                           [("model_loader/loader.py", 570, "_prepare_weights", "raise RuntimeError(")])
    return config, shards


def check_parallel(args, gpus):
    frames = [("arg_groups/parallel_hook.py", 88, "handle_parallel", "raise ValueError(")]
    if gpus <= 0:
        raise StartupError("RuntimeError: No CUDA GPUs are available",
                           [("utils/common.py", 1702, "get_device_core_count", "torch.cuda.get_device_properties(0)")])
    if args.nnodes != 1:
        # per node: tp_size * pp_size / nnodes GPUs (engine.py L1940-1971, gpu_id = tp_rank % tp_size_per_node)
        per_node = len(node_ranks(args.node_rank, args.nnodes, args.tp_size, args.pp_size)[0])
        if args.tp_size < 1 or per_node > gpus:
            raise StartupError("ValueError: tp_size * pp_size / nnodes (%d) exceeds the %d GPUs visible on this node "
                               "(CUDA_VISIBLE_DEVICES)." % (per_node, gpus), frames)
        if gpus % per_node:
            raise StartupError("ValueError: tp_size / nnodes (%d) must divide the %d GPUs of the node." % (per_node, gpus), frames)
    elif args.tp_size < 1 or args.tp_size * args.pp_size > gpus:
        raise StartupError("ValueError: tp_size * pp_size (%d) exceeds the %d GPUs visible on this node "
                           "(CUDA_VISIBLE_DEVICES); set --nnodes to span more nodes." % (args.tp_size * args.pp_size, gpus), frames)
    elif gpus % args.tp_size:
        raise StartupError("ValueError: tp_size (%d) must divide the %d GPUs of the node." % (args.tp_size, gpus), frames)
    if ATTENTION_HEADS % args.tp_size:
        raise StartupError("ValueError: Total number of attention heads (%d) must be divisible by tensor parallel size (%d)."
                           % (ATTENTION_HEADS, args.tp_size), frames)
    if args.ep_size < 1 or args.tp_size % args.ep_size:
        raise StartupError("ValueError: tp_size (%d) must be divisible by ep_size (%d)." % (args.tp_size, args.ep_size), frames)


class State:
    """What the HTTP handlers need to know."""

    def __init__(self, args, context_len, max_total_tokens=0):
        self.args = args
        self.context_len = context_len
        self.served_name = args.served_model_name or args.model_path
        self.ready = False
        self.stopping = False
        self.metrics = Metrics(self.served_name, max_total_tokens, bool(args.enable_priority_scheduling))
        self.outputs = Outputs()    # when the scheduler last sent an output: /health waits for one (standin_health.py)
        self.max_total_tokens = max_total_tokens
        self.startup_time = time.time()


STRAWBERRY_REASONING = (
    'The user asks how many times the letter "r" appears in "strawberry". Spell it out: s-t-r-a-w-b-e-r-r-y. '
    "There is an r in position 3, and two more in positions 8 and 9. That makes 3.")
STRAWBERRY_ANSWER = 'The letter **r** appears **3** times in "strawberry" (st**r**awbe**rr**y).'


def message_text(content):
    """A message's content as text: a string, or the text parts of a list of parts."""
    if isinstance(content, list):
        content = " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def canned_answer(messages):
    text = ""
    for message in reversed(messages or []):
        if isinstance(message, dict) and message.get("role") == "user":
            text = message_text(message.get("content"))
            break
    lowered = text.lower()
    if "strawberry" in lowered and ("letter r" in lowered or "r's" in lowered or "how many r" in lowered):
        return STRAWBERRY_REASONING, STRAWBERRY_ANSWER, text
    words = len(text.split())
    return ("The user sent a message of %d words. This is the glm.serve SGLang stand-in, so I answer with a fixed reply." % words,
            "Hello from the SGLang stand-in. You wrote %d words." % words, text)


class BadRequest(Exception):
    """HTTP 400 with SGLang's flat error body."""


def tool_choice_of(body, tools):
    """protocol.py: tool_choice defaults to "auto" with tools, "none" without; serving_chat's checks."""
    choice = body.get("tool_choice")
    if choice is None:
        choice = "auto" if tools else "none"
    if isinstance(choice, str) and choice not in ("none", "auto", "required"):
        # pydantic refuses it before serving_chat sees it: HTTP 400 as well
        raise BadRequest("tool_choice: Input should be 'none', 'auto' or 'required'")
    if choice == "required" and not tools:
        raise BadRequest("Tools cannot be empty if tool choice is set to required.")
    if isinstance(choice, dict) and not tools:
        raise BadRequest("Tools cannot be empty if tool choice is set to a specific tool.")
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        if name not in [((t or {}).get("function") or {}).get("name") for t in tools]:
            raise BadRequest("Tool '%s' not found in tools list." % name)
    return choice


def glm47_markup(tool, user_text):
    """What GLM writes for a call of ``tool`` (function_call/glm47_moe_detector.py's format): a value for each
    required parameter (every parameter when none is required), made from the user's words."""
    function = tool.get("function") or {}
    params = function.get("parameters") or {}
    props = params.get("properties") or {}
    names = params.get("required") or list(props)
    words = [w.strip("?!.,;:'\"") for w in user_text.split()]
    capitalized = [w for w in words[1:] if w[:1].isupper()] or [w for w in words if w] or ["example"]
    parts = []
    for index, name in enumerate(names):
        kind = (props.get(name) or {}).get("type", "string")
        value = {"integer": "1", "number": "1.5", "boolean": "true", "array": "[]", "object": "{}"}.get(
            kind, capitalized[index % len(capitalized)])
        parts.append("<arg_key>%s</arg_key><arg_value>%s</arg_value>" % (name, value))
    return "<tool_call>%s%s</tool_call>" % (function.get("name"), "".join(parts))


def glm47_parse(markup, tools):
    """The glm47 detector: the calls in ``markup`` as (name, arguments dict); values of string-typed parameters
    stay text, others are read as JSON (else kept as text). Unknown function names are dropped."""
    import re
    by_name = dict((((t or {}).get("function") or {}).get("name"), t) for t in tools)
    calls = []
    for name, body in re.findall(r"<tool_call>([^<\n]+)(.*?)</tool_call>", markup, re.S):
        if name not in by_name:
            continue
        props = ((by_name[name].get("function") or {}).get("parameters") or {}).get("properties") or {}
        args = {}
        for key, value in re.findall(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", body, re.S):
            if (props.get(key) or {}).get("type", "string") == "string":
                args[key] = value
            else:
                try:
                    args[key] = json.loads(value)
                except ValueError:
                    args[key] = value
        calls.append((name, args))
    return calls


class Handler(BaseHTTPRequestHandler):
    """The real server's routes, behind its API-key middleware."""

    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    # uvicorn's asyncio transports set TCP_NODELAY; without it, the headers and the body sent apart meet the client's
    # delayed ACK and every keep-alive answer takes 40 ms more than the real server's
    disable_nagle_algorithm = True
    sys_version = ""
    state = None  # set on the subclass built in serve()

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        """No BaseHTTPRequestHandler default logging: access lines are written in send_response."""

    def send_response(self, code, message=None):
        super().send_response(code, message)
        host, port = self.client_address[:2]
        uvicorn_log('%s:%s - "%s %s HTTP/1.1" %d %s' % (host, port, self.command, self.path, code, self.responses.get(code, ("",))[0]))

    def _send(self, code, body=b"", content_type="application/json", extra=None):
        self.send_response(code)
        if content_type:
            self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, code, obj):
        self._send(code, json.dumps(obj, separators=(",", ":")).encode())

    def _authorized(self, path):
        key = self.state.args.api_key
        if not key or self.command == "OPTIONS":
            return True
        if path.startswith("/health") or path.startswith("/ready") or path.startswith("/metrics"):
            return True
        header = self.headers.get("Authorization") or ""
        parts = header.split(" ", 1)
        return len(parts) == 2 and parts[0].lower() == "bearer" and parts[1] == key

    def _discard_body(self):
        """Reads the request body that an answer without a handler leaves unread: uvicorn (h11) reads past it before
        the next request on a kept-alive connection, so a client (LiteLLM's proxy, httpx) reusing it gets an answer to
        its next request, not a 501 for the left-over body."""
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)

    def _route(self):
        path = self.path.split("?", 1)[0]
        if not self._authorized(path):
            self._discard_body()
            self._json(401, {"error": "Unauthorized"})
            return
        get_routes = {
            "/health": self._health, "/health_generate": self._health, "/ready": self._health,
            "/v1/models": self._models, "/model_info": self._model_info, "/get_model_info": self._model_info,
            "/server_info": self._server_info, "/get_server_info": self._server_info, "/metrics": self._metrics,
        }
        post_routes = {"/v1/chat/completions": self._chat, "/generate": self._generate}
        routes = get_routes if self.command in ("GET", "HEAD") else post_routes
        if path in routes:
            self.state.metrics.http_request(path, self.command)
            routes[path]()
        elif path in get_routes or path in post_routes:
            self._discard_body()
            self._json(405, {"detail": "Method Not Allowed"})
        else:
            self._discard_body()
            self._json(404, {"detail": "Not Found"})

    do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = _route

    def _health(self):
        if not self.state.ready or self.state.stopping:
            self._send(503, content_type=None)
            return
        if self.path.split("?", 1)[0] != "/ready":
            # a 1-token probe, then whole seconds until the scheduler sends any output (standin_health.py)
            self._send(wait_healthy(self.state.outputs, log=log), content_type=None)
            return
        self._send(200, content_type=None)

    def _models(self):
        state = self.state
        self._json(200, {"object": "list", "data": [{
            "id": state.served_name, "object": "model", "created": int(time.time()), "owned_by": "sglang",
            "root": state.served_name, "parent": None, "max_model_len": state.context_len}]})

    def _model_info(self):
        args = self.state.args
        self._json(200, {"model_path": args.model_path, "served_model_name": self.state.served_name,
                         "tokenizer_path": args.tokenizer_path or args.model_path, "is_generation": True,
                         "preferred_sampling_params": None, "weight_version": "default", "load_format": args.load_format,
                         "reasoning_parser": args.reasoning_parser, "tool_call_parser": args.tool_call_parser,
                         "disaggregation_mode": getattr(args, "disaggregation_mode", "null"),
                         "has_image_understanding": True, "has_audio_understanding": False, "model_type": "glm_moe_dsa",
                         "architectures": [ARCHITECTURE]})

    def _server_info(self):
        state = self.state
        resolved = resolved_args(state.args)
        self._json(200, dict(resolved, launch_command="python3 -m sglang.launch_server " + " ".join(
            shlex.quote(a) for a in getattr(state.args, "_launch_argv", [])),
            status="ready" if state.ready else "starting", max_total_num_tokens=state.max_total_tokens,
            max_req_input_len=state.context_len - 1, startup_time=state.startup_time,
            internal_states=[dict(resolved, world_size=state.args.tp_size, last_gen_throughput=0.0, memory_usage={},
                                  startup_time=state.startup_time, effective_max_running_requests_per_dp=None)],
            version="0.5.21", frontend="python", kv_events=None))

    def _metrics(self):
        if not self.state.args.enable_metrics:
            self._json(404, {"detail": "Not Found"})
            return
        self._send(200, self.state.metrics.render(), content_type=METRICS_CONTENT_TYPE)

    def _body(self):
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self._json(400, {"object": "error", "message": "The request body is not valid JSON.", "type": "BadRequestError",
                             "param": None, "code": 400})
            return None
        return body

    def _error(self, message):
        self._json(400, {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": 400})

    def _chat(self):
        body = self._body()
        if body is None:
            return
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            self._error("messages: Field required")
            return
        tools = body.get("tools") or []
        try:
            choice = tool_choice_of(body, tools)
        except BadRequest as exc:
            self._error(str(exc))
            return
        started = time.time()
        reasoning, content, prompt = canned_answer(messages)
        calls, finish = [], "stop"
        last = messages[-1] if isinstance(messages[-1], dict) else {}
        if tools and choice != "none" and last.get("role") == "user":
            if isinstance(choice, dict):
                tool = [t for t in tools if (t.get("function") or {}).get("name") == choice["function"]["name"]][0]
            else:
                tool = tools[0]
            reasoning = "The user's request needs the tool %s; I call it." % (tool.get("function") or {}).get("name")
            markup = glm47_markup(tool, prompt)
            if self.state.args.tool_call_parser:
                calls = [{"id": "call_%s" % uuid.uuid4().hex[:24], "index": i, "type": "function",
                          "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}
                         for i, (name, args) in enumerate(glm47_parse(markup, tools))]
                content, finish = "", "tool_calls" if calls else "stop"
            else:
                content = markup
        elif last.get("role") == "tool":
            reasoning = "The tool answered; I report its result."
            content = "The tool returned: %s" % message_text(last.get("content"))[:200]
        if not self.state.args.reasoning_parser:
            content, reasoning = "<think>%s</think>%s" % (reasoning, content), None
        prompt_tokens = len(prompt.split()) + 8
        completion_tokens = len(content.split()) + len((reasoning or "").split()) + 8 * len(calls)
        metrics = self.state.metrics
        priority = request_priority(self.state.args, body)
        metrics.start(prompt_tokens + completion_tokens, priority)
        decode = seconds("sglang-decode", 0.0)
        output = self.state.outputs.begin(decode, completion_tokens, body.get("stream"))
        model = body.get("model") or self.state.served_name
        ident = uuid.uuid4().hex
        created = int(time.time())
        try:
            time.sleep(decode)
            if body.get("stream"):
                self._stream(ident, created, model, reasoning, content, calls, finish)
                return
            self._json(200, {
                "id": ident, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content, "reasoning_content": reasoning,
                                                     "tool_calls": calls or None},
                             "logprobs": None, "finish_reason": finish, "matched_stop": None if calls else 154827}],
                "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
                          "completion_tokens": completion_tokens, "prompt_tokens_details": None,
                          "reasoning_tokens": len((reasoning or "").split())},
                "metadata": {"weight_version": "default"}})
        finally:
            elapsed = time.time() - started
            self.state.outputs.end(output)
            metrics.finish(bool(body.get("stream")), prompt_tokens, completion_tokens, elapsed, elapsed,
                           prompt_tokens + completion_tokens, priority)

    def _stream(self, ident, created, model, reasoning, content, calls=(), finish="stop"):
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        deltas = [{"role": "assistant", "content": "", "reasoning_content": None}]
        if reasoning:
            deltas.append({"reasoning_content": reasoning})
        if content:
            deltas.append({"content": content})
        for call in calls:
            # the first delta of a call names it, the next ones carry its arguments in fragments
            deltas.append({"tool_calls": [{"id": call["id"], "index": call["index"], "type": "function",
                                           "function": {"name": call["function"]["name"], "arguments": ""}}]})
            arguments = call["function"]["arguments"]
            for start in range(0, len(arguments), 6):
                deltas.append({"tool_calls": [{"id": None, "index": call["index"], "type": "function",
                                               "function": {"name": None, "arguments": arguments[start:start + 6]}}]})
        for delta in deltas:
            chunk = {"id": ident, "object": "chat.completion.chunk", "created": created, "model": model,
                     "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}], "usage": None}
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        final = {"id": ident, "object": "chat.completion.chunk", "created": created, "model": model,
                 "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish, "matched_stop": 154827}],
                 "usage": None}
        self.wfile.write(b"data: " + json.dumps(final).encode() + b"\n\ndata: [DONE]\n\n")
        self.wfile.flush()

    def _generate(self):
        body = self._body()
        if body is None:
            return
        params = body.get("sampling_params") or {}
        max_new = int(params.get("max_new_tokens") or 16)
        text = " ".join(["ok"] * min(max_new, 64))
        prompt_tokens = len(str(body.get("text", "")).split())
        priority = request_priority(self.state.args, body)
        self.state.metrics.start(0, priority)
        self.state.outputs.end(self.state.outputs.begin(0, min(max_new, 64), False))
        self.state.metrics.finish(False, prompt_tokens, min(max_new, 64), 0.01, 0.01, 0, priority)
        self._json(200, {"text": text, "output_ids": [1000] * min(max_new, 64), "meta_info": {
            "id": uuid.uuid4().hex, "finish_reason": {"type": "length", "length": max_new},
            "prompt_tokens": len(str(body.get("text", "")).split()), "weight_version": "default",
            "completion_tokens": min(max_new, 64), "cached_tokens": 0, "e2e_latency": 0.01}})


def request_priority(args, body):
    """The request's priority, or --default-priority-value with priority scheduling (managers/tokenizer_manager.py
    L3790-3797); None without one."""
    priority = body.get("priority")
    if priority is None and args.enable_priority_scheduling:
        priority = args.default_priority_value
    return priority


def bind_address(host):
    """--host, or this node's own address when --host is 0.0.0.0 inside Slurm (see the header)."""
    node = os.environ.get("SLURMD_NODENAME")
    if host == "0.0.0.0" and node:
        try:
            return socket.gethostbyname(node), node
        except OSError:
            return host, None
    return host, None


def serve(args, state):
    host, node = bind_address(args.host)
    handler = type("BoundHandler", (Handler,), {"state": state})
    try:
        server = ThreadingHTTPServer((host, args.port), handler)
    except OverflowError as exc:
        uvicorn_log("OverflowError: %s" % exc, "ERROR")
        sys.exit(1)
    except OSError as exc:
        uvicorn_log("[Errno %s] error while attempting to bind on address ('%s', %d): %s"
                    % (exc.errno, args.host, args.port, (exc.strerror or str(exc)).lower()), "ERROR")
        sys.exit(1)
    server.daemon_threads = True
    if node:
        log("[stand-in] --host 0.0.0.0 on %s: listening on %s:%d, the node's own address (all nodes share one machine)"
            % (node, host, args.port))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    uvicorn_log("Started server process [%d]" % os.getpid())
    uvicorn_log("Waiting for application startup.")
    uvicorn_log("Application startup complete.")
    uvicorn_log("Uvicorn running on http://%s:%d (Press CTRL+C to quit)" % (args.host, args.port))
    return server


# ------------------------------------------------------------------------------------------------------------------
# Multi-node (--nnodes > 1): see MULTI-NODE in the header for what each piece stands for and where it comes from.

DIST_TIMEOUT_DEFAULT = 600.0   # --dist-timeout unset: torch's default for the nccl backend, 10 min
TORCH_DIST = "/usr/local/lib/python3.12/dist-packages/torch/distributed"
GLOO_TCP = "/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp"
SGLANG = os.path.dirname(SRC)
STORE_KEYS = "/default_pg/0//cpu//0/0"

MAIN_FRAMES = [
    ("<frozen runpy>", 198, "_run_module_as_main", None),
    ("<frozen runpy>", 88, "_run_code", None),
    (SGLANG + "/launch_server.py", 84, "<module>", "run_server(server_args)"),
    (SGLANG + "/launch_server.py", 67, "run_server", "launch_server(server_args)"),
    (SRC + "/entrypoints/http_server.py", 2902, "launch_server", ") = Engine._launch_subprocesses("),
    (SRC + "/entrypoints/engine.py", 1101, "_launch_subprocesses", "server_args.check_server_args()"),
    (SRC + "/server_args.py", 421, "check_server_args", "check_server_args(self)"),
    (SRC + "/arg_groups/validation_hook.py", 97, "check_server_args", "assert (cfg.tp_size * cfg.pp_size) % cfg.nnodes == 0, ("),
]
INIT_FRAMES = [
    ("managers/scheduler.py", 6082, "run_scheduler_process", "scheduler = Scheduler(server_args, port_args)"),
    ("managers/scheduler.py", 525, "__init__", "bootstrap.init_parallel_runtime("),
]
ADDRESS_FRAMES = INIT_FRAMES + [
    ("distributed/bootstrap.py", 124, "init_parallel_runtime", "dist_init_method = _resolve_dist_init_method(dist_port=dist_port)"),
    ("distributed/bootstrap.py", 226, "_resolve_dist_init_method", "na = NetworkAddress.parse(get_parallel().dist_init_addr)"),
]
DIST_ENV_FRAMES = INIT_FRAMES + [
    ("distributed/bootstrap.py", 149, "init_parallel_runtime", "_init_parallel_groups("),
    ("distributed/bootstrap.py", 306, "_init_parallel_groups", "init_distributed_environment("),
]
STORE_FRAMES = DIST_ENV_FRAMES + [
    ("distributed/parallel_state.py", 2503, "init_distributed_environment", "torch.distributed.init_process_group("),
    (TORCH_DIST + "/c10d_logger.py", 83, "wrapper", "return func(*args, **kwargs)"),
    (TORCH_DIST + "/c10d_logger.py", 97, "wrapper", "func_return = func(*args, **kwargs)"),
    (TORCH_DIST + "/distributed_c10d.py", 1892, "init_process_group", "store, rank, world_size = next(rendezvous_iterator)"),
    (TORCH_DIST + "/rendezvous.py", 232, "_tcp_rendezvous_handler", "store = _create_c10d_store("),
    (TORCH_DIST + "/rendezvous.py", 199, "_create_c10d_store", "return TCPStore("),
]
TIMEOUT_FRAMES = DIST_ENV_FRAMES + [("distributed/parallel_state.py", 2481, "init_distributed_environment",
                                    'assert timeout > 0, "timeout must be positive"')]
WORLD_GROUP_FRAMES = DIST_ENV_FRAMES + [
    ("distributed/parallel_state.py", 2537, "init_distributed_environment", "_WORLD = init_world_group("),
    ("distributed/parallel_state.py", 2131, "init_world_group", "return GroupCoordinator("),
    ("distributed/parallel_state.py", 427, "__init__", "assert self.cpu_group is not None"),
]
PYNCCL_FRAMES = INIT_FRAMES + [
    ("distributed/bootstrap.py", 149, "init_parallel_runtime", "_init_parallel_groups("),
    ("distributed/bootstrap.py", 317, "_init_parallel_groups", "initialize_model_parallel("),
    ("distributed/parallel_state.py", 2670, "initialize_model_parallel", "_TP = init_model_parallel_group("),
    ("distributed/parallel_state.py", 2168, "init_model_parallel_group", "return GroupCoordinator("),
    ("distributed/parallel_state.py", 472, "__init__", "self.pynccl_comm = PyNcclCommunicator("),
    ("distributed/device_communicators/pynccl.py", 122, "__init__", "self.comm: ncclComm_t = self.nccl.ncclCommInitRank("),
    ("distributed/device_communicators/pynccl_wrapper.py", 504, "ncclCommInitRank", "self.NCCL_CHECK("),
    ("distributed/device_communicators/pynccl_wrapper.py", 461, "NCCL_CHECK", 'raise RuntimeError(f"NCCL error: {error_str}")'),
]


def serving_frames(source):
    """A scheduler's event loop broadcasting the received requests over the TP group's gloo CPU group."""
    return [
        ("managers/scheduler.py", 6088, "run_scheduler_process", "scheduler.run_event_loop()"),
        ("managers/scheduler.py", 1890, "run_event_loop", "dispatch_event_loop(self)"),
        ("managers/scheduler.py", 5938, "dispatch_event_loop", "return _dispatch_event_loop_once(scheduler)"),
        ("managers/scheduler.py", 5951, "_dispatch_event_loop_once", "scheduler.event_loop_overlap()"),
        ("managers/scheduler.py", 1957, "event_loop_overlap", "self.ingest_requests()"),
        ("managers/scheduler.py", 2076, "ingest_requests", "recv_reqs = self.request_receiver.recv_requests(local_reqs=local_reqs)"),
        ("managers/scheduler_components/request_receiver.py", 108, "recv_requests",
         "recv_reqs = self._broadcast_reqs_across_ranks(recv_reqs, local_reqs)"),
        ("managers/scheduler_components/request_receiver.py", 211, "_broadcast_reqs_across_ranks", "recv_reqs = broadcast_pyobj("),
        ("utils/common.py", 2548 if source else 2563, "broadcast_pyobj", "dist.broadcast(tensor_size, src=src, group=dist_group)"),
        (TORCH_DIST + "/c10d_logger.py", 83, "wrapper", "return func(*args, **kwargs)"),
        (TORCH_DIST + "/distributed_c10d.py", 3151, "broadcast", "work.wait()"),
    ]


def stamp():
    return datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")


def c10d_log(level, where, message):
    """One line of torch's C++ log (glog style) on stderr."""
    now = datetime.datetime.now()
    with _PRINT_LOCK:
        fields = (level, now.strftime("%m%d"), now.strftime("%H:%M:%S."), now.microsecond * 1000, where, message)
        sys.stderr.write("[%s%s %s%09d %s] [c10d] %s\n" % fields)
        sys.stderr.flush()


def nccl_warn(where, message):
    """One NCCL WARN line, as a captured SGLang multi-node log shows them (see the header)."""
    with _PRINT_LOCK:
        fields = (stamp(), socket.gethostname(), os.getpid(), os.getpid(), where, message)
        sys.stdout.write("\n[%s] %s:%d:%d [0] %s NCCL WARN %s\n" % fields)
        sys.stdout.flush()


def gloo_closed(peer):
    return StartupError("RuntimeError: [%s/pair.cc:553] Connection closed by peer [%s]:%d. This is typically caused by a remote "
                        "worker crashing. Check the logs of the remote worker before reporting an error. GLHF! \U0001f3d6\ufe0f"
                        % (GLOO_TCP, peer[0], peer[1]), [])


def node_ranks(node_rank, nnodes, tp_size, pp_size):
    """(world ranks of this node's schedulers, their TP ranks): engine.py L1940-1971 (_calculate_rank_ranges) and
    runtime_context.py L97-105 (world rank = tp_size * pp_rank + tp_rank)."""
    pp_per_node = max(pp_size // nnodes, 1)
    nnodes_per_pp = max(nnodes // pp_size, 1)
    pp_ranks = range(pp_per_node * (node_rank // nnodes_per_pp), pp_per_node * (node_rank // nnodes_per_pp + 1))
    tp_per_node = tp_size // nnodes_per_pp
    tp_ranks = range(tp_per_node * (node_rank % nnodes_per_pp), tp_per_node * (node_rank % nnodes_per_pp + 1))
    return [tp_size * pp + tp for pp in pp_ranks for tp in tp_ranks], list(tp_ranks)


def check_server_args(args):
    """validation_hook.py L95-99, run by engine.py L1101 in the main process before server_args is logged (L1124):
    an AssertionError traceback, exit 1 (launch_server.py L83-86 only kills the children)."""
    try:
        if (args.tp_size * args.pp_size) % args.nnodes == 0:
            return
        final = "AssertionError: tp_size must be divisible by number of nodes"
    except ZeroDivisionError:
        final = "ZeroDivisionError: integer modulo by zero"
    lines = ["Traceback (most recent call last):"]
    for path, line, func, code in MAIN_FRAMES:
        lines.append('  File "%s", line %d, in %s' % (path, line, func))
        if code:
            lines.append("    " + code)
    with _PRINT_LOCK:
        sys.stderr.write("\n".join(lines + [final]) + "\n")
        sys.stderr.flush()
    sys.exit(1)


def parse_address(addr):
    """utils/network.py L510-555 (NetworkAddress.parse, IPv4 and host names) and L441-448 (_parse_port)."""
    if ":" not in addr:
        raise StartupError("ValueError: Missing port in address (expected host:port): %r" % addr,
                           ADDRESS_FRAMES + [("utils/network.py", 545, "parse", 'raise ValueError(f"Missing port in address '
                                                                                '(expected host:port): {addr!r}")')])
    host, port_str = addr.rsplit(":", 1)
    if not host:
        raise StartupError("ValueError: Empty host in address: %r" % addr,
                           ADDRESS_FRAMES + [("utils/network.py", 548, "parse", 'raise ValueError(f"Empty host in address: {addr!r}")')])
    frames = ADDRESS_FRAMES + [("utils/network.py", 555, "parse", "return NetworkAddress(host, _parse_port(port_str))")]
    try:
        port = int(port_str)
    except ValueError:
        raise StartupError("ValueError: Invalid port number: %r" % port_str, frames + [
            ("utils/network.py", 445, "_parse_port", 'raise ValueError(f"Invalid port number: {s!r}")')]) from None
    if not 0 <= port <= 65535:
        raise StartupError("ValueError: Port out of range (0-65535): %d" % port, frames + [
            ("utils/network.py", 447, "_parse_port", 'raise ValueError(f"Port out of range (0-65535): {port}")')])
    return host.strip("[]"), port


def dist_timeout(args):
    """Switch sglang-dist-timeout (seconds), else --dist-timeout, else torch's nccl default."""
    value = switch("sglang-dist-timeout")
    if value is not None:
        try:
            if float(value) > 0:
                return float(value)
        except ValueError:
            pass
    if args.dist_timeout is not None:
        if args.dist_timeout <= 0:
            raise StartupError("AssertionError: timeout must be positive", TIMEOUT_FRAMES)
        return float(args.dist_timeout)
    return DIST_TIMEOUT_DEFAULT


class Link:
    """One rendezvous connection: JSON lines both ways; start() runs a daemon thread that hands each message (None
    at end of file) to on_message."""

    def __init__(self, sock, on_message):
        self.sock = sock
        self.peer = sock.getpeername()[:2]
        self.on_message = on_message
        self.hello = None
        self.send_lock = threading.Lock()

    def start(self):
        threading.Thread(target=self._read, daemon=True).start()

    def send(self, obj):
        try:
            with self.send_lock:
                self.sock.sendall((json.dumps(obj) + "\n").encode())
        except OSError:
            pass

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def _read(self):
        buffer = b""
        while True:
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                self.on_message(self, None)
                return
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                try:
                    message = json.loads(line)
                except ValueError:
                    message = {}
                self.on_message(self, message if isinstance(message, dict) else {})


class Cluster:
    """This process's part of one server spanning --nnodes nodes. Rank 0 hosts the rendezvous on --dist-init-addr
    (torch's TCPStore), the others connect to it; the connection then stands for the collectives: "ready" when a
    node has loaded, "shutdown" for rank 0's ShutdownReq broadcast, a closed connection for a lost node."""

    def __init__(self, args):
        self.args = args
        self.world = args.tp_size * args.pp_size
        self.ranks, tp_ranks = node_ranks(args.node_rank, args.nnodes, args.tp_size, args.pp_size)
        self.label = "TP%d" % (tp_ranks[0] if tp_ranks else 0)
        self.head = args.node_rank == 0
        self.timeout = DIST_TIMEOUT_DEFAULT
        self.address = None
        self.lock = threading.Lock()
        self.links = []
        self.checked = set(self.ranks)
        self.joined = threading.Event()
        self.failure = None
        self.failed = threading.Event()
        self.ready = set()
        self.shutdown_req = threading.Event()
        self.closing = False
        self.serving = False
        self.listener = None

    # -- the rendezvous (torch.distributed.init_process_group over tcp://dist_init_addr)
    def rendezvous(self, stop):
        args = self.args
        if args.dist_init_addr:
            self.address = parse_address(args.dist_init_addr)
        else:
            # bootstrap.py L227-231: no --dist-init-addr, every node uses its own --host and a random free port
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                self.address = (args.host or "127.0.0.1", probe.getsockname()[1])
        self.timeout = dist_timeout(args)
        if self.head:
            self._host_store(stop)
        else:
            self._join_store(stop)

    def _host_store(self, stop):
        host, port = self.address
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            try:
                # STAND-IN ACCOMMODATION: the address named (the node's own), so that servers on different "nodes" of
                # the shared machine can use the same port; the real TCPStore listens on every interface
                listener.bind((socket.gethostbyname(host), port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise
                listener.bind(("0.0.0.0", port))
        except OSError as exc:
            listener.close()
            code = -exc.errno if exc.errno else -1
            name = errno.errorcode.get(exc.errno or 0, "UNKNOWN")
            raise StartupError("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
                               "address. port: %d, useIpv6: false, code: %d, name: %s, message: %s"
                               % (port, code, name, (exc.strerror or str(exc)).lower()), STORE_FRAMES) from None
        listener.listen(64)
        self.listener = listener
        threading.Thread(target=self._accept, daemon=True).start()
        started = time.monotonic()
        # TCPStore::waitForWorkers: fails once the whole seconds elapsed exceed the timeout
        deadline = started + math.floor(self.timeout) + 1
        while not self.joined.is_set():
            if self.failed.is_set():
                self._fail_nccl()
            if stop.wait(0.02):
                os._exit(143)  # pylint: disable=protected-access
            if time.monotonic() >= deadline:
                with self.lock:
                    joined = len(self.checked)
                raise StartupError("torch.distributed.DistStoreError: Timed out after %d seconds waiting for clients. %d/%d "
                                   "clients joined." % (math.floor(self.timeout) + 1, joined, self.world), STORE_FRAMES)

    def _accept(self):
        while True:
            try:
                sock, unused_addr = self.listener.accept()
            except OSError:
                return
            link = Link(sock, self._on_head_message)
            with self.lock:
                self.links.append(link)
            link.start()

    def _on_head_message(self, link, message):
        if message is None:
            with self.lock:
                lost = link.hello is not None and self.joined.is_set() and not self.closing
            if lost:
                error = gloo_closed(link.peer)
                error.frames = serving_frames(True) if self.serving else SCHEDULER_FRAMES
                die(error, self.label, at_once=True)
            return
        if "hello" in message:
            self._on_hello(link, message["hello"])
        elif message.get("ready"):
            with self.lock:
                self.ready.add(id(link))

    def _on_hello(self, link, hello):
        """NCCL's bootstrap root (bootstrap.cc) in rank 0's process: every rank checks in once, all with the same count."""
        with self.lock:
            if self.joined.is_set() or self.failed.is_set():
                return      # too late: nobody answers, it waits until its own timeout
            world = int(hello.get("tp_size", 0)) * int(hello.get("pp_size", 0))
            ranks = node_ranks(int(hello.get("node_rank", 0)), int(hello.get("nnodes", 1)), int(hello.get("tp_size", 0)),
                               int(hello.get("pp_size", 0)))[0]
            overlap = sorted(self.checked.intersection(ranks))
            if world != self.world:
                self.failure = ("Bootstrap Root : mismatch in info from procs, nranks %d vs %d, nroots 1 vs 1, iroot 0 vs 0, "
                                "offset 0 vs 0" % (self.world, world))
            elif overlap:
                self.failure = "Bootstrap Root : rank %d of %d ranks has already checked in" % (overlap[0], self.world)
            else:
                link.hello = hello
                self.checked.update(ranks)
                if len(self.checked) == self.world:
                    for other in self.links:
                        if other.hello is not None:
                            other.send({"go": True})
                    self.joined.set()
                return
            root = "%s<%d>" % (self.address[0], 30000 + os.getpid() % 30000)
            for other in self.links:
                other.send({"fail": True, "root": root})
            self.failed.set()

    def _fail_nccl(self, root=None):
        """Every rank's ncclCommInitRank fails once the bootstrap root gave up (pynccl_wrapper.py L458-461)."""
        if self.head:
            nccl_warn("bootstrap.cc:345", self.failure)
        else:
            nccl_warn("misc/socket.cc:578", "socketPollConnect: connect to %s returned Connection refused, exceeded error retry "
                                            "count after 35 attempts" % root)
        raise StartupError("RuntimeError: NCCL error: remote process exited or there was a network error", PYNCCL_FRAMES)

    def _join_store(self, stop):
        host, port = self.address
        started = time.monotonic()
        sock = None
        while sock is None:
            if stop.is_set():
                os._exit(143)  # pylint: disable=protected-access
            try:
                sock = socket.create_connection((host, port), timeout=1.0)
            except OSError:
                if time.monotonic() - started >= self.timeout:
                    message = "The client socket has timed out after %dms while trying to connect to (%s, %d)." % (
                        self.timeout * 1000, host, port)
                    c10d_log("E", "socket.cpp:1028", message)
                    c10d_log("E", "TCPStore.cpp:328", "TCP client failed to connect/validate to host %s:%d - timed out (try=1, "
                                                      "timeout=%dms): %s" % (host, port, self.timeout * 1000, message))
                    raise StartupError("torch.distributed.DistNetworkError: " + message, STORE_FRAMES) from None
                stop.wait(0.05)
        sock.settimeout(None)
        joined_at = time.monotonic()
        if not self.ranks or min(self.ranks) < 0 or max(self.ranks) >= self.world:
            # node_rank outside 0..nnodes-1: world ranks outside the world, in no group (parallel_state.py L418-428)
            sock.close()
            raise StartupError("AssertionError", WORLD_GROUP_FRAMES)
        root = {}

        def on_message(unused_link, message):
            if message is None:
                if self.joined.is_set() and not self.shutdown_req.is_set() and not self.closing:
                    error = gloo_closed(self.address)
                    error.frames = serving_frames(False) if self.serving else SCHEDULER_FRAMES
                    die(error, self.label, at_once=True)
            elif message.get("go"):
                self.joined.set()
            elif message.get("fail"):
                root["root"] = message.get("root")
                self.failed.set()
            elif message.get("shutdown"):
                self.shutdown_req.set()

        link = Link(sock, on_message)
        self.links.append(link)
        link.start()
        link.send({"hello": {"node_rank": self.args.node_rank, "nnodes": self.args.nnodes, "tp_size": self.args.tp_size,
                             "pp_size": self.args.pp_size, "node": os.environ.get("SLURMD_NODENAME") or socket.gethostname()}})
        while not self.joined.is_set():
            if self.failed.is_set():
                self._fail_nccl(root.get("root"))
            if stop.wait(0.02):
                os._exit(143)  # pylint: disable=protected-access
            if time.monotonic() - joined_at >= self.timeout:
                raise StartupError("torch.distributed.DistStoreError: wait timeout after %dms, keys: %s"
                                   % (self.timeout * 1000, STORE_KEYS), STORE_FRAMES)

    # -- after the rendezvous
    def loaded(self, stop):
        """A node's schedulers are ready; rank 0 also waits for every other node's (the collectives of the start-up)."""
        if not self.head:
            self.links[0].send({"ready": True})
            return
        started = time.monotonic()
        while True:
            with self.lock:
                waiting = len([link for link in self.links if link.hello is not None and id(link) not in self.ready])
            if not waiting:
                return
            if stop.wait(0.02):
                os._exit(143)  # pylint: disable=protected-access
            if time.monotonic() - started >= self.timeout:
                raise StartupError("RuntimeError: [%s/unbound_buffer.cc:78] Timed out waiting %dms for recv operation to complete"
                                   % (GLOO_TCP, self.timeout * 1000), SCHEDULER_FRAMES)

    def shutdown(self):
        """Rank 0 stops: its ShutdownReq reaches every TP rank (tokenizer_manager.py L3339-3340, scheduler.py L5893-5896)."""
        with self.lock:
            self.closing = True
            links = list(self.links)
        for link in links:
            if link.hello is not None:
                link.send({"shutdown": True})
            link.close()
        if self.listener is not None:
            self.listener.close()


class DummyHealthHandler(BaseHTTPRequestHandler):
    """utils/common.py L3519-3579 (launch_dummy_health_check_server): what a node_rank >= 1 serves on --host:--port.
    /ping, /health, /health_generate: 200 with an empty body; /metrics only with --enable-metrics; no API key; any
    other path 404. uvicorn runs it with log_level "warning": no access lines."""

    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    disable_nagle_algorithm = True
    sys_version = ""
    enable_metrics = False  # set on the subclass built in serve_dummy()

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        """No access log."""

    def _send(self, code, body=b"", content_type=None):
        self.send_response(code)
        if content_type:
            self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _route(self):
        path = self.path.split("?", 1)[0]
        routes = ("/ping", "/health", "/health_generate") + (("/metrics",) if self.enable_metrics else ())
        if path not in routes:
            self._send(404, b'{"detail":"Not Found"}', "application/json")
        elif self.command not in ("GET", "HEAD"):
            self._send(405, b'{"detail":"Method Not Allowed"}', "application/json")
        elif path == "/metrics":
            self._send(200, b"", METRICS_CONTENT_TYPE)
        else:
            self._send(200)

    do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = _route


def serve_dummy(args):
    """The dummy health server in a daemon thread, as engine.py L1201-1210 starts it once the node's schedulers are ready."""
    host, node = bind_address(args.host)
    handler = type("BoundDummyHandler", (DummyHealthHandler,), {"enable_metrics": bool(args.enable_metrics)})
    failure = None
    try:
        server = ThreadingHTTPServer((host, args.port), handler)
    except (OSError, OverflowError) as exc:
        server = None
        failure = exc
    if server is not None:
        server.daemon_threads = True
        if node:
            log("[stand-in] --host 0.0.0.0 on %s: listening on %s:%d, the node's own address (all nodes share one machine)"
                % (node, host, args.port))
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    log("Dummy health check server started in background thread at %s:%d" % (args.host, args.port))
    if server is None:
        # uvicorn's startup fails in the thread (its SystemExit ends only that thread); the node keeps running
        log("[Errno %s] error while attempting to bind on address ('%s', %d): %s"
            % (getattr(failure, "errno", None), args.host, args.port, (getattr(failure, "strerror", None) or str(failure)).lower()))
        log("Dummy health check server stopped at %s:%d" % (args.host, args.port))
    return server


def run_other_node(args, cluster):
    """What a node_rank >= 1 does once its schedulers are ready (engine.py L1172-1223, http_server.py L2909-2911): no
    tokenizer, no HTTP API; SIGTERM is only logged; it ends when its schedulers end, which rank 0's ShutdownReq does."""
    terms = []
    signal.signal(signal.SIGTERM, lambda signum, frame: terms.append(signum))

    def interrupted(signum, frame):
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)

    signal.signal(signal.SIGINT, interrupted)
    cluster.serving = True
    server = serve_dummy(args)
    while not cluster.shutdown_req.wait(0.05):
        while terms:
            terms.pop()
            log("SIGTERM received on node_rank %d; waiting for the rank-0 ShutdownReq broadcast to stop the schedulers."
                % args.node_rank)
    cluster.closing = True
    for number in range(len(cluster.ranks)):
        log("Scheduler or DataParallelController %d terminated with 0" % (os.getpid() + 1 + number))
    if server is not None:
        server.server_close()
    return 0


def load_model(args, stop, config, cluster=None):
    """The loading phase (port closed): weights, KV cache, CUDA graphs. Returns the scheduler's numbers.
    With --nnodes > 1 (cluster), the ranks meet between "Init torch distributed begin" and "ends"."""
    rank = cluster.label if cluster else "TP0"
    gpus = visible_gpus()
    check_parallel(args, gpus)
    model_len = int(config.get("max_position_embeddings") or MODEL_CONTEXT_LEN)
    context_len = args.context_length or model_len
    if context_len > model_len and os.environ.get("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "").lower() not in ("1", "true"):
        raise StartupError(
            "ValueError: User-specified context_length (%d) is greater than the derived context_length (%d). This may lead to "
            "incorrect model outputs or CUDA errors. To allow overriding this maximum, set the env var "
            "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" % (context_len, model_len),
            [("configs/model_config.py", 298, "__init__", "raise ValueError(")])
    shards = read_model(args)[1]
    load_time = seconds("sglang-load", 1.0)
    log("Init torch distributed begin.", rank)
    if cluster:
        cluster.rendezvous(stop)
    log("Init torch distributed ends. mem usage=1.02 GB", rank)
    log("Load weight begin. avail mem=%.2f GB" % (GPU_TOTAL_GIB - 1.6), rank)
    per_gpu = WEIGHTS_GB / args.tp_size
    # tqdm's bar on stderr, rank 0 only (standin_tqdm.py: which bar the flags select, and how tqdm writes it)
    desc = bar_desc(args)
    progress = Bar(len(shards), desc) if args.node_rank == 0 else None
    for number, shard in enumerate(shards, 1):
        if stop.wait(load_time / max(1, len(shards))):
            os._exit(143)  # pylint: disable=protected-access
        if not os.path.isfile(os.path.join(args.model_path, shard)):
            if progress:
                sys.stderr.write("\n")
            raise StartupError(
                "FileNotFoundError: [Errno 2] No such file or directory: '%s'" % os.path.join(args.model_path, shard),
                [("model_loader/weight_utils.py", 1160, "safetensors_weights_iterator",
                  "with safetensors.safe_open(st_file, framework=\"pt\", device=\"cpu\") as f:")] if desc == SINGLE_THREAD else
                [("model_loader/weight_utils.py", 1278, "buffered_multi_thread_safetensors_weights_iterator",
                  "state_dict = future.result()"),
                 ("model_loader/weight_utils.py", 1254, "_load_file",
                  "with safetensors.safe_open(st_file, framework=\"pt\", device=\"cpu\") as f:")])
        if per_gpu * number / len(shards) > GPU_TOTAL_GIB - 1.6:
            raise oom_error(2.5, 0.41)
        if progress:
            progress.update(1)
    if progress:
        progress.close()
    if switch("sglang-fail") == "oom":
        raise oom_error(3.38, 1.07)
    avail = GPU_TOTAL_GIB - 1.6 - per_gpu
    log("Load weight end. type=%s, dtype=torch.bfloat16, avail mem=%.2f GB, mem usage=%.2f GB." % (ARCHITECTURE, avail, per_gpu), rank)
    if args.kv_cache_dtype in FP8_KV_DTYPES or switch("sglang-fail") == "fp8":
        raise fp8_error(args.kv_cache_dtype if args.kv_cache_dtype in FP8_KV_DTYPES else "fp8_e4m3")
    if args.kv_cache_dtype in FP4_KV_DTYPES:
        raise StartupError("ValueError: FP4 KV cache (--kv-cache-dtype %s) needs Blackwell (sm100) GPUs." % args.kv_cache_dtype,
                           SCHEDULER_FRAMES)
    mem_fraction = args.mem_fraction_static if args.mem_fraction_static is not None else 0.79
    kv_gb = GPU_TOTAL_GIB * mem_fraction - per_gpu
    if kv_gb <= 0.2:
        raise StartupError("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
                           "Current value: mem_fraction_static=%s" % mem_fraction,
                           SCHEDULER_FRAMES + [("model_executor/pool_configurator.py", 94, "__post_init__", "raise RuntimeError(msg)")])
    max_total = int(kv_gb * KV_TOKENS_PER_GB)
    if args.max_total_tokens:
        max_total = min(max_total, args.max_total_tokens)
    log("KV Cache is allocated. #tokens: %d, KV size: %.2f GB" % (max_total, kv_gb), rank)
    log("Memory pool end. avail mem=%.2f GB" % (avail - kv_gb), rank)
    if mem_fraction > 0.9:
        raise oom_error(1.25, 0.32)
    # model_executor/model_runner_components/cuda_graph_setup.py L719-745 (0.5.21)
    log("Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, bs=[1, 2, 4, 8, 16, 24, 32], "
        "avail mem=%.2f GB" % (avail - kv_gb), rank)
    log("Capture target decode CUDA graph end. elapsed=1.02 s, mem usage=0.88 GB, avail mem=%.2f GB." % (avail - kv_gb - 0.88), rank)
    return {
        "max_total_num_tokens": max_total,
        "chunked_prefill_size": args.chunked_prefill_size or 8192,
        "max_prefill_tokens": args.max_prefill_tokens,
        "max_running_requests": args.max_running_requests or min(2048, max(1, max_total // 512)),
        "context_len": context_len,
        "available_gpu_mem": avail - kv_gb - 0.88,
    }


def resolved_args(args):
    """The resolved server args as 0.5.21 logs them and /server_info returns them (no --config, nothing of ours)."""
    return {key: value for key, value in vars(args).items() if key != "config" and not key.startswith("_")}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    sys.stderr.write("%s:0: UserWarning: 'python -m sglang.launch_server' is still supported, but 'sglang serve' is the "
                     "recommended entrypoint.\n  Example: sglang serve --model-path <model> [options]\n" % os.path.abspath(__file__))
    try:
        args = prepare_server_args(argv)
    except (ValueError, AttributeError):
        traceback.print_exc()
        return 1
    args.served_model_name = args.served_model_name or args.model_path
    args.tokenizer_path = args.tokenizer_path or args.model_path
    cluster = None
    if args.nnodes != 1:
        check_server_args(args)
        cluster = Cluster(args)
    log("server_args=%r" % resolved_args(args))

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        config = read_model(args)[0]
        # standin_env.py: NCCL's network between the nodes (NCCL_NET, NCCL_DEBUG), and the kernel caches' folders
        nccl_failure = nccl_network(args.nnodes)
        if nccl_failure:
            raise StartupError(nccl_failure, PYNCCL_FRAMES)
        write_kernel_caches(cluster.label if cluster else "TP0")
        numbers = load_model(args, stop, config, cluster)
        if cluster:
            cluster.loaded(stop)
    except StartupError as error:
        die(error, cluster.label if cluster else "TP0")
    if cluster and not cluster.head:
        if stop.is_set():
            os._exit(143)  # pylint: disable=protected-access
        return run_other_node(args, cluster)
    log("max_total_num_tokens=%d, chunked_prefill_size=%d, max_prefill_tokens=%d, max_running_requests=%d, context_len=%d, "
        "available_gpu_mem=%.2f GB" % (numbers["max_total_num_tokens"], numbers["chunked_prefill_size"], numbers["max_prefill_tokens"],
                                       numbers["max_running_requests"], numbers["context_len"], numbers["available_gpu_mem"]), "TP0")
    if stop.is_set():
        os._exit(143)  # pylint: disable=protected-access

    state = State(args, numbers["context_len"], numbers["max_total_num_tokens"])
    server = serve(args, state)
    if cluster:
        cluster.serving = True
    if not stop.wait(0 if args.skip_server_warmup else seconds("sglang-warmup", 2.0)):
        if not args.skip_server_warmup:
            uvicorn_log('127.0.0.1:51234 - "GET /model_info HTTP/1.1" 200 OK')
            uvicorn_log('127.0.0.1:51236 - "POST /generate HTTP/1.1" 200 OK')
            # the warm-up request counts in the metrics like any other (it is not a health check)
            state.metrics.http_request("/model_info", "GET")
            state.metrics.http_request("/generate", "POST")
            priority = request_priority(state.args, {})
            state.metrics.start(0, priority)
            state.outputs.end(state.outputs.begin(0, 8, False))
            state.metrics.finish(False, 7, 8, 0.05, 0.12, 0, priority)
        state.ready = True
        log("The server is fired up and ready to roll!")
        stop.wait()
    state.stopping = True
    if cluster:
        cluster.shutdown()
    uvicorn_log("Shutting down")
    server.shutdown()
    server.server_close()
    uvicorn_log("Waiting for application shutdown.")
    uvicorn_log("Application shutdown complete.")
    uvicorn_log("Finished server process [%d]" % os.getpid())
    return 0


if __name__ == "__main__":
    sys.exit(main())
