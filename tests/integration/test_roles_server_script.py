# -*- coding: utf-8 -*-
"""The server role's rendered serve.sbatch, checked without a cluster.

* The three variants (default, low latency, H200) are rendered by the role itself (include_role
  glm.serve.server, tasks_from: script, against localhost) and their `sglang.launch_server` command is parsed
  by the REAL sglang==0.5.21 CLI parser (tests/tooling/sglang_cli/check_args.py in .venv-sglang). Skipped only when
  that venv is missing (make it with tests/tooling/sglang_cli/setup.sh).
* The defaults carry the guide's flags, and bad values stop in the role's checks, naming the variable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SGLANG_PYTHON = ROOT / ".venv-sglang" / "bin" / "python"
CHECK_ARGS = ROOT / "tests" / "tooling" / "sglang_cli" / "check_args.py"
ANSIBLE_PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: glm.serve.server
        tasks_from: script
"""

VARIANTS = {
    "default": {},
    "low_latency": {"server_low_latency": True},
    "h200": {"glm_partition": "compute-h200"},
    "no_gpu_check": {"server_gpu_check": False},
    "replica": {"server_replicas": 3},
    "multinode": {"server_nodes": 2},
    "env_idle": {"server_env": {"NCCL_IB_HCA": "mlx5", "TORCH_CUDA_ARCH_LIST": "9.0"}, "server_idle_timeout": "2h"},
}

SEED_FLAGS = [
    "--served-model-name glm-5.3-flash",
    "--tp-size 8",
    "--ep-size 8",
    "--kv-cache-dtype bfloat16",
    "--dsa-prefill-backend tilelang",
    "--dsa-decode-backend tilelang",
    "--moe-runner-backend deep_gemm",
    "--reasoning-parser glm45",
    "--tool-call-parser glm47",
    "--host 0.0.0.0",
    "--port 30000",
]
EAGLE_FLAGS = [
    "--speculative-algorithm EAGLE",
    "--speculative-num-steps 5",
    "--speculative-eagle-topk 1",
    "--speculative-num-draft-tokens 6",
]


def render(tmp_path: Path, name: str, extra_vars: dict) -> subprocess.CompletedProcess:
    work = tmp_path / name
    playbook = tmp_path / "render.yml"
    playbook.write_text(PLAYBOOK)
    extra = dict(extra_vars, glm_work_dir=str(work))
    env = dict(os.environ)
    env.setdefault("ANSIBLE_COLLECTIONS_PATH", str(ROOT / ".collections"))
    env["ANSIBLE_CONFIG"] = str(ROOT / "ansible.cfg")
    env["ANSIBLE_NOCOLOR"] = "1"
    return subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local",
         "-e", "ansible_python_interpreter=" + sys.executable,
         "-e", json.dumps(extra), str(playbook)],
        cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=300, check=False, stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("serve")
    scripts = {}
    for name, extra in VARIANTS.items():
        proc = render(tmp_path, name, extra)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        scripts[name] = tmp_path / name / "serve.sbatch"
    return scripts


def test_the_gpu_check_runs_before_sglang_and_can_be_turned_off(rendered):
    text = rendered["default"].read_text()
    for name, script in rendered.items():
        proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, (name, proc.stderr)
    assert "glm_gpu_check() {" in text and "\nglm_gpu_check 8 0.95 580 || GPU_CHECK=$?\n" in text
    assert text.index("glm_gpu_check 8") < text.index("srun --container-image")
    assert text.index("glm_gpu_check 8") < text.index("GLM_BASE_URL=")      # the endpoint file only after it passed
    assert "  exit 75\n" in text
    # an NVIDIA driver older than the minimum (the check's status 2): its own exit, which the deploy does not retry
    assert 'if [ "$GPU_CHECK" -eq 2 ]; then' in text and "  exit 78\n" in text
    assert "glm_gpu_check" not in rendered["no_gpu_check"].read_text()


