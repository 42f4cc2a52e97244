# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Secrets: after a REAL deploy on the LIVE local cluster (own work dir ~/glm-it-secrets, jobs it-sec-download and
it-sec-serve, smoke test on, `ansible-playbook -vvv`), the API key is looked for, as root, in:

- every process's command line on the machine (/proc/*/cmdline), sampled every 0.2 s from a background thread
  DURING the deploy (and during the rotation), and once after;
- `scontrol show job -dd` of both jobs, the batch scripts Slurm stored (`scontrol write batch_script ID -`), and
  every file under the cluster's state and spool folders (/var/lib/glm-cluster: StateSaveLocation's job.N/script
  and environment files, the slurmd spools);
- every file under the login user's home: the key may be only in files of mode 0600 (the key file, the server's
  log, the job's transient config); the key file itself is 0600, its folder 0700. The same holds for every other
  glm key found there (a demo's ~/glm/api-key, molecule's ~/glm-molecule/api-key);
- the whole `ansible-playbook -vvv` output of the deploy and of the rotation;
- molecule's files: Molecule 26 writes no log file of its own (its output goes to the terminal); what it leaves
  is its ephemeral folder (~/.ansible/tmp/molecule.*, ~/.cache/molecule, $MOLECULE_EPHEMERAL_DIRECTORY: the
  inventory, ansible.cfg, state). Those are scanned for this key and for molecule's own key; the test skips, and
  says so, when no molecule run left anything on this machine.

It must find none. Each scanner is first shown to find a planted value (test_scanners_find_a_planted_secret).
Rotation: `api_key_rotate=true` makes a new key, the server job is submitted again (new id), the old key gets 401
from /v1/models and the new one 200. The jobs are torn down at the end.

Run as root on the machine of the local cluster: .venv/bin/pytest tests/integration/test_secrets.py
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import os
import stat
import subprocess
import threading
import time
import uuid

import pytest

import cluster_target as target
from deploy_helpers import (REPO, cmdlines_holding, files_holding, isolated_vars, live_jobs, login_home,
                            require_cluster, run_playbook, scancel_names, ssh)

WORK = 'glm-it-secrets'
DOWNLOAD = 'it-sec-download'
SERVE = 'it-sec-serve'
VARS = isolated_vars(WORK, DOWNLOAD, SERVE, glm_smoke_test=True, glm_smoke_test_timeout=60)
CLUSTER_FILES = target.DIR


class CmdlineSampler(threading.Thread):
    """Keeps every distinct command line seen on the machine while it runs."""

    def __init__(self, period=0.2):
        super(CmdlineSampler, self).__init__(daemon=True)
        self.period = period
        self.seen = set()
        self.samples = 0
        self.halt = threading.Event()

    def run(self):
        me = str(os.getpid())
        while not self.halt.is_set():
            for pid in os.listdir('/proc'):
                if not pid.isdigit() or pid == me:
                    continue
                try:
                    with open('/proc/%s/cmdline' % pid, 'rb') as handle:
                        self.seen.add(handle.read())
                except OSError:
                    pass
            self.samples += 1
            self.halt.wait(self.period)

    def stop(self):
        self.halt.set()
        self.join()

    def holding(self, secret):
        return [line.replace(b'\0', b' ').decode('utf-8', 'replace') for line in self.seen if secret.encode() in line]


