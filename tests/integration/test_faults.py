# -*- coding: utf-8 -*-
# Copyright (c) glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Faults during a deploy, on the LIVE local Slurm cluster, through the real playbooks/deploy.yml over SSH.

Each case states its time bound and asserts it, checks that the message names the cause and the fix, and that no
job of its names is left (unless the case says so). Every case has its own work dir ~/glm-it-faults-<case>-<id> and
job names itf-<case>-<id>-download / -serve. The stand-ins' failure switches are set per deploy through
download_env / server_env (exported by the batch scripts, passed to the srun steps), never through the cluster-wide
control files. Run as root: .venv/bin/pytest tests/integration/test_faults.py -v
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import signal
import subprocess
import threading
import time
import uuid

import pytest

from deploy_helpers import (CLUSTER, SLURM_CONF, chown_login, failures, isolated_vars, live_jobs, login_home, my_jobs, require_cluster,
                            run_playbook, scancel_names, ssh)

FAST_SERVER = {'GLM_STANDIN_SGLANG_LOAD': '1', 'GLM_STANDIN_SGLANG_WARMUP': '1'}
SERVE_TASK = 'Submit the server job and wait for it to answer'


def root_slurm(argv, check=False):
    """A Slurm command as root (an administrator, or "someone else")."""
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                          env=dict(os.environ, SLURM_CONF=SLURM_CONF), check=check)


class Case:
    """A case's work dir, job names, deploy runs and cleanup."""

    def __init__(self, tag, tmp):
        self.tag = '%s-%s' % (tag, uuid.uuid4().hex[:6])
        self.tmp = tmp
        self.home = login_home()
        self.rel = 'glm-it-faults-%s' % self.tag
        self.dir = os.path.join(self.home, self.rel)
        self.download = 'itf-%s-download' % self.tag
        self.serve = 'itf-%s-serve' % self.tag
        self.extra_names = []

    def vars(self, **extra):
        base = isolated_vars(self.rel, self.download, self.serve, glm_hosts='training', server_time='00:10:00',
                             server_wait_timeout=120, server_env=dict(FAST_SERVER))
        base.update(extra)
        return base

    def deploy(self, timeout=300, **extra):
        """Runs deploy.yml; returns (proc, seconds, [(task, msg)] of the failures)."""
        for _attempt in range(3):
            started = time.monotonic()
            proc = run_playbook('deploy.yml', self.vars(**extra), self.tmp, result_json=True, timeout=timeout)
            took = time.monotonic() - started
            found, _changed = failures(proc.stdout)
            if not any(task != SERVE_TASK and 'Unable to contact slurm controller' in msg for task, msg in found):
                break
            # slurmctld restarting (another test on this cluster may restart it) before anything was submitted
            time.sleep(10)
        return proc, took, found

    def popen(self, **extra):
        import json
        import tempfile
        fd, path = tempfile.mkstemp(suffix='.json', prefix='vars-', dir=self.tmp)
        with os.fdopen(fd, 'w') as handle:
            json.dump(self.vars(**extra), handle)
        from deploy_helpers import BIN, REPO
        env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get('PATH', ''), ANSIBLE_NOCOLOR='1',
                   ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_CALLBACK_RESULT_FORMAT='json',
                   ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, '.collections'))
        return subprocess.Popen([os.path.join(BIN, 'ansible-playbook'), 'playbooks/deploy.yml', '-e', '@' + path],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, env=env, cwd=REPO)

    def mine(self, name):
        return name in (self.download, self.serve) or name in self.extra_names

    def jobs(self):
        """All jobs of this case's names, finished ones too: [(id, name, state)]."""
        return my_jobs(self.mine)

    def live(self):
        return live_jobs(self.mine)

    def job_state(self, name):
        rows = [r for r in self.jobs() if r[1] == name]
        return rows[-1] if rows else None

    def running(self, name, also=None):
        """The row of name's job when it RUNS (and also() holds), else None."""
        row = self.job_state(name)
        return row if row and row[2] == 'RUNNING' and (also is None or also()) else None

    def wait_for(self, predicate, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.5)
        raise AssertionError('%s did not happen within %ds; jobs: %s' % (what, timeout, self.jobs()))

    def warm(self, source):
        """Copy a complete image and model (from the module's warm dir) so that no download is needed."""
        os.makedirs(self.dir, 0o700)
        chown_login(self.dir)
        for name in ('sglang.sqsh', 'GLM-5.3-Flash'):
            src, dst = os.path.join(source, name), os.path.join(self.dir, name)
            if os.path.isdir(src):
                shutil.copytree(src, dst, symlinks=True)
            else:
                shutil.copy2(src, dst)
            subprocess.run(['chown', '-R', 'glmuser:', dst], check=True)

    def cleanup(self):
        scancel_names([self.download, self.serve] + self.extra_names)
        time.sleep(0.5)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope='module')
