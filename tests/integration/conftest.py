# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Integration tests on the LIVE local Slurm cluster (tests/tooling/cluster/cluster.sh), driven through real
ansible-playbook over SSH to the login user. Run as root on the controller:

    .venv/bin/pytest tests/integration -v

Each test works in its own directory ~glmuser/it/<uuid>, with job names that carry that uuid, and
cancels its jobs when it ends.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import pytest

import cluster_target as target
from cluster_target import CLUSTER, LOGIN_USER, REPO
from deploy_helpers import Case, cluster_ready

BIN = os.path.dirname(sys.executable)
# The cluster (host or a Debian root) is chosen by GLM_CLUSTER_RELEASE: see cluster_target.py.
INVENTORY_VARS = target.inventory_vars()


def pytest_configure(config):
    config.addinivalue_line('markers', 'continuity: minutes-long cases of the service\'s continuity (Slurm\'s own delays); '
                            '`make continuity` runs them, make test leaves them out')


@pytest.fixture(scope='session')
def cluster():
    if os.geteuid() != 0:
        pytest.skip('integration tests run as root on the machine of the local cluster')
    if not os.path.exists(CLUSTER):
        pytest.skip('no tests/tooling/cluster/cluster.sh')
    # `status` also fails for a few seconds while a test restarts slurmctld, or while a node shows a passing state
    # (PLANNED by the backfill scheduler): skip only when the cluster stays not ready for a minute
    deadline = time.monotonic() + 60
    while True:
        proc = subprocess.run([CLUSTER, 'status'], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                              check=False)
        if proc.returncode == 0:
            return True
        if time.monotonic() >= deadline:
            # in CI (make test started the cluster) a cluster that is down is a failure, not a reason to skip
            (pytest.fail if os.environ.get('CI') else pytest.skip)(
                'the local Slurm cluster is not up (tests/tooling/cluster/cluster.sh status):\n' + proc.stdout)
        time.sleep(2)


@pytest.fixture(scope='session')
def inventory(cluster, tmp_path_factory):
    own = target.INVENTORY or os.path.join(REPO, 'inventory', 'local')
    if os.path.exists(own):
        return own
    path = str(tmp_path_factory.mktemp('inv') / 'local')
    with open(path, 'w') as handle:
        handle.write(INVENTORY_VARS)
    return path


#: A bash function for batch scripts: `gate FILE SECONDS` returns when FILE exists (the test creates it with
#: Work.open at the moment its scenario needs), or fails after SECONDS so that a gate never opened cannot hang
#: the job (its job then ends with an error that the test sees). Jobs gated so end on an event, not a sleep.
GATE = (
    'gate() {\n'
    '  local i=0\n'
    '  while [ ! -e "$1" ]; do\n'
    '    if [ "$i" -ge $(( $2 * 5 )) ]; then echo "gate $1 was not opened within $2 s" >&2; return 1; fi\n'
    '    sleep 0.2; i=$((i + 1))\n'
    '  done\n'
    '}\n'
)

#: A transparent wrapper of a Slurm command for the login user: every call's arguments and output go to a file of
#: calls/ (NAME.part while the call runs, NAME.done when it has returned), then the real output and status.
SPY = (
    '#!/bin/bash\n'
    'log=$(mktemp "%(calls)s/XXXXXXXX.part") || exec %(real)s "$@"\n'
    'printf \'%%s\\n\' "$*" >"$log"\n'
    '%(real)s "$@" | tee -a "$log"\n'
    'rc=${PIPESTATUS[0]}\n'
    'mv "$log" "${log%%.part}.done"\n'
    'exit "$rc"\n'
)


def as_login(argv, **kwargs):
    return subprocess.run(target.slurm_argv(['runuser', '-u', LOGIN_USER, '--'] + argv), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, universal_newlines=True, check=False, **kwargs)