def slurm(argv):
    env = target.slurm_env()
    return subprocess.run(target.slurm_argv(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, env=env,
                          check=False)


# Jobs of an earlier run of this file that Slurm still shows (finished jobs stay visible for MinJobAge).
EARLIER_JOBS = set()


def jobs_by_name():
    """{name: [(id, state, node), ...]} of this run's jobs, oldest first (squeue -t all as the login user)."""
    out = ssh("squeue --me -h -t all -n %s,%s -o '%%i|%%j|%%T|%%N'" % (DOWNLOAD, SERVE))
    found = {DOWNLOAD: [], SERVE: []}
    for line in out.splitlines():
        if line.strip():
            job_id, name, state, node = line.split('|')
            if job_id not in EARLIER_JOBS:
                found[name].append((job_id, state, node))
    for rows in found.values():
        rows.sort(key=lambda row: int(row[0].split('_')[0]))
    return found


def http_status(url, key, tmp):
    """GET url with `Authorization: Bearer key`; the header comes from a 0600 file, never from argv."""
    if target.IN_ROOT:
        return target.http_status(url, key)   # node names resolve inside the root only
    header = os.path.join(tmp, 'auth-%s' % uuid.uuid4().hex)
    fd = os.open(header, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, 'w') as handle:
        handle.write('Authorization: Bearer %s\n' % key)
    try:
        proc = subprocess.run(['curl', '-s', '-o', '/dev/null', '-m', '10', '-w', '%{http_code}', '-H', '@' + header,
                               url], stdout=subprocess.PIPE, universal_newlines=True, check=False)
        return proc.stdout.strip()
    finally:
        os.unlink(header)


def read_key(path):
    with open(path) as handle:
        return handle.read().strip()


def deploy(tmp, extra=None, verbosity=3):
    """The real deploy with the command-line sampler running; a marker process started meanwhile proves the
    sampler sees processes that come and go during the run."""
    sampler = CmdlineSampler()
    sampler.start()
    marker = 'glm-it-sampler-marker-%s' % uuid.uuid4().hex
    probe = subprocess.Popen(['sh', '-c', 'sleep 1.5', marker])
    try:
        proc = run_playbook('deploy.yml', dict(VARS, **(extra or {})), tmp, verbosity=verbosity, timeout=900)
    finally:
        probe.wait()
        sampler.stop()
    return proc, sampler, marker


@pytest.fixture(scope='module')
def env(tmp_path_factory):
    require_cluster()
    tmp = str(tmp_path_factory.mktemp('secrets'))
    home = login_home()
    work = os.path.join(home, WORK)
    scancel_names([DOWNLOAD, SERVE])
    EARLIER_JOBS.update(row[0] for rows in jobs_by_name().values() for row in rows)
    subprocess.run(['rm', '-rf', work], check=True)
    state = {'tmp': tmp, 'home': home, 'work': work}
    try:
        proc, sampler, marker = deploy(tmp)
        output = proc.stdout + proc.stderr
        with open(os.path.join(tmp, 'deploy-vvv.log'), 'w') as handle:
            handle.write(output)
        assert proc.returncode == 0, 'deploy failed (rc %d):\n%s' % (proc.returncode, output[-4000:])
        state.update(output=output, sampler=sampler, marker=marker, key=read_key(os.path.join(work, 'api-key')),
                     jobs=jobs_by_name())
        yield state
    finally:
        teardown = run_playbook('teardown.yml', dict(VARS, glm_teardown_download=True), tmp)
        scancel_names([DOWNLOAD, SERVE])
        subprocess.run(['rm', '-rf', work], check=False)
        assert teardown.returncode == 0, teardown.stdout[-2000:] + teardown.stderr[-2000:]
        time.sleep(1)
        assert live_jobs(lambda name: name in (DOWNLOAD, SERVE)) == [], 'jobs left after the teardown'


def test_scanners_find_a_planted_secret(tmp_path):
    """Every scanner below finds a value when it IS there, so 'none found' means something."""
    planted = 'planted-%s' % uuid.uuid4().hex
    (tmp_path / 'sub').mkdir()
    leak = tmp_path / 'sub' / 'leak.txt'
    leak.write_text('x %s y\n' % planted)
    os.chmod(str(leak), 0o644)
    assert files_holding(str(tmp_path), planted) == [(str(leak), 0o644)]
    proc = subprocess.Popen(['sh', '-c', 'sleep 5', planted])
    try:
        time.sleep(0.3)
        assert [pid for pid, _line in cmdlines_holding(planted)] == [proc.pid]
        sampler = CmdlineSampler(period=0.05)
        sampler.start()
        time.sleep(0.3)
        sampler.stop()
        assert sampler.holding(planted) and sampler.samples >= 2
    finally:
        proc.kill()
        proc.wait()


def test_deploy_answered_with_the_key(env):
    assert len(env['key']) == 48 and all(c in '0123456789abcdef' for c in env['key'])
    assert [state for _id, state, _node in env['jobs'][SERVE]] == ['RUNNING']
    assert env['jobs'][DOWNLOAD], 'the download job is not in squeue -t all'
    node = env['jobs'][SERVE][0][2]
    assert http_status('http://%s:30000/v1/models' % node, env['key'], env['tmp']) == '200'
    assert http_status('http://%s:30000/v1/models' % node, 'not-the-key', env['tmp']) == '401'


def test_key_on_no_command_line_during_or_after_the_deploy(env):
    sampler = env['sampler']
    assert sampler.samples >= 10, 'the sampler ran %d times only' % sampler.samples
    assert sampler.holding(env['marker']), 'the sampler missed the marker process started during the deploy'
    assert sampler.holding(env['key']) == []
    assert cmdlines_holding(env['key']) == []


def test_key_not_in_scontrol_nor_in_the_stored_scripts(env):
    for name in (DOWNLOAD, SERVE):
        job_id = env['jobs'][name][-1][0]
        show = slurm(['scontrol', 'show', 'job', '-dd', job_id])
        assert show.returncode == 0 and 'JobName=%s' % name in show.stdout, show.stdout + show.stderr
        assert env['key'] not in show.stdout + show.stderr
        script = slurm(['scontrol', 'write', 'batch_script', job_id, '-'])
        assert script.returncode == 0 and '#SBATCH --job-name=%s' % name in script.stdout, script.stderr
        assert env['key'] not in script.stdout
    # StateSaveLocation (job.N/script, job.N/environment) and the slurmd spools, logs, stand-ins
    stored = glob.glob(os.path.join(CLUSTER_FILES, 'state', 'ctld', 'hash.*', 'job.*', 'script'))
    assert stored, 'no job script under the StateSaveLocation: the scan below would see nothing'
    assert files_holding(CLUSTER_FILES, env['key']) == []


def test_key_only_in_0600_files_under_the_home(env):
    home, work = env['home'], env['work']
    key_file = os.path.join(work, 'api-key')
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(work).st_mode) == 0o700
    holding = files_holding(home, env['key'])
    assert key_file in [path for path, _mode in holding]
    assert [(path, oct(mode)) for path, mode in holding if mode != 0o600] == []
    # every other glm key on this machine (a demo's, molecule's) obeys the same rule
    for other in glob.glob(os.path.join(home, '*', 'api-key')):
        if other != key_file and os.path.getsize(other):
            wrong = [(p, oct(m)) for p, m in files_holding(home, read_key(other)) if m != 0o600]
            assert wrong == [], 'the key of %s is in files not 0600' % other


