# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Benchmark: controller load and detection latency of glm.serve.slurm_job's wait, against a naive
``until:`` loop of ``squeue`` every 2 s. Runs on the local test cluster (tests/tooling/cluster/cluster.sh), as root.
Prints figures; it is not a test. See docs/benchmarks.md.

    .venv/bin/python tests/bench/bench_wait.py [--samples 5] [--wait 120] [--only load|latency|rerun|chain|deploy]
        [--before REV]

The module and the naive loop each run as their own user (glmbench, glmnaive; created if missing), through
real ansible-playbook (local connection, become su), so that slurmctld's per-user RPC counts (``sdiag``)
separate them from each other and from anything else on the cluster. With ``--before REV`` the module of that
git revision (a worktree of it) runs too, as user glmbefore, side by side in the same run: its figures are
the "before" column of a change.

``rerun`` deploys once on the local cluster (playbooks/deploy.yml over SSH to glmuser, a work dir of its own),
then times re-runs of the deploy that change nothing against a one-task ping playbook over the same SSH, and
counts the login user's controller RPCs of each re-run (run it while nothing else uses the cluster as glmuser).

``deploy`` runs the REAL playbooks/deploy.yml from nothing as the login user, with the role defaults (60-s progress
slices), the download and the loading of ``--deploy-chain`` seconds (default 480,300: the issue's 13-minute chain),
and gives the deploy's own RPCs by type (tests/bench/bench_deploy.py; with ``--before REV`` that commit's too).
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
BEFORE_USER = 'glmbefore'
LOGIN_USER = 'glmuser'
RECAP = re.compile(r'^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)', re.M)


def sh(argv, **kwargs):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, universal_newlines=True,
                          check=False, **kwargs)


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


# RPCs that a job makes from inside itself (srun creating its steps), not the waiter: the RPC log leaves them out
# of the waiter's count. sdiag's per-user totals include them (the job runs as the same user).
JOB_SIDE_RPCS = ('REQUEST_JOB_STEP_CREATE', 'REQUEST_HET_JOB_ALLOC_INFO', 'REQUEST_STEP_COMPLETE',
                 'REQUEST_JOB_ALLOCATION_INFO', 'REQUEST_STEP_LAYOUT', 'REQUEST_JOB_STEP_INFO')


class RpcLog:
    """slurmctld's own record of each RPC, by type and user: ``SlurmctldDebug=debug2`` logs ``Processing RPC:
    TYPE from UID=N`` for each one. Raised for the bench's window only and set back after."""

    def __init__(self):
        conf = sh(['scontrol', 'show', 'config']).stdout
        found = re.search(r'^SlurmctldLogFile\s*=\s*(\S+)', conf, re.M)
        level = re.search(r'^SlurmctldDebug\s*=\s*(\S+)', conf, re.M)
        self.path = found.group(1) if found else None
        self.level = level.group(1) if level else 'info'
        self.offset = 0

    def __enter__(self):
        if self.path:
            self.offset = os.path.getsize(self.path)
            sh(['scontrol', 'setdebug', 'debug2'])
        return self

    def __exit__(self, *exc):
        sh(['scontrol', 'setdebug', self.level])
        return False

    def by_user(self, users):
        """{user: {rpc type: count}} since __enter__, for these user names."""
        uids = dict((pwd.getpwnam(u).pw_uid, u) for u in users)
        counts = dict((u, {}) for u in users)
        if not self.path:
            return counts
        with open(self.path, 'rb') as handle:
            handle.seek(self.offset)
            text = handle.read().decode('utf-8', 'replace')
        for match in re.finditer(r'Processing RPC: (\S+) from UID=(\d+)', text):
            user = uids.get(int(match.group(2)))
            if user:
                counts[user][match.group(1)] = counts[user].get(match.group(1), 0) + 1
        return counts


