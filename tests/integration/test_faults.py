# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Faults during a deploy, on the LIVE local Slurm cluster, through the real playbooks/deploy.yml over SSH.

Each case states its time bound and asserts it, checks that the message names the cause and the fix, and that no
job of its names is left (unless the case says so). Every case has its own work dir ~/glm-it-faults-<case>-<id> and
job names itf-<case>-<id>-download / -serve. The stand-ins' failure switches are set per deploy through
download_env / server_env (exported by the batch scripts, passed to the srun steps), never through the cluster-wide
control files. Run as root: .venv/bin/pytest tests/integration/test_faults.py -v
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from conftest import Step
import cluster_target as target
from deploy_helpers import (CLUSTER, FAILED_RESULT, FAST_SERVER, REPO, SERVE_TASK, SERVER_WAIT_TIMEOUT, TASK_HEADER,
                            chown_login, cluster_ready, failures, fetch_log, hf_cache, login_home, run_playbook,
                            scancel_names, ssh)


def root_slurm(argv, check=False):
    """A Slurm command as root (an administrator, or "someone else")."""
    return subprocess.run(target.slurm_argv(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                          env=target.slurm_env(), check=check)


class Output:
    """The output of a running deploy (Case.popen), read as it is printed: each stdout line with the time.monotonic()
    it arrived, so that a bound can end at the moment the deploy reported a failure, not when the process exits."""

    def __init__(self, proc):
        self.proc = proc
        self.lines = []
        self.err = []
        self.readers = [threading.Thread(target=self._read, args=(proc.stdout, self.lines, True), daemon=True),
                        threading.Thread(target=self._read, args=(proc.stderr, self.err, False), daemon=True)]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _read(stream, into, stamp):
        for line in stream:
            into.append((time.monotonic(), line) if stamp else line)

    def finish(self, timeout):
        """Waits for the deploy to end; returns its stdout. On timeout, fails with what it printed so far."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail('the deploy did not end within %d s; it printed:\n%s\n%s' % (
                timeout, ''.join(line for _t, line in self.lines)[-6000:], ''.join(self.err)[-2000:]))
        for reader in self.readers:
            reader.join(10)
        return ''.join(line for _t, line in self.lines)

    def started(self, task):
        """True once the deploy printed the header of task (it runs: the tasks before it are done)."""
        return any((TASK_HEADER.match(line.rstrip('\n')) or [None, None])[1] == task for _t, line in self.lines)

    def failed_at(self, task):
        """When the deploy printed the first failed result of task (None if it did not)."""
        current = None
        for stamp, line in self.lines:
            header = TASK_HEADER.match(line.rstrip('\n'))
            if header:
                current = header.group(1)
            elif current == task and FAILED_RESULT.match(line):
                return stamp
        return None


def task_result(out, task=None):
    """The JSON result of the last failed result (of task, if given) in a deploy's output (result_json)."""
    decoder = json.JSONDecoder()
    found = None
    for match in FAILED_RESULT.finditer(out):
        headers = [h.group(1) for h in TASK_HEADER.finditer(out, 0, match.start())]
        if task is None or (headers and headers[-1] == task):
            found = decoder.raw_decode(out, match.end())[0]
    assert found is not None, 'no failed result of %s in:\n%s' % (task, out[-3000:])
    return found


@pytest.fixture(scope='module')
def warm_dir():
    """One complete image + model, made once by the real stand-ins in a CPU job, copied into the cases that need no
    download (so that they start the server at once)."""
    cluster_ready()
    rel = 'glm-it-faults-warm-%s' % uuid.uuid4().hex[:6]
    path = os.path.join(login_home(), rel)
    ssh('mkdir -p ~/%s && cd ~/%s && sbatch --wait -J itf-warm -c 1 --mem=256M -t 5 -o warm.out --wrap '
        '"srun --container-image=docker://lmsysorg/sglang:v0.5.21 --container-save=$HOME/%s/sglang.sqsh true && '
        'srun --container-image=$HOME/%s/sglang.sqsh --container-mounts=$HOME/%s hf download zai-org/GLM-5.3-Flash '
        '--local-dir $HOME/%s/GLM-5.3-Flash"' % (rel, rel, rel, rel, rel, rel), timeout=120)
    # what download.sbatch writes once `hf download` has exited 0 and every file had the Hub's checksum (the Hub's
    # listing, as the hf stand-in serves it, and the record of the check): without it the deploy downloads again
    sys.path.insert(0, os.path.join(REPO, 'tests', 'doubles', 'python'))
    import hf_standin  # pylint: disable=import-outside-toplevel
    commit = hf_standin.commit_hash('zai-org/GLM-5.3-Flash', None)
    listing = os.path.join(path, 'GLM-5.3-Flash', '.glm-serve-listing.json')
    with open(listing, 'w') as handle:
        json.dump({'repo': 'zai-org/GLM-5.3-Flash', 'revision': '', 'commit': commit, 'files': dict(
            (e['path'], {'size': e['size']}) for e in hf_standin.hub_listing('zai-org/GLM-5.3-Flash'))}, handle)
    record = os.path.join(path, 'GLM-5.3-Flash', '.glm-serve-complete.json')
    with open(record, 'w') as handle:
        json.dump({'repo': 'zai-org/GLM-5.3-Flash', 'revision': '', 'commit': commit, 'completed': int(time.time()),
                   'job_id': 'warm', 'verified': {'listing': '.glm-serve-listing.json', 'commit': commit, 'files': dict(
                       (n, {'size': st.st_size, 'mtime_ns': st.st_mtime_ns}) for n, st in (
                           (e['path'], os.stat(os.path.join(path, 'GLM-5.3-Flash', e['path'])))
                           for e in hf_standin.hub_listing('zai-org/GLM-5.3-Flash')))}},
                  handle)
    chown_login(listing)
    chown_login(record)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def serve_failure(found):
    msgs = [msg for task, msg in found if task == SERVE_TASK]
    assert msgs, 'the deploy did not fail in the server task: %s' % (found,)
    print('\nMESSAGE: %s' % msgs[-1])   # shown with pytest -s
    return msgs[-1]


def read(path):
    try:
        with open(path, errors='replace') as handle:
            return handle.read()
    except (IOError, OSError):
        return ''


def failed_at_once(proc, took, within):
    """The deploy's server task failed at once: its wait (the module's own `duration`, from the start of the wait to
    the failure) took less than `within` s, and did not time out. That bound is measured from the right event; the
    whole deploy adds some 10 s of Ansible and SSH on an idle machine and 30-40 s on a loaded 2-core one, so it is
    only held to end before a wait of server_wait_timeout (120 s) could have. Returns the wait's duration."""
    result = task_result(proc.stdout, SERVE_TASK)
    assert not result.get('timed_out'), result.get('msg')
    assert result.get('duration') is not None and result['duration'] < within, (result.get('duration'), within)
    assert took < SERVER_WAIT_TIMEOUT, took
    return result['duration']


# -- 1. the download fails --------------------------------------------------------------------------------------


def test_01_download_fails_names_job_id_log_and_leaves_no_pending_server(case):
    """Bound: the wait fails within 30 s (see failed_at_once). hf exits 1 (HTTP 503) after 2 files."""
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
    failed_at_once(proc, took, 30)


# -- 2. the download hits its time limit; a rerun resumes -------------------------------------------------------


def test_02_download_time_limit_then_rerun_resumes(case):
    """Bound: the failing deploy ends within 60 s of the lowering of the download's end (slurmctld enforces limits
    every 30 s, KillWait 5 s, a poll every server_wait_sleep 5 s), not at the server's wait timeout (120 s); the rerun
    takes 60 s. The download (13 files, 8 s each: 104 s) cannot finish before even its 1 min limit is enforced
    (60 s + 30 s), so the test never depends on how early the limit is lowered: that only makes it quicker."""
    c = case('dltime')
    shards = {'GLM_STANDIN_HF_SHARDS': '8'}
    slow = dict(shards, GLM_STANDIN_HF_DELAY='8')

    def shorten():
        row = c.wait_for(lambda: c.running(c.download, also=lambda: fetch_log(c)), 90, 'the download running')
        end = time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(time.time() + 2))
        ssh('scontrol update JobId=%s EndTime=%s' % (row[0], end))
        return time.monotonic()

    step = Step(shorten, lambda: scancel_names([c.download, c.serve]))
    proc, took, found = c.deploy(download_env=slow, download_time='00:01:00')
    try:
        after = time.monotonic() - step.join()
    except AssertionError as exc:
        raise AssertionError('%s\nthe deploy: %s' % (exc, found or proc.stdout[-3000:]))
    msg = serve_failure(found)
    download = c.job_state(c.download)
    assert download and download[2] == 'TIMEOUT', c.jobs()
    assert 'TIMEOUT' in msg and 'reached its time limit' in msg
    assert 'run deploy again and it resumes' in msg and 'download_time' in msg, msg
    assert not task_result(proc.stdout, SERVE_TASK).get('timed_out'), msg
    assert c.live() == []
    assert after < 60, (after, took)
    first = fetch_log(c)
    assert first, 'nothing was fetched before the time limit'

    proc, took, found = c.deploy(download_time='00:05:00', download_env=shards)
    assert proc.returncode == 0, found or proc.stdout[-3000:]
    second = fetch_log(c)[len(first):]
    assert second and not set(first) & set(second), (first, second)   # complete files were not fetched again
    assert took < 60, took


