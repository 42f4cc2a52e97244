"""status.yml and teardown.yml (stop_at, refusal to lengthen, idempotence), on the local cluster over real SSH.

After a deploy of its own (work dir ~/glm-it-teardown, jobs it-td-*):
- status.yml names the running server job, its node and end, and says /v1/models answers (200 with the key);
- a second deploy changes nothing, submits nothing, and reads in a screen (one check per role, one preflight);
- status.yml without a readable key file still shows the jobs, and says why it did not ask /v1/models;
- teardown with glm_stop_at lowers the running job's end time (Slurm itself ends it then); the job keeps running;
- a glm_stop_at after the job's current end is refused with a message (users may only shorten their jobs);
- teardown cancels the server, a second teardown changes nothing (safe on a schedule), and status says no job runs.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import json
import os
import re
import shutil

import pytest

from deploy_helpers import isolated_vars, login_home, recap, require_cluster, run_playbook, scancel_names, ssh

WORK = 'glm-it-teardown'
DOWNLOAD = 'it-td-download'
SERVE = 'it-td-serve'
VARS = isolated_vars(WORK, DOWNLOAD, SERVE, server_time='00:30:00')
TASK = re.compile(r'^TASK \[(.*)\] \*+$', re.M)


def serve_job():
    """(id, state, end time) of the live server job, or None (squeue as the login user)."""
    rows = [line.split('|') for line in ssh("squeue --me -h -n %s -o '%%i|%%T|%%e'" % SERVE).splitlines() if line]
    assert len(rows) <= 1, rows
    return tuple(rows[0]) if rows else None


@pytest.fixture(scope='module')
def env(tmp_path_factory):
    require_cluster()
    tmp = str(tmp_path_factory.mktemp('teardown'))
    work = os.path.join(login_home(), WORK)
    scancel_names([DOWNLOAD, SERVE])
    shutil.rmtree(work, ignore_errors=True)
    try:
        proc = run_playbook('deploy.yml', VARS, tmp)
        assert proc.returncode == 0, proc.stdout[-4000:]
        job = serve_job()
        assert job and job[1] == 'RUNNING', job
        yield {'tmp': tmp, 'job': job}
    finally:
        run_playbook('teardown.yml', dict(VARS, glm_teardown_download=True), tmp)
        scancel_names([DOWNLOAD, SERVE])
        shutil.rmtree(work, ignore_errors=True)


def test_status_shows_the_running_server(env):
    proc = run_playbook('status.yml', VARS, env['tmp'])
    assert recap(proc) == (0, 0), proc.stdout[-4000:]
    job_id = env['job'][0]
    assert '%s job %s: RUNNING on node' % (SERVE, job_id) in proc.stdout, proc.stdout[-3000:]
    assert 'answers (HTTP 200 with the key, 401 without)' in proc.stdout, proc.stdout[-3000:]


def test_status_as_json_for_scripts(env):
    """glm_status_json: the same status as data on the operator's machine, 0600, with no secret in it."""
    path = os.path.join(env['tmp'], 'status.json')
    proc = run_playbook('status.yml', dict(VARS, glm_status_json=path), env['tmp'])
    assert proc.returncode == 0, proc.stdout[-3000:]
    with open(path) as handle:
        text = handle.read()
    doc = json.loads(text)
    assert oct(os.stat(path).st_mode & 0o777) == '0o600'
    assert doc['schema'] == 'glm.serve/status/v1' and doc['model'] == 'glm-5.3-flash' and doc['host'] == 'local'
    server = doc['server']
    assert server['job_id'] == env['job'][0] and server['state'] == 'RUNNING' and server['answers'] == 'ready', server
    assert server['without_key_status'] == 401 and server['max_model_len'] and server['endpoint'].startswith('http://node')
    assert [j['job_id'] for j in doc['jobs'] if j['name'] == SERVE and j['live']] == [env['job'][0]], doc['jobs']
    assert doc['endpoint_file']['GLM_BASE_URL'] == server['endpoint'] and doc['endpoint_file']['GLM_MODEL'] == 'glm-5.3-flash'
    assert doc['nodes_avoided'] == {}
    with open(os.path.join(login_home(), WORK, 'api-key')) as handle:
        key = handle.read().strip()
    assert key and key not in text