def warm_dir():
    """One complete image + model, made once by the real stand-ins in a CPU job, copied into the cases that need no
    download (so that they start the server at once)."""
    require_cluster()
    rel = 'glm-it-faults-warm-%s' % uuid.uuid4().hex[:6]
    path = os.path.join(login_home(), rel)
    ssh('mkdir -p ~/%s && cd ~/%s && sbatch --wait -J itf-warm -c 1 --mem=256M -t 5 -o warm.out --wrap '
        '"srun --container-image=docker://lmsysorg/sglang:v0.5.21 --container-save=$HOME/%s/sglang.sqsh true && '
        'srun --container-image=$HOME/%s/sglang.sqsh hf download zai-org/GLM-5.3-Flash --local-dir $HOME/%s/GLM-5.3-Flash"'
        % (rel, rel, rel, rel, rel), timeout=120)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def case(request, tmp_path):
    require_cluster()
    made = []

    def make(tag):
        made.append(Case(tag, str(tmp_path)))
        return made[-1]
    yield make
    for item in made:
        item.cleanup()
    for item in made:
        assert item.live() == [], 'jobs of %s left after the cleanup' % item.tag


def serve_failure(found):
    msgs = [msg for task, msg in found if task == SERVE_TASK]
    assert msgs, 'the deploy did not fail in the server task: %s' % (found,)
    print('\nMESSAGE: %s' % msgs[-1])   # shown with pytest -s
    return msgs[-1]


def fetch_log(case):
    path = os.path.join(case.dir, 'GLM-5.3-Flash', '.cache', 'huggingface', 'standin-fetch.log')
    try:
        with open(path) as handle:
            return [line.split(None, 1)[1].strip() for line in handle if line.startswith('fetched ')]
    except (IOError, OSError):
        return []


# -- 1. the download fails --------------------------------------------------------------------------------------


def test_01_download_fails_names_job_id_log_and_leaves_no_pending_server(case):
    """Bound: 60 s. hf exits 1 (HTTP 503) after 2 files."""
    c = case('dlfail')
    proc, took, found = c.deploy(download_env={'GLM_STANDIN_HF_FAIL_AFTER': '2'})
    assert proc.returncode != 0
    msg = serve_failure(found)
    download = c.job_state(c.download)
    assert download and download[2] == 'FAILED', c.jobs()
    assert 'can never start' in msg and '%s %s FAILED' % (c.download, download[0]) in msg, msg
    assert '%s/%s-%s.out' % (c.dir, c.download, download[0]) in msg           # the log, and its tail
    assert '503 Server Error' in msg
    assert 'What to do:' in msg and 'run deploy again' in msg and 'resumes' in msg
    assert c.live() == [], 'the server job was left PENDING: %s' % c.jobs()   # cancelled, not DependencyNeverSatisfied
    assert os.path.exists(os.path.join(c.dir, '%s-%s.out' % (c.download, download[0])))   # nothing lost
    assert took < 60, took


# -- 2. the download hits its time limit; a rerun resumes -------------------------------------------------------


def test_02_download_time_limit_then_rerun_resumes(case):
    """Bound: 100 s for the failing deploy (the 1 min limit, lowered to a few seconds from now with scontrol update
    EndTime as a user may; slurmctld enforces limits every 30 s), 60 s for the rerun."""
    c = case('dltime')
    slow = {'GLM_STANDIN_HF_DELAY': '8', 'GLM_STANDIN_HF_SHARDS': '2'}   # 7 files, 56 s: cut short by the limit

    def shorten():
        row = c.wait_for(lambda: c.running(c.download, also=lambda: fetch_log(c)), 60, 'the download running')
        end = time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(time.time() + 2))
        ssh('scontrol update JobId=%s EndTime=%s' % (row[0], end))

    thread = threading.Thread(target=shorten)
    thread.start()
    proc, took, found = c.deploy(download_env=slow, download_time='00:01:00')
    thread.join()
    msg = serve_failure(found)
    download = c.job_state(c.download)
    assert download and download[2] == 'TIMEOUT', c.jobs()
    assert 'TIMEOUT' in msg and 'reached its time limit' in msg
    assert 'run deploy again and it resumes' in msg and 'download_time' in msg, msg
    assert c.live() == []
    assert took < 100, took
    first = fetch_log(c)
    assert first, 'nothing was fetched before the time limit'

    proc, took, found = c.deploy(download_time='00:05:00', download_env={'GLM_STANDIN_HF_SHARDS': '2'})
    assert proc.returncode == 0, found or proc.stdout[-3000:]
    second = fetch_log(c)[len(first):]
    assert second and not set(first) & set(second), (first, second)   # complete files were not fetched again
    assert took < 60, took


# -- 3. no space left on device ---------------------------------------------------------------------------------