def test_02b_a_download_stopped_after_the_shards_is_not_taken_for_complete(case):
    """hf stops (exits 1) in the middle of tokenizer.json, after config.json, every shard and the index: the files
    a check of the weights looks at are all there. The job wrote no completion record, so the next deploy does not
    skip the download (the server would fail on the missing tokenizer): it submits it again, hf fetches only what
    is missing, and the server starts."""
    c = case('dlshards')
    # the stand-in fetches in the Hub's order: config, generation_config, 8 shards, the index (11), then tokenizer.json
    proc, took, found = c.deploy(download_env={'GLM_STANDIN_HF_FAIL_AFTER': '11'})
    assert proc.returncode != 0
    first = fetch_log(c)
    model = os.path.join(c.dir, 'GLM-5.3-Flash')
    assert 'model.safetensors.index.json' in first and len([f for f in first if f.endswith('.safetensors')]) == 8, first
    assert os.path.isfile(os.path.join(model, 'config.json')) and not os.path.exists(os.path.join(model, 'tokenizer.json'))
    assert not os.path.exists(os.path.join(model, '.glm-serve-complete.json'))

    proc, took, found = c.deploy()
    assert proc.returncode == 0, found or proc.stdout[-3000:]
    assert 'no completion record' in proc.stdout, proc.stdout[-3000:]       # the report says why it downloads
    second = fetch_log(c)[len(first):]
    assert second == ['tokenizer.json', 'tokenizer_config.json'], second    # only what was missing
    with open(os.path.join(model, '.glm-serve-complete.json')) as handle:
        record = json.load(handle)
    assert record['repo'] == 'zai-org/GLM-5.3-Flash' and len(record['commit']) == 40, record
    downloads = [r for r in c.jobs() if r[1] == c.download]
    assert [r[2] for r in downloads][-1] == 'COMPLETED', downloads

    proc, took, found = c.deploy()                                           # complete now: nothing submitted
    assert proc.returncode == 0 and 'nothing to download' in proc.stdout, found or proc.stdout[-3000:]
    assert [r for r in c.jobs() if r[1] == c.download] == downloads


# -- 3. no space left on device ---------------------------------------------------------------------------------


def test_03_no_space_says_free_or_buy_storage(case):
    """Bound: the wait fails within 30 s (see failed_at_once)."""
    c = case('nospace')
    proc, took, found = c.deploy(download_env={'GLM_STANDIN_HF_NOSPACE_AFTER': '3'})
    msg = serve_failure(found)
    assert 'No space left on device' in msg
    assert 'delete the partial download or buy more storage' in msg and '%s/GLM-5.3-Flash' % c.rel in msg, msg
    assert c.live() == []
    assert os.path.isdir(os.path.join(c.dir, 'GLM-5.3-Flash'))           # the partial download is kept
    failed_at_once(proc, took, 30)


