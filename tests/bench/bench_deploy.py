# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Benchmark: the controller load of the REAL playbooks/deploy.yml from nothing, as a new user runs it: the default
60-s progress slices and ``server_wait_sleep``, a download of ``--download`` seconds (the hf stand-in's delay per
file) and ``--loading`` seconds of loading (the SGLang stand-in). Run as root on the machine of the local cluster
(bookworm, the host's); prints figures, it is not a test.

    .venv/bin/python tests/bench/bench_deploy.py [--download 130] [--loading 120] [--tree PATH] [--json FILE]

The deploy runs over SSH as the login user (inventory/local), in a work dir and with job names of its own, from
``--tree`` (default this one: give a worktree of another commit for its "before" figure). Counted: the login
user's RPCs by ``sdiag`` (which includes what the jobs do themselves) and, by type, from slurmctld's own log at
``debug2`` (raised for the window, set back after); the deploy's own are those less the jobs' step RPCs. Per
slice of the server's wait: the module's controller calls (``polls``) and the slice's length. ``make bench``
runs it with the issue's 13-minute chain (``bench_wait.py --only deploy``).
"""

from __future__ import absolute_import, division, print_function

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'integration'))

import cluster_target as target  # noqa: E402  pylint: disable=wrong-import-position
from deploy_helpers import BIN, REPO, isolated_vars, login_home, scancel_names  # noqa: E402  pylint: disable=wrong-import-position

WORK = 'glm-bench-deploy'
NAMES = ('bench-dp-download', 'bench-dp-serve')
HF_FILES = 13   # the hf stand-in's repository: 13 files, each --download / 13 seconds
#: RPCs a job makes from inside itself (srun creating its steps), not the deploy
JOB_SIDE_RPCS = ('REQUEST_JOB_STEP_CREATE', 'REQUEST_HET_JOB_ALLOC_INFO', 'REQUEST_STEP_COMPLETE',
                 'REQUEST_JOB_ALLOCATION_INFO', 'REQUEST_STEP_LAYOUT', 'REQUEST_JOB_STEP_INFO')
ITEM = re.compile(r'^(?:ok|changed|failed): \[local\] => \(item=.*?\) => ', re.M)


def slurm(argv):
    return subprocess.run(target.slurm_argv(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False,
                          universal_newlines=True, stdin=subprocess.DEVNULL, env=target.slurm_env()).stdout


def sdiag_user(user):
    section = slurm(['sdiag']).split('by user', 1)[-1].split('Pending RPC', 1)[0]
    for match in re.finditer(r'^\s*(\S+)\s*\(\s*\d+\)\s*count:(\d+)', section, re.M):
        if match.group(1) == user:
            return int(match.group(2))
    return 0


class RpcLog:
    """slurmctld's ``Processing RPC: TYPE from UID=N`` lines (``SlurmctldDebug=debug2``) for the window."""

    def __enter__(self):
        conf = slurm(['scontrol', 'show', 'config'])
        found = re.search(r'^SlurmctldLogFile\s*=\s*(\S+)', conf, re.M)
        level = re.search(r'^SlurmctldDebug\s*=\s*(\S+)', conf, re.M)
        self.path = found.group(1) if found and os.path.exists(found.group(1)) else None
        self.level = level.group(1) if level else 'info'
        self.offset = os.path.getsize(self.path) if self.path else 0
        slurm(['scontrol', 'setdebug', 'debug2'])
        return self

    def __exit__(self, *exc):
        slurm(['scontrol', 'setdebug', self.level])
        return False

    def types(self, uid):
        """({type: count}, [(time of day, type)]) of the RPCs of ``uid`` in the window."""
        counts, when = {}, []
        if self.path:
            with open(self.path, 'rb') as handle:
                handle.seek(self.offset)
                text = handle.read().decode('utf-8', 'replace')
            for match in re.finditer(r'^\[\S*?T?(\d\d:\d\d:\d\d)[^\]]*\].*?Processing RPC: (\S+) from UID=(\d+)', text, re.M):
                if int(match.group(3)) == uid:
                    counts[match.group(2)] = counts.get(match.group(2), 0) + 1
                    when.append((match.group(1), match.group(2).replace('REQUEST_', '')))
        return counts, when


def variables(download, loading):
    """A new user's deploy: the role defaults (60-s slices, wait_sleep 60), the stand-ins slowed down."""
    return isolated_vars(WORK, NAMES[0], NAMES[1], server_wait_sleep=60, server_wait_timeout=download + loading + 600,
                         server_time='01:00:00', download_env={'GLM_STANDIN_HF_DELAY': '%.2f' % (download / float(HF_FILES))},
                         server_env={'GLM_STANDIN_SGLANG_LOAD': str(loading), 'GLM_STANDIN_SGLANG_WARMUP': '1'})


def playbook(tree, name, extra, verbose=False):
    """ansible-playbook TREE/playbooks/NAME over SSH to the login user (inventory/local); (seconds, stdout, rc)."""
    fd, path = tempfile.mkstemp(suffix='.json')
    with os.fdopen(fd, 'w') as handle:
        json.dump(extra, handle)
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get('PATH', ''), ANSIBLE_NOCOLOR='1',
               ANSIBLE_COLLECTIONS_PATH=os.path.join(tree, '.collections'), ANSIBLE_CONFIG=os.path.join(tree, 'ansible.cfg'),
               ANSIBLE_CALLBACK_RESULT_FORMAT='json')
    argv = [os.path.join(BIN, 'ansible-playbook'), os.path.join(tree, 'playbooks', name), '-e', '@' + path]
    if verbose:
        argv.append('-v')
    started = time.time()
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, env=env,
                          cwd=tree, check=False, stdin=subprocess.DEVNULL)
    os.unlink(path)
    return time.time() - started, proc.stdout, proc.returncode