def waiter_rpcs(types):
    """(RPCs of the waiter, the breakdown 'TYPE xN, ...') from one user's counts, without the job's own."""
    mine = dict((k, v) for k, v in types.items() if k not in JOB_SIDE_RPCS)
    text = ', '.join('%s x%d' % (k.replace('REQUEST_', ''), v) for k, v in sorted(mine.items()))
    return sum(mine.values()), text


def worktree(rev):
    """A checkout of rev (its module is "before"), with the .collections link its ansible-playbook runs need."""
    path = os.path.join(tempfile.gettempdir(), 'glm-bench-before-%s' % rev.replace('/', '_'))
    if not os.path.isdir(path):
        out = sh(['git', '-C', REPO, 'worktree', 'add', '--detach', '-f', path, rev])
        if out.returncode:
            raise SystemExit('git worktree add %s failed: %s' % (rev, out.stderr))
    link = os.path.join(path, '.collections', 'ansible_collections', 'glm', 'serve')
    if not os.path.islink(link):
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink('../../..', link)
    return path


class Bench:
    def __init__(self, before=None):
        self.id = uuid.uuid4().hex[:8]
        self.users = dict(USERS)
        self.trees = {}
        if before:
            self.users['before'] = BEFORE_USER
            self.trees['before'] = worktree(before)
        fd, self.inventory = tempfile.mkstemp(prefix='bench-inv-')
        with os.fdopen(fd, 'w') as handle:
            for kind, user in self.users.items():
                handle.write('%s ansible_connection=local ansible_become=true ansible_become_method=su ansible_become_user=%s '
                             'ansible_python_interpreter=/usr/bin/python3\n' % (kind, user))
        self.dirs = {}
        for kind, user in self.users.items():
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
        tree = self.trees.get(host, REPO)
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(tree, '.collections'), ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'))
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

    def each_user(self, func):
        """func(kind) for every user at once, in threads; returns when all have."""
        threads = [threading.Thread(target=func, args=(k,)) for k in self.users]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

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
        for kind in bench.users:
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
            task = naive_wait(jobs[kind]) if kind == 'naive' else module_wait(jobs[kind], seconds * 3)
            try:
                results[kind] = bench.play(kind, [task])
            except SystemExit as exc:
                print(exc)
                results[kind] = ([{'failed': True}], time.time())

        bench.each_user(run)
        after = rpc_counts()
        for kind, user in bench.users.items():
            (res,), ended = results[kind]
            minutes = (ended - started) / 60.0
            rpcs = after.get(user, 0) - before.get(user, 0)
            if rpcs < 0:
                print('sdiag counters were reset during the run (slurmctld restarted?): RPCs of %s unknown' % user)
                rpcs = None
            calls = res.get('attempts') if kind == 'naive' else res.get('polls')
            rows.append((label, kind, round(ended - started, 1), rpcs, round(rpcs / minutes, 1) if rpcs is not None else None, calls,
                         round(calls / minutes, 1) if calls else None, res.get('failed', False)))
    return rows


def latency_state(bench, samples, kind='module'):
    """Module return minus the moment a dependent job starts (its first line writes the time)."""
    out = []
    for i in range(samples):
        path = bench.dirs[kind][0]
        stamp = os.path.join(path, 'start-%d' % i)
        parent = bench.submit(kind, bench.script(kind, 'lp.sbatch', 'sleep %d\n' % (4 + i % 4)))
        child = bench.submit(kind, bench.script(kind, 'lc.sbatch', 'python3 -c "import time; print(time.time())" > %s\nsleep 60\n' % stamp),
                             '--dependency=afterok:%s' % parent)
        (res,), ended = bench.play(kind, [module_wait(child, 120, condition='RUNNING')])
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


