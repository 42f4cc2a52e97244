# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Benchmark, per Slurm release: the controller load of glm.serve.slurm_job's wait and how fast it sees a job start,
on the local cluster that GLM_CLUSTER_RELEASE selects (bookworm: Slurm 22.05 on the host; trixie: 24.11 and sid: 26.05
in their Debian roots; see tests/integration/cluster_target.py). Run as root; prints figures, it is not a test.

    GLM_CLUSTER_RELEASE=trixie .venv/bin/python tests/bench/bench_release.py [--wait 60] [--samples 3] [--json FILE]

Everything runs as the cluster's login user, over SSH, through real ansible-playbook (as a deploy does):

- **load**: the module waits (``wait_condition: COMPLETED``) on a job that runs ``--wait`` seconds; the login user's
  RPCs to slurmctld over that wait, and slurmctld's time spent on them (``total_time``, µs), come from ``sdiag``
  (its per-user counters; the job itself, a ``sleep``, makes none), their types from sdiag's per-type counters
  (nothing else runs on the cluster meanwhile). Where the release
  has ``squeue --only-job-state`` (23.11.5 and later) the same wait runs a second time with the module held to the
  older path (``scontrol --local show job`` per poll): a ``squeue`` wrapper first on the module's PATH answers
  ``--version`` with 23.11.4 and passes everything else to the real squeue. The two rows show which RPCs each path
  makes (``REQUEST_JOB_STATE`` is squeue --only-job-state's) and how many per minute.
- **latency**: a job that depends (afterok) on one that sleeps 4 to 7 s writes the time it starts; the module waits
  for it to be RUNNING; latency = the controller's clock right after the module returned minus that time (the
  clocks are the same machine's). Median of ``--samples``.

``--json FILE`` writes the figures for make test's closing table (tests/tooling/releases.sh).
"""

from __future__ import absolute_import, division, print_function

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'integration'))

import cluster_target as target  # noqa: E402  pylint: disable=wrong-import-position
from conftest import Work, as_login  # noqa: E402  pylint: disable=wrong-import-position

ONLY_JOB_STATE_RPC = 'REQUEST_JOB_STATE'
# RPCs of the cluster itself (slurmd, the bench's own sdiag), not of the waiting user
CLUSTER_RPCS = ('REQUEST_STATS_INFO', 'MESSAGE_NODE_REGISTRATION_STATUS', 'MESSAGE_EPILOG_COMPLETE',
                'REQUEST_COMPLETE_BATCH_SCRIPT', 'REQUEST_PING', 'REQUEST_SUBMIT_BATCH_JOB', 'REQUEST_KILL_JOB',
                'REQUEST_CANCEL_JOB_STEP', 'REQUEST_SHARE_INFO', 'REQUEST_PERSIST_INIT', 'ACCOUNTING_UPDATE_MSG',
                'REQUEST_DBD_RELAY')
OLD_SQUEUE = '#!/bin/bash\n[ "$1" = --version ] && { echo "slurm 23.11.4"; exit 0; }\nexec %s "$@"\n'


def sdiag():
    """({user: (RPC count, total µs)}, {RPC type: (count, total µs)}) from the cluster's sdiag (as root: not counted
    for the login user). total_time is slurmctld's own time spent on those RPCs, in microseconds."""
    out = subprocess.run(target.slurm_argv(['sdiag']), stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False,
                         universal_newlines=True, stdin=subprocess.DEVNULL, env=target.slurm_env()).stdout
    types = out.split('by message type', 1)[-1].split('by user', 1)[0]
    users = out.split('by user', 1)[-1].split('Pending RPC', 1)[0]
    count = re.compile(r'^\s*(\S+)\s*\(\s*\d+\)\s*count:(\d+)\s+ave_time:\d+\s+total_time:(\d+)', re.M)
    return (dict((m.group(1), (int(m.group(2)), int(m.group(3)))) for m in count.finditer(users)),
            dict((m.group(1), (int(m.group(2)), int(m.group(3)))) for m in count.finditer(types)))


def diff(after, before, key):
    """(count, µs) of key between two sdiag readings."""
    a, b = after.get(key, (0, 0)), before.get(key, (0, 0))
    return a[0] - b[0], a[1] - b[1]


def version():
    out = as_login(['squeue', '--version']).stdout.split()
    return out[-1] if out else 'unknown'


def has_only_job_state(text):
    parts = [int(p) for p in re.findall(r'\d+', text)[:3]]
    return parts >= [23, 11, 5]


def wait_task(job_id, condition, timeout, environment=None):
    task = {'glm.serve.slurm_job': {'job_id': job_id, 'wait': True, 'wait_condition': [condition], 'wait_timeout': timeout},
            'ignore_errors': True}
    if environment:
        task['environment'] = environment
    return task


def clock_task():
    return {'ansible.builtin.set_fact': {'bench_end': "{{ lookup('ansible.builtin.pipe', 'date +%s.%N') }}"}}


def submit(work, script, *args):
    proc = as_login(['sbatch', '--parsable', '--chdir', work.dir] + list(args) + [script])
    if proc.returncode:
        raise SystemExit('sbatch failed: %s' % proc.stderr)
    return proc.stdout.strip().split(';')[0]


