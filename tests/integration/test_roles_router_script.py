# -*- coding: utf-8 -*-
"""The router role's rendered router.sbatch, checked without a cluster: rendered by the role itself (include_role
glm.serve.router, tasks_from: script, against localhost), its router arguments (after ``--``) parsed by the REAL
gateway's parser (smg 1.13's ``parse_router_args``, in .venv-router), its launcher arguments by the launcher's own
parser; no key on its command line; bad values stop in the role's checks, naming the variable."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROUTER_PYTHON = ROOT / ".venv-router" / "bin" / "python"
ANSIBLE_PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")
PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: glm.serve.router
        tasks_from: script
"""
PARSE = """
import json, sys
from smg.launch_router import parse_router_args
args = parse_router_args(sys.argv[1:])
print(json.dumps({k: getattr(args, k) for k in ('host', 'port', 'policy', 'prometheus_port', 'health_check_interval_secs',
                                                 'health_check_timeout_secs', 'retry_max_retries', 'max_concurrent_requests',
                                                 'queue_size', 'queue_timeout_secs', 'cb_failure_threshold', 'api_key',
                                                 'worker_urls', 'server_cert_path', 'server_key_path',
                                                 'request_timeout_secs')}))
"""


def render(tmp_path: Path, name: str, extra_vars: dict) -> subprocess.CompletedProcess:
    playbook = tmp_path / "render.yml"
    playbook.write_text(PLAYBOOK)
    extra = dict(extra_vars, glm_work_dir=str(tmp_path / name))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    env.setdefault("ANSIBLE_COLLECTIONS_PATH", str(ROOT / ".collections"))
    return subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local", "-e", "ansible_python_interpreter=" + sys.executable,
                           "-e", json.dumps(extra), str(playbook)], cwd=str(ROOT), env=env, capture_output=True, text=True,
                          timeout=300, check=False, stdin=subprocess.DEVNULL)


def command(script: Path) -> list:
    """The launcher's command line of router.sbatch (after its GLM_ROUTER_* variables), its continuation lines joined,
    split as the shell would, up to the & that runs it in the background (the restart loop waits for it)."""
    text = script.read_text()
    start = text.index("GLM_ROUTER_RESTARTS=")
    words = shlex.split(text[start:text.index(" &\n", start)].replace("\\\n", " "))
    return words[2:]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("router")
    scripts = {}
    custom = {"router_policy": "round_robin", "router_port": 31000, "router_host": "node", "router_extra_args": ["--cb-failure-threshold", "5"],
              "router_partition": "cpu-small", "router_cpus": 4, "router_mem": "8G",
              "router_tls_cert": "/etc/glm/router cert.pem", "router_tls_key": "~/tls/router-key.pem", "router_proxy": "none"}
    successors = {"router_successors_until": "forever", "router_time": "00:30:00", "router_handover_lead": 600}
    litellm = {"router_proxy": "litellm", "router_request_timeout": 700}
    for name, extra in {"default": {}, "custom": custom, "successors": successors, "litellm": litellm}.items():
        proc = render(tmp, name, extra)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        scripts[name] = tmp / name / "router.sbatch"
    return scripts


