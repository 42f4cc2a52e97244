"""--check changes nothing, on the local cluster (tests/tooling/cluster), over real SSH as the login user.

- deploy --check on nothing: succeeds, predicts changes, creates no folder, submits no job;
- after a real deploy, deploy --check: reports changed=0, submits nothing, leaves every file as it was;
- with a setting that changes serve.sbatch, deploy --check refuses it (one server: an outage) unless
  server_allow_outage=true, then predicts the server's restart; either way it does nothing;
- teardown --check with the server running: predicts the cancel and cancels nothing.

The job logs (*.out) are left out of the file comparison: the running jobs write them, not the playbook.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import os
import shutil
import time

import pytest

from deploy_helpers import (isolated_vars, login_home, my_jobs, recap, require_cluster, run_playbook, scancel_names,
                            snapshot)

WORK = 'glm-it-check'
DOWNLOAD = 'it-chk-download'
SERVE = 'it-chk-serve'
VARS = isolated_vars(WORK, DOWNLOAD, SERVE)


def mine(name):
    return name in (DOWNLOAD, SERVE)


def files(work):
    return dict((path, entry) for path, entry in snapshot(work).items() if not path.endswith('.out'))


@pytest.fixture(scope='module')
def env(tmp_path_factory):
    require_cluster()
    tmp = str(tmp_path_factory.mktemp('check'))
    work = os.path.join(login_home(), WORK)
    scancel_names([DOWNLOAD, SERVE])
    shutil.rmtree(work, ignore_errors=True)
    earlier = set(row[0] for row in my_jobs(mine))
    try:
        yield {'tmp': tmp, 'work': work, 'earlier': earlier}
    finally:
        run_playbook('teardown.yml', dict(VARS, glm_teardown_download=True), tmp)
        scancel_names([DOWNLOAD, SERVE])
        shutil.rmtree(work, ignore_errors=True)


def new_jobs(env):
    return [row for row in my_jobs(mine) if row[0] not in env['earlier']]


def test_deploy_check_on_nothing_creates_and_submits_nothing(env):
    proc = run_playbook('deploy.yml', VARS, env['tmp'], options=['--check'])
    changed, failed = recap(proc)
    assert failed == 0, proc.stdout[-4000:]
    assert changed > 0, 'check mode should predict the key, the scripts and the jobs'
    assert not os.path.lexists(env['work']), os.listdir(env['work'])
    assert new_jobs(env) == []


def test_deploy_check_after_a_deploy_changes_nothing(env):
    proc = run_playbook('deploy.yml', VARS, env['tmp'])
    assert proc.returncode == 0, proc.stdout[-4000:]
    # the job's own record that SGLang passed its health gate (.NAME-JOBID.ready) may come a moment after the
    # deploy's probe answered: taken first, so that what follows is the check run's doing alone
    deadline = time.monotonic() + 30
    while not glob.glob(os.path.join(env['work'], '.%s-*.ready' % SERVE)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert glob.glob(os.path.join(env['work'], '.%s-*.ready' % SERVE)), 'the server job never passed its health gate'
    jobs, before = new_jobs(env), files(env['work'])
    assert [row[1:] for row in jobs if row[1] == SERVE] == [(SERVE, 'RUNNING')]
    assert 'api-key' in before and 'serve.sbatch' in before

    proc = run_playbook('deploy.yml', VARS, env['tmp'], options=['--check'])
    assert recap(proc) == (0, 0), proc.stdout[-4000:]
    assert new_jobs(env) == jobs
    assert files(env['work']) == before


def test_deploy_check_predicts_the_restart_of_a_changed_server(env):
    """A setting that changes serve.sbatch would stop the one server (no router to move its clients to): the check
    run refuses it as the real one would, before anything, naming server_allow_outage; with it, the restart is
    predicted. Either way nothing is done."""
    jobs, before = new_jobs(env), files(env['work'])
    proc = run_playbook('deploy.yml', dict(VARS, server_time='00:20:00'), env['tmp'], options=['--check'])
    assert recap(proc)[1] == 1, proc.stdout[-4000:]
    refused = proc.stdout.split('TASK [glm.serve.server : Submit the server job', 1)[1].split('PLAY RECAP', 1)[0]
    assert 'differs from the one job' in refused and 'nothing was cancelled or submitted' in refused, refused[-3000:]
    assert 'What to do: this setting changes the server' in refused and '-e server_allow_outage=true' in refused, refused[-3000:]
    proc = run_playbook('deploy.yml', dict(VARS, server_time='00:20:00', server_allow_outage=True), env['tmp'], options=['--check'])
    assert recap(proc)[1] == 0, proc.stdout[-4000:]
    submit = proc.stdout.split('TASK [glm.serve.server : Submit the server job', 1)[1].split('TASK [', 1)[0]
    assert 'changed: [local]' in submit, submit
    assert new_jobs(env) == jobs
    assert files(env['work']) == before


def test_teardown_check_cancels_nothing(env):
    before = new_jobs(env)
    assert (SERVE, 'RUNNING') in [row[1:] for row in before]
    endpoint = os.path.join(env['work'], 'endpoint')
    there = os.path.exists(endpoint)                   # the server writes it as it starts
    proc = run_playbook('teardown.yml', VARS, env['tmp'], options=['--check'])
    changed, failed = recap(proc)
    assert (changed, failed) == (1 + there, 0), proc.stdout[-4000:]    # the cancel, the endpoint file's removal
    assert new_jobs(env) == before and os.path.exists(endpoint) == there

    proc = run_playbook('teardown.yml', VARS, env['tmp'])
    assert recap(proc) in ((1, 0), (1 + there, 0)), proc.stdout[-4000:]      # (the job's own end may remove it first)
    assert not os.path.exists(endpoint)
    assert (SERVE, 'RUNNING') not in [row[1:] for row in new_jobs(env)]
