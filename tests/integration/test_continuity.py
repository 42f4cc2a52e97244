# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Continuity on the LIVE local cluster, cases that take minutes (`make continuity`; make test leaves them out):
replicas whose jobs reach their time limit leave the router before it (server_drain_before: Slurm's own
`--signal=B:USR1@SECONDS` to the batch script), finish what they have and end COMPLETED instead of TIMEOUT.

Two replicas with 2-minute jobs and server_drain_before=30: Slurm signals each job 30 s (or, by its own timer's
resolution, up to a minute more) before its limit. The two were submitted together, so they drain together and,
with no successor yet (the next part of issue 25), the router is left with none: this case checks the drain, not
an unbroken service.

A login node that restarts (the platform's own fault: sshd and every session killed) while a deploy waits for its
server: ssh is tried again (ansible.cfg's retries) and the wait goes on where it was."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import subprocess
import threading
import time

import pytest

from deploy_helpers import (CLUSTER, ROUTER_WHEELS, isolated_vars, live_jobs, login_home, require_cluster, router_wheels, run_playbook,
                            scancel_names, ssh)

pytestmark = pytest.mark.continuity

WORK = 'glm-it-continuity'
DOWNLOAD, SERVE = 'it-ct-download', 'it-ct-serve'
NAMES = [DOWNLOAD, SERVE, SERVE + '-2', SERVE + '-router']


def variables():
    return isolated_vars(WORK, DOWNLOAD, SERVE, server_replicas=2, server_time='00:02:00', server_drain_before=30,
                         server_env={'GLM_STANDIN_SGLANG_LOAD': '1', 'GLM_STANDIN_SGLANG_WARMUP': '1'},
                         router_pip_args=['--no-index', '--find-links', os.path.join(login_home(), ROUTER_WHEELS)],
                         router_sync_interval=2, router_health_check_interval=2, router_host='node',
                         router_time='00:10:00', server_wait_timeout=300)


def test_replicas_at_their_time_limit_leave_the_router_and_end_completed(tmp_path):
    require_cluster()
    work = os.path.join(login_home(), WORK)
    scancel_names(NAMES)
    shutil.rmtree(work, ignore_errors=True)
    router_wheels()
    try:
        proc = run_playbook('deploy.yml', variables(), str(tmp_path), timeout=900)
        assert proc.returncode == 0, proc.stdout[-6000:]
        ids = {row[1]: row[0] for row in live_jobs(lambda name: name in NAMES)}
        replicas = [ids[SERVE], ids[SERVE + '-2']]
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and any(row[1] != SERVE + '-router' for row in live_jobs(lambda n: n in NAMES)):
            time.sleep(5)
        out = ssh('sacct -X -n -P -j %s -o JobID,State,Elapsed,ExitCode' % ','.join(replicas))
        rows = [line.split('|') for line in out.split()]
        assert sorted(row[1] for row in rows) == ['COMPLETED', 'COMPLETED'], out      # not TIMEOUT
        for name in (SERVE, SERVE + '-2'):
            log = ssh('cat ~/%s/%s-%s.out' % (WORK, name, ids[name]))
            assert 'the time limit is 30 s away (server_drain_before): left the router' in log, log[-3000:]
            assert 'SGLang stopped' in log and 'restart' not in log, log[-3000:]
        assert ssh('ls ~/%s/replicas' % WORK, check=False).split() == []
        print('\nCONTINUITY: 2 replicas of 2-minute jobs drained before their limit and ended: %s' % out.replace('\n', '; '))
    finally:
        run_playbook('teardown.yml', dict(variables(), glm_teardown_download=True), str(tmp_path))
        scancel_names(NAMES)
        shutil.rmtree(work, ignore_errors=True)


LR_WORK, LR_DOWNLOAD, LR_SERVE = 'glm-it-login-restart', 'it-lr-download', 'it-lr-serve'


def test_a_login_node_restart_during_the_deploys_wait_is_ridden_out(tmp_path):
    """The login node restarts (cluster.sh restart-login: sshd, every SSH session and every process of the login user
    outside a job killed, sshd back 15 s later) while the deploy waits for its server to load (45 s): the slice in
    flight dies with its session, ssh is tried again (retries = 8 in ansible.cfg and in the one init writes), the
    slice runs again and the wait goes on: the deploy ends ready, with one server job. Without the retries, it ended
    at once: UNREACHABLE, "Data could not be sent to remote host", rc 4."""
    require_cluster()
    names = [LR_DOWNLOAD, LR_SERVE]
    work = os.path.join(login_home(), LR_WORK)
    extra = isolated_vars(LR_WORK, LR_DOWNLOAD, LR_SERVE, server_time='00:10:00', glm_progress_interval=10,
                          server_env={'GLM_STANDIN_SGLANG_LOAD': '45'})
    scancel_names(names)
    shutil.rmtree(work, ignore_errors=True)
    result = {}

    def deploy():
        result['proc'] = run_playbook('deploy.yml', extra, str(tmp_path), timeout=600)
    thread = threading.Thread(target=deploy)
    try:
        started = time.monotonic()
        thread.start()

        def loading():
            return any(row[1] == LR_SERVE and row[2] == 'RUNNING' for row in live_jobs(lambda n: n in names))
        while time.monotonic() < started + 180 and not loading():
            time.sleep(2)
        time.sleep(8)                                              # the server loading, the deploy in its wait
        restart = subprocess.run([CLUSTER, 'restart-login', '15'], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 universal_newlines=True, timeout=120, check=False)
        assert restart.returncode == 0, restart.stdout
        assert 'process(es) of the login node killed' in restart.stdout, restart.stdout
        thread.join(600)
        proc = result['proc']
        took = time.monotonic() - started
        assert proc.returncode == 0, proc.stdout[-6000:]
        assert 'serves glm-5.3-flash' in proc.stdout, proc.stdout[-3000:]
        servers = live_jobs(lambda n: n == LR_SERVE)
        assert len(servers) == 1, servers                          # the wait went on: nothing submitted twice
        print('\nCONTINUITY: the login node restarted (down 15 s) during the deploy\'s wait: the deploy ended ready after '
              '%.0f s, one server job (%s)' % (took, restart.stdout.strip().replace('\n', '; ')))
    finally:
        thread.join(600)
        run_playbook('teardown.yml', dict(extra, glm_teardown_download=True), str(tmp_path))
        scancel_names(names)
        shutil.rmtree(work, ignore_errors=True)