def test_the_job_and_its_launcher(rendered):
    text = rendered["default"].read_text()
    for line in ("#SBATCH --job-name=glm-serve-router", "#SBATCH --partition=cpu", "#SBATCH --cpus-per-task=2",
                 "#SBATCH --mem=4G", "#SBATCH --time=08:00:00", "#SBATCH --output=%x-%j.out"):
        assert line + "\n" in text
    assert "--gres" not in text and "--container-image" not in text      # no GPU, no container
    argv = command(rendered["default"])
    assert argv[0].endswith("/default/router-venv/bin/python") and argv[1].endswith("/default/glm_router.py")
    ours = argv[2:argv.index("--")]
    # behind the front door the gateway's key is the replicas' own (no client holds it), not the operator's
    assert ours[ours.index("--key-file") + 1].endswith("/default/replica-key")
    assert ours[ours.index("--replicas-dir") + 1].endswith("/default/replicas")
    assert ours[ours.index("--endpoint-file") + 1].endswith("/default/endpoint")
    assert ours[ours.index("--workers-file") + 1].endswith("/default/router-workers.json")
    assert "--api-key" not in text and 0o600 == rendered["default"].stat().st_mode & 0o777
    # router_proxy=glm (the default): the front door in the launcher, its registry and usage book in the work dir
    assert ours[ours.index("--proxy") + 1] == "glm"
    assert ours[ours.index("--gateway-keys") + 1].endswith("/default/gateway-keys.json")
    assert ours[ours.index("--usage-file") + 1].endswith("/default/usage.json")
    assert [ours[ours.index(f) + 1] for f in ("--max-body-mb", "--max-connections", "--max-connections-per-peer")] == [
        "32", "4096", "1024"]
    assert "--gateway-config" not in ours and "--proxy-metrics-port" not in ours
    # router_proxy=litellm: LiteLLM's proxy in front, its config and metrics port too
    theirs = command(rendered["litellm"])
    ours = theirs[2:theirs.index("--")]
    assert ours[ours.index("--proxy") + 1] == "litellm"
    assert ours[ours.index("--gateway-config") + 1].endswith("/litellm/gateway-config.json")
    assert ours[ours.index("--proxy-metrics-port") + 1] == "29001" and "--max-body-mb" not in ours
    assert "--proxy" not in command(rendered["custom"])                   # router_proxy=none: the gateway alone
    custom = command(rendered["custom"])                                  # whose key is the operator's: the clients send it
    assert custom[custom.index("--key-file") + 1].endswith("/custom/api-key")
    assert "#SBATCH --partition=cpu-small\n" in rendered["custom"].read_text()


