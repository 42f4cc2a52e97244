# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Helpers for the stand-in tests (tests/doubles_tests): run the stand-ins as subprocesses on 127.0.0.1, free ports,
tmp dirs, the seed guide's server command line and the API key the tests serve with.

The stand-ins run under Debian's /usr/bin/python3 when it exists (the interpreter of the cluster's jobs,
stdlib only), else under the interpreter running pytest.
"""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
STANDINS = os.path.join(REPO, "tests", "doubles")
HF = os.path.join(STANDINS, "python", "hf_standin.py")
HF_WRAPPER = os.path.join(STANDINS, "bin", "hf")
STANDIN_PYTHONPATH = os.path.join(STANDINS, "python")
PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
SEED_MODEL = "zai-org/GLM-5.3-Flash"

sys.path.insert(0, os.path.join(REPO, "tests", "tooling", "sglang_cli"))
import check_args  # noqa: E402  pylint: disable=wrong-import-position,import-error
sys.path.insert(0, os.path.join(REPO, "tests", "tooling"))
from procs import sglang_pids  # noqa: E402,F401  pylint: disable=wrong-import-position,import-error,unused-import

KEY = "0123abcd" * 6
#: the seed guide's serve.sbatch step; {mem}: --mem-fraction-static, {extra}: more flag lines before --host (its
#: low-latency variant adds EAGLE's)
SEED_SERVE_TEMPLATE = """srun --container-image="$IMAGE" \\
  --ntasks=1 --gres=gpu:8 --cpus-per-task="$SLURM_CPUS_ON_NODE" \\
  bash -c 'unset NCCL_NET; exec python3 -m sglang.launch_server \\
    --model-path "$MODEL" \\
    --served-model-name glm-5.3-flash \\
    --tp-size 8 \\
    --ep-size 8 \\
    --mem-fraction-static {mem} \\
    --kv-cache-dtype bfloat16 \\
    --dsa-prefill-backend tilelang \\
    --dsa-decode-backend tilelang \\
    --moe-runner-backend deep_gemm \\
    --reasoning-parser glm45 \\
    --tool-call-parser glm47 \\
    --api-key "$GLM_API_KEY" \\
{extra}    --host 0.0.0.0 \\
    --port 30000'
"""
SEED_SERVE = SEED_SERVE_TEMPLATE.format(mem="0.75", extra="")
STRAWBERRY = "How many times does the letter r appear in strawberry?"


def seed_args(model_dir, port, **replace):
    """The seed guide's server arguments, with $MODEL / $GLM_API_KEY filled in and a free port."""
    args = check_args.extract_args(SEED_SERVE)
    values = {"$MODEL": str(model_dir), "$GLM_API_KEY": KEY, "30000": str(port)}
    args = [values.get(a, a) for a in args]
    for flag, value in replace.items():
        args[args.index("--" + flag.replace("_", "-")) + 1] = value
    return args


def standin_env(control_dir, **extra):
    """A clean environment: no GLM_STANDIN_* or Slurm variables from outside, an empty control dir of our own."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GLM_STANDIN_") and not k.startswith("SLURM") and k != "CUDA_VISIBLE_DEVICES"}
    env["GLM_STANDIN_CONTROL"] = str(control_dir)
    env["PYTHONPATH"] = STANDIN_PYTHONPATH
    env["PYTHONUNBUFFERED"] = "1"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_hf(args, control_dir, timeout=30, **env):
    return subprocess.run([PYTHON, HF] + list(args), env=standin_env(control_dir, **env), capture_output=True, text=True,
                          timeout=timeout, check=False)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate, timeout=10.0, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not met within %.1f s" % timeout)


def http(method, url, key=None, body=None, timeout=5):
    """(status, body text); status None when the connection is refused."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    if key is not None:
        request.add_header("Authorization", "Bearer %s" % key)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except (ConnectionRefusedError, urllib.error.URLError) as error:
        if isinstance(error, ConnectionRefusedError) or isinstance(getattr(error, "reason", None), ConnectionRefusedError):
            return None, ""
        raise


class Server:
    """A stand-in SGLang server subprocess, its log files and URL."""

    def __init__(self, args, tmp_path, **env):
        argv = list(args)
        if "--port" in argv:
            self.port = int(argv[argv.index("--port") + 1])
        else:
            self.port = free_port()
            argv += ["--port", str(self.port)]
        self.url = "http://127.0.0.1:%d" % self.port
        self.out_path = tmp_path / ("server-%d.out" % self.port)
        self.err_path = tmp_path / ("server-%d.err" % self.port)
        control = tmp_path / "control"
        control.mkdir(exist_ok=True)
        env.setdefault("GLM_STANDIN_SGLANG_LOAD", "0")
        env.setdefault("GLM_STANDIN_SGLANG_WARMUP", "0.3")
        with open(self.out_path, "w", encoding="utf-8") as out, open(self.err_path, "w", encoding="utf-8") as err:
            self.proc = subprocess.Popen([PYTHON, "-m", "sglang.launch_server"] + argv, env=standin_env(control, **env),
                                         stdout=out, stderr=err, cwd=str(tmp_path))

    @property
    def out(self):
        return self.out_path.read_text(encoding="utf-8")

    @property
    def err(self):
        return self.err_path.read_text(encoding="utf-8")

    def get(self, path, key=None):
        return http("GET", self.url + path, key=key)

    def post(self, path, body, key=None):
        return http("POST", self.url + path, key=key, body=body)

    def wait_ready(self, timeout=10.0):
        wait_for(lambda: "fired up and ready to roll" in self.out or self.proc.poll() is not None, timeout)
        assert self.proc.poll() is None, "server exited %s:\n%s\n%s" % (self.proc.returncode, self.out, self.err[-3000:])

    def wait_exit(self, timeout=10.0):
        return self.proc.wait(timeout=timeout)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
