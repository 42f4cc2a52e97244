# -*- coding: utf-8 -*-
# Copyright (c) glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark: controller load and detection latency of glm.serve.slurm_job's wait, against a naive
``until:`` loop of ``squeue`` every 2 s. Runs on the local test cluster (tests/cluster/cluster.sh), as root.
Prints figures; it is not a test. See docs/benchmarks.md.

    .venv/bin/python tests/bench/bench_wait.py [--samples 5] [--wait 120] [--only load|latency]

The module and the naive loop each run as their own user (glmbench, glmnaive; created if missing), through
real ansible-playbook (local connection, become su), so that slurmctld's per-user RPC counts (``sdiag``)
separate them from each other and from anything else on the cluster.
"""

from __future__ import absolute_import, division, print_function

import argparse
import json
import os
import pwd
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
BIN = os.path.dirname(sys.executable)
USERS = {'module': 'glmbench', 'naive': 'glmnaive'}


def sh(argv, **kwargs):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False, **kwargs)


def ensure_user(name):
    try:
        return pwd.getpwnam(name)
    except KeyError:
        sh(['useradd', '-m', '-s', '/bin/bash', name])
        return pwd.getpwnam(name)


def rpc_counts():
    """{user: count} from sdiag's per-user RPC statistics."""
    out = sh(['sdiag']).stdout
    counts = {}
    section = out.split('by user', 1)[-1].split('Pending RPC', 1)[0]
    for match in re.finditer(r'^\s*(\S+)\s*\(\s*\d+\)\s*count:(\d+)', section, re.M):
        counts[match.group(1)] = int(match.group(2))
    return counts


class Bench:
    def __init__(self):
        self.id = uuid.uuid4().hex[:8]
        fd, self.inventory = tempfile.mkstemp(prefix='bench-inv-')
        with os.fdopen(fd, 'w') as handle:
            for kind, user in USERS.items():
                handle.write('%s ansible_connection=local ansible_become=true ansible_become_method=su ansible_become_user=%s '
                             'ansible_python_interpreter=/usr/bin/python3\n' % (kind, user))
        self.dirs = {}
        for kind, user in USERS.items():
            entry = ensure_user(user)
            path = os.path.join(entry.pw_dir, 'bench', self.id)
            os.makedirs(path)
            for p in (os.path.dirname(path), path):
                os.chown(p, entry.pw_uid, entry.pw_gid)
            self.dirs[kind] = (path, entry)

    def file(self, kind, name, text, mode=0o644):
        path, entry = self.dirs[kind]
        full = os.path.join(path, name)
        with open(full, 'w') as handle:
            handle.write(text)
        os.chmod(full, mode)
        os.chown(full, entry.pw_uid, entry.pw_gid)
        return full

    def script(self, kind, name, body, extra=()):
        return self.file(kind, name, '#!/bin/bash\n#SBATCH --output=%x-%j.out\n' + ''.join('#SBATCH %s\n' % e for e in extra) + body)

    def submit(self, kind, script, *args):
        path, entry = self.dirs[kind]
        out = sh(['runuser', '-u', entry.pw_name, '--', 'sbatch', '--parsable'] + list(args) + [script], cwd=path)
        if out.returncode:
            raise SystemExit('sbatch failed: %s' % out.stderr)
        return out.stdout.strip().split(';')[0]

    def play(self, host, tasks):
        """Run tasks; returns (results, epoch time right after the last one returned, taken on the controller)."""
        tasks = [dict(t, register=t.get('register') or 'r%d' % i) for i, t in enumerate(tasks)]
        tasks.append({'ansible.builtin.set_fact': {'bench_end': "{{ lookup('ansible.builtin.pipe', 'date +%s.%N') }}"},
                      'register': 'r%d' % len(tasks)})
        names = [t['register'] for t in tasks]
        fd, out = tempfile.mkstemp(suffix='.json')
        os.close(fd)
        tasks.append({'delegate_to': 'localhost', 'become': False, 'check_mode': False,
                      'ansible.builtin.copy': {'dest': out, 'content': '{{ [%s] | to_json }}' % ', '.join(names)}})
        fd, path = tempfile.mkstemp(suffix='.yml')
        with os.fdopen(fd, 'w') as handle:
            json.dump([{'hosts': host, 'gather_facts': False, 'tasks': tasks}], handle)
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, '.collections'), ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'))
        proc = sh([os.path.join(BIN, 'ansible-playbook'), '-i', self.inventory, path], env=env, cwd=REPO)
        os.unlink(path)
        try:
            with open(out) as handle:
                results = json.load(handle)
            os.unlink(out)
        except (IOError, ValueError):
            raise SystemExit('play failed:\n%s\n%s' % (proc.stdout[-3000:], proc.stderr[-3000:]))
        ended = float(results.pop()['ansible_facts']['bench_end'])
        return results, ended

    def cleanup(self):
        for kind, (path, entry) in self.dirs.items():
            sh(['runuser', '-u', entry.pw_name, '--', 'scancel', '-u', entry.pw_name])
            shutil.rmtree(path, ignore_errors=True)
        os.unlink(self.inventory)


