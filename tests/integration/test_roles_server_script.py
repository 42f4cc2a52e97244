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
import re
import shlex
import subprocess
import time
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
    "successors": {"server_replicas": 2, "server_successors_until": "forever", "server_time": "01:00:00",
                   "server_handover_lead": 600, "server_sbatch_args": ["--qos=high prio"]},
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
    ({"server_successors_until": "tomorrow"}, "server_successors_until", "YYYY-MM-DD or YYYY-MM-DDTHH:MM"),
    ({"server_successors_until": "forever", "server_time": "00:10:00", "server_handover_lead": 480}, "server_handover_lead",
     "at most server_time (00:10:00) minus server_drain_before (120) minus 60"),
    ({"server_successors_until": "2027-01-31", "server_drain_before": 0}, "server_handover_lead",
     "server_drain_before must be above 0"),
])
def test_bad_values_stop_before_the_script(tmp_path, extra, variable, words):
    proc = render(tmp_path, "bad", extra)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert variable in out and words in out, out[-3000:]
    assert not (tmp_path / "bad" / "serve.sbatch").exists()


def test_successors_are_submitted_by_the_job_and_the_old_job_drains_when_taken_over(rendered):
    """server_successors_until: the replica's script runs glm_continuity beside SGLang (successor.bash), with the
    lead, the date and the deploy's own sbatch arguments; without it, nothing of it is in the script."""
    text = rendered["successors"].read_text()
    assert "glm_continuity() {" in text and "glm_submit_successor() {" in text
    call = ('glm_continuity "$READY_FILE" "$REPLICA_FILE" "$SUCCESSOR_FILE" "$SERVICE_END" 600 forever \\\n  %s \'--qos=high prio\' &'
            % str(rendered["successors"]))
    assert call in text, text[text.index("SUCCESSOR_FILE="):][:600]
    assert "kill ${CONTINUITY:-} 2> /dev/null || true' EXIT" in text
    assert '"$(glm_drain_why "$REPLICA_FILE" 120 "$SUCCESSOR_FILE")"' in text
    # the handover recorded for status, in the layout's file, with the GPUs both jobs held meanwhile (8 x 1 node)
    handovers = str(rendered["successors"].parent / "handovers.log")
    assert 'glm_record_handover %s "$SUCCESSOR_FILE.took-over" 8\n' % handovers in text
    # the successor avoids the deploy's bad-node list (the layout's file, server_bad_node_ttl's default)
    assert "BAD_NODES_FILE=%s BAD_NODE_TTL=86400\n" % (rendered["successors"].parent / "bad-nodes.json") in text
    assert "GLM_JOB_STARTED=$(date +%s)" in text
    for name in ("default", "replica"):
        assert "glm_continuity" not in rendered[name].read_text()


SUCCESSOR_FUNCTIONS = ROOT / "roles" / "server" / "files" / "successor.bash"


