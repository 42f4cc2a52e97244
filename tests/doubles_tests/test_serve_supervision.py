# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The server role's serve.sbatch, run whole on this machine as a replica's batch script would run: the health gate
and SGLang restarted in its job after a crash (issue 25), with the SGLang and nvidia-smi stand-ins and an ``srun``
shim that runs the step's command here (it drops srun's and Pyxis's options: no container, no Slurm).

What runs for real: the rendered script (GPU check, key files, the gate's curl calls with the key from curl's config
file, the restart loop, its traps), the SGLang stand-in (tests/doubles/python/sglang) and nvidia-smi's. A crash is a
SIGKILL of the SGLang process, from outside, as the OOM killer or a dying scheduler's kill_process_tree does.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from standin_helpers import KEY, REPO, STANDINS, STANDIN_PYTHONPATH, free_port, sglang_pids, wait_for

ANSIBLE_PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")
PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: glm.serve.server
        tasks_from: script
"""
SRUN = """#!/usr/bin/env bash
# srun shim: the step's command, here (srun's and Pyxis's options dropped)
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
exec "$@"
"""
# scontrol's stand-in, for the one call the script makes (glm_preempted, at Slurm's USR1): `scontrol show job ID` as
# Slurm prints it (src/api/job_info.c: "EndTime=", "PreemptTime=" None until the job is preempted, then the
# preemption's time and EndTime pulled in to it + GraceTime; Slurm 24.11 on the test bed, the standard time format).
# The control dir's "scontrol-preempted" (its text: the grace seconds) makes this job a preempted one; without it the
# USR1 is the time limit's. Outside Slurm there is no controller to ask, and the real scontrol would spend ~18 s
# failing to connect (measured here).
SCONTROL = """#!/usr/bin/env bash
[ "$1 $2" = "show job" ] || { echo "scontrol stand-in: only 'show job'" >&2; exit 2; }
grace=$(cat "$GLM_STANDIN_CONTROL/scontrol-preempted" 2> /dev/null)
fmt=%Y-%m-%dT%H:%M:%S
if [ -n "$grace" ]; then
  preempt=$(date +$fmt); end=$(date -d "+$grace seconds" +$fmt)
else
  preempt=None; end=$(date -d "+120 seconds" +$fmt)
