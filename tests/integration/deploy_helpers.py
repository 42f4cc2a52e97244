# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Helpers for the tests that run the real playbooks (deploy.yml, teardown.yml) against the LIVE local Slurm
cluster (tests/tooling/cluster/cluster.sh) as root on its machine: running a playbook with exact-typed extra vars,
looking at the login user's jobs over real SSH, snapshots of folders, a scanner for a secret, and a fault case (a
deploy of its own, cleaned up after: Case, made by conftest.py's fixture ``case``) with the hf stand-in's fetch log.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
# The module's own list of live and ending states (one list: playbooks, tests and module agree).
sys.path.insert(0, os.path.join(REPO, '.collections'))
from ansible_collections.glm.serve.plugins.module_utils.slurm_parse import ENDING_STATES, LIVE_STATES  # noqa: E402

import cluster_target as target  # noqa: E402  (GLM_CLUSTER_RELEASE picks the cluster: host or a Debian root)
from cluster_target import CLUSTER, LOGIN_USER  # noqa: E402,F401
sys.path.insert(0, os.path.join(REPO, 'tests', 'tooling'))
from procs import sglang_pids  # noqa: E402,F401  pylint: disable=import-error,unused-import

BIN = os.path.dirname(sys.executable)
SSH = ['ssh', '-i', target.SSH_KEY, '-o', 'UserKnownHostsFile=%s' % target.KNOWN_HOSTS,
       '-o', 'StrictHostKeyChecking=yes', '-o', 'BatchMode=yes', '-o', 'ControlMaster=auto',
       '-o', 'ControlPath=/tmp/glm-it-helpers-%C', '-o', 'ControlPersist=120', '-p', str(target.SSH_PORT),
       LOGIN_USER + '@' + target.SSH_HOST]


def isolated_vars(work, download, serve, **overrides):
    """Deploy variables for a test of its own: work dir ~/<work> and its own job names (so it never touches a
    demo's ~/glm, molecule's or another test's jobs), the free-space threshold the stand-in checkpoint needs,
    and short waits and time limits. overrides win."""
    result = {
        'glm_work_dir': '~/' + work,
        'glm_download_job_name': download,
        'glm_serve_job_name': serve,
        'download_min_free_gb': 1,
        'server_wait_timeout': 300,
        'server_wait_sleep': 5,
        'server_time': '00:30:00',
    }
    result.update(overrides)
    return result


def require_cluster():
    """Skip unless root on the machine of a running local cluster."""
    if os.geteuid() != 0:
        pytest.skip('these tests run as root on the machine of the local cluster')
    if not os.path.exists(CLUSTER):
        pytest.skip('no tests/tooling/cluster/cluster.sh')
    # `status` fails for a few seconds while a test restarts slurmctld: skip only when it stays so for a minute
    deadline = time.monotonic() + 60
    while True:
        proc = subprocess.run([CLUSTER, 'status'], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, check=False)
        if proc.returncode == 0 or time.monotonic() >= deadline:
            break
        time.sleep(2)
    if proc.returncode != 0:
        # in CI (make test started the cluster) a cluster that is down is a failure, not a reason to skip
        (pytest.fail if os.environ.get('CI') else pytest.skip)(
            'the local Slurm cluster is not up (tests/tooling/cluster/cluster.sh status):\n' + proc.stdout)


def login_home():
    return target.login_ids()[2]


def chown_login(path):
    uid, gid, _home = target.login_ids()
    os.chown(path, uid, gid)


#: The role's router_package and router_proxy_packages (LiteLLM's proxy in front, router_proxy=litellm, the default)
ROUTER_PACKAGES = ('smg==1.13.0', 'litellm[proxy]==1.108.7', 'prometheus-client==0.26.0')
ROUTER_WHEELS = 'glm-it-wheels'