def until_running(job_id, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        out = subprocess.run(target.slurm_argv(['squeue', '-h', '-j', job_id, '-o', '%T']), stdout=subprocess.PIPE,
                             universal_newlines=True, check=False, stdin=subprocess.DEVNULL, env=target.slurm_env()).stdout
        if out.strip() == 'RUNNING':
            return
        time.sleep(0.5)
    raise SystemExit('job %s did not start within %d s' % (job_id, timeout))


def load(work, seconds, path):
    """One wait on a job running `seconds` s; path 'auto' (what the module picks) or 'scontrol' (held to it)."""
    env = None
    if path == 'scontrol':
        bindir = os.path.join(work.dir, 'old-squeue')
        os.mkdir(bindir)
        os.chown(bindir, work.uid, work.gid)
        work.file(os.path.join('old-squeue', 'squeue'), OLD_SQUEUE % target.slurm_command('squeue'), mode=0o755)
        env = {'PATH': bindir + ':/usr/local/bin:/usr/bin:/bin'}
    job_id = submit(work, work.script('load-%s.sbatch' % path, 'sleep %d\n' % seconds))
    until_running(job_id)
    users0, types0 = sdiag()
    started = time.time()
    (res, clock), proc = work.play([wait_task(job_id, 'COMPLETED', seconds * 3, env), clock_task()])
    ended = float(clock['ansible_facts']['bench_end'])
    users1, types1 = sdiag()
    minutes = (ended - started) / 60.0
    rpcs, micros = diff(users1, users0, target.LOGIN_USER)
    by_type = dict((k, diff(types1, types0, k)) for k in types1 if k not in CLUSTER_RPCS)
    by_type = dict((k, v) for k, v in by_type.items() if v[0] > 0)
    if res.get('failed') or res.get('state') != 'COMPLETED':
        raise SystemExit('the wait failed: %s\n%s' % (res.get('msg'), proc.stdout[-2000:]))
    return {'path': 'squeue --only-job-state' if ONLY_JOB_STATE_RPC in by_type else 'scontrol --local show job',
            'held': path == 'scontrol', 'seconds': round(ended - started, 1), 'rpcs': rpcs,
            'rpcs_per_min': round(rpcs / minutes, 2), 'controller_us': micros, 'polls': res.get('polls'),
            'by_type': dict((k, v[0]) for k, v in by_type.items()),
            'us_by_type': dict((k, v[1]) for k, v in by_type.items())}


def latency(work, samples):
    out = []
    for i in range(samples):
        stamp = os.path.join(work.dir, 'start-%d' % i)
        parent = submit(work, work.script('lp-%d.sbatch' % i, 'sleep %d\n' % (4 + i % 4)))
        child = submit(work, work.script('lc-%d.sbatch' % i, 'python3 -c "import time; print(time.time())" > %s\nsleep 60\n' % stamp),
                       '--dependency=afterok:%s' % parent)
        (res, clock), unused_proc = work.play([wait_task(child, 'RUNNING', 120), clock_task()])
        ended = float(clock['ansible_facts']['bench_end'])
        with open(stamp) as handle:
            began = float(handle.read())
        if res.get('failed'):
            raise SystemExit('the wait for RUNNING failed: %s' % res.get('msg'))
        out.append({'latency': round(ended - began, 2), 'polls': res.get('polls')})
        as_login(['scancel', child])
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--wait', type=int, default=60, help='seconds the job of the load figure runs (default 60)')
    parser.add_argument('--samples', type=int, default=3, help='detection latency samples (default 3)')
    parser.add_argument('--json', metavar='FILE', help='also write the figures as JSON')
    opts = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit('run as root (sdiag, runuser)')
    work = Work(target.INVENTORY or os.path.join(target.REPO, 'inventory', 'local'))
    slurm = version()
    figures = {'release': target.RELEASE, 'slurm': slurm, 'load': [], 'latency': []}
    try:
        paths = ['auto', 'scontrol'] if has_only_job_state(slurm) else ['auto']
        for path in paths:
            figures['load'].append(load(work, opts.wait, path))
        figures['latency'] = latency(work, opts.samples)
    finally:
        work.cleanup()
    values = [s['latency'] for s in figures['latency']]
    figures['latency_median'] = statistics.median(values) if values else None
    auto = figures['load'][0]
    figures['rpcs_per_min'] = auto['rpcs_per_min']
    figures['path'] = auto['path']
    print('\n## %s: Slurm %s' % (target.RELEASE, slurm))
    print('| waiter | path | seconds | RPCs of %s | RPCs/min | slurmctld time (µs) | polls | RPC types (sdiag: count, µs) |'
          % target.LOGIN_USER)
    print('|---|---|---|---|---|---|---|---|')
    for row in figures['load']:
        print('| %s | %s | %s | %s | %s | %s | %s | %s |' % (
            'held to scontrol (squeue says 23.11.4)' if row['held'] else 'the module as it is', row['path'], row['seconds'], row['rpcs'],
            row['rpcs_per_min'], row['controller_us'], row['polls'], ', '.join(
                '%s x%d %d µs' % (k.replace('REQUEST_', ''), v, row['us_by_type'][k]) for k, v in sorted(row['by_type'].items()))))
    print('detection latency (a dependent job starts, wait for RUNNING): %s; median %s s' % (
        ', '.join('%.2f s (%s polls)' % (s['latency'], s['polls']) for s in figures['latency']), figures['latency_median']))
    if opts.json:
        with open(opts.json, 'w') as handle:
            json.dump(figures, handle, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