fi
echo "JobId=$3 JobName=$SLURM_JOB_NAME Partition=gpu StartTime=2026-12-06T04:00:00 EndTime=$end Deadline=N/A"
echo "   PreemptEligibleTime=2026-12-06T04:00:00 PreemptTime=$preempt SuspendTime=None SecsPreSuspend=0"
"""


def make_job(tmp_path_factory, model_dir, **settings):
    """A work dir with the rendered server script (restarts 2, 1 s apart, and SETTINGS), the key, the model, and a
    bin/ with the srun shim, scontrol's and nvidia-smi's stand-ins; returns (work, port, control, start(job_id) -> Popen)."""
    base = tmp_path_factory.mktemp("supervision")
    work, port = base / "work", free_port()
    (base / "render.yml").write_text(PLAYBOOK)
    extra = dict({"glm_work_dir": str(work), "glm_port": port, "server_restarts": 2, "server_restart_delay": 1,
                  "server_host": "127.0.0.1",
                  "server_env": {"GLM_STANDIN_SGLANG_LOAD": "0", "GLM_STANDIN_SGLANG_WARMUP": "1"}}, **settings)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    env.setdefault("ANSIBLE_COLLECTIONS_PATH", os.path.join(REPO, ".collections"))
    proc = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local", "-e",
                           "ansible_python_interpreter=" + sys.executable, "-e", json.dumps(extra), str(base / "render.yml")],
                          env=env, capture_output=True, text=True, timeout=300, check=False, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    os.symlink(model_dir, work / "GLM-5.3-Flash")
    (work / "api-key").write_text(KEY + "\n")
    (work / "api-key").chmod(0o600)
    bin_dir = base / "bin"
    bin_dir.mkdir()
    for tool, text in (("srun", SRUN), ("scontrol", SCONTROL)):
        (bin_dir / tool).write_text(text)
        (bin_dir / tool).chmod(0o755)
    os.symlink(os.path.join(STANDINS, "node-bin", "nvidia-smi"), bin_dir / "nvidia-smi")
    control = base / "control"
    control.mkdir()

    name = "glm-serve-2" if settings.get("server_replicas", 1) > 1 else "glm-serve"

    def start(job_id):
        job_env = {k: v for k, v in os.environ.items() if not k.startswith(("GLM_STANDIN_", "SLURM"))}
        job_env.update(PATH="%s:%s" % (bin_dir, os.environ["PATH"]), PYTHONPATH=STANDIN_PYTHONPATH,
                       GLM_STANDIN_CONTROL=str(control), SLURM_JOB_NAME=name, SLURM_JOB_ID=job_id,
                       SLURMD_NODENAME="127.0.0.1", GLM_STANDIN_SGLANG_GPUS="8")
        log = open(work / ("%s-%s.out" % (name, job_id)), "w")
        return subprocess.Popen(["bash", str(work / "serve.sbatch")], cwd=str(work), env=job_env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    return work, port, control, start


@pytest.fixture(scope="module")
def job(tmp_path_factory, model_dir):
    """A replica behind the router (its address file), without metrics."""
    return make_job(tmp_path_factory, model_dir, server_replicas=2, server_enable_metrics=False)


@pytest.fixture(scope="module")
def single(tmp_path_factory, model_dir):
    """One server without the router (its endpoint file), with metrics, the activity watcher and an idle timeout."""
    return make_job(tmp_path_factory, model_dir, server_replicas=1, server_enable_metrics=True,
                    server_activity_interval=1, server_idle_timeout="1h")


def sglang_pid(job_id):
    """The SGLang stand-in process of this job, or None."""
    return (sglang_pids(job_id) or [None])[0]


def stop(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_the_gate_then_a_crash_restarted_in_the_job_then_the_bound(job):
    work, port, _control, start = job
    url_file = work / "replicas" / "glm-serve-2.url"
    log = work / "glm-serve-2-900041.out"
    proc = start("900041")
    try:
        # the replica announces itself only once /health, /v1/models and a chat answered with the key
        assert wait_for(url_file.exists, timeout=60), log.read_text()[-3000:]
        text = log.read_text()
        assert "health gate passed: /health, /v1/models and a chat answer with the key on http://127.0.0.1:%d" % port in text
        assert url_file.read_text() == "http://127.0.0.1:%d\n900041\n" % port
        assert KEY not in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
        assert (work / ".glm-serve-2-900041.curl").stat().st_mode & 0o777 == 0o600
        # two crashes: each time the replica leaves the router, SGLang starts again in the job (GPU check first) and
        # the replica joins again once it passed the gate
        for restart, delay in ((1, 1), (2, 2)):
            first = sglang_pid("900041")
            assert first
            os.kill(first, signal.SIGKILL)
            assert wait_for(lambda: not url_file.exists(), timeout=10)
            assert wait_for(lambda: "restart %d of 2 in %d s" % (restart, delay) in log.read_text(), timeout=10)
            assert wait_for(url_file.exists, timeout=60), log.read_text()[-3000:]
            assert sglang_pid("900041") not in (None, first)
            assert proc.poll() is None
        text = log.read_text()
        assert text.count("gpu-check: 127.0.0.1: 8 GPUs ok") == 3 and text.count("health gate passed") == 3
        # the third crash is beyond server_restarts=2: the job ends with SGLang's status (SIGKILL: 137) and says why
        os.kill(sglang_pid("900041"), signal.SIGKILL)
        assert proc.wait(timeout=20) == 137
        assert "restarted 2 times in this job already (server_restarts=2): the job ends" in log.read_text()
        assert not url_file.exists() and not (work / ".glm-serve-2-900041.curl").exists()
        assert not (work / ".glm-serve-2-900041.yaml").exists() and not (work / ".glm-serve-2-900041.ready").exists()
    finally:
        stop(proc)


def test_the_gpu_check_before_a_restart_can_end_the_job_as_a_bad_node(job):
    """After a crash, a GPU that still holds memory (a process of the dead server that the driver has not let go of)
    fails the GPU check: the job ends with the bad-node status (75), which the deploy reads, instead of starting SGLang
    on it."""
    work, _port, control, start = job
    url_file = work / "replicas" / "glm-serve-2.url"
    proc = start("900042")
    try:
        assert wait_for(url_file.exists, timeout=60)
        (control / "gpu-busy").write_text("3")
        os.kill(sglang_pid("900042"), signal.SIGKILL)
        assert proc.wait(timeout=30) == 75
        text = (work / "glm-serve-2-900042.out").read_text()
        assert "restart 1 of 2 in 1 s" in text and "gpu-check: FAILED on 127.0.0.1: GPU 3" in text
        assert not url_file.exists()
    finally:
        (control / "gpu-busy").unlink()
        stop(proc)


def test_an_error_before_sglang_served_ends_the_job_at_once(job):
    """A start failure (here the stand-in's CUDA out-of-memory) is not restarted: nothing served, the deploy reports
    it as before; and SGLang stopping cleanly (a SIGTERM to the job: scancel) is not a crash either."""
    work, _port, control, start = job
    (control / "sglang-fail").write_text("oom")
    try:
        proc = start("900043")
        assert proc.wait(timeout=30) == 1
    finally:
        (control / "sglang-fail").unlink()
        stop(proc)
    assert "restart" not in (work / "glm-serve-2-900043.out").read_text()
    assert not (work / "replicas" / "glm-serve-2.url").exists()
    proc = start("900044")
    try:
        assert wait_for((work / "replicas" / "glm-serve-2.url").exists, timeout=60)
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=20) == 143
        time.sleep(1)
        assert sglang_pid("900044") is None
        assert "restart" not in (work / "glm-serve-2-900044.out").read_text()
    finally:
        stop(proc)


def test_usr1_before_the_time_limit_drains_the_replica_and_ends_the_job_completed(job):
    """Slurm's USR1 (sbatch --signal=B:USR1@120, server_drain_before) to the batch script: the replica leaves the
    router at once, SGLang is asked to stop through the stop file (a SIGTERM from the step's loop: its clean
    shutdown), and the script ends 0 (COMPLETED) before the limit's SIGTERM; no restart."""
    work, _port, _control, start = job
    url_file = work / "replicas" / "glm-serve-2.url"
    proc = start("900045")
    try:
        assert wait_for(url_file.exists, timeout=60)
        assert "#SBATCH --signal=B:USR1@120" in (work / "serve.sbatch").read_text()
        os.kill(proc.pid, signal.SIGUSR1)
        assert wait_for(lambda: not url_file.exists(), timeout=5)
        assert proc.wait(timeout=40) == 0
        text = (work / "glm-serve-2-900045.out").read_text()
        assert "the time limit is 120 s away (server_drain_before): left the router" in text
        assert "SGLang stopped" in text and "restart" not in text
        assert sglang_pid("900045") is None and not (work / ".glm-serve-2-900045.stop").exists()
        assert not (work / ".glm-serve-2-900045.preempted").exists()
    finally:
        stop(proc)


def test_usr1_of_a_preemption_tells_the_autoscaler_and_drains_within_the_grace_time(job):
    """The same USR1 sent at a preemption (PreemptParameters=send_user_signal): `scontrol show job` has PreemptTime
    set; the replica writes the file the router's autoscaler reads (.NAME-JOBID.preempted) before it leaves the
    router, drains until the EndTime Slurm pulled in, and ends 0."""
    work, _port, control, start = job
    url_file = work / "replicas" / "glm-serve-2.url"
    proc = start("900046")
    try:
        assert wait_for(url_file.exists, timeout=60)
        (control / "scontrol-preempted").write_text("30")
        os.kill(proc.pid, signal.SIGUSR1)
        assert wait_for(lambda: not url_file.exists(), timeout=5)
        assert (work / ".glm-serve-2-900046.preempted").exists()
        assert proc.wait(timeout=40) == 0
        text = (work / "glm-serve-2-900046.out").read_text()
        assert "Slurm preempts this job (its grace time ends in " in text, text[-2000:]
        assert "SGLang stopped" in text and "restart" not in text
    finally:
        (control / "scontrol-preempted").unlink(missing_ok=True)
        (work / ".glm-serve-2-900046.preempted").unlink(missing_ok=True)
        stop(proc)


def test_one_server_is_restarted_in_its_job_and_keeps_its_endpoint(single):
    """Without the router: the endpoint file is written as the job starts (the deploy's probe waits on it) and stays
    the same across a restart; a new activity watcher follows the new SGLang; the gate's record (.ready) is what
    allows the restart, and goes with the job."""
    work, port, _control, start = single
    log = work / "glm-serve-900051.out"
    proc = start("900051")
    try:
        assert wait_for((work / ".glm-serve-900051.ready").exists, timeout=60), log.read_text()[-3000:]
        endpoint = (work / "endpoint").read_text()
        assert "GLM_BASE_URL=http://127.0.0.1:%d/v1" % port in endpoint
        assert wait_for((work / "glm-serve-900051.activity").exists, timeout=10)
        first = sglang_pid("900051")
        os.kill(first, signal.SIGKILL)
        assert wait_for(lambda: "restart 1 of 2 in 1 s" in log.read_text(), timeout=10)
        assert wait_for(lambda: log.read_text().count("health gate passed") == 2, timeout=60), log.read_text()[-3000:]
        assert sglang_pid("900051") not in (None, first) and proc.poll() is None
        assert (work / "endpoint").read_text() == endpoint
        # a watcher follows the new SGLang: the activity file is written again after the restart
        checked = json.loads((work / "glm-serve-900051.activity").read_text())["checked"]
        assert wait_for(lambda: json.loads((work / "glm-serve-900051.activity").read_text())["checked"] > checked + 1, timeout=10)
    finally:
        stop(proc)
    assert not (work / ".glm-serve-900051.curl").exists() and not (work / ".glm-serve-900051.ready").exists()