def test_deploy_again_changes_nothing_and_reads_in_a_screen(env):
    proc = run_playbook('deploy.yml', VARS, env['tmp'])
    assert recap(proc) == (0, 0), proc.stdout[-4000:]
    assert serve_job()[0] == env['job'][0], 'a second deploy submitted a new server job'
    tasks = TASK.findall(proc.stdout)
    # one check per role (no line per variable), one Slurm preflight, nothing written or submitted again; one look
    # for a router of an earlier deploy of replicas (a find in the work dir, no Slurm call); the tunnel's relay in the
    # work dir (issue 23; one raw call that writes it only when it differs); the NCCL sockets look and warning of a multi-node
    # server (issue 23, skipped on one node)
    assert len(tasks) <= 34, tasks
    # no line per item, but the wait's one slice, which says the server is ready
    items = [line for line in proc.stdout.splitlines() if '(item=' in line]
    assert len(items) == 1 and re.match(r'^ok: \[local\] => \(item=ready: http://node\d:\d+ serves ', items[0]), items
    assert len([t for t in tasks if 'Look at the Slurm cluster' in t]) == 1, tasks
    assert len(proc.stdout.splitlines()) <= 132, proc.stdout      # 123 + 3 tasks of issue 23 (header, line, blank)


def test_status_without_a_readable_key_file_still_shows_the_jobs(env):
    proc = run_playbook('status.yml', dict(VARS, glm_api_key_file='~/%s/no-such-key' % WORK), env['tmp'])
    assert recap(proc) == (0, 0), proc.stdout[-4000:]
    assert '%s job %s: RUNNING on node' % (SERVE, env['job'][0]) in proc.stdout, proc.stdout[-3000:]
    assert 'not asked: cannot read the API key file' in proc.stdout, proc.stdout[-3000:]


def test_stop_at_lowers_the_end_time_and_keeps_the_job(env):
    job_id, _state, end = serve_job()
    current = datetime.datetime.strptime(end, '%Y-%m-%dT%H:%M:%S')
    stop_at = (current - datetime.timedelta(minutes=10)).strftime('%Y-%m-%dT%H:%M:%S')
    proc = run_playbook('teardown.yml', dict(VARS, glm_stop_at=stop_at), env['tmp'])
    assert recap(proc) == (1, 0), proc.stdout[-4000:]
    assert serve_job() == (job_id, 'RUNNING', stop_at)
    # the same stop_at again: nothing to change
    proc = run_playbook('teardown.yml', dict(VARS, glm_stop_at=stop_at), env['tmp'])
    assert recap(proc) == (0, 0), proc.stdout[-4000:]


def test_stop_at_after_the_current_end_is_refused(env):
    job_id, _state, end = serve_job()
    later = (datetime.datetime.strptime(end, '%Y-%m-%dT%H:%M:%S') + datetime.timedelta(hours=2))
    proc = run_playbook('teardown.yml', dict(VARS, glm_stop_at=later.strftime('%Y-%m-%dT%H:%M:%S')), env['tmp'])
    assert proc.returncode != 0
    assert 'shorten' in proc.stdout, proc.stdout[-3000:]
    assert serve_job() == (job_id, 'RUNNING', end)


def test_teardown_cancels_then_changes_nothing(env):
    assert ssh('test -f ~/%s/endpoint && echo there' % WORK).strip() == 'there'
    proc = run_playbook('teardown.yml', VARS, env['tmp'])
    # the job cancelled; its endpoint file removed by the job's own end (its SIGTERM) or, if that has not run yet, here
    assert recap(proc) in ((1, 0), (2, 0)), proc.stdout[-4000:]
    assert serve_job() is None
    assert ssh('test -e ~/%s/endpoint || echo gone' % WORK).strip() == 'gone'   # no client is sent to the old NODE:PORT
    proc = run_playbook('teardown.yml', VARS, env['tmp'])
    assert recap(proc) == (0, 0), proc.stdout[-4000:]
    proc = run_playbook('status.yml', VARS, env['tmp'])
    assert recap(proc) == (0, 0), proc.stdout[-4000:]
    assert '%s job %s: RUNNING' % (SERVE, env['job'][0]) not in proc.stdout
    assert 'not asked (no running server)' in proc.stdout, proc.stdout[-3000:]