# -- 4. CUDA out of memory at start -----------------------------------------------------------------------------


def test_04_cuda_oom_suggests_mem_fraction_070(case, warm_dir):
    """Bound: the wait fails within 30 s (see failed_at_once)."""
    c = case('oom')
    c.warm(warm_dir)
    proc, took, found = c.deploy(server_env=dict(FAST_SERVER, GLM_STANDIN_SGLANG_FAIL='oom'))
    msg = serve_failure(found)
    assert 'FAILED' in msg and 'CUDA out of memory' in msg
    assert 'server_mem_fraction_static=0.70' in msg, msg
    assert c.live() == []
    failed_at_once(proc, took, 30)


# -- 5. the server job is cancelled by someone else, or its node fails ------------------------------------------


def _run_until_server_runs(c):
    """Starts a deploy whose server loads for 60 s (port closed); returns (Output, server job row) once the server
    job RUNS and its output shows the server loading. (Whether the deploy's waiter has seen it RUNNING yet cannot be
    observed from here; either way the wait is under way, since the deploy submitted the job and waits for it.)"""
    out = Output(c.popen(server_env=dict(FAST_SERVER, GLM_STANDIN_SGLANG_LOAD='60')))

    def loading():
        row = c.running(c.serve)
        return row if row and 'server_args=' in read(os.path.join(c.dir, '%s-%s.out' % (c.serve, row[0]))) else None

    try:
        row = c.wait_for(loading, 90, 'the server job running and loading')
    except AssertionError as exc:
        out.proc.kill()
        raise AssertionError('%s\nthe deploy: %s' % (exc, out.finish(30)[-3000:]))
    return out, row


def test_05a_server_cancelled_by_someone_else_fails_at_once(case, warm_dir):
    """Bound: the deploy reports the failure within 10 s of the scancel (a poll every server_wait_sleep 5 s)."""
    c = case('cancel')
    c.warm(warm_dir)
    out, row = _run_until_server_runs(c)
    endpoint = os.path.join(c.dir, 'endpoint')
    assert 'GLM_BASE_URL=http://' in read(endpoint)                      # the job wrote it as it started
    root_slurm(['scancel', row[0]], check=True)
    event = time.monotonic()
    text = out.finish(timeout=60)
    msg = serve_failure(failures(text)[0])
    assert 'ended CANCELLED' in msg and 'it was cancelled' in msg
    assert 'Someone cancelled the server job %s' % row[0] in msg and 'run deploy again' in msg, msg
    after = out.failed_at(SERVE_TASK) - event
    assert after < 10, after
    assert c.live() == []
    # the job's SIGTERM took its endpoint file (no client is sent to that node's port, which another user may bind
    # next) and its key's config files with it
    left = c.wait_for(lambda: not os.path.exists(endpoint) and not glob.glob(os.path.join(
        c.dir, '.%s-%s.*' % (c.serve, row[0]))) or None, 30, 'the endpoint file and the job files removed')
    assert left


def test_05b_node_failure_fails_at_once(case, warm_dir):
    """Bound: the deploy reports the failure within 15 s of the node going DOWN. Slurm here requeues the batch job (JobRequeue=1):
    it goes back to PENDING (BeginTime) with Restarts=1; where it is not requeued it ends NODE_FAIL. Both fail at
    once. The node is set DOWN only when no job of anyone else runs on it; otherwise the job is requeued with
    `scontrol requeue` (the same path in the module), so other work on the cluster is never killed."""
    c = case('node')
    c.warm(warm_dir)
    out, row = _run_until_server_runs(c)
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
        text = out.finish(timeout=60)
        # deploy again at once (the same settings: another server_env would be a changed script, replaced by
        # design): the requeued job is adopted and its begin time, which Slurm put 121 s ahead, set to now once
        # KillWait (5 s here) + 5 s have passed since the requeue. The node answers again at once (ReturnToService=2,
        # node_mgr.c _node_did_resp) and may be chosen again: a start sooner than that met slurmd's refusal of a second
        # copy while the earlier run's step was still there (req.c _rpc_batch_job), a second requeue and 121 s more
        # (CI of 7d35702: the job started 124 s after the redeploy, which failed with "requeued" in 3.3 s)
        # (server_wait=false: adopting sets the begin time, not the wait, which would only watch the stand-in's 60-s load)
        redeploy_at = time.time()
        again, took, found = c.deploy(server_env=dict(FAST_SERVER, GLM_STANDIN_SGLANG_LOAD='60'), server_wait=False)
        c.wait_for(lambda: job_field(row[0], 'JobState') != 'PENDING', 30, 'the adopted job started')
        started = job_field(row[0], 'StartTime')
        start_after = when(row[0], 'StartTime') - int(redeploy_at) if started and started != 'Unknown' else None
        print('\nRECOVERY: run again after the requeue, the job started %s s after the deploy began; the deploy took '
              '%.1f s (server_wait=false: it adopts and returns)' % (start_after, took))
    finally:
        if downed:
            root_slurm(['scontrol', 'update', 'NodeName=%s' % node, 'State=RESUME'])
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and 'idle' not in root_slurm(['sinfo', '-h', '-n', node, '-o', '%T']).stdout \
                    and 'mix' not in root_slurm(['sinfo', '-h', '-n', node, '-o', '%T']).stdout:
                root_slurm(['scontrol', 'update', 'NodeName=%s' % node, 'State=IDLE'])
                time.sleep(1)
    msg = serve_failure(failures(text)[0])
    assert ('requeued by Slurm' in msg or 'NODE_FAIL' in msg), msg
    assert 'scancel %s' % row[0] in msg or 'run deploy again' in msg, msg
    after = out.failed_at(SERVE_TASK) - event
    assert after < 15, after
    if 'requeued by Slurm' in msg:
        assert 'run deploy again to adopt it and start it sooner' in msg, msg
        assert again.returncode == 0, '\n'.join(m for _t, m in found) or again.stdout[-3000:]
        assert job_field(row[0], 'Restarts') == '1', job_field(row[0], 'Restarts')   # not requeued a second time
        said = again.stdout + again.stderr                           # Ansible prints its warnings on stderr
        # KillWait is 5 s on this cluster: the begin time is set to now 10 s after the requeue (waited for) or at once
        assert 'was requeued by Slurm (restarts 1' in said and re.search(
            r'that was set to now( after \d+ s \(10 s after the requeue|, so that)', said), said[-3000:]
        assert c.job_state(c.serve)[0] == row[0], c.jobs()          # the same job, adopted, not a second one
        # it was 137 s (the requeued job's begin time, about 2 min ahead) before the job started at all
        assert start_after is not None and start_after < 15, (started, start_after)