def test_defaults_carry_the_guide(rendered):
    text = rendered["default"].read_text()
    for line in ("#SBATCH --job-name=glm-serve", "#SBATCH --partition=compute-h100", "#SBATCH --nodes=1",
                 "#SBATCH --gres=gpu:8", "#SBATCH --exclusive", "#SBATCH --mem=0", "#SBATCH --time=08:00:00",
                 "#SBATCH --output=%x-%j.out"):
        assert line + "\n" in text
    for flag in SEED_FLAGS + ["--mem-fraction-static 0.75"]:
        assert flag in text
    for flag in EAGLE_FLAGS:
        assert flag not in text
    assert "unset NCCL_NET" in text
    # srun's -c implies --exact and is redundant: a step without it gets every CPU the job has on its node
    assert "--cpus-per-task" not in text
    assert "export PYTHONUNBUFFERED=1" in text
    assert "SGLANG_CACHE_DIR=" in text and "SGLANG_DG_CACHE_DIR=" in text
    # the key goes through the config file, never argv
    assert "--api-key" not in text
    assert '--config "$CONFIG"' in text
    assert 0o600 == rendered["default"].stat().st_mode & 0o777


def test_a_replica_announces_itself_to_the_router_instead_of_the_endpoint_file(rendered, tmp_path):
    """server_replicas > 1: the same job (its name comes from sbatch --job-name), but the endpoint file is the
    router's; the job writes replicas/NAME.url once SGLang passed the health gate (glm_await_ready, run whole in
    tests/doubles_tests/test_serve_supervision.py) and removes it when it ends, a scancel too, unless a replacement's."""
    text = rendered["replica"].read_text()
    default = rendered["default"].read_text()
    assert "GLM_BASE_URL=" in default and "GLM_BASE_URL=" not in text
    assert '/replica/replicas/"$SLURM_JOB_NAME.url"' in text
    assert "trap 'exit 143' TERM INT" in text and 'glm_leave_router "$REPLICA_FILE"\' EXIT' in text
    # announced by the gate, started after SGLang, itself after the GPU check
    gate = 'glm_await_ready "$SERVER" "http://$SLURMD_NODENAME:30000" "$CURL_CONFIG" glm-5.3-flash "$READY_FILE" "$REPLICA_FILE" &'
    assert gate in text and gate.replace(' "$REPLICA_FILE"', '') in default
    assert text.index("glm_gpu_check 8") < text.index("  glm_start_sglang\n") < text.index(gate)
    # the script's part that withdraws, run as a job would run it (no srun): SIGTERM removes the file if it is the job's
    work = tmp_path / "job"
    work.mkdir()
    functions = (ROOT / "roles" / "server" / "files" / "serve_ready.bash").read_text()
    block = text[text.index("REPLICA_FILE="):text.index("\n\n", text.index("REPLICA_FILE="))]
    assert block.count("\n") == 7, block                  # REPLICA_FILE=, mkdir, the two traps, the drain's 2 + 2 lines
    assert "#SBATCH --signal=B:USR1@120\n" in text and "#SBATCH --signal" not in default   # server_drain_before: replicas only
    script = work / "announce.sh"
    script.write_text("set -euo pipefail\nCONFIG=%s/config CURL_CONFIG= READY_FILE= GLM_STOP_FILE=\n%s\n%s\nprintf 'http://%%s:30000\\n%%s\\n' "
                      "\"$SLURMD_NODENAME\" \"$SLURM_JOB_ID\" > \"$REPLICA_FILE\"\nsleep 30 & wait $!\n" % (work, functions, block))
    url_file = Path(block.split("REPLICA_FILE=", 1)[1].split('"$SLURM_JOB_NAME', 1)[0].strip("'")) / "glm-serve-2.url"
    # job 7 announces itself, is cancelled: its file goes; job 9 announces itself, a replacement (job 10) announces
    # itself meanwhile, job 9 is cancelled: the replacement's file stays
    for job_id, replaced in (("7", False), ("9", True)):
        env = dict(os.environ, SLURM_JOB_NAME="glm-serve-2", SLURM_JOB_ID=job_id, SLURMD_NODENAME="node2")
        proc = subprocess.Popen(["bash", str(script)], env=env, cwd=str(work))
        try:
            for _tick in range(100):
                if url_file.exists():
                    break
                subprocess.run(["sleep", "0.1"], check=True)
            assert url_file.read_text() == "http://node2:30000\n%s\n" % job_id
            if replaced:
                url_file.write_text("http://node1:30000\n10\n")
            proc.terminate()
            assert proc.wait(timeout=10) == 143
            assert url_file.exists() == replaced
        finally:
            if proc.poll() is None:
                proc.kill()
    assert url_file.read_text() == "http://node1:30000\n10\n"


