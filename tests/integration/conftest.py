# -*- coding: utf-8 -*-
# Copyright (c) glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Integration tests on the LIVE local Slurm cluster (tests/cluster/cluster.sh), driven through real
ansible-playbook over SSH to the login user. Run as root on the controller:

    .venv/bin/pytest tests/integration -v

Each test works in its own directory ~glmuser/it/<uuid>, with job names that carry that uuid, and
cancels its jobs when it ends.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import uuid

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
CLUSTER = os.path.join(REPO, 'tests', 'cluster', 'cluster.sh')
LOGIN_USER = 'glmuser'
BIN = os.path.dirname(sys.executable)
INVENTORY_VARS = (
    'local ansible_host=127.0.0.1 ansible_port=2222 ansible_user=glmuser '
    'ansible_ssh_private_key_file=/var/lib/glm-cluster/ssh/id_ed25519 '
    "ansible_ssh_common_args='-o UserKnownHostsFile=/var/lib/glm-cluster/ssh/known_hosts' "
    'ansible_python_interpreter=/usr/bin/python3\n'
)


@pytest.fixture(scope='session')
def cluster():
    if os.geteuid() != 0:
        pytest.skip('integration tests run as root on the machine of the local cluster')
    if not os.path.exists(CLUSTER):
        pytest.skip('no tests/cluster/cluster.sh')
    proc = subprocess.run([CLUSTER, 'status'], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    if proc.returncode != 0:
        pytest.skip('the local Slurm cluster is not up (tests/cluster/cluster.sh status):\n' + proc.stdout)
    return True


@pytest.fixture(scope='session')
def inventory(cluster, tmp_path_factory):
    own = os.path.join(REPO, 'inventory', 'local')
    if os.path.exists(own):
        return own
    path = str(tmp_path_factory.mktemp('inv') / 'local')
    with open(path, 'w') as handle:
        handle.write(INVENTORY_VARS)
    return path


def as_login(argv, **kwargs):
    return subprocess.run(['runuser', '-u', LOGIN_USER, '--'] + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, check=False, **kwargs)


class Work:
    """A test's directory on the shared home, its job names, and its cleanup."""

    def __init__(self, inventory):
        self.inventory = inventory
        self.id = uuid.uuid4().hex[:10]
        user = pwd.getpwnam(LOGIN_USER)
        self.uid, self.gid = user.pw_uid, user.pw_gid
        self.dir = os.path.join(user.pw_dir, 'it', self.id)
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
                                  env=env, timeout=timeout, cwd=REPO, check=False)
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

    def cleanup(self):
        for name in self.names:
            as_login(['scancel', '-n', name])
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def work(inventory):
    w = Work(inventory)
    yield w
    w.cleanup()