def test_router_successors_until_makes_each_router_job_submit_its_successor(rendered, tmp_path):
    """router_successors_until: once the endpoint file names this job, its successor is submitted (successor.bash's
    glm_submit_successor: the router's script, its sbatch args, lead 600 s) in the background; the launcher moves its
    ports on the same node and records the handover. Off by default (server_successors_until unset): none of it."""
    text = rendered["successors"].read_text()
    assert "glm_submit_successor()" in text and 'grep -qsx "GLM_ROUTER_JOB=$SLURM_JOB_ID"' in text
    line = [l for l in text.splitlines() if "glm_submit_successor \"$SUCCESSOR_FILE\"" in l][0]
    assert '"$SERVICE_END" 600' in line and text.split(line, 1)[1].lstrip().startswith("forever ")
    assert "/successors/router.sbatch" in text.split(line, 1)[1].split("\n")[1]
    assert 'this successor of router job $GLM_SUCCESSOR_OF ends without starting' in text
    ours = command(rendered["successors"])
    ours = ours[:ours.index("--")]
    assert ours[ours.index("--port-offset") + 1] == "10" and ours[ours.index("--takeover-timeout") + 1] == "75"
    assert ours[ours.index("--handovers-file") + 1].endswith("/successors/handovers.log")
    assert ours[ours.index("--service-end") + 1].endswith("/successors/service-end")
    assert "--port-offset" not in command(rendered["default"]) and "glm_submit_successor" not in rendered["default"].read_text()
    proc = subprocess.run(["bash", "-n", str(rendered["successors"])], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(not ROUTER_PYTHON.exists(), reason=".venv-router missing: make .venv-router/.installed")
def test_the_real_router_parser_takes_the_rendered_arguments(rendered):
    results = {}
    for name, script in rendered.items():
        argv = command(script)
        proc = subprocess.run([str(ROUTER_PYTHON), "-c", PARSE] + argv[argv.index("--") + 1:], capture_output=True, text=True,
                              check=False, timeout=60)
        assert proc.returncode == 0, (name, proc.stderr[-2000:])
        results[name] = json.loads(proc.stdout)
    assert results["default"] == {"host": "0.0.0.0", "port": 30000, "policy": "cache_aware", "prometheus_port": 29000,
                                  "health_check_interval_secs": 10, "health_check_timeout_secs": 25, "retry_max_retries": 3,
                                  "max_concurrent_requests": 256, "queue_size": 512, "queue_timeout_secs": 60,
                                  "cb_failure_threshold": 10, "api_key": None, "worker_urls": [],
                                  "server_cert_path": None, "server_key_path": None, "request_timeout_secs": 1800}
    assert results["litellm"]["request_timeout_secs"] == 700      # router_request_timeout: the gateway's, the door's
    # router_tls_cert/router_tls_key: the gateway's --tls-cert-path/--tls-key-path ("~" resolved, a space quoted)
    assert results["custom"]["server_cert_path"] == "/etc/glm/router cert.pem"
    assert results["custom"]["server_key_path"].endswith("/tls/router-key.pem") and "~" not in results["custom"]["server_key_path"]
    assert results["custom"]["policy"] == "round_robin" and results["custom"]["port"] == 31000
    assert results["custom"]["cb_failure_threshold"] == 5                        # router_extra_args reach the gateway
    assert results["custom"]["host"] == "$HOST"                                   # router_host=node: the node's address
    assert 'HOST=$(getent hosts "$SLURMD_NODENAME"' in rendered["custom"].read_text()
    # the check is not vacuous: the real parser refuses a policy it does not have
    bad = subprocess.run([str(ROUTER_PYTHON), "-c", PARSE, "--policy", "fastest"], capture_output=True, text=True, check=False)
    assert bad.returncode != 0 and "policy" in bad.stderr


@pytest.mark.parametrize("extra, variable, words", [
    ({"router_policy": "fastest"}, "router_policy", "cache_aware"),
    ({"router_policy": "power_of_two"}, "router_policy", "cache_aware, round_robin, random"),
    ({"router_port": 80}, "router_port", "1024 to 65535"),
    ({"router_port": 29000}, "router_metrics_port", "three different ports"),
    ({"router_proxy_metrics_port": 29000}, "router_proxy_metrics_port", "three different ports"),
    ({"router_extra_args": ["--api-key", "x"]}, "router_extra_args", "glm_api_key_file"),
    ({"router_time": "8h"}, "router_time", "Slurm time limit"),
    ({"router_successors_until": "soon"}, "router_successors_until", "YYYY-MM-DD or YYYY-MM-DDTHH:MM"),
    ({"router_successors_until": "forever", "router_time": "00:09:00"}, "router_handover_lead", "at most half of router_time (00:09:00"),
    ({"router_successors_until": "forever", "router_port_offset": 0}, "router_port_offset", "1 to 1000"),
    ({"router_successors_until": "forever", "router_port_offset": 1}, "router_port_offset", "six different ports"),
    ({"router_successors_until": "forever", "router_handover_lead": 60}, "router_handover_lead", "at least 105"),
    ({"router_mem": "lots"}, "router_mem", "Slurm memory size"),
    ({"router_enabled": "maybe"}, "router_enabled", "true"),
    ({"router_host": "node3"}, "router_host", "refuses a host name"),
    ({"router_queue_timeout": 0}, "router_queue_timeout", "1 or more"),
    ({"router_retries": -1}, "router_retries", "0 or more"),
    ({"router_extra_args": ["--queue-size", "5"]}, "router_extra_args", "router_queue_size"),
    ({"router_tls_cert": "/etc/glm/cert.pem"}, "router_tls_key", "set both"),
    ({"router_tls_cert": "cert.pem", "router_tls_key": "key.pem"}, "router_tls_cert", "absolute paths"),
    ({"router_extra_args": ["--tls-cert-path=/x.pem"]}, "router_extra_args", "router_tls_cert"),
    ({"router_proxy": "envoy"}, "router_proxy", "litellm"),
    ({"router_proxy": "none", "glm_api_keys": [{"name": "team-a"}]}, "glm_api_keys", "set router_proxy=glm"),
    ({"router_max_concurrent_requests": 8, "glm_api_keys": [{"name": "team-a", "max_parallel": 6},
                                                            {"name": "team-b", "max_parallel": 4}]},
     "glm_api_keys max_parallel add up to 10", "router_max_concurrent_requests=8"),
    ({"router_max_body_mb": 0}, "router_max_body_mb", "whole numbers of 1 or more"),
    ({"router_max_connections": 10, "router_max_connections_per_peer": 20}, "router_max_connections_per_peer",
     "not above router_max_connections"),
    ({"router_extra_args": ["--request-timeout-secs", "5"]}, "router_extra_args", "router_request_timeout"),
    ({"glm_api_keys": [{"name": "Team A"}]}, "glm_api_keys names", "lower-case letters"),
    ({"glm_api_keys": [{"name": "team-a"}, {"name": "team-a"}]}, "glm_api_keys names", "a different name"),
    ({"glm_api_keys": [{"name": "default", "rpm": 5}], "glm_api_keys_rotate": ["default"]}, "glm_api_keys_rotate",
     "api_key_rotate=true"),
    ({"glm_api_keys": [{"name": "team-a", "rpm": 0}]}, "glm_api_keys limits", "1 or more"),
    ({"glm_api_keys": [{"name": "team-a"}], "glm_api_keys_rotate": ["team-b"]}, "glm_api_keys_rotate", "team-b"),
])
def test_bad_values_stop_before_the_script(tmp_path, extra, variable, words):
    proc = render(tmp_path, "bad", extra)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert variable in out and words in out, out[-3000:]
    assert not (tmp_path / "bad" / "router.sbatch").exists()


def loop_with(script: Path, fake: str, tmp_path: Path) -> Path:
    """router.sbatch's restart loop with the launcher's command replaced by FAKE (a bash body run as ./launcher)."""
    text = script.read_text()
    start, end = text.index("restarts=0 killed="), text.index("\ndone\n", text.index("restarts=0 killed=")) + 6
    loop = text[start:end]
    command = loop[loop.index("  GLM_ROUTER_RESTARTS="):loop.index(" &\n") + 3]
    loop = loop.replace(command, "  GLM_ROUTER_RESTARTS=$restarts GLM_ROUTER_KILLED=$killed ./launcher &\n")
    (tmp_path / "launcher").write_text("#!/usr/bin/env bash\necho \"start $GLM_ROUTER_RESTARTS ${GLM_ROUTER_KILLED:-none}\" >> runs\n" + fake)
    (tmp_path / "launcher").chmod(0o755)
    (tmp_path / "loop.sh").write_text("set -euo pipefail\n" + loop)
    return tmp_path / "loop.sh"


@pytest.mark.parametrize("fake, runs, rc", [
    # killed by SIGKILL twice, then it ends by itself: started again twice, the job's status its own
    ('n=$(wc -l < runs); if [ "$n" -le 2 ]; then kill -KILL $$; fi; exit 0\n', ["start 0 none", "start 1 9", "start 2 9"], 0),
    # its gateway killed (75): started again, once, then an error of its own (1) ends the job
    ('n=$(wc -l < runs); if [ "$n" -le 1 ]; then exit 75; fi; exit 1\n', ["start 0 none", "start 1 child"], 1),
    # a setting it cannot use (exit 1): no restart
    ("exit 1\n", ["start 0 none"], 1),
    # killed every time: router_restarts (3) restarts, then the job ends with the kill's status
    ("kill -KILL $$\n", ["start 0 none", "start 1 9", "start 2 9", "start 3 9"], 137),
])
def test_the_router_job_starts_its_killed_launcher_again(rendered, tmp_path, fake, runs, rc):
    loop = loop_with(rendered["default"], fake, tmp_path)
    proc = subprocess.run(["bash", str(loop)], cwd=str(tmp_path), capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == rc, (proc.stdout, proc.stderr)
    assert (tmp_path / "runs").read_text().splitlines() == runs
    assert proc.stdout.count("starting it again") == len(runs) - 1


def test_a_scancel_during_the_restart_pause_starts_no_launcher(rendered, tmp_path):
    """SIGTERM (scancel, the time limit) to the job while the loop waits to start a killed launcher again: the job
    ends 0, no launcher started after it."""
    loop = loop_with(rendered["default"], "kill -KILL $$\n", tmp_path)
    proc = subprocess.Popen(["bash", str(loop)], cwd=str(tmp_path), stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()             # said just before its 1-s pause
    assert "the launcher was killed (signal 9), not by this job's end; starting it again (restart 1 of 3)" in line, line
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    assert (tmp_path / "runs").read_text().splitlines() == ["start 0 none"]
