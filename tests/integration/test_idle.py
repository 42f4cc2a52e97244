# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Metrics and stop-when-idle (issue 10, sections 3 and 5) on the LIVE local cluster: the server runs with
--enable-metrics, status.yml shows its load (parsed with prometheus_client) and the time since the last request,
a steady trickle of requests keeps it alive past server_idle_timeout, and once they stop the server ends itself:
a line in its log, the job COMPLETED, the GPUs free, and status says why and what to do.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import shutil
import time
import urllib.request

import pytest

import cluster_target as target
from deploy_helpers import isolated_vars, login_home, my_jobs, require_cluster, run_playbook, scancel_names

WORK = 'it-idle'
NAMES = ('it-idle-download', 'it-idle-serve')
IDLE = 12          # seconds
INTERVAL = 2       # the watcher reads /metrics every 2 s
VARS = isolated_vars(WORK, *NAMES, server_idle_timeout='%ds' % IDLE, server_activity_interval=INTERVAL)


@pytest.fixture()
def served(tmp_path):
    require_cluster()
    scancel_names(NAMES)
    shutil.rmtree(os.path.join(login_home(), WORK), ignore_errors=True)
    try:
        proc = run_playbook('deploy.yml', VARS, str(tmp_path))
        assert proc.returncode == 0, proc.stdout[-4000:]
        endpoint = re.search(r'endpoint: (http://\S+)/v1', proc.stdout).group(1)
        with open(os.path.join(login_home(), WORK, 'api-key')) as handle:
            key = handle.read().strip()
        yield {'endpoint': endpoint, 'key': key, 'tmp': str(tmp_path)}
    finally:
        scancel_names(NAMES)
        shutil.rmtree(os.path.join(login_home(), WORK), ignore_errors=True)


def ask(served):
    if target.IN_ROOT:   # node names resolve inside the root only
        assert target.http_status(served['endpoint'] + '/v1/chat/completions', served['key'], data=json.dumps({
            'model': 'glm-5.3-flash', 'messages': [{'role': 'user', 'content': 'Hello'}]})) == '200'
        return
    request = urllib.request.Request(served['endpoint'] + '/v1/chat/completions', method='POST', data=json.dumps({
        'model': 'glm-5.3-flash', 'messages': [{'role': 'user', 'content': 'Hello'}]}).encode(), headers={
        'Authorization': 'Bearer ' + served['key'], 'Content-Type': 'application/json'})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def server_state():
    rows = my_jobs(lambda name: name == NAMES[1])
    return rows[-1][2] if rows else None


def test_load_in_status_a_trickle_keeps_it_alive_then_it_stops_idle(served):
    # a request every IDLE/3 s for twice the idle timeout: it stays up
    until = time.monotonic() + 2 * IDLE
    while time.monotonic() < until:
        ask(served)
        last_ask = time.monotonic()
        time.sleep(IDLE / 3.0)
    assert server_state() == 'RUNNING'

    status = run_playbook('status.yml', VARS, served['tmp'])
    assert status.returncode == 0, status.stdout[-3000:]
    load = re.search(r'load: (\d+) running, (\d+) queued, (\d+) tokens/s generated, KV cache (\d+)% used, (\d+) requests since '
                     r'the start; last request (\d+) s ago; stops after 12 s idle \(server_idle_timeout\)',
                     ' '.join(status.stdout.split()))   # the callback folds long lines
    assert load, status.stdout[-3000:]
    assert int(load.group(5)) >= 6 + 1                  # the trickle, and the warm-up request SGLang counts too
    assert int(load.group(6)) <= IDLE                   # the last request was moments ago

    # no more requests: within the timeout and two reads of the metrics after the last one, the server ends itself
    deadline = last_ask + IDLE + 4 * INTERVAL + 20
    while server_state() in ('RUNNING', 'COMPLETING') and time.monotonic() < deadline:
        time.sleep(1)
    assert server_state() == 'COMPLETED', my_jobs(lambda name: name in NAMES)
    assert time.monotonic() - last_ask >= IDLE - INTERVAL   # not before it was idle that long
    job_id = my_jobs(lambda name: name == NAMES[1])[-1][0]
    with open(os.path.join(login_home(), WORK, '%s-%s.out' % (NAMES[1], job_id)), errors='replace') as handle:
        log = handle.read()
    assert re.search(r'\[glm\.serve\] idle: no request for \d+ s \(server_idle_timeout=12s\): stopping the server', log), log[-2000:]
    assert '[glm.serve] stopped after 12s idle (server_idle_timeout); deploy again to start it' in log
    assert 'Shutting down' in log                       # SGLang was stopped cleanly (SIGTERM), not killed

    after = run_playbook('status.yml', VARS, served['tmp'])
    assert after.returncode == 0, after.stdout[-3000:]
    assert 'progress: ended: job %s (%s) stopped after 12s idle (server_idle_timeout); deploy again to start it' % (
        job_id, NAMES[1]) in ' '.join(after.stdout.split()), after.stdout[-3000:]