class Work:
    """A test's directory on the shared home, its job names, and its cleanup."""

    def __init__(self, inventory):
        self.inventory = inventory
        self.id = uuid.uuid4().hex[:10]
        self.uid, self.gid, home = target.login_ids()
        self.dir = os.path.join(home, 'it', self.id)
        os.makedirs(self.dir)
        for path in (os.path.dirname(self.dir), self.dir):
            os.chown(path, self.uid, self.gid)
        self.names = []

    def name(self, base):
        name = 'it-%s-%s' % (base, self.id)
        self.names.append(name)
        return name

    def file(self, name, text, mode=0o644):
        path = os.path.join(self.dir, name)
        with open(path, 'w') as handle:
            handle.write(text)
        os.chmod(path, mode)
        os.chown(path, self.uid, self.gid)
        return path

    def script(self, name, body, sbatch=('--output=%x-%j.out',)):
        head = '#!/bin/bash\n' + ''.join('#SBATCH %s\n' % opt for opt in sbatch)
        return self.file(name, head + body)

    def play(self, tasks, check=False, timeout=400):
        """Run tasks in one play on host local; returns (list of per-task results, completed process).

        Each task is registered; a last task, on the controller, writes the registered results as JSON.
        """
        tasks = [dict(task, register='r%d' % i) for i, task in enumerate(tasks)]
        fd, out = tempfile.mkstemp(suffix='.json', prefix='it-results-')
        os.close(fd)
        tasks.append({'name': 'results', 'delegate_to': 'localhost', 'check_mode': False,
                      'ansible.builtin.copy': {'dest': out, 'content': '{{ [%s] | to_json }}' % ', '.join(
                          'r%d' % i for i in range(len(tasks)))}})
        playbook = [{'hosts': 'local', 'gather_facts': False, 'tasks': tasks}]
        fd, path = tempfile.mkstemp(suffix='.yml', prefix='it-play-')
        with os.fdopen(fd, 'w') as handle:
            json.dump(playbook, handle)
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, '.collections'),
                   ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='1')
        argv = [os.path.join(BIN, 'ansible-playbook'), '-i', self.inventory, path] + (['--check'] if check else [])
        try:
            proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                                  env=env, timeout=timeout, cwd=REPO, check=False, stdin=subprocess.DEVNULL)
        finally:
            os.unlink(path)
        try:
            with open(out) as handle:
                results = json.load(handle)
            os.unlink(out)
        except (IOError, OSError, ValueError):
            raise AssertionError('the play wrote no results (rc %d):\n%s\n%s' % (proc.returncode, proc.stdout, proc.stderr))
        return results, proc

    def squeue(self, name):
        """Live jobs of that name: list of (id, state)."""
        proc = as_login(['squeue', '-h', '-n', name, '-o', '%i %T'])
        return [tuple(line.split()) for line in proc.stdout.splitlines() if line.strip()]

    # -- explicit events, instead of sleeps ----------------------------------------------------------

    def gate(self, name):
        """The path of a gate file (not made yet) for GATE in a batch script."""
        return os.path.join(self.dir, 'gate-' + name)

    def open(self, gate):
        """Open a gate: the jobs waiting on it go on."""
        self.file(os.path.basename(gate), '')

    def spy(self):
        """Wrap scontrol and squeue for the module: returns the task environment that puts the wrappers first on
        PATH. Work.seen() then tells what the module itself has observed."""
        bindir, calls = os.path.join(self.dir, 'spy-bin'), os.path.join(self.dir, 'spy-calls')
        for path in (bindir, calls):
            os.mkdir(path)
            os.chown(path, self.uid, self.gid)
        for command in ('scontrol', 'squeue'):
            real = target.slurm_command(command)
            self.file(os.path.join('spy-bin', command), SPY % {'calls': calls, 'real': real}, mode=0o755)
        return {'PATH': bindir + ':/usr/local/bin:/usr/bin:/bin'}

    def seen(self, job_id, state, reason=None):
        """True when a Slurm call of the module about job_id has RETURNED the job in state (and with reason): the
        module has observed that, so its result must show it. Reads scontrol's `JobState=S Reason=R` and squeue's
        columns alike (a word of its own, not a field name such as `Dependency=`)."""
        calls = os.path.join(self.dir, 'spy-calls')
        wanted = [re.compile(r'(?:%s=|(?<![\w=]))%s(?![\w=])' % (field, re.escape(value)))
                  for field, value in (('JobState', state), ('Reason', reason)) if value]
        for entry in os.listdir(calls):
            if not entry.endswith('.done'):
                continue
            with open(os.path.join(calls, entry)) as handle:
                argv, _sep, out = handle.read().partition('\n')
            if str(job_id) in argv.replace(',', ' ').split() and all(w.search(out) for w in wanted):
                return True
        return False

    def wait_for(self, predicate, timeout, what):
        """Poll predicate until it holds (returns its value) or fail after timeout seconds."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() >= deadline:
                raise AssertionError('%s did not happen within %ds; jobs: %s' % (
                    what, timeout, [(n, self.squeue(n)) for n in self.names]))
            time.sleep(0.2)

    def during(self, step):
        """Run step() in a thread (while the test runs a play); returns the thread, whose join() re-raises the
        step's error. A step that fails cancels this test's jobs first, so that the play does not wait for
        its timeout."""
        return Step(step, self.cancel)

    def cancel(self):
        for name in self.names:
            as_login(['scancel', '-n', name])

    def cleanup(self):
        """Cancels the test's jobs and waits (at most 60 s) until they have left the queue, so that no job of the test
        still runs, or writes into its folder, when the folder goes."""
        self.cancel()
        deadline = time.monotonic() + 60
        while any(self.squeue(name) for name in self.names) and time.monotonic() < deadline:
            time.sleep(0.5)
        shutil.rmtree(self.dir, ignore_errors=True)


class Step(threading.Thread):
    """A test step in the background; join() re-raises its error (a thread's error is otherwise lost)."""

    def __init__(self, step, on_error):
        super(Step, self).__init__(daemon=True)
        self.step, self.on_error, self.error, self.value = step, on_error, None, None
        self.start()

    def run(self):
        try:
            self.value = self.step()
        except BaseException as exc:  # noqa: B902 -- handed to the test's thread by join()
            self.error = exc
            self.on_error()

    def join(self, timeout=None):
        super(Step, self).join(timeout)
        if self.error is not None:
            raise self.error
        return self.value


@pytest.fixture
def work(inventory):
    w = Work(inventory)
    yield w
    w.cleanup()


@pytest.fixture
def case(request, tmp_path):
    cluster_ready()
    made = []

    def make(tag):
        made.append(Case(tag, str(tmp_path)))
        return made[-1]
    yield make
    for item in made:
        item.cleanup()
    for item in made:
        assert item.live() == [], 'jobs of %s left after the cleanup' % item.tag