def slices(out, events=None):
    """[(polls, duration, phase)] of each item of the server's wait (the -v results); ``events``, a list, gets the
    wait's event lines (the last slice's, which carry the earlier slices' too)."""
    decoder = json.JSONDecoder()
    found = []
    for match in ITEM.finditer(out):
        try:
            result = decoder.raw_decode(out, match.end())[0]
        except ValueError:
            continue
        if 'polls' in result and 'wait_done' in result:
            found.append((result['polls'], result.get('duration'), result.get('phase')))
            if events is not None:
                events[:] = result.get('events') or []
    return found


def deploy(tree, download, loading):
    """One deploy from nothing; a dict of its figures."""
    scancel_names(NAMES)
    shutil.rmtree(os.path.join(login_home(), WORK), ignore_errors=True)
    extra = variables(download, loading)
    uid = target.login_ids()[0]
    try:
        with RpcLog() as log:
            before = sdiag_user(target.LOGIN_USER)
            seconds, out, rc = playbook(tree, 'deploy.yml', extra, verbose=True)
            total = sdiag_user(target.LOGIN_USER) - before
            types, when = log.types(uid)
    finally:
        playbook(tree, 'teardown.yml', dict(extra, glm_teardown_download=True))
        scancel_names(NAMES)
        shutil.rmtree(os.path.join(login_home(), WORK), ignore_errors=True)
    own = dict((k, v) for k, v in types.items() if k not in JOB_SIDE_RPCS)
    events = []
    found = slices(out, events)
    minutes = seconds / 60.0
    return {'tree': tree, 'rc': rc, 'seconds': round(seconds, 1), 'sdiag_rpcs': total, 'own_rpcs': sum(own.values()),
            'own_per_min': round(sum(own.values()) / minutes, 2), 'by_type': own,
            'per_min_by_type': dict((k, round(v / minutes, 2)) for k, v in own.items()),
            'job_side': dict((k, v) for k, v in types.items() if k in JOB_SIDE_RPCS), 'slices': found, 'events': events,
            'started': time.strftime('%H:%M:%S', time.localtime(time.time() - seconds)),
            'timeline': [w for w in when if 'REQUEST_' + w[1] not in JOB_SIDE_RPCS],
            'tail': out[-3000:] if rc else ''}


def report(row):
    print('\n## deploy.yml from nothing (%s), rc %s, %s s' % (row['tree'], row['rc'], row['seconds']))
    print('RPCs of %s (sdiag): %s; the deploy\'s own (log, less the jobs\' steps): %s, %s a minute' % (
        target.LOGIN_USER, row['sdiag_rpcs'], row['own_rpcs'], row['own_per_min']))
    print('| RPC type | count | per minute |')
    print('|---|---|---|')
    for key in sorted(row['by_type']):
        print('| %s | %d | %s |' % (key.replace('REQUEST_', ''), row['by_type'][key], row['per_min_by_type'][key]))
    print('jobs\' own: %s' % row['job_side'])
    print('slices of the server\'s wait (polls, seconds, phase): %s' % row['slices'])
    print('the deploy\'s own RPCs in time (started %s): %s' % (row['started'], row['timeline']))
    if row['tail']:
        print(row['tail'])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--download', type=int, default=130, help='seconds of download (default 130)')
    parser.add_argument('--loading', type=int, default=120, help='seconds of loading (default 120)')
    parser.add_argument('--tree', default=REPO, help='the tree whose deploy.yml runs (default this one)')
    parser.add_argument('--json', metavar='FILE', help='also write the figures as JSON')
    opts = parser.parse_args(argv)
    if os.geteuid() != 0 or target.IN_ROOT:
        raise SystemExit('run as root, on the host\'s cluster (sdiag, slurmctld\'s log)')
    row = deploy(os.path.abspath(opts.tree), opts.download, opts.loading)
    report(row)
    if opts.json:
        with open(opts.json, 'w') as handle:
            json.dump(row, handle, indent=1)
    return 0 if row['rc'] == 0 else 1


if __name__ == '__main__':
    sys.exit(main())