def router_wheels():
    """The router's wheels (ROUTER_PACKAGES and their dependencies) for the login node's Python, in its home, made
    once (a Debian root's login node has no package index: the role installs from there, router_pip_args --no-index
    --find-links); the folder."""
    folder = os.path.join(login_home(), ROUTER_WHEELS)
    version = ssh('python3 -c "import sys; print(\'%d.%d\' % sys.version_info[:2])"').strip()
    # a wheel's file name spells a project's "-" as "_" (prometheus_client-0.26.0-py3-none-any.whl)
    wanted = [re.sub(r'\[.*\]', '', p).replace('-', '_').replace('==', '-') + '-' for p in ROUTER_PACKAGES]
    have = os.listdir(folder) if os.path.isdir(folder) else []
    if not all(any(n.startswith(w) for n in have) for w in wanted) or '.python-' + version not in have:
        shutil.rmtree(folder, ignore_errors=True)
        subprocess.run([sys.executable, '-m', 'pip', 'download', '-q'] + list(ROUTER_PACKAGES) + [
            '--python-version', version, '--only-binary=:all:', '--platform', 'manylinux_2_17_x86_64', '--platform',
            'manylinux2014_x86_64', '--platform', 'manylinux_2_28_x86_64', '--platform', 'linux_x86_64', '-d', folder],
            check=True)
        open(os.path.join(folder, '.python-' + version), 'w').close()
        for name in [''] + os.listdir(folder):
            chown_login(os.path.join(folder, name))
    return folder


#: another user of the cluster, with a login of their own on the same login node (tests/tooling/cluster/cluster.sh
#: OTHER_USER; '' where the cluster has none: a Debian root's)
OTHER_USER = '' if target.IN_ROOT else target.ENV.get('GLM_CLUSTER_OTHER_USER', '')
SSH_OTHER = SSH[:-1] + ['%s@%s' % (OTHER_USER, target.SSH_HOST)]