def run_functions(tmp_path, body, scontrol_line, env=None):
    """bash with successor.bash sourced, fake scontrol (prints SCONTROL_LINE) and sbatch (records its argv, prints 77)
    first on the PATH; returns (the completed process, sbatch's argv lines)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "scontrol").write_text("#!/bin/sh\nprintf '%%s\\n' %s\n" % json.dumps(scontrol_line))
    record = ('#!/bin/sh\nfor a in "$@"; do printf "%%s\\n" "$a"; done >> %s/sbatch.argv\n'
              'echo "$GLM_SUCCESSOR_OF" > %s/sbatch.env\necho "77;glm"\n')
    (bin_dir / "sbatch").write_text(record % (tmp_path, tmp_path))
    for tool in ("scontrol", "sbatch"):
        (bin_dir / tool).chmod(0o755)
    environ = dict(os.environ, PATH="%s:%s" % (bin_dir, os.environ["PATH"]), SLURM_JOB_ID="41", SLURM_JOB_NAME="glm-serve-2",
                   **(env or {}))
    proc = subprocess.run(["bash", "-c", "set -euo pipefail; source %s; %s" % (SUCCESSOR_FUNCTIONS, body)], env=environ,
                          capture_output=True, text=True, timeout=60, check=False, cwd=str(tmp_path))
    argv = tmp_path / "sbatch.argv"
    return proc, argv.read_text().splitlines() if argv.exists() else []


@pytest.mark.parametrize("limit, seconds", [("30", 1800), ("02:30", 150), ("1:00:00", 3600), ("1-02", 93600),
                                            ("1-02:03:04", 93784), ("08:00:00", 28800)])
def test_the_jobs_time_limit_in_seconds(tmp_path, limit, seconds):
    proc, _argv = run_functions(tmp_path, "glm_slurm_seconds %s" % limit, "")
    assert proc.stdout.strip() == str(seconds), proc.stderr


def test_the_successor_is_submitted_with_slurms_own_timing(tmp_path):
    """One scontrol (comment, limit, start) and one sbatch: the same name and comment, after:THIS_JOB+MINUTES with
    MINUTES = (limit - lead) / 60 counted by Slurm from the job's start, the deploy's sbatch arguments, the script."""
    line = ("JobId=41 JobName=glm-serve-2 UserId=glmuser(1001) Comment=glm.serve:glm-serve:replica:2 JobState=RUNNING "
            "RunTime=00:00:10 TimeLimit=01:00:00 StartTime=2026-12-05T10:00:00 EndTime=2026-12-05T11:00:00")
    started = int(subprocess.run(["date", "-d", "2026-12-05 10:00:00", "+%s"], capture_output=True, text=True, check=True).stdout)
    proc, argv = run_functions(tmp_path, "glm_submit_successor %s/next %s/end 600 forever /w/serve.sbatch '--qos=high prio'"
                               % (tmp_path, tmp_path), line)
    assert proc.returncode == 0, proc.stderr
    assert argv == ["--parsable", "--job-name=glm-serve-2", "--comment=glm.serve:glm-serve:replica:2", "--dependency=after:41+50",
                    "--qos=high prio", "/w/serve.sbatch"]
    assert (tmp_path / "next").read_text() == "77\n%d\n" % (started + 3600) and (tmp_path / "sbatch.env").read_text() == "41\n"   # GLM_SUCCESSOR_OF
    assert "successor job 77 submitted (server_successors_until=forever): Slurm starts it at about 2026-12-05 10:50:00" in proc.stdout
    assert "50 min after this job started and 600 s before its time limit (01:00:00; server_handover_lead=600" in proc.stdout
    # past the date: none submitted, and said
    later = tmp_path / "later"
    later.mkdir()
    proc, argv = run_functions(later, "glm_submit_successor %s/next %s/end 600 2026-12-05T10:30 /w/serve.sbatch" % (later, later), line)
    assert proc.returncode == 0 and argv == [] and not (later / "next").exists(), proc.stderr
    assert "past server_successors_until (2026-12-05T10:30); the replica ends with this job" in proc.stdout
    # a limit too short for the lead, or none: said, nothing submitted
    for limit, words in (("00:09:00", "leaves less than a minute"), ("UNLIMITED", "time limit is 'UNLIMITED'")):
        short = tmp_path / limit.replace(":", "")
        short.mkdir()
        proc, argv = run_functions(short, "glm_submit_successor %s/next %s/end 600 forever /w/serve.sbatch" % (short, short),
                                   line.replace("TimeLimit=01:00:00", "TimeLimit=" + limit))
        assert proc.returncode == 1 and words in proc.stderr and argv == [] and not (short / "next").exists()


def test_the_successor_avoids_the_nodes_of_the_bad_node_list(tmp_path):
    """BAD_NODES_FILE (the deploy's bad-nodes.json): its nodes added less than BAD_NODE_TTL s ago, and the sbatch
    arguments' own --exclude / -x, in one --exclude, as the module's own submissions do; an expired entry, a missing
    or unreadable list: nothing excluded beyond the arguments' own."""
    line = ("JobId=41 JobName=glm-serve-2 UserId=glmuser(1001) Comment=glm.serve:glm-serve:replica:2 JobState=RUNNING "
            "RunTime=00:00:10 TimeLimit=01:00:00 StartTime=2026-12-05T10:00:00 EndTime=2026-12-05T11:00:00")
    now = int(time.time())
    bad = tmp_path / "bad-nodes.json"
    bad.write_text(json.dumps({"node2": {"cause": "gpu-check: GPU 3 ECC", "since": now - 60, "job_id": "40"},
                               "node4": {"cause": "old", "since": now - 7200, "job_id": "30"}}))
    env = {"BAD_NODES_FILE": str(bad), "BAD_NODE_TTL": "3600"}
    call = "glm_submit_successor %s/next %s/end 600 forever /w/serve.sbatch --exclude=node9 --qos=high -x node8" % (tmp_path, tmp_path)
    proc, argv = run_functions(tmp_path, call, line, env=env)
    assert proc.returncode == 0, proc.stderr
    assert argv == ["--parsable", "--job-name=glm-serve-2", "--comment=glm.serve:glm-serve:replica:2", "--dependency=after:41+50",
                    "--qos=high", "--exclude=node2,node9,node8", "/w/serve.sbatch"], argv
    assert "successor job 77 submitted" in proc.stdout and "(avoiding the nodes of the bad-node list: node2)" in proc.stdout
    # a -x with nothing after it is passed on as it is (sbatch says what is wrong), an empty --exclude= adds nothing
    edge = tmp_path / "edge"
    edge.mkdir()
    proc, argv = run_functions(edge, "glm_submit_successor %s/next %s/end 600 forever /w/s --exclude= -x" % (edge, edge), line, env=env)
    assert proc.returncode == 0 and argv[-3:] == ["-x", "--exclude=node2", "/w/s"], (argv, proc.stderr)
    for name, text in (("expired", json.dumps({"node2": {"since": now - 7200}})), ("broken", "{not json"), ("missing", None)):
        where = tmp_path / name
        where.mkdir()
        if text is not None:
            (where / "bad-nodes.json").write_text(text)
        proc, argv = run_functions(where, "glm_submit_successor %s/next %s/end 600 forever /w/s --exclude=node9" % (where, where),
                                   line, env=dict(env, BAD_NODES_FILE=str(where / "bad-nodes.json")))
        assert proc.returncode == 0 and argv[-2:] == ["--exclude=node9", "/w/s"], (name, argv, proc.stderr)
        assert "bad-node list" not in proc.stdout and "successor job 77 submitted" in proc.stdout, name


def test_a_job_taken_over_by_its_successor_drains(tmp_path):
    """Once the job has served (READY) and its own id was the replica's, another job's id there makes it note that
    job and send itself USR1 (the drain's signal); the predecessor's id, there before this job's gate wrote its own,
    does not."""
    (tmp_path / "ready").write_text("1\n")
    replica = tmp_path / "glm-serve-2.url"
    replica.write_text("http://node1:30000\n40\n")                   # the predecessor's, until the gate writes ours
    body = ('trap \'echo USR1; exit 0\' USR1; (sleep 3; printf "http://node2:30000\\n41\\n" > %(r)s; sleep 3; '
            'printf "http://node3:30000\\n77\\n1764930000\\n" > %(r)s) & glm_continuity %(t)s/ready %(r)s %(t)s/next %(t)s/end 600 forever /w/s & '
            'wait $!; sleep 30' % {"r": replica, "t": tmp_path})
    (tmp_path / "next").write_text("77\n")                             # submitted already: no sbatch here
    proc, argv = run_functions(tmp_path, body, "")
    assert proc.stdout.strip() == "USR1", (proc.stdout, proc.stderr)
    assert (tmp_path / "next.took-over").read_text() == "77 1764930000\n" and argv == []
    # after the drain: the handover's line for status (its end, the replica, the old and new job, the new one's start,
    # the GPUs), appended
    proc, _argv = run_functions(tmp_path, "glm_record_handover %(t)s/handovers.log %(t)s/next.took-over 8; "
                                "glm_record_handover %(t)s/handovers.log %(t)s/next.took-over 8" % {"t": tmp_path}, "")
    lines = (tmp_path / "handovers.log").read_text().splitlines()
    assert proc.returncode == 0 and len(lines) == 2, proc.stderr
    end, name, old, new, start, gpus = lines[0].split()
    assert (name, old, new, start, gpus) == ("glm-serve-2", "41", "77", "1764930000", "8") and int(end) > 1764930000


def test_the_drain_says_why(tmp_path):
    """glm_drain_why (serve_ready.bash): the successor's takeover, a rolling change's new job (the deploy's USR1; with
    successors on, a took-over by another job than the one submitted), the service's end, or the time limit."""
    ready = os.path.join(os.path.dirname(SUCCESSOR_FUNCTIONS), "serve_ready.bash")
    url, nxt = tmp_path / "r.url", tmp_path / "next"

    def why(*args):
        proc, _argv = run_functions(tmp_path, "source %s; glm_drain_why %s" % (ready, " ".join(str(a) for a in args)), "")
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()
    url.write_text("http://node1:30000\n41\n")
    assert why(url, 120) == "the time limit is 120 s away (server_drain_before)"
    assert why(url, 120, nxt) == "the time limit is 120 s away (server_drain_before)"
    url.write_text("http://node2:30000\n55\n")
    assert why(url, 120) == "job 55 took the replica's place (a change rolled out by the deploy)"
    nxt.write_text("77\n1764933600\n")
    (tmp_path / "next.took-over").write_text("77 1764930000\n")
    assert why(url, 120, nxt) == "job 77 took the replica's place (server_successors_until)"
    (tmp_path / "next.took-over").write_text("55 1764930000\n")
    assert why(url, 120, nxt) == "job 55 took the replica's place (a change rolled out by the deploy)"
    (tmp_path / "next.took-over").unlink()
    (tmp_path / "next.ended").write_text("2026-12-05 10:20:00\n")
    assert why(url, 120, nxt) == "the service ends at 2026-12-05 10:20:00 (teardown's glm_stop_at)"


def test_a_preemption_is_told_apart_from_the_time_limit(tmp_path):
    """glm_preempted (serve_ready.bash), asked when Slurm's USR1 came: `scontrol show job` (the fields as Slurm 24.11
    prints them on the test bed: PreemptTime=None until preempted, then the preemption's time, EndTime pulled in to
    it + GraceTime) says a preemption, and the seconds to EndTime are what the drain has; the time limit's USR1
    (PreemptTime=None) is not one."""
    import time as clock
    ready = os.path.join(os.path.dirname(SUCCESSOR_FUNCTIONS), "serve_ready.bash")
    fmt = "%Y-%m-%dT%H:%M:%S"
    end = clock.strftime(fmt, clock.localtime(clock.time() + 60))
    base = ("JobId=41 JobName=glm-serve-2 Partition=gpu-burst StartTime=2026-12-06T04:00:00 EndTime=%s Deadline=N/A "
            "PreemptEligibleTime=2026-12-06T04:00:00 PreemptTime=%s SuspendTime=None")
    proc, _argv = run_functions(tmp_path, "source %s; glm_preempted 120" % ready, base % (end, clock.strftime(fmt)))
    assert proc.returncode == 0 and 55 <= int(proc.stdout.strip()) <= 60, (proc.stdout, proc.stderr)
    proc, _argv = run_functions(tmp_path, "source %s; glm_preempted 120 || echo no" % ready, base % (end, "None"))
    assert proc.stdout.strip() == "no", proc.stdout
    # no EndTime to read (a job without a time limit): the drain's own seconds
    proc, _argv = run_functions(tmp_path, "source %s; glm_preempted 120" % ready, base % ("Unknown", clock.strftime(fmt)))
    assert proc.stdout.strip() == "120", (proc.stdout, proc.stderr)
    # a controller that does not answer (restarting; the real scontrol spends ~18 s failing to connect): after 5 s
    # the USR1 is taken for the time limit's, and the replica leaves the router
    (tmp_path / "bin" / "scontrol").write_text("#!/bin/sh\nexec sleep 30\n")
    began = clock.monotonic()
    proc = subprocess.run(["bash", "-c", "source %s; glm_preempted 120 || echo no" % ready], capture_output=True,
                          env=dict(os.environ, PATH="%s:%s" % (tmp_path / "bin", os.environ["PATH"]), SLURM_JOB_ID="41"),
                          text=True, timeout=60, check=False)
    assert proc.stdout.strip() == "no" and clock.monotonic() - began < 8, (proc.stdout, clock.monotonic() - began)


def test_a_usr1_as_the_gate_ends_does_not_hang_the_job():
    """The job's helpers are ended by glm_end_children, not bash's `wait`: a trapped USR1 that comes while bash reaps
    the gate leaves bash's job table with the gate running, and `wait GATE` never returned (the replica stayed in the
    router; make test failed on it in CI). Here the gate signals the script as it ends, 200 times: with `kill; wait`
    this hung within the first 3 (bash 5.2.15); with glm_end_children all 200 end (5.5 s)."""
    ready = os.path.join(os.path.dirname(SUCCESSOR_FUNCTIONS), "serve_ready.bash")
    script = ('source %s; trap "DRAIN=1" USR1; for i in $(seq 1 200); do DRAIN=; sleep 30 & S=$!; '
              '(sleep 0.02; kill -USR1 $$) & G=$!; wait "$S"; glm_end_children "$G"; [ -n "$DRAIN" ] || exit 3; '
              'kill "$S"; done; echo ended' % shlex.quote(ready))
    proc = subprocess.run(["timeout", "30", "bash", "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ended", (proc.returncode, proc.stdout, proc.stderr[-500:])


def test_the_services_end_stops_the_successors(tmp_path):
    """The teardown's end of the service (layout's service_end; empty: now, else glm_stop_at): no successor is
    submitted to start past it, a serving job drains once it has come, and a successor that starts after it ends at
    once (the script's first lines)."""
    line = ("JobId=41 JobName=glm-serve Comment=glm.serve:glm-serve:replica:1 TimeLimit=01:00:00 "
            "StartTime=2026-12-05T10:00:00")
    (tmp_path / "end").write_text("2026-12-05T10:20:00\n")
    proc, argv = run_functions(tmp_path, "glm_submit_successor %(t)s/next %(t)s/end 600 forever /w/s" % {"t": tmp_path}, line)
    assert proc.returncode == 0 and argv == [] and not (tmp_path / "next").exists(), proc.stderr
    assert "no successor: the service ends at 2026-12-05 10:20:00 (teardown)" in proc.stdout
    # the end come (the file empty: now), a serving job notes it and sends itself USR1, the drain
    (tmp_path / "end").write_text("\n")
    (tmp_path / "ready").write_text("1\n")
    (tmp_path / "next").write_text("77\n")
    body = ("trap 'echo USR1; exit 0' USR1; glm_continuity %(t)s/ready %(t)s/url %(t)s/next %(t)s/end 600 forever /w/s & "
            "wait $!; sleep 30" % {"t": tmp_path})
    proc, argv = run_functions(tmp_path, body, "")
    assert proc.stdout.strip() == "USR1" and (tmp_path / "next.ended").exists() and argv == [], (proc.stdout, proc.stderr)
    # no end file: no end
    proc, _argv = run_functions(tmp_path, "glm_service_end %s/none || echo none" % tmp_path, "")
    assert proc.stdout.strip() == "none"


def test_a_successor_that_starts_after_the_teardown_ends_at_once(rendered, tmp_path):
    """The rendered script's first lines, run with GLM_SUCCESSOR_OF and the service's end written: it says so and
    exits 0 before anything else (no key read, no GPU check, no SGLang)."""
    text = rendered["successors"].read_text()
    head = text[:text.index("# The key reaches SGLang")]
    end = re.search(r"SERVICE_END=(\S+)", head).group(1)
    script = tmp_path / "head.bash"
    script.write_text(head.replace("SERVICE_END=%s" % end, "SERVICE_END=%s" % (tmp_path / "end"))
                      + "\necho STARTED\n")
    environ = dict(os.environ, SLURM_JOB_ID="78", SLURM_JOB_NAME="glm-serve-2", GLM_SUCCESSOR_OF="77")
    (tmp_path / "end").write_text("\n")
    proc = subprocess.run(["bash", str(script)], env=environ, capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0 and "STARTED" not in proc.stdout, (proc.stdout, proc.stderr)
    assert "the service has ended (teardown, %s): this successor of job 77 ends without starting SGLang" % (tmp_path / "end") in proc.stdout
    # the first job of a deploy (no GLM_SUCCESSOR_OF), or no end written: it goes on
    for env, present in ((dict(environ, GLM_SUCCESSOR_OF=""), True), (environ, False)):
        if not present:
            (tmp_path / "end").unlink()
        proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30, check=False)
        assert "STARTED" in proc.stdout, (proc.stdout, proc.stderr)
    assert end == shlex.quote(str(rendered["successors"].parent / "service-end"))


def test_slurms_early_drain_signal_waits_for_the_takeover(tmp_path):
    """Slurm may send the time limit's USR1 up to a minute early, before the successor has taken over: the job goes
    on serving until the successor has (SUCCESSOR_FILE.took-over), or until DRAIN seconds before its end (the
    successor file's second line), whichever comes first; without a successor, at once."""
    now = int(time.time())
    (tmp_path / "next").write_text("77\n%d\n" % (now + 30 + 600))            # the end far away: waits for the takeover
    body = ("(sleep 3; echo '77 1' > %(t)s/next.took-over) & S=$SECONDS; glm_await_takeover %(t)s/next 30; "
            "echo waited $((SECONDS - S))" % {"t": tmp_path})
    proc, _argv = run_functions(tmp_path, body, "")
    assert "came before the successor took over" in proc.stdout and re.search(r"waited [345]$", proc.stdout.strip()), proc.stdout
    (tmp_path / "next.took-over").unlink()
    (tmp_path / "next").write_text("77\n%d\n" % (int(time.time()) + 34))    # no takeover: until 30 s before the end
    proc, _argv = run_functions(tmp_path, "S=$SECONDS; glm_await_takeover %s/next 30; echo waited $((SECONDS - S))" % tmp_path, "")
    assert re.search(r"waited [1-5]$", proc.stdout.strip()), proc.stdout
    (tmp_path / "next").unlink()                                              # no successor: at once
    proc, _argv = run_functions(tmp_path, "glm_await_takeover %s/next 30; echo done" % tmp_path, "")
    assert proc.stdout.strip() == "done"


def test_a_successor_submitted_as_the_service_ends_is_cancelled_by_its_submitter(tmp_path):
    """The teardown writes the service's end while the successor's sbatch runs (here: the fake sbatch writes it):
    the job that submitted it cancels it at once (scancel ID), records nothing and says so."""
    line = ("JobId=41 JobName=glm-serve Comment=glm.serve:glm-serve:replica:1 TimeLimit=01:00:00 "
            "StartTime=2026-12-05T10:00:00")
    bin_dir = tmp_path / "teardown-bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\nprintf '\\n' > %s/end\necho 77\n" % tmp_path)
    (bin_dir / "scancel").write_text("#!/bin/sh\necho \"$@\" >> %s/scancel.argv\n" % tmp_path)
    for tool in ("sbatch", "scancel"):
        (bin_dir / tool).chmod(0o755)
    # run_functions puts its own fake sbatch first: this one goes before it
    proc, _argv = run_functions(tmp_path, "PATH=%s:$PATH; glm_submit_successor %s/next %s/end 600 forever /w/s" % (
        bin_dir, tmp_path, tmp_path), line)
    assert proc.returncode == 0, proc.stderr
    assert "the service ended while successor job 77 was being submitted: cancelled it" in proc.stdout
    assert (tmp_path / "scancel.argv").read_text() == "77\n" and not (tmp_path / "next").exists()