def test_logs_scripts_and_endpoint_are_private(env):
    work = env['work']
    serve_id = env['jobs'][SERVE][-1][0]
    download_id = env['jobs'][DOWNLOAD][-1][0]
    serve_log = os.path.join(work, '%s-%s.out' % (SERVE, serve_id))
    with open(serve_log) as handle:
        # SGLang (and its stand-in) logs server_args with the key in clear: this log is why the umask matters
        assert env['key'] in handle.read(), 'the server log does not print the key: this check would prove nothing'
    for name in ('%s-%s.out' % (SERVE, serve_id), '%s-%s.out' % (DOWNLOAD, download_id), 'endpoint', 'api-key',
                 'serve.sbatch', 'download.sbatch'):
        path = os.path.join(work, name)
        assert oct(stat.S_IMODE(os.stat(path).st_mode)) == oct(0o600), name


def test_key_not_in_the_vvv_output(env):
    out = env['output']
    assert 'ESTABLISH SSH CONNECTION' in out and '<%s>' % target.SSH_HOST in out, 'not a -vvv run'
    assert 'Submit the server job' in out and 'Send the guide' in out
    assert env['key'] not in out


def test_key_not_in_molecule_files(env):
    places = glob.glob(os.path.expanduser('~/.ansible/tmp/molecule.*')) + glob.glob(os.path.expanduser(
        '~/.cache/molecule')) + [p for p in [os.environ.get('MOLECULE_EPHEMERAL_DIRECTORY')] if p]
    places = [p for p in places if os.path.isdir(p)]
    if not places:
        pytest.skip('no molecule run left files on this machine (~/.ansible/tmp/molecule.*, ~/.cache/molecule)')
    keys = [env['key']]
    molecule_key = os.path.join(env['home'], 'glm-molecule', 'api-key')
    if os.path.exists(molecule_key):
        keys.append(read_key(molecule_key))
    scanned = 0
    for place in places:
        for key in keys:
            assert files_holding(place, key) == [], place
        scanned += sum(len(files) for _d, _s, files in os.walk(place))
    assert scanned, 'molecule folders hold no file'


def test_key_not_in_molecule_output(env):
    """`make molecule` (run before pytest by `make test`) keeps molecule's whole terminal output in this file."""
    log = os.path.join(REPO, 'tests', 'output', 'molecule.log')
    if not os.path.exists(log):
        pytest.skip('no molecule output to scan: run `make molecule` first (make test does)')
    with open(log, encoding='utf-8', errors='replace') as handle:
        out = handle.read()
    assert 'converge' in out and 'idempotence' in out, 'not the output of a molecule test run'
    molecule_key = os.path.join(env['home'], 'glm-molecule', 'api-key')
    assert os.path.exists(molecule_key), 'molecule keeps its key after teardown, as deploy does'
    assert read_key(molecule_key) not in out
    assert env['key'] not in out


def test_rotation_restarts_the_server_and_refuses_the_old_key(env):
    old_key, old_job = env['key'], env['jobs'][SERVE][-1]
    proc, sampler, _marker = deploy(env['tmp'], {'api_key_rotate': True, 'glm_smoke_test': False}, verbosity=3)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    new_key = read_key(os.path.join(env['work'], 'api-key'))
    assert new_key != old_key and len(new_key) == 48
    jobs = jobs_by_name()[SERVE]
    live = [row for row in jobs if row[1] == 'RUNNING']
    assert len(live) == 1 and live[0][0] != old_job[0], jobs
    assert [row[1] for row in jobs if row[0] == old_job[0]] in ([], ['CANCELLED'], ['COMPLETED'], ['COMPLETING'])
    url = 'http://%s:30000/v1/models' % live[0][2]
    assert http_status(url, old_key, env['tmp']) == '401'
    assert http_status(url, new_key, env['tmp']) == '200'
    for key in (old_key, new_key):
        assert key not in output
        assert sampler.holding(key) == []
    assert stat.S_IMODE(os.stat(os.path.join(env['work'], 'api-key')).st_mode) == 0o600
    assert [(p, oct(m)) for p, m in files_holding(env['home'], new_key) if m != 0o600] == []