def test_a_server_over_two_nodes(rendered):
    """server_nodes=2: two whole nodes, one task per node, each with its rank; the head is the batch script's node."""
    text = rendered["multinode"].read_text()
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --gres=gpu:8", "#SBATCH --exclusive"):
        assert line + "\n" in text
    assert "--nodes=2 --ntasks=2 --ntasks-per-node=1 --gres=gpu:8" in text
    assert 'exec python3 -m sglang.launch_server "$@" --node-rank "$SLURM_NODEID"' in text
    for flag in ("--tp-size 16", "--ep-size 16", "--nnodes 2", '--dist-init-addr "$SLURMD_NODENAME:20000"'):
        assert flag in text
    # the GPU check on each node (a task per node), before SGLang starts
    check = ('srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --gres=gpu:8 \\\n'
             '  bash -c "$(declare -f glm_gpu_check)"\'; glm_gpu_check "$@"\' gpu-check 8 0.95 580 || GPU_CHECK=$?')
    assert check in text and text.index(check) < text.index("srun --container-image")
    default = rendered["default"].read_text()
    assert "declare -f glm_gpu_check" not in default and "\nglm_gpu_check 8 0.95 580 || GPU_CHECK=$?\n" in default
    assert "--nnodes" not in default and "--node-rank" not in default and "#SBATCH --nodes=1\n" in default


def _container_env(text):
    """The names of the server step's --container-env."""
    lines = [line for line in text.splitlines() if line.startswith('srun --container-image="$IMAGE"')]
    assert len(lines) == 1, lines
    return lines[0].split("--container-env=", 1)[1].split()[0].strip("'").split(",")


def test_the_job_environment_wins_over_the_image(rendered):
    """Pyxis 0.24 (README.md L98-105, args.c L146-152; pyxis_slurmstepd.c L657-714 spank_import_container_env): the
    job's exported variables reach the container, but a value the image sets (its ENV, enroot's /etc/environment)
    takes precedence, except for the names given in --container-env. So the server's step names every variable the
    script exports for SGLang: the kernel caches, PYTHONUNBUFFERED, server_env's, the stop file with an idle timeout,
    and NCCL's debug settings on several nodes. Live: tests/integration/test_faults.py, test_13a to test_13d."""
    assert _container_env(rendered["default"].read_text()) == ["SGLANG_CACHE_DIR", "SGLANG_DG_CACHE_DIR", "PYTHONUNBUFFERED"]
    names = _container_env(rendered["env_idle"].read_text())
    assert names == ["SGLANG_CACHE_DIR", "SGLANG_DG_CACHE_DIR", "PYTHONUNBUFFERED", "NCCL_IB_HCA", "TORCH_CUDA_ARCH_LIST",
                     "GLM_STOP_FILE"], names
    assert "NCCL_DEBUG" in _container_env(rendered["multinode"].read_text())


