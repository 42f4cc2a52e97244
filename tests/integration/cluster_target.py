# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which local cluster the integration tests run on: one variable, GLM_CLUSTER_RELEASE.

- unset or ``bookworm``: the host's own cluster (tests/tooling/cluster/cluster.sh with Debian 12's Slurm 22.05), login node
  glmuser@127.0.0.1:2222, the repo's inventory/local.
- ``trixie`` (Slurm 24.11) or ``sid`` (Slurm 26.05): the cluster in that Debian root (``GLM_CLUSTER_RELEASE=trixie
  tests/tooling/cluster/cluster.sh install|start``), login node glmuser@10.77.N.2:2222 over a veth pair, an inventory the
  script writes in the root's cluster folder; Slurm commands run inside the root through ``cluster.sh exec``.

Everything else (paths of the key, known_hosts, control folder, login home and ids) comes from ``cluster.sh env``.
A path under a root's login home is the same path on the host and inside the root.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import pwd
import shutil
import subprocess
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
CLUSTER = os.path.join(REPO, 'tests', 'tooling', 'cluster', 'cluster.sh')
RELEASE = os.environ.get('GLM_CLUSTER_RELEASE') or 'bookworm'
IN_ROOT = RELEASE != 'bookworm'
LOGIN_USER = 'glmuser'


def _cluster_env():
    values = {}
    if not os.path.exists(CLUSTER):
        return values
    proc = subprocess.run(['bash', CLUSTER, 'env'], stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          env=dict(os.environ, GLM_CLUSTER_RELEASE=RELEASE), check=False, stdin=subprocess.DEVNULL)
    for line in proc.stdout.splitlines():
        if line.startswith('export ') and '=' in line:
            key, _sep, value = line[len('export '):].partition('=')
            values[key] = value
    return values


ENV = _cluster_env()
DIR = ENV.get('GLM_CLUSTER_DIR') or '/var/lib/glm-cluster'
SSH_HOST = ENV.get('GLM_CLUSTER_SSH_HOST') or '127.0.0.1'
SSH_PORT = int(ENV.get('GLM_CLUSTER_SSH_PORT') or 2222)
SSH_KEY = ENV.get('GLM_CLUSTER_SSH_KEY') or DIR + '/ssh/id_ed25519'
KNOWN_HOSTS = ENV.get('GLM_CLUSTER_KNOWN_HOSTS') or DIR + '/ssh/known_hosts'
CONTROL = ENV.get('GLM_STANDIN_CONTROL') or DIR + '/control'
#: the cluster's slurm.conf as the host sees it (for host-side Slurm commands of the bookworm cluster only)
SLURM_CONF = DIR + '/etc/slurm.conf'
#: an inventory of the root's login node (host "local" in group training, like inventory/local); None: the repo's
INVENTORY = os.path.join(REPO, 'inventory', RELEASE) if IN_ROOT else None
if INVENTORY:
    # every ansible-playbook a test starts (with os.environ) targets the root, even one that gives no -i: ansible.cfg's
    # inventory/local is the host cluster, which a run against a root must never touch
    os.environ['ANSIBLE_INVENTORY'] = INVENTORY


def login_ids():
    """(uid, gid, home) of the login user on the cluster (a root has its own /etc/passwd)."""
    if IN_ROOT:
        return int(ENV['GLM_CLUSTER_LOGIN_UID']), int(ENV['GLM_CLUSTER_LOGIN_GID']), ENV['GLM_CLUSTER_LOGIN_HOME']
    user = pwd.getpwnam(LOGIN_USER)
    return user.pw_uid, user.pw_gid, user.pw_dir


def slurm_argv(argv):
    """argv to run a command where the cluster's Slurm commands work (inside the root for trixie/sid)."""
    return ([CLUSTER, 'exec'] + list(argv)) if IN_ROOT else list(argv)


def slurm_env(environ=None):
    """The environment for slurm_argv(...) (SLURM_CONF for the host cluster; the root sets its own)."""
    env = dict(os.environ if environ is None else environ)
    if not IN_ROOT:
        env['SLURM_CONF'] = SLURM_CONF
    return env


def slurm_command(command):
    """The path of a Slurm command on the cluster's machine (for wrappers written into the login home)."""
    if IN_ROOT:
        return '/usr/bin/' + command
    return shutil.which(command) or '/usr/bin/' + command


def inventory_vars():
    return ('local ansible_host=%s ansible_port=%d ansible_user=%s ansible_ssh_private_key_file=%s '
            "ansible_ssh_common_args='-o UserKnownHostsFile=%s' ansible_python_interpreter=/usr/bin/python3\n"
            % (SSH_HOST, SSH_PORT, LOGIN_USER, SSH_KEY, KNOWN_HOSTS))


def shared_tmpdir():
    """A new folder whose path names the same folder on the host and where slurm_argv runs: in a root, under its /tmp
    as the host sees it (the root is mounted at its own path inside). The caller removes it."""
    base = os.path.join(ENV['GLM_CLUSTER_ROOT'], 'tmp') if IN_ROOT else None
    return tempfile.mkdtemp(prefix='glm-it-', dir=base)


def http_status(url, key, data=None, timeout=10):
    """HTTP status (a string, '000' when nothing answered) of a request to url made where the cluster's node names
    resolve (on the host for bookworm, inside the root otherwise), as root. The key goes in a header read from a 0600
    file, never on a command line; data (a str) makes it a POST of JSON."""
    folder = shared_tmpdir()
    try:
        header = os.path.join(folder, 'headers')
        fd = os.open(header, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, 'w') as handle:
            handle.write('Authorization: Bearer %s\n' % key)
            if data is not None:
                handle.write('Content-Type: application/json\n')
        argv = ['curl', '-s', '-o', '/dev/null', '-m', str(timeout), '-w', '%{http_code}', '-H', '@' + header]
        if data is not None:
            body = os.path.join(folder, 'body')
            with open(body, 'w') as handle:
                handle.write(data)
            argv += ['--data-binary', '@' + body]
        proc = subprocess.run(slurm_argv(argv + [url]), stdout=subprocess.PIPE, universal_newlines=True, check=False,
                              stdin=subprocess.DEVNULL)
        return proc.stdout.strip()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