# -- 6. the server waits for a free node ------------------------------------------------------------------------


def test_06_waiting_for_resources_is_progress_and_the_timeout_says_so(case, warm_dir):
    """Bound: the wait ends at its server_wait_timeout of 20 s (the module's own duration: 20 s, plus a last call), and
    the whole deploy before 120 s (see failed_at_once)."""
    c = case('busy')
    c.warm(warm_dir)
    block = 'itf-%s-block' % c.tag
    c.extra_names.append(block)
    for unused_node in range(2):
        ssh("cd /tmp && sbatch -J %s -p compute-h100 --gres=gpu:8 --exclusive --mem=0 -t 5 -o /dev/null --wrap 'sleep 240'"
            % block)

    def full():
        """Both blockers queued and no node idle (each runs a blocker, or someone else's job on a shared cluster): the
        server, which wants a whole node (server_exclusive), cannot start, and a node that frees goes to the older,
        pending blocker first. (Blockers merely queued, with a node idle, could leave it to the server.)"""
        states = root_slurm(['sinfo', '-h', '-N', '-p', 'compute-h100', '-o', '%T']).stdout.split()
        return len([r for r in c.live() if r[1] == block]) == 2 and states and \
            all(s.startswith(('allocated', 'mixed')) for s in states)

    c.wait_for(full, 60, 'no node idle, the blockers queued')
    proc, took, found = c.deploy(server_wait_timeout=20)
    msg = serve_failure(found)
    server = c.job_state(c.serve)
    assert server and server[2] == 'PENDING', c.jobs()                     # stays queued
    assert 'timed out after 20s' in msg and 'waiting for a free node' in msg, msg
    assert 'stays queued' in msg and 'scancel %s' % server[0] in msg and 'teardown' in msg
    waited = task_result(proc.stdout, SERVE_TASK)
    assert waited.get('timed_out') is True and 20 <= waited['duration'] < 30, waited.get('duration')
    assert took < SERVER_WAIT_TIMEOUT, took
    assert 'waiting for a free node' in proc.stdout.replace(msg, '')        # progress, in the events of the result


# -- 7. the server runs with an older key than the key file -----------------------------------------------------


def test_07_older_key_401_explains_rotation_and_restart(case, warm_dir):
    """Bound: the second deploy's wait fails within 30 s (see failed_at_once)."""
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
    failed_at_once(proc, took, 30)
    assert len([r for r in c.jobs() if r[1] == c.serve]) == 1             # nothing was submitted again


# -- 8. slurmctld restarts during the wait ----------------------------------------------------------------------


def test_08_controller_restart_during_the_wait_carries_on(case):
    """Bound: 120 s. The controller is down 8 s while the deploy waits for the server job, which is PENDING on the
    download still RUNNING (7 files, 5 s each: 35 s), so the server can start only after the controller is back: the
    wait has to carry on through the outage. The outage starts once hf has fetched a file: the download's job steps
    all exist then (an srun that creates its step while slurmctld is down can hang, which is not this test's case)."""
    c = case('ctld')

    def waiting():
        download, serve = c.job_state(c.download), c.job_state(c.serve)
        return download and serve and download[2] == 'RUNNING' and serve[2] == 'PENDING' and fetch_log(c)

    def restart():
        c.wait_for(waiting, 90, 'the deploy waiting for the server job, the download fetching')
        proc = subprocess.run([CLUSTER, 'restart-controller', '8'], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, check=False)
        assert proc.returncode == 0, proc.stdout
        return True

    step = Step(restart, lambda: scancel_names([c.download, c.serve]))
    proc, took, found = c.deploy(download_env={'GLM_STANDIN_HF_DELAY': '5', 'GLM_STANDIN_HF_SHARDS': '2'})
    try:
        assert step.join(), 'the controller was not restarted'
    except AssertionError as exc:
        raise AssertionError('%s\nthe deploy: %s' % (exc, found or proc.stdout[-3000:]))
    assert proc.returncode == 0, found or proc.stdout[-3000:]
    assert len(c.jobs()) == 2
    assert took < 120, took


def test_08b_controller_down_when_the_deploy_starts_is_ridden_out(case, warm_dir):
    """Bound: the deploy succeeds. slurmctld is down for 25 s (a controller in a Kubernetes pod restarting) when the
    deploy starts: its preflight's sinfo fails with "Unable to contact slurm controller" and is asked again every 5 s,
    saying so, until the controller answers; nothing fails and the jobs are submitted once. (It failed at once in the
    preflight before.) Run once with ansible-playbook directly: the harness's own retry of such failures is not used."""
    c = case('ctldstart')
    c.warm(warm_dir)
    restart = subprocess.Popen([CLUSTER, 'restart-controller', '25'], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               universal_newlines=True)
    try:
        c.wait_for(lambda: root_slurm(['sinfo', '-h']).returncode != 0, 30, 'slurmctld down')
        down_at = time.monotonic()
        proc = run_playbook('deploy.yml', c.vars(server_env=FAST_SERVER), c.tmp, result_json=True, timeout=300)
        took = time.monotonic() - down_at
    finally:
        out, _err = restart.communicate(timeout=120)
    assert restart.returncode == 0, out
    found, _changed = failures(proc.stdout)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, found or said[-3000:]
    assert 'FAILED - RETRYING' in said and 'Look at the Slurm cluster from the host' in said, said[-3000:]
    assert 'Unable to contact slurm controller' not in ''.join(msg for _task, msg in found)
    assert [r[2] for r in c.jobs() if r[1] == c.serve] == ['RUNNING'], c.jobs()
    print('\nCONTROLLER DOWN AT START: the deploy succeeded %.1f s after slurmctld went down (25 s outage)' % took)