def test_nccl_net_unset_on_one_node_kept_on_several(rendered):
    """One node: NCCL_NET unset as the guide does (inside a node NCCL uses NVLink whatever it says, and a forced
    NCCL_NET whose plugin is missing fails NCCL even there). Several nodes: the site's value is kept (unset, NCCL falls
    back to TCP sockets silently when InfiniBand does not work in the container), and NCCL_DEBUG=INFO (unless the site
    sets it) puts NCCL's choice in the log ("NET/Socket : Using ...", NVIDIA/nccl src/transport/net_socket.cc;
    "Using network Socket", src/init.cc), which the deploy reads to warn (roles/server/tasks/run.yml)."""
    default = rendered["default"].read_text()
    assert "bash -c 'unset NCCL_NET; exec python3 -m sglang.launch_server" in default
    assert "NCCL_DEBUG" not in default
    assert "unset NCCL_NET" in rendered["env_idle"].read_text()
    multi = rendered["multinode"].read_text()
    assert "unset NCCL_NET" not in multi and "export NCCL_NET" not in multi
    assert "export NCCL_DEBUG=${NCCL_DEBUG:-INFO}\n" in multi and "export NCCL_DEBUG_SUBSYS=${NCCL_DEBUG_SUBSYS:-INIT,NET}\n" in multi
    assert multi.index("export NCCL_DEBUG=") < multi.index('srun --container-image="$IMAGE"')


def test_low_latency_and_h200(rendered):
    low = rendered["low_latency"].read_text()
    for flag in SEED_FLAGS + EAGLE_FLAGS + ["--mem-fraction-static 0.70"]:
        assert flag in low
    assert low.index("--speculative-num-draft-tokens 6") < low.index("--host 0.0.0.0")
    assert "#SBATCH --partition=compute-h200\n" in rendered["h200"].read_text()


@pytest.mark.skipif(not SGLANG_PYTHON.exists(), reason=".venv-sglang missing: run tests/tooling/sglang_cli/setup.sh")
def test_real_sglang_parser_accepts_the_three_variants(rendered, tmp_path):
    bad = tmp_path / "bad.sbatch"
    bad.write_text(rendered["default"].read_text().replace("--kv-cache-dtype bfloat16", "--kv-cache-dtype bf17"))
    cases = [{"name": name, "file": str(path)} for name, path in rendered.items()]
    cases.append({"name": "bad", "file": str(bad)})
    cases_file = tmp_path / "cases.json"
    cases_file.write_text(json.dumps(cases))
    proc = subprocess.run([str(SGLANG_PYTHON), str(CHECK_ARGS), "--parser", "real", "--cases", str(cases_file)],
                          capture_output=True, text=True, timeout=600, check=False)
    results = {r["name"]: r for r in json.loads(proc.stdout)}
    for name in VARIANTS:
        assert results[name]["rc"] == 0, results[name]
    # the check is not vacuous: the real parser refuses a bad choice
    assert results["bad"]["rc"] != 0
    assert "kv-cache-dtype" in results["bad"]["message"]


@pytest.mark.parametrize("extra, variable, words", [
    ({"server_kv_cache_dtype": "fp8_e4m3"}, "server_kv_cache_dtype", "FP8 KV cache"),
    ({"server_kv_cache_dtype": "fp8_e5m2", "glm_partition": "compute-h200"}, "server_kv_cache_dtype", "bfloat16"),
    ({"server_tp_size": 4}, "server_tp_size", "server_gpus"),
    ({"server_ep_size": 3}, "server_ep_size", "divisor"),
    ({"server_mem_fraction_static": 1.7}, "server_mem_fraction_static", "between 0 and 1"),
    ({"glm_port": 99999}, "glm_port", "1 to 65535"),
    ({"server_time": "8h"}, "server_time", "Slurm time limit"),
    ({"server_extra_args": ["--api-key", "x"]}, "server_extra_args", "config file"),
    ({"server_gpus": "eight"}, "server_gpus", "int"),
    ({"server_replicas": 0}, "server_replicas", "1 or more"),
    ({"server_replicas": 2, "server_min_replicas": 3}, "server_min_replicas", "from 1 to server_replicas (2)"),
])
def test_bad_values_stop_before_the_script(tmp_path, extra, variable, words):
    proc = render(tmp_path, "bad", extra)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert variable in out and words in out, out[-3000:]
    assert not (tmp_path / "bad" / "serve.sbatch").exists()