def module_wait(job_id, timeout, condition='COMPLETED', probe=None):
    args = {'job_id': job_id, 'wait': True, 'wait_condition': [condition], 'wait_timeout': timeout}
    if probe:
        args['probe'] = probe
    return {'glm.serve.slurm_job': args, 'ignore_errors': True}


def naive_wait(job_id, condition='COMPLETED'):
    return {'ansible.builtin.command': 'squeue -h -t all -j %s -o %%T' % job_id, 'register': 'q',
            'until': "q.stdout == '%s'" % condition, 'retries': 1000, 'delay': 2, 'changed_when': False}


def load(bench, seconds):
    """Controller RPCs per minute over a wait on a running job and over a chain of two jobs."""
    rows = []
    for label, chain in (('running job, %d s' % seconds, False), ('chain of two jobs, 2 x %d s' % (seconds // 2), True)):
        jobs = {}
        for kind in USERS:
            if chain:
                half = seconds // 2
                parent = bench.submit(kind, bench.script(kind, 'p.sbatch', 'echo start; sleep %d; echo done\n' % half))
                jobs[kind] = bench.submit(kind, bench.script(kind, 'c.sbatch', 'echo start; sleep %d; echo done\n' % half),
                                          '--dependency=afterok:%s' % parent)
            else:
                jobs[kind] = bench.submit(kind, bench.script(kind, 'r.sbatch', 'echo start; sleep %d; echo done\n' % seconds))
        time.sleep(2)  # both running
        before = rpc_counts()
        results = {}
        started = time.time()

        def run(kind):
            task = module_wait(jobs[kind], seconds * 3) if kind == 'module' else naive_wait(jobs[kind])
            try:
                results[kind] = bench.play(kind, [task])
            except SystemExit as exc:
                print(exc)
                results[kind] = ([{'failed': True}], time.time())

        threads = [threading.Thread(target=run, args=(k,)) for k in USERS]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        after = rpc_counts()
        for kind, user in USERS.items():
            (res,), ended = results[kind]
            minutes = (ended - started) / 60.0
            rpcs = after.get(user, 0) - before.get(user, 0)
            calls = res.get('polls') if kind == 'module' else res.get('attempts')
            rows.append((label, kind, round(ended - started, 1), rpcs, round(rpcs / minutes, 1), calls,
                         round(calls / minutes, 1) if calls else None, res.get('failed', False)))
    return rows


def latency_state(bench, samples):
    """Module return minus the moment a dependent job starts (its first line writes the time)."""
    out = []
    for i in range(samples):
        path = bench.dirs['module'][0]
        stamp = os.path.join(path, 'start-%d' % i)
        parent = bench.submit('module', bench.script('module', 'lp.sbatch', 'sleep %d\n' % (4 + i % 4)))
        child = bench.submit('module', bench.script('module', 'lc.sbatch', 'python3 -c "import time; print(time.time())" > %s\nsleep 60\n' % stamp),
                             '--dependency=afterok:%s' % parent)
        (res,), ended = bench.play('module', [module_wait(child, 120, condition='RUNNING')])
        with open(stamp) as handle:
            began = float(handle.read())
        out.append((round(ended - began, 2), res.get('polls'), res.get('failed', False)))
        sh(['scancel', child])
    return out


def first_answer(url, key, deadline, box):
    request = urllib.request.Request(url, headers={'Authorization': 'Bearer ' + key})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    while time.time() < deadline:
        try:
            with opener.open(request, timeout=1) as response:
                if response.status == 200:
                    box.append(time.time())
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.05)


def latency_probe(bench, samples):
    """Module return minus the moment the server first answers /v1/models (seen by a 50 ms poller)."""
    path, entry = bench.dirs['module']
    key = uuid.uuid4().hex
    bench.file('module', 'api-key', key + '\n', mode=0o600)
    setup = bench.submit('module', bench.script('module', 'setup.sbatch', (
        'set -e\nsrun --container-image=docker://lmsysorg/sglang:v0.5.21 --container-save=%(d)s/sglang.sqsh true\n'
        'srun --container-image=%(d)s/sglang.sqsh hf download zai-org/GLM-5.3-Flash --local-dir %(d)s/model\n') % {'d': path}))
    for unused_attempt in range(120):
        if os.path.isdir(os.path.join(path, 'model')) and not sh(['squeue', '-h', '-j', setup]).stdout.strip():
            break
        time.sleep(1)
    out = []
    for i in range(samples):
        port = 40000 + i
        script = bench.script('module', 'serve.sbatch', (
            'export GLM_STANDIN_SGLANG_GPUS=8 GLM_STANDIN_SGLANG_LOAD=%(load)d GLM_STANDIN_SGLANG_WARMUP=1 PYTHONUNBUFFERED=1\n'
            'export KEY=$(cat %(d)s/api-key)\n'
            'srun --container-image=%(d)s/sglang.sqsh --ntasks=1 bash -c \'exec python3 -m sglang.launch_server --model-path %(d)s/model '
            '--served-model-name glm-5.3-flash --tp-size 8 --api-key "$KEY" --host 0.0.0.0 --port %(p)d\'\n') % {
                'd': path, 'p': port, 'load': 6 + i % 5}, extra=('--cpus-per-task=2', '--mem=2G'))
        job = bench.submit('module', script)
        box = []
        poller = None
        for unused_attempt in range(100):   # find the node without adding load to the measured user
            node = sh(['squeue', '-h', '-j', job, '-o', '%N']).stdout.strip()
            if node:
                poller = threading.Thread(target=first_answer, args=('http://%s:%d/v1/models' % (node, port), key, time.time() + 120, box))
                poller.start()
                break
            time.sleep(0.2)
        probe = {'port': port, 'key_file': os.path.join(path, 'api-key'), 'model': 'glm-5.3-flash'}
        (res,), ended = bench.play('module', [module_wait(job, 120, condition='RUNNING', probe=probe)])
        if poller:
            poller.join()
        out.append((round(ended - box[0], 2) if box else None, res.get('polls'), res.get('failed', False)))
        sh(['scancel', job])
        time.sleep(1)
    return out


def overhead(bench):
    """Wall time of an ansible-playbook run of a module that returns at once (included in every latency)."""
    started = time.time()
    bench.play('module', [{'ansible.builtin.ping': {}}])
    return round(time.time() - started, 2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--samples', type=int, default=5)
    parser.add_argument('--wait', type=int, default=120)
    parser.add_argument('--only', choices=['load', 'latency'])
    opts = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit('run as root (sdiag, users, runuser)')
    bench = Bench()
    try:
        print('slurm: %s; a whole ansible-playbook run of ping: %.2f s' % (sh(['squeue', '--version']).stdout.strip(), overhead(bench)))
        if opts.only in (None, 'load'):
            print('\n## Controller load (sdiag RPCs of the waiting user)')
            print('| wait | waiter | seconds | RPCs | RPCs/min | squeue/scontrol calls | calls/min | failed |')
            print('|---|---|---|---|---|---|---|---|')
            for row in load(bench, opts.wait):
                print('| %s | %s | %s | %s | %s | %s | %s | %s |' % row)
        if opts.only in (None, 'latency'):
            for label, func in (('a dependent job starts (wait for RUNNING)', latency_state),
                                ('the server first answers /v1/models (probe)', latency_probe)):
                samples = func(bench, opts.samples)
                values = [s[0] for s in samples if s[0] is not None and not s[2]]
                print('\n## Detection latency: %s' % label)
                print('samples (latency s, controller calls, failed): %s' % samples)
                if values:
                    print('median %.2f s, min %.2f s, max %.2f s (to the controller-side task right after the module returned)' % (
                        statistics.median(values), min(values), max(values)))
    finally:
        bench.cleanup()


if __name__ == '__main__':
    main()