def ssh_other(command, timeout=60):
    """Run a shell command as OTHER_USER over real SSH; (exit status, stdout and stderr)."""
    proc = subprocess.run(SSH_OTHER + [command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                          universal_newlines=True, check=False, timeout=timeout)
    return proc.returncode, proc.stdout


def ssh(command, check=True, timeout=60):
    """Run a shell command as the login user over real SSH; returns stdout."""
    proc = subprocess.run(SSH + [command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                          universal_newlines=True, check=False, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError('ssh %r: rc %d\n%s%s' % (command, proc.returncode, proc.stdout, proc.stderr))
    return proc.stdout


def scale_log(work_name):
    """The autoscaler's scale log of the deployment in ~/WORK_NAME, each line's text (its epoch and date cut)."""
    return [line.split(' ', 2)[2] for line in ssh('cat ~/%s/scale.log 2>/dev/null || true' % work_name).splitlines()
            if len(line.split(' ', 2)) == 3]


def wait_for_scale_line(work_name, words, timeout, after=0, router_name=None):
    """The scale log's first line (from index AFTER) with all of WORDS, and its index, once it is there (one ssh a
    second, no Slurm call); AssertionError with the log (and ROUTER_NAME's job log) after TIMEOUT s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = scale_log(work_name)
        found = [(i, line) for i, line in enumerate(lines) if i >= after and all(w in line for w in words)]
        if found:
            return found[0]
        time.sleep(1)
    raise AssertionError('no %r in the scale log after %d s:\n%s\n%s' % (
        words, timeout, '\n'.join(scale_log(work_name)), ssh('grep -a glm.serve ~/%s/%s-*.out | tail -n 30' % (
            work_name, router_name), check=False) if router_name else ''))


def my_jobs(match):
    """The login user's jobs (squeue --me, as the login user over SSH) whose name satisfies match(name):
    list of (id, name, state) in the order of the ids as numbers (job 100 after job 98)."""
    out = ssh("squeue --me -h -t all -o '%i|%j|%T'")
    rows = [tuple(line.split('|', 2)) for line in out.splitlines() if line.strip()]
    return sorted((row for row in rows if match(row[1])), key=lambda row: [int(p) if p.isdigit() else 0 for p in row[0].split('_')])


def live_jobs(match):
    """The jobs not over yet: live (glm.serve.slurm_job_info's `live`: queued or running) or ending (COMPLETING,
    STAGE_OUT: still on a node), by the module's own lists of states."""
    return [row for row in my_jobs(match) if row[2] in LIVE_STATES | ENDING_STATES]


def scancel_names(names):
    """Cancel the login user's jobs of these names (scancel --name takes one name, not a list)."""
    if names:
        ssh('; '.join('scancel --name=%s' % shlex.quote(name) for name in names), check=False)


def load_target(work_name, router_name):
    """(the endpoint file's text, its GLM_BASE_URL, the router job's node) of a deployment behind the router: what a
    load through the router needs (two ssh calls, one squeue as the login user)."""
    endpoint = ssh('cat ~/%s/endpoint' % work_name)
    base = dict(line.split('=', 1) for line in endpoint.split())['GLM_BASE_URL']
    router = live_jobs(lambda n: n == router_name)[0]
    return endpoint, base, ssh("squeue --me -h -j %s -o '%%N'" % router[0]).strip()


def start_load(work_name, base, node, seconds):
    """tests/tooling/loadgen.py on the login node, as a client on the cluster would run it: 5 requests a second to
    BASE for SECONDS, a quarter streamed, the key from the deployment's file, one line per request in
    WORK/it-load.jsonl. No Slurm call. Returns the Popen (its last stdout line: the JSON summary)."""
    work = os.path.join(login_home(), work_name)
    loadgen = os.path.join(work, 'it-loadgen.py')
    shutil.copy(os.path.join(REPO, 'tests', 'tooling', 'loadgen.py'), loadgen)
    chown_login(loadgen)
    return subprocess.Popen(SSH + ['python3 %s --url %s --key-file ~/%s/api-key --rate 5 --duration %d --streamed 0.25 '
                                   '--timeout 60 --allow-host %s --log %s/it-load.jsonl' % (loadgen, base, work_name, seconds, node, work)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, universal_newlines=True)


#: the stand-in SGLang of the tests under load: 1 s of loading, 1 s of warm-up, each generation request 2 s
STANDIN_UNDER_LOAD = {'GLM_STANDIN_SGLANG_LOAD': '1', 'GLM_STANDIN_SGLANG_WARMUP': '1', 'GLM_STANDIN_SGLANG_DECODE': '2'}


class RouterDeployment:
    """One test's deployment behind SGLang's router on the live cluster, from nothing and back to nothing (the
    continuity tests' and test_rolling's set-up, written once): its work dir ~/WORK, its jobs (DOWNLOAD, SERVE,
    SERVE-2, SERVE-router; OTHERS: jobs the test submits itself), its variables (isolated_vars, the router installed
    from the local wheels, on a node, syncing and checking every 2 s; SETTINGS win) and the loads it started.

    As a context manager: on entry no job of those names and no work dir (the wheels in place); on exit the loads
    stopped, the work dir kept in TMP_PATH/work (no key, no dot files), teardown.yml, the OTHERS cancelled, and then
    no job of the deployment left but COMPLETING ones (checked when the test itself passed)."""

    def __init__(self, tmp_path, work, download, serve, others=(), **settings):
        self.tmp_path, self.work_name = str(tmp_path), work
        self.work = os.path.join(login_home(), work)
        self.router = serve + '-router'
        self.names, self.others = [download, serve, serve + '-2', self.router], list(others)
        self.settings = isolated_vars(work, download, serve, **dict(dict(
            server_env=STANDIN_UNDER_LOAD, server_wait_timeout=300, router_sync_interval=2, router_health_check_interval=2,
            router_host='node', router_pip_args=['--no-index', '--find-links', os.path.join(login_home(), ROUTER_WHEELS)]),
            **settings))
        self.loads = []

    def variables(self, **more):
        return dict(self.settings, **more)

    def deploy(self, timeout=900, **more):
        return run_playbook('deploy.yml', self.variables(**more), self.tmp_path, timeout=timeout)

    def jobs(self):
        """{job name: (job id, state)} of the live jobs of the deployment and of OTHERS."""
        return {row[1]: (row[0], row[2]) for row in live_jobs(lambda name: name in self.names + self.others)}

    def target(self):
        """(the endpoint file's text, the router's base URL, its node): load_target."""
        return load_target(self.work_name, self.router)

    def load(self, seconds):
        """start_load through the router for SECONDS; stopped at the exit if it still runs."""
        _endpoint, base, node = self.target()
        self.loads.append(start_load(self.work_name, base, node, seconds))
        return self.loads[-1]

    def stop_loads(self):
        """Ends the loads early (loadgen's SIGTERM: it finishes the requests it has sent and prints its counts)."""
        ssh("pkill -TERM -f '%s/it-loadgen[.]py' || true" % self.work)

    def __enter__(self):
        require_cluster()
        scancel_names(self.names + self.others)
        shutil.rmtree(self.work, ignore_errors=True)
        router_wheels()
        return self

    def __exit__(self, kind, _value, _traceback):
        for load in self.loads:
            if load.poll() is None:
                load.kill()
        if os.path.isdir(self.work):
            shutil.copytree(self.work, os.path.join(self.tmp_path, 'work'), dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns('api-key', 'replica-key*', 'keys', '.*', 'router-venv'))
        run_playbook('teardown.yml', self.variables(glm_teardown_download=True), self.tmp_path)
        scancel_names(self.others)
        left = {name: job for name, job in self.jobs().items() if name in self.names and job[1] != 'COMPLETING'}
        scancel_names(self.names)
        shutil.rmtree(self.work, ignore_errors=True)
        assert kind is not None or not left, 'jobs left after the teardown: %s' % left
        return False


def start_relay(work_name, to, port):
    """The tunnel's relay on the login node, as the line deploy prints starts it (roles/glm/files/glm_relay.py, its
    input kept open): 127.0.0.1:PORT there, to TO (NODE:PORT) until the deployment's endpoint file names another
    address, which each new connection then follows. Returns the Popen (close its stdin, or kill it, to end it)."""
    work = os.path.join(login_home(), work_name)
    return subprocess.Popen(SSH + ['python3 %s/glm_relay.py %d %s %s/endpoint' % (work, port, to, work)],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, universal_newlines=True)


def snapshot(root):
    """Every entry under root: relative path -> (type, size, mtime_ns, mode, uid, gid). Missing root: {}."""
    result = {}
    if not os.path.lexists(root):
        return result
    for folder, dirs, files in os.walk(root):
        for name in [''] + dirs + files:
            path = os.path.join(folder, name) if name else folder
            if not name and folder != root:
                continue
            st = os.lstat(path)
            result[os.path.relpath(path, root)] = (stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns,
                                                   stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
    return result


def run_playbook(playbook, extra_vars, workdir, verbosity=0, result_json=False, timeout=600, env=None, options=()):
    """ansible-playbook playbooks/<playbook> -e @vars.json from the repo root (its ansible.cfg: inventory/local,
    the tree as glm.serve). result_json: the default callback prints results as JSON (for failures()).
    options: more ansible-playbook options (e.g. ['--check']). Returns the completed process (text output)."""
    fd, path = tempfile.mkstemp(suffix='.json', prefix='vars-', dir=workdir)
    with os.fdopen(fd, 'w') as handle:
        json.dump(extra_vars, handle)
    environ = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get('PATH', ''), ANSIBLE_NOCOLOR='1',
                   ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'),
                   ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, '.collections'))
    if result_json:
        environ['ANSIBLE_CALLBACK_RESULT_FORMAT'] = 'json'
    environ.update(env or {})
    argv = [os.path.join(BIN, 'ansible-playbook'), os.path.join('playbooks', playbook), '-e', '@' + path]
    if target.INVENTORY:
        argv[1:1] = ['-i', target.INVENTORY]
    if verbosity:
        argv.append('-' + 'v' * verbosity)
    argv.extend(options)
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          env=environ, cwd=REPO, timeout=timeout, check=False, stdin=subprocess.DEVNULL)


TASK_HEADER = re.compile(r'^TASK \[(?:[^\]]* : )?(.*?)\] \*+$', re.M)
FAILED_RESULT = re.compile(r'^(?:failed|fatal): \[[^\]]+\](?: \(item=[^\n]*?\))?(?:: FAILED!)? => ', re.M)
RECAP = re.compile(r'^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)', re.M)


def failures(text):
    """From the default callback's output with results as JSON: ([(task name, message)] of every failed result
    in order, {host: changed count} from the recap)."""
    decoder = json.JSONDecoder()
    found = []
    for match in FAILED_RESULT.finditer(text):
        headers = [h.group(1) for h in TASK_HEADER.finditer(text, 0, match.start())]
        result, _end = decoder.raw_decode(text, match.end())
        found.append((headers[-1] if headers else '', str(result.get('msg', ''))))
    changed = {m.group(1): int(m.group(3)) for m in RECAP.finditer(text)}
    return found, changed


def recap(proc, host='local'):
    """(changed, failed) of host (the login host of inventory/local) from the play recap of a finished run;
    fails when there is no recap for it or the host was unreachable."""
    found = [m for m in RECAP.finditer(proc.stdout) if m.group(1) == host]
    assert found, 'no play recap for %s:\n%s\n%s' % (host, proc.stdout[-3000:], proc.stderr[-2000:])
    assert found[-1].group(4) == '0', 'host %s unreachable:\n%s' % (host, proc.stdout[-3000:])
    return int(found[-1].group(3)), int(found[-1].group(5))


def files_holding(root, secret, skip=None):
    """Files under root whose bytes contain secret: list of (path, mode). skip(path) -> True leaves a path out.
    Reads as root; follows no symlink; unreadable special files are skipped."""
    secret = secret.encode() if not isinstance(secret, bytes) else secret
    hits = []
    for folder, dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if skip and skip(path):
                continue
            try:
                st = os.lstat(path)
                if not stat.S_ISREG(st.st_mode):
                    continue
                with open(path, 'rb') as handle:
                    if secret in handle.read():
                        hits.append((path, stat.S_IMODE(st.st_mode)))
            except OSError:
                continue
    return hits


def cmdlines_holding(secret):
    """Processes whose command line (/proc/PID/cmdline) contains secret: list of (pid, cmdline)."""
    secret = secret.encode() if not isinstance(secret, bytes) else secret
    hits = []
    me = os.getpid()
    for pid in os.listdir('/proc'):
        if not pid.isdigit() or int(pid) == me:
            continue
        try:
            with open('/proc/%s/cmdline' % pid, 'rb') as handle:
                data = handle.read()
        except OSError:
            continue
        if secret in data:
            hits.append((int(pid), data.replace(b'\0', b' ').decode('utf-8', 'replace')))
    return hits


# -- fault cases: a deploy of its own per case (test_faults.py, test_checksums.py) -------------------------------

SERVER_WAIT_TIMEOUT = 120
FAST_SERVER = {'GLM_STANDIN_SGLANG_LOAD': '1', 'GLM_STANDIN_SGLANG_WARMUP': '1'}
SERVE_TASK = 'Submit the server job and wait for it to answer'


def cluster_ready():
    """require_cluster(), with patience: `cluster.sh status` also fails for a few seconds while another test restarts
    slurmctld or while a node shows a passing state (e.g. PLANNED by the backfill scheduler), and a case must not be
    skipped for that. Skips only when the cluster stays not ready for a minute."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return require_cluster()
        except pytest.skip.Exception:
            if os.geteuid() != 0 or not os.path.exists(CLUSTER) or time.monotonic() >= deadline:
                raise
            time.sleep(2)


class Case:
    """A case's work dir, job names, deploy runs and cleanup."""

    def __init__(self, tag, tmp):
        self.tag = '%s-%s' % (tag, uuid.uuid4().hex[:6])
        self.tmp = tmp
        self.home = login_home()
        self.rel = 'glm-it-faults-%s' % self.tag
        self.dir = os.path.join(self.home, self.rel)
        self.download = 'itf-%s-download' % self.tag
        self.serve = 'itf-%s-serve' % self.tag
        self.extra_names = []

    def vars(self, **extra):
        base = isolated_vars(self.rel, self.download, self.serve, glm_hosts='training', server_time='00:10:00',
                             server_wait_timeout=SERVER_WAIT_TIMEOUT, server_env=dict(FAST_SERVER))
        base.update(extra)
        return base

    def deploy(self, timeout=300, **extra):
        """Runs deploy.yml; returns (proc, seconds, [(task, msg)] of the failures)."""
        for _attempt in range(3):
            started = time.monotonic()
            proc = run_playbook('deploy.yml', self.vars(**extra), self.tmp, result_json=True, timeout=timeout)
            took = time.monotonic() - started
            found, _changed = failures(proc.stdout)
            if not any(task != SERVE_TASK and 'Unable to contact slurm controller' in msg for task, msg in found):
                break
            # slurmctld restarting (another test on this cluster may restart it) before anything was submitted
            time.sleep(10)
        return proc, took, found

    def popen(self, **extra):
        """Starts deploy.yml; its output is unbuffered, so that Output can stamp each line when it is printed."""
        fd, path = tempfile.mkstemp(suffix='.json', prefix='vars-', dir=self.tmp)
        with os.fdopen(fd, 'w') as handle:
            json.dump(self.vars(**extra), handle)
        env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get('PATH', ''), ANSIBLE_NOCOLOR='1',
                   ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_CALLBACK_RESULT_FORMAT='json',
                   ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, '.collections'), PYTHONUNBUFFERED='1')
        return subprocess.Popen([os.path.join(BIN, 'ansible-playbook'), 'playbooks/deploy.yml', '-e', '@' + path],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, env=env, cwd=REPO,
                                stdin=subprocess.DEVNULL)

    def mine(self, name):
        return name in (self.download, self.serve) or name in self.extra_names

    def jobs(self):
        """All jobs of this case's names, finished ones too: [(id, name, state)]."""
        return my_jobs(self.mine)

    def live(self):
        return live_jobs(self.mine)

    def download_row(self):
        return self.job_state(self.download)

    def job_state(self, name):
        rows = [r for r in self.jobs() if r[1] == name]
        return rows[-1] if rows else None

    def running(self, name, also=None):
        """The row of name's job when it RUNS (and also() holds), else None."""
        row = self.job_state(name)
        return row if row and row[2] == 'RUNNING' and (also is None or also()) else None

    def wait_for(self, predicate, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.5)
        raise AssertionError('%s did not happen within %ds; jobs: %s' % (what, timeout, self.jobs()))

    def warm(self, source):
        """Copy a complete image and model (from the module's warm dir) so that no download is needed."""
        os.makedirs(self.dir, 0o700)
        chown_login(self.dir)
        for name in ('sglang.sqsh', 'GLM-5.3-Flash'):
            src, dst = os.path.join(source, name), os.path.join(self.dir, name)
            if os.path.isdir(src):
                shutil.copytree(src, dst, symlinks=True)
            else:
                shutil.copy2(src, dst)
            uid, gid = target.login_ids()[:2]                   # the login user's ids on this cluster (a root's differ)
            subprocess.run(['chown', '-R', '%d:%d' % (uid, gid), dst], check=True)

    def cleanup(self):
        """Cancels the case's jobs and waits until they have ended (a cancelled job is COMPLETING for up to KillWait,
        5 s, and longer on a loaded machine) before its folder goes. A job still live 60 s after scancel is left for
        the fixture's check to report."""
        scancel_names([self.download, self.serve] + self.extra_names)
        deadline = time.monotonic() + 60
        while self.live() and time.monotonic() < deadline:
            time.sleep(0.5)
        shutil.rmtree(self.dir, ignore_errors=True)


def hf_cache(case, name):
    """A file of the hf stand-in's own folder in the case's model dir (its fetch log, its gate)."""
    return os.path.join(case.dir, 'GLM-5.3-Flash', '.cache', 'huggingface', name)


def fetch_log(case):
    path = hf_cache(case, 'standin-fetch.log')
    try:
        with open(path) as handle:
            return [line.split(None, 1)[1].strip() for line in handle if line.startswith('fetched ')]
    except (IOError, OSError):
        return []