def test_03_no_space_says_free_or_buy_storage(case):
    """Bound: 60 s."""
    c = case('nospace')
    proc, took, found = c.deploy(download_env={'GLM_STANDIN_HF_NOSPACE_AFTER': '3'})
    msg = serve_failure(found)
    assert 'No space left on device' in msg
    assert 'delete the partial download or buy more storage' in msg and '%s/GLM-5.3-Flash' % c.rel in msg, msg
    assert c.live() == []
    assert os.path.isdir(os.path.join(c.dir, 'GLM-5.3-Flash'))           # the partial download is kept
    assert took < 60, took


# -- 4. CUDA out of memory at start -----------------------------------------------------------------------------


def test_04_cuda_oom_suggests_mem_fraction_070(case, warm_dir):
    """Bound: 45 s."""
    c = case('oom')
    c.warm(warm_dir)
    proc, took, found = c.deploy(server_env=dict(FAST_SERVER, GLM_STANDIN_SGLANG_FAIL='oom'))
    msg = serve_failure(found)
    assert 'FAILED' in msg and 'CUDA out of memory' in msg
    assert 'server_mem_fraction_static=0.70' in msg, msg
    assert c.live() == []
    assert took < 45, took


# -- 5. the server job is cancelled by someone else, or its node fails ------------------------------------------


def _run_until_server_runs(c):
    """Starts a deploy whose server loads for 60 s (port closed); returns (Popen, server job row)."""
    proc = c.popen(server_env=dict(FAST_SERVER, GLM_STANDIN_SGLANG_LOAD='60'))
    row = c.wait_for(lambda: c.running(c.serve), 60, 'the server job running')
    time.sleep(2)   # the deploy is now probing the port
    return proc, row


def test_05a_server_cancelled_by_someone_else_fails_at_once(case, warm_dir):
    """Bound: the deploy ends within 10 s of the scancel."""
    c = case('cancel')
    c.warm(warm_dir)
    proc, row = _run_until_server_runs(c)
    root_slurm(['scancel', row[0]], check=True)
    event = time.monotonic()
    out, _err = proc.communicate(timeout=60)
    after = time.monotonic() - event
    msg = serve_failure(failures(out)[0])
    assert 'ended CANCELLED' in msg and 'it was cancelled' in msg
    assert 'Someone cancelled the server job %s' % row[0] in msg and 'run deploy again' in msg, msg
    assert after < 10, after
    assert c.live() == []


def test_05b_node_failure_fails_at_once(case, warm_dir):
    """Bound: the deploy ends within 15 s of the node going DOWN. Slurm here requeues the batch job (JobRequeue=1):
    it goes back to PENDING (BeginTime) with Restarts=1; where it is not requeued it ends NODE_FAIL. Both fail at
    once. The node is set DOWN only when no job of anyone else runs on it; otherwise the job is requeued with
    `scontrol requeue` (the same path in the module), so other work on the cluster is never killed."""
    c = case('node')
    c.warm(warm_dir)
    proc, row = _run_until_server_runs(c)
    shown = ssh('scontrol show job %s' % row[0])
    node = shown.split(' NodeList=', 1)[1].split()[0] if ' NodeList=' in shown else None
    others = root_slurm(['squeue', '-h', '-w', node, '-o', '%i']).stdout.split() if node else ['?']
    downed = others == [row[0]]
    try:
        if downed:
            root_slurm(['scontrol', 'update', 'NodeName=%s' % node, 'State=DOWN', 'Reason=itf-node-test'], check=True)
        else:
            ssh('scontrol requeue %s' % row[0])
        event = time.monotonic()
        out, _err = proc.communicate(timeout=60)
        after = time.monotonic() - event
    finally:
        if downed:
            root_slurm(['scontrol', 'update', 'NodeName=%s' % node, 'State=RESUME'])
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and 'idle' not in root_slurm(['sinfo', '-h', '-n', node, '-o', '%T']).stdout \
                    and 'mix' not in root_slurm(['sinfo', '-h', '-n', node, '-o', '%T']).stdout:
                root_slurm(['scontrol', 'update', 'NodeName=%s' % node, 'State=IDLE'])
                time.sleep(1)
    msg = serve_failure(failures(out)[0])
    assert ('requeued by Slurm' in msg or 'NODE_FAIL' in msg), msg
    assert 'scancel %s' % row[0] in msg or 'run deploy again' in msg, msg
    assert after < 15, after
    # a requeued job is Slurm's to run again: the message says how to cancel it; the test cancels it


# -- 6. the server waits for a free node ------------------------------------------------------------------------