# -- 9. the playbook is interrupted mid-wait; a rerun adopts ----------------------------------------------------


def test_09_interrupted_deploy_rerun_adopts_the_jobs(case):
    """Bound: the rerun ends within 60 s of the download going on; exactly one download and one server job.
    The download waits behind the hf stand-in's gate (GLM_STANDIN_HF_GATE) from its start until the rerun has passed
    its download task, so the rerun meets it live whatever the machine's speed. (Without it, a download that ends
    between the rerun's check of the files and its adoption of the job makes the rerun submit a second, needless
    download: a race of the download role, not what this case is about. An earlier version held the job with
    scontrol suspend/hold; a suspend that reaches slurmd while the step is still being launched can leave the job
    stopped after the resume, as CI showed on 24.11: 120 s of "PENDING Dependency".)"""
    c = case('sigint')
    gated = {'GLM_STANDIN_HF_GATE': 'go', 'GLM_STANDIN_HF_DELAY': '1', 'GLM_STANDIN_HF_SHARDS': '2'}
    gate = hf_cache(c, 'go')
    proc = c.popen(download_env=gated)
    c.wait_for(lambda: c.job_state(c.serve) and c.running(c.download), 90, 'both jobs submitted, the download running')
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode != 0
    before = c.jobs()
    assert c.running(c.download), before                                 # still behind its gate
    out = Output(c.popen(download_env=gated))
    try:
        c.wait_for(lambda: out.started(SERVE_TASK) or out.proc.poll() is not None, 180, 'the rerun waiting for the server')
    finally:
        os.makedirs(os.path.dirname(gate), exist_ok=True)
        with open(gate, 'w'):
            pass
    resumed = time.monotonic()
    text = out.finish(timeout=180)
    took = time.monotonic() - resumed
    assert out.proc.returncode == 0, failures(text)[0] or text[-3000:]
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


# -- 11. a bad GPU: the node is avoided ---------------------------------------------------------------------------


def job_field(job_id, field):
    """A field of `scontrol show job` (BatchHost, SubmitTime, StartTime...), None when it is not there."""
    out = root_slurm(['scontrol', 'show', 'job', str(job_id)]).stdout
    found = [part.split('=', 1)[1] for part in out.split() if part.startswith(field + '=')]
    return found[0] if found else None


def when(job_id, field):
    """A time field of `scontrol show job` as seconds since the epoch (Slurm prints local time, to the second)."""
    return time.mktime(time.strptime(job_field(job_id, field), '%Y-%m-%dT%H:%M:%S'))


def node_of(job_id):
    return job_field(job_id, 'BatchHost')


def both_nodes_idle(case):
    """Waits until node1 and node2 are idle: the first job must get node1 (first fit in node order) and the
    second node2. A job of anyone else on them (a deploy left running by hand) is named in the failure."""
    def idle():
        states = root_slurm(['sinfo', '-h', '-N', '-p', 'compute-h100', '-o', '%N %T']).stdout.split('\n')
        return sorted(line.strip() for line in states if line.strip()) == ['node1 idle', 'node2 idle']
    deadline = time.monotonic() + 120
    while not idle():
        assert time.monotonic() < deadline, 'node1 and node2 not idle within 120 s; jobs on the cluster:\n%s' % (
            root_slurm(['squeue', '-a', '-o', '%i %u %j %T %N']).stdout)
        time.sleep(0.5)


@pytest.mark.parametrize('switch, cause', [
    ('GLM_STANDIN_GPU_BUSY', 'GPU 3 (00000000:5D:00.0): 73156 of 143771 MiB free'),
    ('GLM_STANDIN_GPU_ECC', 'GPU 3 (00000000:5D:00.0): 2 uncorrectable ECC errors (volatile)'),
    ('GLM_STANDIN_GPU_MISSING', '7 GPUs visible, the job asked for 8'),
])
def test_11a_a_bad_gpu_costs_seconds_and_the_server_runs_on_the_other_node(case, warm_dir, switch, cause):
    """Bound: the first job's GPU check fails within seconds of its start, and the second job is submitted within
    15 s of that (the check's verdict is an error line: the wait asks Slurm at once). node1 idle first, so that
    Slurm gives the first job node1 (first fit in node order), where GPU 3 is busy, has ECC errors, or is missing."""
    c = case('gpubad')
    c.warm(warm_dir)
    both_nodes_idle(c)
    proc, took, found = c.deploy(server_env=dict(FAST_SERVER, **{switch: 'node1:3'}))
    assert proc.returncode == 0, found or proc.stdout[-3000:]
    rows = [r for r in c.jobs() if r[1] == c.serve]
    assert len(rows) == 2, rows
    (first, _n, first_state), (second, _m, second_state) = rows
    assert node_of(first) == 'node1' and first_state == 'FAILED', (rows, node_of(first))
    assert node_of(second) == 'node2' and second_state == 'RUNNING', (rows, node_of(second))
    log = read(os.path.join(c.dir, '%s-%s.out' % (c.serve, first)))
    assert 'gpu-check: FAILED on node1: ' + cause in log, log
    assert 'server_args' not in log                                           # SGLang never started
    if switch == 'GLM_STANDIN_GPU_BUSY':
        assert '1 compute process (pid 4242 python3 70000 MiB)' in log
    warned = proc.stdout + proc.stderr                                      # the module's warning
    assert 'failed on node node1' in warned and 'submitting it again without that node' in warned, warned[-3000:]
    listed = json.loads(read(os.path.join(c.dir, 'bad-nodes.json')))
    assert list(listed) == ['node1'] and listed['node1']['job_id'] == first and listed['node1']['cause'].startswith(cause)
    assert 'nodes avoided (failed the GPU check): node1' in proc.stdout, proc.stdout[-2000:]     # the deploy's summary

    gap = when(second, 'SubmitTime') - when(first, 'StartTime')     # Slurm's times, to the second
    assert gap < 15, gap
    healthy = read(os.path.join(c.dir, '%s-%s.out' % (c.serve, second)))
    took_check = [int(line.rsplit('(', 1)[1].rstrip('s)\n')) for line in healthy.splitlines()
                  if line.startswith('gpu-check: node2: 8 GPUs ok')]
    assert took_check and took_check[0] < 5, healthy[:2000]
    print('\nGPU check: the job started on node1, the next one was submitted %d s later; healthy check on node2: %d s' % (
        gap, took_check[0]))
    # status lists the node, and how to forget it
    status = run_playbook('status.yml', c.vars(), c.tmp)
    assert 'nodes avoided: node1 (since' in status.stdout and 'bad-nodes.json' in status.stdout, status.stdout[-2000:]


