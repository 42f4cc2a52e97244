# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Progress while the deploy waits (issue 10, section 1), on the LIVE local cluster, with Ansible's default
stdout callback: a line at least every glm_progress_interval seconds and at each change of phase, from the
download (MB done of the total, rate, ETA) through the loading of the weights (shards) to ready; and, after a
deploy with server_wait=false, the same line from status.yml.

The hf stand-in is slowed down (hf-delay: seconds per file, 13 files) and so is the SGLang stand-in's loading
(sglang-load), so that the wait crosses several intervals in each phase.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import shutil
import subprocess
import tempfile
import time

import pytest

import cluster_target as target
from deploy_helpers import BIN, REPO, isolated_vars, login_home, my_jobs, require_cluster, run_playbook, scancel_names

WORK = 'it-progress'
NAMES = ('it-prog-download', 'it-prog-serve')
INTERVAL = 5
# serve_progress.duration: 45 s, 2 min, 3 h 05 min
ETA = r'(?:\d+ s|\d+ min|\d+ h \d\d min)'
CONTROL = target.CONTROL
PHASES = ('queued', 'saving', 'downloading', 'starting', 'loading', 'capturing', 'warming', 'ready')
ITEM = re.compile(r'^(changed|ok): \[local\] => \(item=(.*)\)$')


def _switch(name, value):
    path = os.path.join(CONTROL, name)
    if value is None:
        if os.path.exists(path):
            os.unlink(path)
    else:
        with open(path, 'w') as handle:
            handle.write('%s\n' % value)


@pytest.fixture()
def slow():
    require_cluster()
    scancel_names(NAMES)
    shutil.rmtree(os.path.join(login_home(), WORK), ignore_errors=True)
    # 13 files: about 52 s of download (the deploy must still see it cross 3 intervals after the first deploy, a
    # status and its own start, on a loaded 2-core machine)
    _switch('hf-delay', 4)
    _switch('sglang-load', 12)   # 8 shards, 1.5 s each
    try:
        yield
    finally:
        _switch('hf-delay', None)
        _switch('sglang-load', None)
        scancel_names(NAMES)


def timed_playbook(playbook, extra_vars, timeout=400):
    """ansible-playbook with the default callback, each output line with the time it arrived."""
    fd, path = tempfile.mkstemp(suffix='.json', prefix='vars-')
    with os.fdopen(fd, 'w') as handle:
        json.dump(extra_vars, handle)
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get('PATH', ''), ANSIBLE_NOCOLOR='1',
               ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, '.collections'),
               ANSIBLE_STDOUT_CALLBACK='default')
    proc = subprocess.Popen([os.path.join(BIN, 'ansible-playbook'), os.path.join('playbooks', playbook), '-e', '@' + path],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, env=env, cwd=REPO,
                            stdin=subprocess.DEVNULL, bufsize=1)
    lines = []
    deadline = time.monotonic() + timeout
    try:
        for line in proc.stdout:
            lines.append((time.monotonic(), line.rstrip('\n')))
            assert time.monotonic() < deadline, 'ansible-playbook took longer than %d s' % timeout
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.unlink(path)
    return proc.returncode, lines


def phase_of(label):
    for phase in PHASES:
        if label.startswith(phase) or label.startswith('ready'):
            return 'ready' if label.startswith('ready') else phase
    return None


def test_progress_lines_while_waiting_and_the_same_line_in_status(slow, tmp_path):
    variables = isolated_vars(WORK, *NAMES, glm_progress_interval=INTERVAL, server_wait_timeout=400)

    # 1. submit without waiting; while the download runs, status says where it stands, in the same words
    first = run_playbook('deploy.yml', dict(variables, server_wait=False), str(tmp_path))
    assert first.returncode == 0, first.stdout + first.stderr
    # the download runs (it may wait a moment for a node an earlier test's job still leaves), then prints a while
    deadline = time.monotonic() + 90
    while not [r for r in my_jobs(lambda name: name == NAMES[0]) if r[2] == 'RUNNING'] and time.monotonic() < deadline:
        time.sleep(1)
    time.sleep(6)
    status = run_playbook('status.yml', variables, str(tmp_path))
    assert status.returncode == 0, status.stdout + status.stderr
    # the YAML callback (ansible.cfg: callback_result_format = yaml) folds a long string over lines, as a slow first
    # sample's "ETA 2 h 01 min" makes it (a CI run): unfolded as YAML reads it, a line break and its indent one space
    said = re.search(r"progress: ((?:downloading|saving)[^'\"\n]*)", re.sub(r'\n[ \t]+', ' ', status.stdout))
    assert said, status.stdout
    if said.group(1).startswith('downloading'):
        assert re.match(r'downloading: \d+\.\d of 2\.1 MB \(\d+%\), \d+ kB/s, ETA ' + ETA + r' \(job \d+ on node\d\)',
                        said.group(1)), said.group(1)

    # 2. deploy again, waiting: it adopts both jobs and prints a line per slice until the server answers
    rc, lines = timed_playbook('deploy.yml', variables)
    text = '\n'.join(line for _t, line in lines)
    assert rc == 0, text
    items = [(t, m.group(2)) for t, line in lines for m in [ITEM.match(line)] if m]
    labels = [label for _t, label in items]
    phases = [phase_of(label) for label in labels]
    assert None not in phases, labels
    # the phases come in order, and the download, the loading and the end are each seen. The server job may wait its
    # turn between the end of the download and its start ("queued: job N (...) waits for M (COMPLETED)"): the scheduler
    # starts a job whose dependency just cleared at its next pass, which can take longer than a slice (seen on 24.11)
    ranks, after_download = [], False
    for phase, label in zip(phases, labels):
        after_download = after_download or phase in ('saving', 'downloading')
        if phase == 'queued' and after_download:
            assert NAMES[1] in label, labels          # only the server job can be queued once the download ran
            ranks.append(PHASES.index('starting') - 0.5)
        else:
            ranks.append(PHASES.index(phase))
    assert ranks == sorted(ranks), labels
    assert 'downloading' in phases and 'loading' in phases and phases[-1] == 'ready', labels
    download_lines = [label for label in labels if label.startswith('downloading')]
    assert len(download_lines) >= 3, labels           # the download crosses several intervals
    done = [float(re.match(r'downloading: (\d+\.\d) of', label).group(1)) for label in download_lines]
    assert done == sorted(done) and done[-1] > done[0], download_lines
    assert any(re.search(r', ETA ' + ETA, label) for label in download_lines), download_lines
    assert any(re.search(r'loading the weights: \d/8 shards \(\d+%\) \(job', label) for label in labels), labels
    assert re.match(r'ready: http://node\d:30000 serves glm-5\.3-flash', labels[-1]), labels
    # a line at least every interval (plus the start of a slice: the module's transfer and start, about 1 s)
    started = [t for t, line in lines if 'Submit the server job and wait for it to answer' in line][0]
    times = [started] + [t for t, _label in items]
    gaps = [round(b - a, 1) for a, b in zip(times, times[1:])]
    assert max(gaps) <= INTERVAL + 3, (gaps, labels)