def latency_probe(bench, samples, kind='module'):
    """Module return minus the moment the server first answers /v1/models (seen by a 50 ms poller)."""
    path = setup_image(bench, kind)
    key = uuid.uuid4().hex
    bench.file(kind, 'api-key', key + '\n', mode=0o600)
    out = []
    for i in range(samples):
        port = 40000 + i
        script = bench.script(kind, 'serve.sbatch', (
            'export GLM_STANDIN_SGLANG_GPUS=8 GLM_STANDIN_SGLANG_LOAD=%(load)d GLM_STANDIN_SGLANG_WARMUP=1 PYTHONUNBUFFERED=1\n'
            'export KEY=$(cat %(d)s/api-key)\n'
            'srun --container-image=%(d)s/sglang.sqsh --container-mounts=%(d)s --ntasks=1 '
            'bash -c \'exec python3 -m sglang.launch_server --model-path %(d)s/model '
            '--served-model-name glm-5.3-flash --tp-size 8 --api-key "$KEY" --host 0.0.0.0 --port %(p)d\'\n') % {
                'd': path, 'p': port, 'load': 6 + i % 5}, extra=('--cpus-per-task=2', '--mem=2G'))
        job = bench.submit(kind, script)
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
        (res,), ended = bench.play(kind, [module_wait(job, 120, condition='RUNNING', probe=probe)])
        if poller:
            poller.join()
        out.append((round(ended - box[0], 2) if box else None, res.get('polls'), res.get('failed', False)))
        sh(['scancel', job])
        time.sleep(1)
    return out


def setup_image(bench, kind):
    """The SGLang stand-in image and model in the kind's bench folder (the download job of a deploy, once)."""
    path = bench.dirs[kind][0]
    if os.path.isdir(os.path.join(path, 'model')):
        return path
    setup = bench.submit(kind, bench.script(kind, 'setup.sbatch', (
        'set -e\nsrun --container-image=docker://lmsysorg/sglang:v0.5.21 --container-save=%(d)s/sglang.sqsh true\n'
        'srun --container-image=%(d)s/sglang.sqsh --container-mounts=%(d)s hf download zai-org/GLM-5.3-Flash --local-dir %(d)s/model\n') % {'d': path}))
    for unused_attempt in range(120):
        if os.path.isdir(os.path.join(path, 'model')) and not sh(['squeue', '-h', '-j', setup]).stdout.strip():
            break
        time.sleep(1)
    return path