def test_11b_every_node_bad_stops_and_says_so_and_the_next_deploy_submits_nothing(case, warm_dir):
    """ECC errors on node1 and a missing GPU on node2 (whichever comes first): two attempts, then the deploy
    stops naming both nodes; the next deploy stops before submitting anything; the list expires."""
    c = case('gpuall')
    c.warm(warm_dir)
    both_nodes_idle(c)
    bad = dict(FAST_SERVER, GLM_STANDIN_GPU_ECC='node1:2', GLM_STANDIN_GPU_MISSING='node2:5')
    proc, took, found = c.deploy(server_env=bad)
    assert proc.returncode != 0
    msg = serve_failure(found)
    assert 'no other node is left' in msg and 'What to do:' in msg and 'bad-nodes.json' in msg, msg
    assert 'A GPU failed while the server ran' not in msg                 # the mid-run hint is not for this
    listed = json.loads(read(os.path.join(c.dir, 'bad-nodes.json')))
    assert sorted(listed) == ['node1', 'node2'], listed
    assert '2 uncorrectable ECC errors' in listed['node1']['cause'] and '7 GPUs visible' in listed['node2']['cause']
    assert len([r for r in c.jobs() if r[1] == c.serve]) == 2
    proc, took, found = c.deploy(server_env=bad)
    assert proc.returncode != 0 and len([r for r in c.jobs() if r[1] == c.serve]) == 2      # nothing submitted
    msg = serve_failure(found)
    assert 'every node the job can run on (node1, node2) is on the bad-node list' in msg, msg
    # older than server_bad_node_ttl: forgotten, the deploy submits again (healthy GPUs this time: it serves)
    proc, took, found = c.deploy(server_env=dict(FAST_SERVER), server_bad_node_ttl=1, server_bad_node_retries=0)
    assert len([r for r in c.jobs() if r[1] == c.serve]) == 3, c.jobs()
    assert proc.returncode == 0, found


def test_11c_a_driver_older_than_the_minimum_fails_at_once_without_a_bad_node(case, warm_dir):
    """The driver of every node (the stand-in's gpu-driver switch, 570.172.08: CUDA 12.8) is older than
    server_gpu_min_driver (580): the same on every node of a partition, so another node would not do. The deploy
    submits once, fails at once with the driver's own verdict and hint, and leaves no node on bad-nodes.json
    (the healthy nodes stay usable, and a lower server_gpu_min_driver works on the next deploy)."""
    c = case('gpudrv')
    c.warm(warm_dir)
    both_nodes_idle(c)
    old = dict(FAST_SERVER, GLM_STANDIN_GPU_DRIVER='570.172.08')
    proc, took, found = c.deploy(server_env=old)
    assert proc.returncode != 0
    rows = [r for r in c.jobs() if r[1] == c.serve]
    assert len(rows) == 1, rows                                             # submitted once, not retried
    log = read(os.path.join(c.dir, '%s-%s.out' % (c.serve, rows[0][0])))
    assert 'gpu-check: DRIVER on node1: NVIDIA driver 570.172.08 is older than 580' in log, log[-3000:]
    assert 'gpu-check: FAILED on' not in log and ': ok\n' not in log, log[-3000:]
    msg = serve_failure(found)
    assert 'the NVIDIA driver on node1 as 570.172.08; the minimum, server_gpu_min_driver, is 580' in msg, msg
    assert '--constraint' in msg and 'administrators' in msg, msg
    assert 'is on the bad-node list' not in msg and 'The GPU check of job' not in msg, msg      # not the node's hint
    assert 'submitting it again' not in proc.stdout + proc.stderr
    listed = json.loads(read(os.path.join(c.dir, 'bad-nodes.json')) or '{}')
    assert 'node1' not in listed and 'node2' not in listed, listed
    # a minimum lowered knowingly: the next deploy serves, on node1 (no node was excluded)
    proc, _took, found = c.deploy(server_env=old, server_gpu_min_driver='570')
    assert proc.returncode == 0, found or proc.stdout[-3000:]
    rows = [r for r in c.jobs() if r[1] == c.serve]
    assert len(rows) == 2 and rows[1][2] == 'RUNNING' and node_of(rows[1][0]) == 'node1', rows
    print('\nold driver: the deploy failed after %.0f s, one job' % took)


# -- 12. Pyxis's mount rules; an image save that fails ------------------------------------------------------------
# The cluster's Pyxis stand-in follows the real rules (tests/doubles/pyxis/pyxis_standin.c): a container step sees
# the home directory only when it is mounted (the site default here is off, as in enroot's shipped config), and a
# write to a path not mounted goes into the container's own filesystem and is gone when the step ends. The save of
# --container-save is a real squashfs, which the stand-in can be told to cut short.

PLUGSTACK = os.path.join(target.DIR, 'etc', 'plugstack.conf')
NO_MOUNTS = ' --container-mounts="$MOUNTS"'