def test_06_waiting_for_resources_is_progress_and_the_timeout_says_so(case, warm_dir):
    """Bound: server_wait_timeout 20 s + 40 s for the playbook."""
    c = case('busy')
    c.warm(warm_dir)
    block = 'itf-%s-block' % c.tag
    c.extra_names.append(block)
    for unused_node in range(2):
        ssh("cd /tmp && sbatch -J %s -p compute-h100 --gres=gpu:8 --exclusive --mem=0 -t 5 -o /dev/null --wrap 'sleep 240'"
            % block)
    c.wait_for(lambda: len([r for r in c.live() if r[1] == block and r[2] == 'RUNNING']) == 2 or
               len([r for r in c.live() if r[1] == block]) == 2, 30, 'the blockers queued')
    proc, took, found = c.deploy(server_wait_timeout=20)
    msg = serve_failure(found)
    server = c.job_state(c.serve)
    assert server and server[2] == 'PENDING', c.jobs()                     # stays queued
    assert 'timed out after 20s' in msg and 'waiting for a free node' in msg, msg
    assert 'stays queued' in msg and 'scancel %s' % server[0] in msg and 'teardown' in msg
    assert took < 60, took
    assert 'waiting for a free node' in proc.stdout.replace(msg, '')        # progress, in the events of the result


# -- 7. the server runs with an older key than the key file -----------------------------------------------------


def test_07_older_key_401_explains_rotation_and_restart(case, warm_dir):
    """Bound: 40 s for the second deploy."""
    c = case('key')
    c.warm(warm_dir)
    proc, took, found = c.deploy()
    assert proc.returncode == 0, found
    key_file = os.path.join(c.dir, 'api-key')
    with open(key_file, 'w') as handle:                                   # out of band, same file, same mode
        handle.write(uuid.uuid4().hex + uuid.uuid4().hex[:16] + '\n')
    proc, took, found = c.deploy()
    msg = serve_failure(found)
    assert 'HTTP 401' in msg or '401' in msg
    assert 'older key' in msg and 'api_key_rotate=true' in msg and 'server_recreate=true' in msg, msg
    assert took < 40, took
    assert len([r for r in c.jobs() if r[1] == c.serve]) == 1             # nothing was submitted again


# -- 8. slurmctld restarts during the wait ----------------------------------------------------------------------


def test_08_controller_restart_during_the_wait_carries_on(case):
    """Bound: 120 s (the controller is down 8 s while the download runs)."""
    c = case('ctld')
    restarted = []

    def restart():
        c.wait_for(lambda: c.running(c.download), 60, 'the download running')
        subprocess.run([CLUSTER, 'restart-controller', '8'], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
        restarted.append(time.monotonic())

    thread = threading.Thread(target=restart)
    thread.start()
    proc, took, found = c.deploy(download_env={'GLM_STANDIN_HF_DELAY': '2', 'GLM_STANDIN_HF_SHARDS': '2'})
    thread.join()
    assert restarted, 'the controller was not restarted'
    assert proc.returncode == 0, found or proc.stdout[-3000:]
    assert len(c.jobs()) == 2
    assert took < 120, took


# -- 9. the playbook is interrupted mid-wait; a rerun adopts ----------------------------------------------------


def test_09_interrupted_deploy_rerun_adopts_the_jobs(case):
    """Bound: the rerun within 60 s; exactly one download and one server job."""
    c = case('sigint')
    slow = {'GLM_STANDIN_HF_DELAY': '2', 'GLM_STANDIN_HF_SHARDS': '2'}
    proc = c.popen(download_env=slow)
    c.wait_for(lambda: c.job_state(c.serve) and c.job_state(c.download), 90, 'both jobs submitted')
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode != 0
    before = c.jobs()
    proc, took, found = c.deploy(download_env=slow)
    assert proc.returncode == 0, found or proc.stdout[-3000:]
    rows = c.jobs()
    assert sorted(r[1] for r in rows) == sorted([c.download, c.serve]), (before, rows)
    assert set(r[0] for r in rows) == set(r[0] for r in before)
    assert took < 60, took


# -- 10. two deploys at once --------------------------------------------------------------------------------------


def test_10_two_deploys_at_once_make_one_chain(case):
    """Bound: 90 s for both. Same login, work dir and names: one download, one server, both deploys succeed."""
    c = case('twice')
    slow = {'GLM_STANDIN_HF_DELAY': '1'}
    started = time.monotonic()
    procs = [c.popen(download_env=slow), c.popen(download_env=slow)]
    outs = [p.communicate(timeout=180)[0] for p in procs]
    took = time.monotonic() - started
    rows = c.jobs()
    assert [r[1] for r in rows].count(c.download) == 1, rows
    assert [r[1] for r in rows].count(c.serve) == 1, rows
    for proc, out in zip(procs, outs):
        assert proc.returncode == 0, failures(out)[0] or out[-3000:]
    serve_id = [r[0] for r in rows if r[1] == c.serve][0]
    assert all('job: %s on' % serve_id in out for out in outs)            # both report the same server job
    assert took < 90, took