def long_chain(bench, download, loading, port=41000):
    """A deploy's long wait, all in for the waiter: submit a download that prints progress for ``download`` s,
    submit the server after it (afterok) that logs while it loads for ``loading`` s, wait until /v1/models answers.
    The module does it with two slurm_job tasks (lookup, sbatch, duplicate check, wait with probe), the naive way
    with sbatch, an ``until:`` squeue every 2 s and an ``until:`` curl every 2 s. Every waiter runs at once."""
    key = uuid.uuid4().hex
    plays = {}
    for number, kind in enumerate(bench.users):
        path = setup_image(bench, kind)
        bench.file(kind, 'api-key', key + '\n', mode=0o600)
        dl = bench.script(kind, 'dl.sbatch', 'for i in $(seq 1 %d); do echo "Fetching 41 files: $((i * 200 / %d))%%|"; sleep 2; done\n' % (
            download // 2, download // 2 + 1))
        serve = bench.script(kind, 'srv.sbatch', (
            'export GLM_STANDIN_SGLANG_GPUS=8 GLM_STANDIN_SGLANG_LOAD=1 GLM_STANDIN_SGLANG_WARMUP=1 PYTHONUNBUFFERED=1\n'
            'for i in $(seq 1 %(n)d); do echo "Loading safetensors checkpoint shards: $((i * 100 / %(n)d))%% Completed"; sleep 10; done\n'
            'export KEY=$(cat %(d)s/api-key)\n'
            'srun --container-image=%(d)s/sglang.sqsh --container-mounts=%(d)s --ntasks=1 '
            'bash -c \'exec python3 -m sglang.launch_server --model-path %(d)s/model '
            '--served-model-name glm-5.3-flash --tp-size 8 --api-key "$KEY" --host 0.0.0.0 --port %(p)d\'\n') % {
                'd': path, 'p': port + number, 'n': loading // 10}, extra=('--cpus-per-task=2', '--mem=2G'))
        names = ('chain-dl-%s-%s' % (bench.id, kind), 'chain-srv-%s-%s' % (bench.id, kind))
        if kind == 'naive':
            url = 'http://{{ node.stdout }}:%d/v1/models' % (port + number)
            plays[kind] = [
                {'ansible.builtin.command': 'sbatch --parsable -J %s %s' % (names[0], dl), 'args': {'chdir': path}, 'register': 'dl'},
                {'ansible.builtin.command': 'sbatch --parsable -J %s --dependency=afterok:{{ dl.stdout }} %s' % (names[1], serve),
                 'args': {'chdir': path}, 'register': 'srv'},
                dict(naive_wait('{{ srv.stdout }}', 'RUNNING'), register='q'),
                {'ansible.builtin.command': 'squeue -h -j {{ srv.stdout }} -o %N', 'register': 'node', 'changed_when': False},
                {'ansible.builtin.shell': 'curl -s -o /dev/null -w %%{http_code} -H "Authorization: Bearer $(cat %s/api-key)" %s' % (path, url),
                 'register': 'c', 'until': "c.stdout == '200'", 'retries': 1000, 'delay': 2, 'changed_when': False},
                {'ansible.builtin.set_fact': {'polls': '{{ q.attempts + c.attempts + 1 }}'}},
            ]
        else:
            # as deploy.yml does it: the preflight's sinfo, the download task listing both names (lookup_also),
            # the server task taking that listing (lookup), then the wait with the probe
            server = {'name': names[1], 'script': serve, 'chdir': path, 'wait': True, 'wait_timeout': 3 * (download + loading),
                      'dependency': [{'type': 'afterok', 'job_ids': ['{{ dl.job_id }}']}],
                      'probe': {'port': port + number, 'key_file': os.path.join(path, 'api-key'), 'model': 'glm-5.3-flash'}}
            download_task = {'name': names[0], 'script': dl, 'chdir': path}
            # the shared listing (lookup_also/lookup) exists since 804caa0: --before REV must be that or newer
            download_task['lookup_also'] = [names[1]]
            server['lookup'] = '{{ dl.lookup | default(omit) }}'
            server_task = {'glm.serve.slurm_job': server, 'register': 'srv', 'ignore_errors': True}
            polls = '{{ dl.polls + srv.polls }}'
            if kind == 'module':
                # as the server role waits: in slices of glm_progress_interval (60 s), each a line of progress
                server.update(wait_slice=60, wait_resume="{{ srv.resume if __slice > 0 else omit }}")
                server_task.update(loop='{{ range(%d) | list }}' % (3 * (download + loading) // 60 + 20), loop_control={
                    'index_var': '__slice', 'label': "{{ srv.progress | default('') }}",
                    'break_when': ['srv is failed or srv.resume is not defined']})
                polls = "{{ dl.polls + srv.results | map(attribute='polls') | sum }}"
            plays[kind] = [
                {'ansible.builtin.command': "sinfo --noheader --format='%R %G'", 'changed_when': False},
                {'glm.serve.slurm_job': download_task, 'register': 'dl'},
                server_task,
                {'ansible.builtin.set_fact': {'polls': polls}},
            ]
    before = rpc_counts()
    results = {}
    started = time.time()

    def run(kind):
        try:
            results[kind] = bench.play(kind, plays[kind])
        except SystemExit as exc:
            print(exc)
            results[kind] = (None, time.time())

    with RpcLog() as log:
        bench.each_user(run)
        after = rpc_counts()
        types = log.by_user(bench.users.values())
    rows = []
    for kind, user in bench.users.items():
        res, ended = results[kind]
        minutes = (ended - started) / 60.0
        rpcs = after.get(user, 0) - before.get(user, 0)
        own, breakdown = waiter_rpcs(types[user])
        failed = res is None or any(r.get('failed') for r in res)
        polls = res[-1].get('ansible_facts', {}).get('polls') if res else None
        rows.append(('chain %d s + %d s' % (download, loading), {'module': 'this tree'}.get(kind, kind), round(ended - started, 1),
                     rpcs if rpcs >= 0 else None, own, round(own / minutes, 2), polls, failed, breakdown if kind != 'naive' else '-'))
        sh(['runuser', '-u', user, '--', 'scancel', '-u', user])
    return rows


def overhead(bench):
    """Wall time of an ansible-playbook run of a module that returns at once (included in every latency)."""
    started = time.time()
    bench.play('module', [{'ansible.builtin.ping': {}}])
    return round(time.time() - started, 2)


def login_playbook(playbook, extra, tree=REPO):
    """ansible-playbook over SSH to the login user (inventory/local), from tree; returns (seconds, stdout, rc)."""
    fd, path = tempfile.mkstemp(suffix='.json')
    with os.fdopen(fd, 'w') as handle:
        json.dump(extra, handle)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(tree, '.collections'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_CONFIG=os.path.join(tree, 'ansible.cfg'))
    started = time.time()
    proc = sh([os.path.join(BIN, 'ansible-playbook'), '-i', os.path.join(tree, 'inventory', 'local'), playbook,
               '-e', '@' + path], env=env, cwd=tree)
    seconds = time.time() - started
    os.unlink(path)
    return seconds, proc.stdout, proc.returncode


def rerun(bench, count=5):
    """A deploy that changes nothing (everything is up), against a one-task ping playbook over the same SSH, in
    alternation (a re-run, a ping, ...: the machine's slow moments fall on both); RPCs of the login user per run,
    and the ratio of the best times and of the medians. Rows for this tree, and for the --before tree if given."""
    fd, ping = tempfile.mkstemp(suffix='.yml')
    with os.fdopen(fd, 'w') as handle:
        json.dump([{'hosts': 'training', 'gather_facts': False, 'tasks': [{'ansible.builtin.ping': {}}]}], handle)
    rows = []
    trees = [('after', REPO)] + [('before', t) for k, t in bench.trees.items() if k == 'before']
    for label, tree in trees:
        work = 'bench-rerun-%s-%s' % (bench.id, label)
        extra = {'glm_work_dir': '~/' + work, 'glm_download_job_name': 'bench-dl-%s-%s' % (bench.id, label),
                 'glm_serve_job_name': 'bench-srv-%s-%s' % (bench.id, label), 'download_min_free_gb': 1,
                 'server_wait_timeout': 300, 'server_wait_sleep': 5, 'server_time': '00:30:00'}
        playbook = os.path.join(tree, 'playbooks', 'deploy.yml')
        seconds, out, rc = login_playbook(playbook, extra, tree)
        if rc:
            raise SystemExit('the first deploy failed (%s):\n%s' % (label, out[-3000:]))
        lines = len(out.splitlines())
        rows.append((label, 'deploy from nothing', round(seconds, 1), None, lines, _tasks(out)))
        times = {'deploy': [], 'ping': []}
        for i in range(count):
            before = rpc_counts().get(LOGIN_USER, 0)
            seconds, out, rc = login_playbook(playbook, extra, tree)
            rpcs = rpc_counts().get(LOGIN_USER, 0) - before
            changed = [m.group(3) for m in RECAP.finditer(out)]
            times['deploy'].append(seconds)
            rows.append((label, 'deploy again #%d (changed=%s, rc %d)' % (i + 1, ','.join(changed), rc), round(seconds, 2),
                         rpcs, len(out.splitlines()), _tasks(out)))
            before = rpc_counts().get(LOGIN_USER, 0)
            seconds, out, rc = login_playbook(ping, {}, tree)
            times['ping'].append(seconds)
            rows.append((label, 'ping playbook #%d' % (i + 1), round(seconds, 2), rpc_counts().get(LOGIN_USER, 0) - before,
                         len(out.splitlines()), _tasks(out)))
        best = min(times['deploy']) / min(times['ping'])
        middle = statistics.median(times['deploy']) / statistics.median(times['ping'])
        rows.append((label, '**re-run / ping**: best %.2f / %.2f s, median %.2f / %.2f s' % (
            min(times['deploy']), min(times['ping']), statistics.median(times['deploy']), statistics.median(times['ping'])),
            '**%.2f x** best, %.2f x median' % (best, middle), None, None, None))
        teardown = os.path.join(tree, 'playbooks', 'teardown.yml')
        seconds, out, rc = login_playbook(teardown, dict(extra, glm_teardown_download=True), tree)
        rows.append((label, 'teardown', round(seconds, 1), None, len(out.splitlines()), _tasks(out)))
        sh(['runuser', '-u', LOGIN_USER, '--', 'rm', '-rf', os.path.join(pwd.getpwnam(LOGIN_USER).pw_dir, work)])
    os.unlink(ping)
    return rows


def _tasks(out):
    """Tasks run on the login host: ok + changed + failed + skipped of its recap (None without one)."""
    found = [m for m in RECAP.finditer(out) if m.group(1) != 'localhost']
    if not found:
        return None
    m = found[-1]
    return int(m.group(2)) + int(m.group(5)) + int(m.group(6))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--samples', type=int, default=5)
    parser.add_argument('--wait', type=int, default=120)
    parser.add_argument('--only', choices=['load', 'latency', 'rerun', 'chain', 'deploy'])
    parser.add_argument('--deploy-chain', default='480,300', help='deploy: download and loading seconds (default 480,300)')
    parser.add_argument('--chain', default='480,240', help='the long chain: download and loading seconds (default 480,240)')
    parser.add_argument('--before', metavar='REV', help='also run the module of this git revision, side by side')
    opts = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit('run as root (sdiag, users, runuser)')
    bench = Bench(opts.before)
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
                for kind in [k for k in bench.users if k != 'naive']:
                    samples = func(bench, opts.samples, kind)
                    values = [s[0] for s in samples if s[0] is not None and not s[2]]
                    print('\n## Detection latency (%s): %s' % ('this tree' if kind == 'module' else opts.before, label))
                    print('samples (latency s, controller calls, failed): %s' % samples)
                    if values:
                        print('median %.2f s, min %.2f s, max %.2f s (to the controller-side task right after the module returned)' % (
                            statistics.median(values), min(values), max(values)))
        if opts.only in (None, 'chain'):
            download, loading = [int(x) for x in opts.chain.split(',')]
            print('\n## A deploy\'s long wait, all in for the waiter (submit both jobs, wait until /v1/models answers)')
            print('| chain | waiter | seconds | RPCs of the user (sdiag) | RPCs of the waiter (log) | waiter RPCs/min '
                  '| squeue/scontrol calls | failed | by type |')
            print('|---|---|---|---|---|---|---|---|---|')
            for row in long_chain(bench, download, loading):
                print('| %s | %s | %s | %s | %s | %s | %s | %s | %s |' % row)
            print('(the user\'s RPCs include those its jobs make themselves: srun creating steps, %s)' % ', '.join(JOB_SIDE_RPCS))
        if opts.only in (None, 'deploy'):
            import bench_deploy  # pylint: disable=import-outside-toplevel
            download, loading = [int(x) for x in opts.deploy_chain.split(',')]
            trees = [REPO] + ([bench.trees['before']] if 'before' in bench.trees else [])
            for tree in trees:
                bench_deploy.report(bench_deploy.deploy(tree, download, loading))
        if opts.only in (None, 'rerun'):
            print('\n## Deploy again with everything up, against a ping playbook (login user %s over SSH)' % LOGIN_USER)
            print('| tree | run | seconds | RPCs of %s | output lines | tasks |' % LOGIN_USER)
            print('|---|---|---|---|---|---|')
            for row in rerun(bench):
                print('| %s | %s | %s | %s | %s | %s |' % row)
    finally:
        bench.cleanup()


if __name__ == '__main__':
    main()