def collection_without_mounts(tmp, templates):
    """A copy of the collection whose TEMPLATES call srun as the guide does, without --container-mounts; the env
    that makes a playbook use it."""
    root = os.path.join(tmp, 'guide-srun')
    dest = os.path.join(root, 'ansible_collections', 'glm', 'serve')
    shutil.copytree(REPO, dest, ignore=shutil.ignore_patterns('.git', '.venv*', '.collections', 'tests', 'build',
                                                              'molecule', '__pycache__'))
    for rel in templates:
        path = os.path.join(dest, rel)
        text = read(path)
        assert NO_MOUNTS in text, 'no --container-mounts in %s' % rel
        with open(path, 'w') as handle:
            handle.write(text.replace(NO_MOUNTS, ''))
    return {'ANSIBLE_COLLECTIONS_PATH': root}


def image_problem(path):
    """unsquashfs -s on PATH, as download.sbatch checks it: '' when whole, else what is wrong. Run where the cluster's
    squashfs-tools are (inside a root for trixie/sid, whose path of the file is the host's: the host may have none)."""
    proc = subprocess.run(target.slurm_argv(['unsquashfs', '-s', path]), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, check=False, env=target.slurm_env(),
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        return proc.stdout.strip()
    used = [int(line.split()[2]) for line in proc.stdout.splitlines() if line.startswith('Filesystem size ')]
    return '' if used and used[0] <= os.path.getsize(path) else 'truncated (%s of %s)' % (os.path.getsize(path), used)


def test_12a_without_the_home_mounted_the_deploy_works_end_to_end(case):
    """The site mounts no home directory (mount_home=0): the download (image save, hf) and the server, which use the
    work dir under the home, work because the scripts mount what they use. Fails with scripts that do not: their
    download writes into the container and is lost, the server then finds no model."""
    assert 'mount_home=0' in read(PLUGSTACK), read(PLUGSTACK)
    c = case('mounts')
    proc, took, found = c.deploy()
    assert proc.returncode == 0, found or proc.stdout[-3000:]
    model = os.path.join(c.dir, 'GLM-5.3-Flash')
    for name in ('config.json', 'tokenizer.json', 'model.safetensors.index.json', '.glm-serve-complete.json'):
        assert os.path.isfile(os.path.join(model, name)), (name, sorted(os.listdir(model)))
    assert image_problem(os.path.join(c.dir, 'sglang.sqsh')) == ''
    downloads = [r for r in c.jobs() if r[1] == c.download]
    assert [r[2] for r in downloads] == ['COMPLETED'], downloads


def test_12b_a_download_script_without_mounts_fails_and_says_why(case):
    """The guide's srun lines, unchanged (no --container-mounts), on this site: hf writes the weights into the
    container's own filesystem and exits 0. The job checks that they reached the node and fails, and the deploy
    names the cause (mounts); nothing is taken for a download."""
    c = case('dlnomount')
    env = collection_without_mounts(c.tmp, ['roles/download/templates/download.sbatch.j2'])
    proc = run_playbook('deploy.yml', c.vars(), c.tmp, result_json=True, timeout=300, env=env)
    found, _changed = failures(proc.stdout)
    assert proc.returncode != 0
    msg = serve_failure(found)
    download = c.job_state(c.download)
    assert download and download[2] == 'FAILED', c.jobs()
    assert 'did not write to' in msg and 'Pyxis mounts only what it is told' in msg, msg
    model = os.path.join(c.dir, 'GLM-5.3-Flash')
    assert not os.path.exists(os.path.join(model, 'config.json'))           # hf "succeeded" into the container
    assert not os.path.exists(os.path.join(model, '.glm-serve-complete.json'))
    assert c.live() == [], c.jobs()


def test_12c_a_server_script_without_mounts_fails_and_says_why(case, warm_dir):
    """The image and the weights are in place; the server's srun has no --container-mounts: SGLang sees neither its
    config file nor the model. The deploy fails at once and the hint names the mounts."""
    c = case('srvnomount')
    c.warm(warm_dir)
    env = collection_without_mounts(c.tmp, ['roles/server/templates/serve.sbatch.j2'])
    started = time.monotonic()
    proc = run_playbook('deploy.yml', c.vars(), c.tmp, result_json=True, timeout=300, env=env)
    took = time.monotonic() - started
    found, _changed = failures(proc.stdout)
    assert proc.returncode != 0
    msg = serve_failure(found)
    assert 'Config file not found' in msg or "Can't load the configuration" in msg, msg
    assert 'Pyxis mounts only what it is told' in msg and '--container-mounts' in msg, msg
    failed_at_once(proc, took, 30)


@pytest.mark.parametrize('switch', ['pyxis-export-fail', 'pyxis-export-truncate'])
def test_12d_an_image_save_that_fails_is_caught(case, switch):
    """Pyxis exports the container after the step; srun exits 0 even when the export fails (fail: an error in the
    step's log; truncate: nothing said), leaving part of a squashfs. download.sbatch checks the image before it
    renames it into place: the job fails naming the cause, no broken image is left to be used, and the next deploy,
    the save working again, saves it and serves."""
    c = case('save' + switch.rsplit('-', 1)[1])
    control = os.path.join(target.CONTROL, switch)
    with open(control, 'w'):
        pass
    try:
        proc, took, found = c.deploy()
    finally:
        os.unlink(control)
    assert proc.returncode != 0
    msg = serve_failure(found)
    download = c.job_state(c.download)
    assert download and download[2] == 'FAILED', c.jobs()
    assert 'saved by Pyxis' in msg and 'is broken' in msg and 'truncated' in msg, msg
    assert 'full disk or quota' in msg, msg                                   # the hint
    assert not os.path.exists(os.path.join(c.dir, 'sglang.sqsh'))
    assert [f for f in os.listdir(c.dir) if f.endswith('.partial.sqsh')] == []
    proc, took, found = c.deploy()
    assert proc.returncode == 0, found or proc.stdout[-3000:]
    assert image_problem(os.path.join(c.dir, 'sglang.sqsh')) == ''


def test_12e_a_broken_image_in_place_is_saved_again(case, warm_dir):
    """An image cut short by a save before this check existed: the deploy does not take it for an image (the server
    would fail to start the container); it says so and the download job saves it again, the weights kept."""
    c = case('imgbroken')
    c.warm(warm_dir)
    image = os.path.join(c.dir, 'sglang.sqsh')
    size = os.path.getsize(image)
    with open(image, 'r+b') as handle:
        handle.truncate(size // 2)
    fetched = fetch_log(c)                                                     # the warm dir's own download
    proc, took, found = c.deploy()
    assert proc.returncode == 0, found or proc.stdout[-3000:]
    assert 'is broken: truncated' in proc.stdout, proc.stdout[-3000:]
    assert image_problem(image) == ''
    assert fetch_log(c) == fetched                                             # no weight fetched again


# -- 13. Pyxis's environment; NCCL's network between nodes -------------------------------------------------------
# Pyxis 0.24 (NVIDIA/pyxis v0.24.0): README.md L98-105 and args.c L146-152 (--container-env): exported host variables
# are set in the container "but their existing values in the image take precedence"; pyxis_slurmstepd.c L657-714
# (spank_import_container_env) sets the container's environment over the job's with overwrite, except the
# --container-env names, and L1061-1075 writes those names into enroot's environ(). enroot v4.1.2: src/docker.sh
# L350-351 writes the image's ENV to the rootfs's /etc/environment, src/runtime.sh L32-62 (_do_environ) reads it, then
# environ(); bin/common.h L148-170 (load_environment) sets them in order. The Pyxis stand-in does the same with the
# test image docker://glm-standin/sglang-env:v0.5.21 (tests/doubles/images/), whose environment sets
# SGLANG_CACHE_DIR, SGLANG_DG_CACHE_DIR, HF_HOME, HF_TOKEN_PATH, HF_XET_HIGH_PERFORMANCE and NCCL_NET=IB, and keeps it
# in the image --container-save writes. The SGLang stand-in writes a file in each kernel cache (standin_env.py).

ENV_IMAGE = 'docker://glm-standin/sglang-env:v0.5.21'
CONTAINER_ENV = ' --container-env={{ _server_container_env | quote }}'


def kernels(case):
    """The SGLang stand-in's kernel files found in the job's cache folders (glm_work_dir/cache)."""
    return sorted(glob.glob(os.path.join(case.dir, 'cache', '*', 'glm-standin-kernels-*')))


def test_13a_exports_alone_lose_to_an_image_that_sets_the_caches(case):
    """The guide's way (export only, as this collection's scripts did): with an image that sets SGLANG_CACHE_DIR and
    SGLANG_DG_CACHE_DIR, the server runs and the deploy passes, but the kernels go into the container's own /root and
    are gone: the job's cache folders stay empty, silently."""
    c = case('envlost')
    path = os.path.join(REPO, 'roles/server/templates/serve.sbatch.j2')
    assert CONTAINER_ENV in read(path)
    root = os.path.join(c.tmp, 'export-only')
    dest = os.path.join(root, 'ansible_collections', 'glm', 'serve')
    shutil.copytree(REPO, dest, ignore=shutil.ignore_patterns('.git', '.venv*', '.collections', 'tests', 'build',
                                                              'molecule', '__pycache__'))
    copy = os.path.join(dest, 'roles/server/templates/serve.sbatch.j2')
    with open(copy, 'w') as handle:
        handle.write(read(path).replace(CONTAINER_ENV, ''))
    proc = run_playbook('deploy.yml', c.vars(download_container_image=ENV_IMAGE), c.tmp, result_json=True, timeout=300,
                        env={'ANSIBLE_COLLECTIONS_PATH': root})
    found, _changed = failures(proc.stdout)
    assert proc.returncode == 0, found or proc.stdout[-3000:]
    assert os.path.isdir(os.path.join(c.dir, 'cache', 'sglang'))          # the job made them
    assert kernels(c) == [], kernels(c)


def test_13b_the_jobs_values_win_over_the_image(case):
    """The same image and deploy with this collection's scripts: the server step names its variables in
    --container-env, so the kernels land in the job's cache folders (kept for the next start)."""
    c = case('envkept')
    proc, took, found = c.deploy(download_container_image=ENV_IMAGE)
    assert proc.returncode == 0, found or proc.stdout[-3000:]
    found = [os.path.relpath(p, c.dir) for p in kernels(c)]
    assert found == ['cache/deep_gemm/glm-standin-kernels-TP0', 'cache/sglang/glm-standin-kernels-TP0'], found


def _two_nodes(c, **server_env):
    env = dict(FAST_SERVER, **server_env)
    return c.deploy(timeout=420, server_nodes=2, server_env=env)


def test_13c_two_nodes_over_sockets_deploy_and_warn(case, warm_dir):
    """Two nodes whose container has no usable InfiniBand (the SGLang stand-in's sglang-nccl-net=Socket): NCCL falls
    back to sockets (NVIDIA/nccl src/transport/net_socket.cc "NET/Socket : Using%s", src/init.cc "Using network %s",
    printed with NCCL_DEBUG=INFO, which serve.sbatch sets on several nodes). The server works, so the deploy passes,
    and it says so in a warning line."""
    c = case('ncclsock')
    c.warm(warm_dir)
    proc, took, found = _two_nodes(c, GLM_STANDIN_SGLANG_NCCL_NET='Socket')
    assert proc.returncode == 0, found or proc.stdout[-3000:]
    assert "WARNING: the server's 2 nodes talk over TCP sockets" in proc.stdout, proc.stdout[-3000:]
    assert 'NET/Socket : Using [0]eth0' in proc.stdout


def test_13d_the_sites_nccl_net_is_kept_on_two_nodes(case, warm_dir):
    """The site's NCCL_NET=IB (here through server_env) is kept on several nodes: where IB does not work in the
    container, NCCL refuses (src/net.cc "Error: network %s not found.") instead of falling back to sockets, and the
    deploy fails at once with the NCCL hint."""
    c = case('ncclib')
    c.warm(warm_dir)
    proc, took, found = _two_nodes(c, GLM_STANDIN_SGLANG_NCCL_NET='Socket', NCCL_NET='IB')
    assert proc.returncode != 0
    msg = serve_failure(found)
    assert 'Error: network IB not found' in msg and 'NCCL_NET' in msg, msg
