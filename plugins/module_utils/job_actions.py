# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What slurm_job and slurm_job_info do: present, absent and info, on top of SlurmCli and JobWaiter.

Each action takes one :class:`Context` (the CLI client, the module's parameters, check mode, warn, the clock)
and returns the result dict; it raises SlurmError, WaitFailed or ActionError, which the modules turn into
``fail_json`` with :func:`fail_kwargs`.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import hashlib
import json
import os
import pwd
import re
import tempfile
import time

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None

from ansible_collections.glm.serve.plugins.module_utils import slurm_parse as sp
from ansible_collections.glm.serve.plugins.module_utils.slurm_cli import SlurmAccountingUnavailable, SlurmError, SlurmTransientError
from ansible_collections.glm.serve.plugins.module_utils import serve_progress
from ansible_collections.glm.serve.plugins.module_utils.job_waiter import JobWaiter, Target, WaitFailed, describe
from ansible_collections.glm.serve.plugins.module_utils.wait_policy import WaitPolicy
from ansible_collections.glm.serve.plugins.module_utils import model_probe as mp
from ansible_collections.glm.serve.plugins.module_utils import wait_rules as wr

RESULT_JOB_KEYS = ('job_id', 'name', 'user', 'state', 'reason', 'nodes', 'exit_code', 'output_path')
INFO_KEYS = ('job_id', 'name', 'user', 'state', 'reason', 'nodes', 'partition', 'elapsed', 'time_limit',
             'end_time', 'output_path', 'work_dir', 'dependency', 'exit_code', 'start_time', 'submit_time', 'source')

#: At most this many ended jobs per listing come from accounting (the newest), beside what slurmctld remembers.
ACCOUNTING_MAX = 5


class ActionError(Exception):
    """A user error found before any Slurm command ran (bad path, missing option)."""

    def __init__(self, msg, **extra):
        super(ActionError, self).__init__(msg)
        self.msg = msg
        self.extra = extra


def current_user():
    return pwd.getpwuid(os.geteuid()).pw_name


class Context:
    """What every step of an action needs: the CLI client, the module's parameters, check mode, ``warn`` and
    ``log`` (the module's), the file system the waiter watches, and one clock (the client's)."""

    def __init__(self, cli, params, check_mode=False, warn=None, log=None, files=None):
        self.cli = cli
        self.params = params
        self.check_mode = check_mode
        self.warn = warn or (lambda msg: None)
        self.log = log or (lambda msg: None)
        self.files = files
        self.clock = cli.clock
        self.retry_timeout = params.get('retry_timeout') or 120
        self.name = params.get('name')
        self._user = params.get('user')
        self.recorded = {}          # job id -> what its submit record says (see recorded())
        self.record_lookup = None   # (job id, its row or None): the submit record's job as recorded_live() found it
        self.accounting_said = False
        cli.on_outage = self.outage

    def outage(self, seconds, error, timeout):
        """Says that a Slurm call waited for the controller (the waits of ``wait`` report their own)."""
        self.warn('the Slurm controller did not answer for %d s (%s); the call was retried until it did, as it is for up '
                  'to retry_timeout=%d s' % (round(seconds), error, timeout))

    @property
    def user(self):
        if self._user is None:
            self._user = current_user()
        return self._user

    def retry(self, func, *args, **kwargs):
        """func, with the controller's outages retried for up to ``retry_timeout`` seconds."""
        return self.cli.retry(func, self.retry_timeout, *args, **kwargs)

    def script_text(self):
        """The batch script as it is to be submitted: ``script_content`` if given, else the file (None if unreadable)."""
        if self.params.get('script_content') is not None:
            return self.params['script_content']
        try:
            with open(self.params['script'], 'rb') as handle:
                return handle.read().decode('utf-8', 'replace')
        except (IOError, OSError, TypeError, KeyError):
            return None


def base_result(ctx):
    return {
        'changed': False, 'job_id': None, 'cluster': None, 'name': ctx.name, 'user': ctx.user, 'state': None,
        'reason': None, 'nodes': None, 'exit_code': None, 'output_path': None, 'submitted': False,
        'cancelled': [], 'chain': [], 'duration': 0.0, 'slurm_version': ctx.cli.version()[0], 'polls': 0,
        'events': [],
    }


def fill_job(result, job):
    if job:
        for key in RESULT_JOB_KEYS:
            if job.get(key) is not None:
                result[key] = job.get(key)
    return result


def chain_entries(chain):
    return [dict((k, j.get(k)) for k in ('job_id', 'name', 'state', 'reason')) for j in chain]


def is_live(job):
    """In the queue and not ending: the one list of live states, ``slurm_parse.LIVE_STATES``."""
    return job.get('state') in sp.LIVE_STATES


def is_ending(job):
    """Still on its node but finishing (COMPLETING, STAGE_OUT): not live, not gone either."""
    return job.get('state') in sp.ENDING_STATES


def is_dead_pending(job):
    """A PENDING job whose dependency can never be satisfied: it will never run."""
    return job.get('state') == 'PENDING' and job.get('reason') == sp.NEVER_SATISFIED


def find_live(ctx, name=None, retry_timeout=None):
    """Live jobs of name (the context's by default) and the context's user, newest first."""
    name = name or ctx.name
    timeout = ctx.retry_timeout if retry_timeout is None else retry_timeout
    return newest_live(ctx, ctx.cli.retry(ctx.cli.squeue, timeout, name=name, user=ctx.user), [name])


def newest_live(ctx, rows, names):
    """The live rows of these names and the context's user, newest first."""
    rows = [r for r in rows if r.get('name') in names and (not ctx.user or r.get('user') == ctx.user) and is_live(r)]
    return sorted(rows, key=lambda r: _id_key(r['job_id']), reverse=True)


def _id_key(job_id):
    head = str(job_id).split('_', 1)[0].split('+', 1)[0]
    return int(head) if head.isdigit() else 0


def lookup(ctx, job_id):
    """The job with this id (finished ones too, while Slurm remembers them), or None."""
    return ctx.retry(ctx.cli.show_job, str(job_id))


def details(ctx, job):
    """Add output_path and exit_code (scontrol show job) to a squeue row.

    A live job this module submitted from the script as it is now (its submit record says so) needs no call: its
    output path is the script's ``#SBATCH --output`` pattern, expanded as Slurm does, in its working directory.
    """
    if job is None or job.get('output_path'):
        return job
    local = local_output_path(ctx, job)
    if local:
        return dict(job, output_path=local)
    shown = ctx.retry(ctx.cli.show_job, job['job_id'])
    if shown:
        merged = dict(job)
        for key, value in shown.items():
            if value is not None and (merged.get(key) is None or key in ('output_path', 'exit_code')):
                merged[key] = value
        job = merged
    path = job.get('output_path')
    if path and '%' in path:
        job['output_path'] = sp.expand_output_pattern(path, job['job_id'], job.get('name'), job.get('user'), job.get('work_dir'))
    return job


class SubmitLock:
    """An exclusive ``flock`` on a lock file, held around "look for a live job of this name, else submit", so that
    two runs on the same login node (two playbooks started at once) submit one job, not two.

    The file is made 0600 and left in place (removing it would race with the next holder). When it cannot be
    made or locked, the module warns and goes on without it; the check after sbatch still removes a duplicate.
    """

    def __init__(self, path, clock, timeout=120, warn=None, poll=0.2):
        self.path = path
        self.clock = clock
        self.timeout = timeout
        self.warn = warn or (lambda msg: None)
        self.poll = poll
        self.fd = None
        self.waited = 0.0

    def __enter__(self):
        if not self.path or fcntl is None:
            return self
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except (IOError, OSError) as exc:
            self.warn('cannot create the lock file %s (%s): submitting without it' % (self.path, exc))
            return self
        start = self.clock.now()
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self.waited = self.clock.now() - start
                return self
            except (IOError, OSError) as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    self.warn('cannot lock %s (%s): submitting without it' % (self.path, exc))
                    self._close()
                    return self
            if self.clock.now() - start >= self.timeout:
                self.warn('%s stayed locked for %ds by another run: submitting without it' % (self.path, self.timeout))
                self._close()
                return self
            self.clock.sleep(self.poll)

    @property
    def held(self):
        """True while this run holds the lock (False when it went on without it)."""
        return self.fd is not None

    def _close(self):
        if self.fd is not None:
            try:
                os.close(self.fd)
            finally:
                self.fd = None

    def __exit__(self, *exc_info):
        if self.fd is not None:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                self._close()
        return False


def lock_folder(params):
    """Where sbatch runs (chdir, else the script's folder): the lock and the submit records live there."""
    return params.get('chdir') or (os.path.dirname(os.path.abspath(params['script'])) if params.get('script') else None)


def lock_path(params, name, user, suffix='.lock'):
    """The lock file of name+user: next to where sbatch runs (chdir, else the script's folder)."""
    folder = lock_folder(params)
    if not folder or not os.path.isdir(folder):
        return None
    safe = re.sub(r'[^A-Za-z0-9._-]', '_', '%s-%s' % (user, name))
    return os.path.join(folder, '.slurm_job-%s%s' % (safe, suffix))


# -- the submit record: which script content the module submitted as which job -------------------------------
#
# After sbatch, the module writes {"job_id", "sha256"} of the script next to the lock file (0600). A later run that
# finds that job live and the script unchanged knows what Slurm stored without asking it (``scontrol write
# batch_script``, ``scontrol show job``): a re-run that changes nothing costs one lookup. Without a record (a job
# submitted by hand, another login node's run, an older version of the module) the module asks Slurm as before.


def script_digest(path=None, text=None):
    """sha256 of a script, from its text or its file (None when there is neither)."""
    if text is None:
        try:
            with open(path, 'rb') as handle:
                return hashlib.sha256(handle.read()).hexdigest()
        except (IOError, OSError, TypeError):
            return None
    return hashlib.sha256(text.encode('utf-8')).hexdigest()


def read_record(ctx, name=None):
    name = name or ctx.name
    path = lock_path(ctx.params, name, ctx.user, '.json') if name else None
    try:
        with open(path) as handle:
            record = json.load(handle)
        return record if isinstance(record, dict) else None
    except (IOError, OSError, TypeError, ValueError):
        return None


def write_record(ctx, job_id, digest):
    path = lock_path(ctx.params, ctx.name, ctx.user, '.json')
    if not path or not digest:
        return
    try:
        write_json(path, {'job_id': str(job_id), 'sha256': digest}, '.slurm_job-')
    except (IOError, OSError) as exc:
        ctx.warn('cannot write the submit record %s (%s): the next run asks Slurm for the stored script' % (path, exc))


def write_json(path, data, prefix):
    """Write data as JSON to path atomically (a temporary file in its folder, renamed), readable by its owner only
    (mkstemp makes it 0600). Raises IOError/OSError."""
    fd, temp = tempfile.mkstemp(prefix=prefix, dir=os.path.dirname(path) or '.')
    with os.fdopen(fd, 'w') as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
    os.rename(temp, path)


def recorded(ctx, job):
    """True/False: the record of ``job`` says whether it runs the script as it is now; None: no record of it.
    Read and hashed once per job and run (the script check and the output path both ask)."""
    key = str(job.get('job_id'))
    if key not in ctx.recorded:
        ctx.recorded[key] = _recorded(ctx, job)
    return ctx.recorded[key]


def _recorded(ctx, job):
    record = read_record(ctx)
    text = ctx.script_text() if ctx.params.get('script') else None
    if not record or record.get('job_id') != str(job.get('job_id')) or text is None:
        return None
    return record.get('sha256') == script_digest(text=text)


_OUTPUT_RE = re.compile(r'^#SBATCH\s+(?:--output(?:=|\s+)|-o\s*)(\S+)\s*$')


def script_output_pattern(text, sbatch_args=()):
    """The ``--output`` of a batch script's ``#SBATCH`` header (None if unset, or if sbatch_args set it)."""
    if text is None or any(a.startswith(('--output', '-o')) for a in sbatch_args or ()):
        return None
    found = None
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith('#'):
            break   # sbatch reads #SBATCH lines up to the first command
        match = _OUTPUT_RE.match(line)
        if match:
            found = match.group(1).strip('"\'')
    return found


def local_output_path(ctx, job):
    """The output path of a live job submitted by this module from the script as it is now, without Slurm."""
    if not is_live(job) or not job.get('work_dir') or recorded(ctx, job) is not True:
        return None
    pattern = script_output_pattern(ctx.script_text(), ctx.params.get('sbatch_args'))
    path = sp.expand_output_pattern(pattern, job['job_id'], job.get('name'), job.get('user'), job.get('work_dir')) if pattern else None
    if not path:
        return None
    return path if os.path.isabs(path) else os.path.join(job['work_dir'], path)


def compile_hints(hints):
    """Check the hints' patterns; returns [(compiled, hint, job)]. Raises ActionError naming a bad pattern."""
    compiled = []
    for index, hint in enumerate(hints or []):
        try:
            compiled.append((re.compile(hint['match'], re.IGNORECASE | re.MULTILINE), hint['hint'], hint.get('job')))
        except re.error as exc:
            raise ActionError('hints[%d].match %r is not a valid regular expression: %s' % (index, hint['match'], exc))
    return compiled


def matching_hints(hints, exc):
    """The hint texts whose pattern matches the failed job's "STATE REASON EXIT_CODE", the failure message and
    the log tail; a hint with ``job`` applies only when that job (name or id) is the one that failed. In a hint,
    {job_id}, {name} and {log} are the job's, and {GROUP} what the pattern's named group GROUP matched."""
    failed = getattr(exc, 'failed_job', None) or getattr(exc, 'job', None) or {}
    text = '\n'.join(['%s %s %s' % (failed.get('state') or '', failed.get('reason') or '', failed.get('exit_code') or ''),
                      exc.msg] + list(getattr(exc, 'log_tail', None) or []))
    found = []
    for pattern, hint, job in hints:
        if job and job not in (failed.get('name'), failed.get('job_id')):
            continue
        match = pattern.search(text)
        if match:
            hint = hint.replace('{job_id}', str(failed.get('job_id') or '?')).replace('{name}', str(failed.get('name') or '?'))
            hint = hint.replace('{log}', str(getattr(exc, 'log_path', None) or failed.get('output_path') or '?'))
            for group, value in match.groupdict().items():         # the pattern's named groups: {group}
                hint = hint.replace('{%s}' % group, value if value is not None else '?')
            if hint not in found:
                found.append(hint)
    return found


def submitted_before(ctx, job, path):
    """True when the job was submitted before path was last modified (a job submitted after it starts with what
    the file holds now). A missing file or an unknown submit time: False."""
    try:
        mtime = os.stat(path).st_mtime
    except (IOError, OSError):
        return False
    submitted = sp.parse_time(job.get('submit_time'))
    if submitted is None:
        shown = ctx.retry(ctx.cli.show_job, job['job_id'])
        submitted = sp.parse_time((shown or {}).get('submit_time'))
    # Slurm's times have whole seconds: a job submitted in the same second as the change counts as after it
    return submitted is not None and submitted < int(mtime)


def script_changed(ctx, job):
    """True when the script Slurm stored for the live job differs from the script to submit now (the submit record
    answers for a job this module submitted; otherwise Slurm is asked)."""
    same = recorded(ctx, job)
    if same is not None:
        return not same
    current = ctx.script_text()
    if current is None:
        return False
    stored = ctx.cli.batch_script(job['job_id'])
    if stored is None:
        ctx.warn('Slurm did not give the batch script of job %s (scontrol write batch_script): it is kept as it is' % job['job_id'])
        return False
    return stored != current


def probe_options():
    """The sub-options of both modules' ``probe`` option (documented in the doc fragment glm.serve.slurm.probe)."""
    return dict(
        port=dict(type='int', required=True),
        path=dict(type='str', default='/v1/models'),
        key_file=dict(type='path', required=True, no_log=False),
        model=dict(type='str', required=True),
        timeout=dict(type='int', default=5),
    )


def bad_nodes_options():
    """The sub-options of slurm_job's ``bad_nodes``."""
    return dict(
        file=dict(type='path', required=True),
        pattern=dict(type='str', required=True),
        ttl=dict(type='int', default=86400),
        retries=dict(type='int', default=2),
        nodes=dict(type='list', elements='str', default=[]),
        job_nodes=dict(type='int', default=1),
    )


# -- nodes to avoid: a job that failed for a reason of its node (a GPU check) is submitted again without it ----


def read_bad_nodes(path, ttl, now=None):
    """{node: {'cause', 'since', 'job_id'}} of the list at path, without the entries older than ttl seconds."""
    now = time.time() if now is None else now
    try:
        with open(path) as handle:
            data = json.load(handle)
    except (IOError, OSError, ValueError, TypeError):
        return {}
    if not isinstance(data, dict):
        return {}
    fresh = {}
    for node, entry in data.items():
        if isinstance(entry, dict) and isinstance(entry.get('since'), (int, float)) and now - entry['since'] < ttl:
            fresh[str(node)] = entry
    return fresh


def write_bad_nodes(ctx, path, entries):
    try:
        write_json(path, entries, '.bad-nodes-')
    except (IOError, OSError) as exc:
        ctx.warn('cannot write the bad-node list %s (%s): the next run may try the node again' % (path, exc))


def _sbatch_excludes(args):
    """(sbatch_args without --exclude/-x, the nodes they excluded)."""
    rest, nodes, args = [], [], list(args or [])
    while args:
        arg = args.pop(0)
        if arg.startswith('--exclude='):
            nodes += arg.split('=', 1)[1].split(',')
        elif arg in ('--exclude', '-x') and args:
            nodes += args.pop(0).split(',')
        elif arg.startswith('-x') and len(arg) > 2:
            nodes += arg[2:].split(',')
        else:
            rest.append(arg)
    return rest, [n for n in nodes if n]


def sbatch_args_avoiding(ctx, result):
    """sbatch_args with the nodes of the bad-node list (and the user's own --exclude) in one --exclude. Raises
    ActionError, before anything is submitted, when that would exclude every node of ``bad_nodes.nodes``."""
    args = list(ctx.params.get('sbatch_args') or [])
    spec = ctx.params.get('bad_nodes')
    if not spec:
        return args
    bad = read_bad_nodes(spec['file'], spec['ttl'])
    if not bad:
        return args
    rest, own = _sbatch_excludes(args)
    excluded = sorted(set(own) | set(bad))
    result['excluded_nodes'] = sorted(bad)
    usable = [n for n in spec.get('nodes') or [] if n not in excluded]
    need = max(1, spec.get('job_nodes') or 1)
    if spec.get('nodes') and len(usable) < need:
        what = ('every node the job can run on (%s) is on the bad-node list' % ', '.join(spec['nodes']) if not usable else
                'the job needs %d nodes and only %s of the nodes it can run on (%s) %s not on the bad-node list' % (
                    need, ', '.join(usable), ', '.join(spec['nodes']), 'is' if len(usable) == 1 else 'are'))
        raise ActionError(
            '%s %s: %s. Nothing was submitted. Check the nodes (or ask the cluster\'s administrators to), then remove '
            'the file to try them again; entries expire %s after they were added' % (what, spec['file'], '; '.join(
                '%s: %s' % (n, bad[n].get('cause')) for n in sorted(bad)), _duration(spec['ttl'])))
    return rest + ['--exclude=%s' % ','.join(excluded)]


def _duration(seconds):
    return '%d h' % (seconds // 3600) if seconds % 3600 == 0 else '%d s' % seconds


def bad_node_of(ctx, exc, job_id):
    """(node, cause) when the job ``job_id`` itself failed and its log tail matches ``bad_nodes.pattern``."""
    spec = ctx.params.get('bad_nodes')
    failed = exc.failed_job or {}
    if not spec or exc.timed_out or str(failed.get('job_id')) != str(job_id):
        return None, None
    match = re.search(spec['pattern'], '\n'.join(exc.log_tail or []), re.MULTILINE)
    if not match:
        return None, None
    groups = match.groupdict()
    node = groups.get('node') or (failed.get('nodes') or '').split(',')[0]
    if not node or node in ('(null)', 'None'):
        return None, None
    return node, (groups.get('cause') or match.group(0)).strip()


def avoid_and_retry(ctx, result, exc, job_id, attempt):
    """After the job failed for a reason of its node: put the node on the list; True when another attempt should
    be submitted (retries left and a node left), else the failure gets a note saying what was done."""
    spec = ctx.params['bad_nodes']
    node, cause = bad_node_of(ctx, exc, job_id)
    if node is None:
        return False
    entries = read_bad_nodes(spec['file'], spec['ttl'])
    entries[node] = {'cause': cause, 'since': int(time.time()), 'job_id': str(job_id)}
    write_bad_nodes(ctx, spec['file'], entries)
    result.setdefault('bad_nodes', []).append({'node': node, 'cause': cause, 'job_id': str(job_id)})
    left = [n for n in spec.get('nodes') or [] if n not in entries]
    enough = len(left) >= max(1, spec.get('job_nodes') or 1)
    if attempt < spec['retries'] and (enough or not spec.get('nodes')):
        ctx.warn('job %s failed on node %s (%s): submitting it again without that node (on the bad-node list %s for %s)' % (
            job_id, node, cause, spec['file'], _duration(spec['ttl'])))
        return True
    why = ('after %d attempts' % (attempt + 1) if enough or not spec.get('nodes') else 'no other node is left' if not left
           else 'fewer nodes than the job needs (%d) are left' % max(1, spec.get('job_nodes') or 1))
    exc.notes.append('Node %s failed the job (%s) and is on the bad-node list %s for %s; not submitted again: %s' % (
        node, cause, spec['file'], _duration(spec['ttl']), why))
    return False


def make_probe(probe):
    """A ModelProbe for the module's ``probe`` option (None without it), and the key (a secret to redact)."""
    if not probe:
        return None, ()
    try:
        key = mp.read_key(probe['key_file'])
    except mp.KeyFileError as exc:
        raise ActionError(str(exc))
    model_probe = mp.ModelProbe(probe['port'], probe.get('path') or '/v1/models', key, probe['model'],
                                timeout=probe.get('timeout') or 5, key_file=probe['key_file'])
    return model_probe, (key,)


def parse_umask(value):
    try:
        return int(str(value), 8)
    except ValueError:
        raise ActionError('umask must be an octal string such as "0077", got %r' % (value,))


def policy(params, timeout=None):
    """The waiter's policy from the module's wait options."""
    return WaitPolicy(timeout=params['wait_timeout'] if timeout is None else timeout, cap=params['wait_sleep'])


def progress_reader(ctx, waiter, secrets=()):
    """A serve_progress.Progress over the waiter's jobs (their output files) and the ``progress`` option's model
    directory; the download sample of the last slice gives the rate."""
    spec = ctx.params.get('progress') or {}
    resume = ctx.params.get('wait_resume') or {}

    def read_log(job):
        return serve_progress.log_end(waiter.output_paths.get(job.get('job_id')) or job.get('output_path'), ctx.files, secrets)

    return serve_progress.Progress(model_dir=spec.get('model_dir'), read_log=read_log, sample=resume.get('sample'),
                                   floor=resume.get('floor'))


def run_wait(ctx, result, target, until_gone=False, secrets=(), timeout=None, hints=(), snapshot=None):
    """Wait for ``target`` (a job_waiter.Target); fill ``result`` with what the wait saw, also when it fails.

    With the module's ``wait_slice``, waits at most that long (less when the deploy's phase changes) and returns None
    when the wait is not over; ``result`` then holds ``resume`` (the waiter's snapshot, for the next slice) and
    ``progress``, the line that says where the deploy stands. ``snapshot``: the last slice's, to go on from."""
    waiter = JobWaiter(ctx.cli, target, policy=policy(ctx.params, timeout), clock=ctx.clock, files=ctx.files,
                       secrets=secrets, on_event=lambda event: ctx.log('slurm_job wait: %s' % event['line']),
                       until_gone=until_gone, cancel_dead=ctx.params.get('kill_on_invalid_dep', True) and not until_gone,
                       accounting=ctx.params.get('accounting', True))
    slice_seconds = ctx.params.get('wait_slice') or None
    progress = progress_reader(ctx, waiter, secrets) if slice_seconds and not until_gone else None
    if snapshot is not None and not waiter.restore(snapshot):
        ctx.warn('the wait_resume given does not fit job %s (another version or job): waiting afresh' % target.job_id)
    try:
        outcome = waiter.wait(slice_seconds=slice_seconds,
                              phase=(lambda: progress.phase(waiter.chain(target))) if progress else None)
    except WaitFailed as exc:
        exc.hints = matching_hints(hints, exc)
        if exc.hints:
            result['hints'] = exc.hints
        for cancelled in exc.cancelled:
            if cancelled not in result['cancelled']:
                result['cancelled'].append(cancelled)
                result['changed'] = True
        fill_job(result, exc.job)
        result['chain'] = chain_entries(exc.chain)
        result['events'] = waiter.recent_events()
        result['duration'] = round(ctx.clock.now() - waiter.start, 3) if waiter.start is not None else 0.0
        endpoint = waiter.targets[0].port.endpoint if waiter.targets[0].port else None
        if endpoint:
            result['endpoint'] = endpoint
        if exc.log_tail:
            result['log_tail'] = exc.log_tail
        if progress is not None:
            result['wait_done'] = True
            result['phase'] = 'failed'
            result['progress'] = 'failed: %s' % exc.summary
        raise
    if outcome is None:
        # the slice is over, the wait is not
        chain = waiter.chain(target)
        fill_job(result, chain[-1])
        result['chain'] = chain_entries(chain)
        result['events'] = waiter.recent_events()
        result['duration'] = round(ctx.clock.now() - waiter.start, 3)
        said = progress.describe(chain)
        result.update(wait_done=False, phase=said['phase'], progress=said['line'],
                      resume={'job_id': target.job_id, 'waiter': waiter.snapshot(), 'sample': said['sample'],
                              'floor': {'about': said.get('about'), 'phase': said['phase'], 'line': said['line']}})
        return None
    fill_job(result, outcome['job'])
    if outcome.get('output_path'):
        result['output_path'] = outcome['output_path']
    result['chain'] = chain_entries(outcome['chain'])
    result['events'] = outcome['events']
    result['duration'] = outcome['duration']
    if target.probe is not None:
        result['endpoint'] = outcome['endpoint']
        result['models'] = outcome['models']
        result['max_model_len'] = outcome['max_model_len']
    if progress is not None and target.probe is None:
        result.update(wait_done=True, phase='ready', progress='done: %s' % describe(outcome['job']))
    elif progress is not None:
        said = progress.describe(outcome['chain'], ready=bool(outcome.get('endpoint')), endpoint=outcome.get('endpoint'),
                                 model=target.probe.model)
        result.update(wait_done=True, phase=said['phase'], progress=said['line'])
    return outcome


def _norm_time(value):
    if not value:
        return None
    value = str(value).strip().replace(' ', 'T')
    if len(value) == 16:  # YYYY-MM-DDTHH:MM
        value += ':00'
    return value


def apply_end_time(ctx, job, result):
    wanted = _norm_time(ctx.params.get('end_time'))
    if not wanted or not job:
        return
    if job.get('state') != 'RUNNING':
        ctx.warn('end_time applies to a RUNNING job; job %s is %s, so its end time was not changed' % (job['job_id'], job.get('state')))
        return
    if _norm_time(job.get('end_time')) == wanted:
        return
    result['changed'] = True
    result['end_time_changed'] = {'before': job.get('end_time'), 'after': wanted}
    if not ctx.check_mode:
        ctx.cli.update_end_time(job['job_id'], wanted)


def _dependency_ids(params):
    return [str(i).split(';', 1)[0] for d in (params.get('dependency') or []) for i in (d.get('job_ids') or [])]


def write_script(ctx, result):
    """Write ``script_content`` to ``script`` (0600, atomically) when the file differs; in check mode, only say so."""
    content, path = ctx.params.get('script_content'), ctx.params.get('script')
    if content is None:
        return
    if not path:
        raise ActionError('script_content needs script, the path to write it to on the host')
    try:
        with open(path, 'rb') as handle:
            if handle.read() == content.encode('utf-8'):
                return
    except (IOError, OSError):
        pass
    result['changed'] = result['script_written'] = True
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        if ctx.check_mode:
            ctx.warn('the folder %s does not exist (yet): in a real run the task would fail unless it is created first' % folder)
            return
        raise ActionError('the folder %s of script does not exist on the host: create it first' % folder)
    if ctx.check_mode:
        return
    fd, temp = tempfile.mkstemp(prefix='.%s.' % os.path.basename(path), dir=folder)
    try:
        with os.fdopen(fd, 'wb') as handle:
            handle.write(content.encode('utf-8'))
        os.chmod(temp, 0o600)
        os.rename(temp, path)
    except (IOError, OSError) as exc:
        if os.path.exists(temp):
            os.unlink(temp)
        raise ActionError('cannot write the batch script %s: %s' % (path, exc))


def present(ctx):
    """Write the script (``script_content``), adopt or submit the job (``name`` + user, or ``job_id``), then wait
    for it and set its end time. With ``wait_resume`` (the ``resume`` of the last slice of a sliced wait), only
    go on waiting for that job: no script, no lookup, no submission."""
    params = ctx.params
    result = base_result(ctx)
    hints = compile_hints(params.get('hints'))
    waits = params.get('wait') and not ctx.check_mode
    probe, secrets = make_probe(params.get('probe')) if waits else (None, ())
    resume = params.get('wait_resume') if waits else None
    try:
        if resume:
            if not resume.get('job_id'):
                raise ActionError('wait_resume must be the resume value a slice of this task returned (it has no job_id)')
            result['job_id'] = str(resume['job_id'])
            result['bad_nodes'] = list(resume.get('bad_nodes') or [])
            if resume.get('excluded_nodes'):
                result['excluded_nodes'] = list(resume['excluded_nodes'])
            job = {'job_id': result['job_id']}
        else:
            write_script(ctx, result)
            job = adopt_by_id(ctx) if params.get('job_id') else adopt_or_submit(ctx, result)
            if job is not None and job.get('job_id'):
                result['job_id'] = job['job_id']
                if not ctx.check_mode or not result['submitted']:
                    job = details(ctx, job)
                fill_job(result, job)
                result['chain'] = chain_entries([job])
        if waits and result['job_id']:
            known = None if resume else job
            if not resume and result['submitted'] and _dependency_ids(params) and not job.get('reason'):
                # just submitted after other jobs: PENDING (Dependency) until Slurm says otherwise, so the first
                # round asks the parents only (the job's own file, or the next round, tells when it starts)
                known = dict(job, reason=sp.DEPENDENCY)
            attempt = int(resume.get('attempt') or 0) if resume else 0
            snapshot = resume.get('waiter') if resume else None
            while True:
                target = Target(result['job_id'], success=params.get('wait_condition') or ['RUNNING'],
                                parents=_dependency_ids(params), probe=probe, known=known)
                try:
                    outcome = run_wait(ctx, result, target, secrets=secrets, hints=hints, snapshot=snapshot)
                    if outcome is None:
                        result['resume'].update(attempt=attempt, bad_nodes=result.get('bad_nodes') or [],
                                                excluded_nodes=result.get('excluded_nodes') or [])
                        job = None
                    else:
                        job = outcome['job']
                    break
                except WaitFailed as exc:
                    if not params.get('bad_nodes') or not avoid_and_retry(ctx, result, exc, result['job_id'], attempt):
                        raise
                attempt += 1
                snapshot = None
                for key in ('hints', 'log_tail', 'wait_done', 'phase', 'progress'):
                    result.pop(key, None)
                job = known = adopt_or_submit(ctx, result)
                result['job_id'] = job['job_id']
                if not job.get('output_path'):
                    job = known = details(ctx, job)
                fill_job(result, job)
        if job is not None and job.get('job_id') and params.get('end_time'):
            apply_end_time(ctx, job, result)
    except Exception as exc:
        exc.result = result
        raise
    finally:
        result['polls'] = ctx.cli.polls
    return result


def adopt_by_id(ctx):
    job = lookup(ctx, ctx.params['job_id'])
    if job is None:
        raise ActionError('job %s is not known to Slurm (Invalid job id specified): it never existed or was purged '
                          'after it ended; drop job_id to submit a new job' % ctx.params['job_id'])
    return job


def adopt_or_submit(ctx, result):
    if not ctx.name:
        raise ActionError('state=present needs name (the job name, with user the idempotency key) or job_id')
    with SubmitLock(None if ctx.check_mode else lock_path(ctx.params, ctx.name, ctx.user), ctx.clock, ctx.retry_timeout,
                    ctx.warn) as lock:
        return find_or_submit(ctx, result, lock.held)


def find_or_submit(ctx, result, locked=True):
    """Adopt the live job of name+user, or cancel what must go and submit. Run under SubmitLock (``locked``: held)."""
    params = ctx.params
    live = live_jobs(ctx, result)
    to_cancel = [j['job_id'] for j in live if is_dead_pending(j)]
    live = [j for j in live if not is_dead_pending(j)]
    job = None
    older_than = params.get('recreate_if_older_than')
    if live and not params.get('recreate') and older_than and submitted_before(ctx, live[0], older_than):
        result['older_than'] = older_than
        to_cancel += [j['job_id'] for j in live]
        live = []
    if live and not params.get('recreate'):
        job = live[0]
        if len(live) > 1:
            ctx.warn('%d live jobs are named %s for user %s (%s): using the newest' % (
                len(live), ctx.name, ctx.user, ', '.join(j['job_id'] for j in live)))
        if params.get('recreate_on_change') and params.get('script') and script_changed(ctx, job):
            result['script_changed'] = True
            job = None
        elif job.get('state') == 'PENDING' and job.get('reason') == 'BeginTime':
            job = start_requeued_now(ctx, job, result)
    if job is None:
        if not live and not ctx.check_mode and 'previous' not in result and not result.get('job_id'):
            report_previous(ctx, result)      # once, for the job of an earlier run (not one this run submitted)
        to_cancel += [j['job_id'] for j in live]
        job = submit(ctx, to_cancel, result)
        if not ctx.check_mode and job.get('job_id') and (params.get('duplicate_check') == 'always' or not locked):
            job = keep_oldest(ctx, job, to_cancel, result)
    return job


# -- the lookup by name, asking Slurm as little as it can -----------------------------------------------------
#
# In order: the listing an earlier task of the play made for this name (``lookup``), when no job of this name was
# submitted since; the job of the submit record (``scontrol --local show job``: 1 RPC), when it is live; else
# ``squeue --local -n NAMES -u USER`` (2 RPCs, whatever the number of names), which also lists ``lookup_also``
# for a later task.

LOOKUP_MAX_AGE = 60.0


def live_jobs(ctx, result):
    """The live jobs of name+user, newest first. Run under SubmitLock."""
    shared = shared_lookup(ctx)
    if shared is not None:
        return shared
    names = [ctx.name] + [n for n in ctx.params.get('lookup_also') or [] if n and n != ctx.name]
    if len(names) == 1:
        job = recorded_live(ctx)
        if job is not None:
            return [job]
    records = dict((n, record_id(ctx, n)) for n in names)      # before the listing: see shared_lookup()
    taken_at = time.time()
    rows = newest_live(ctx, ctx.cli.retry(ctx.cli.squeue, ctx.retry_timeout, name=','.join(names), user=ctx.user), names)
    if len(names) > 1:
        result['lookup'] = {'user': ctx.user, 'names': names, 'folder': lock_folder(ctx.params), 'taken_at': taken_at,
                            'records': records, 'jobs': rows}
    return [r for r in rows if r.get('name') == ctx.name]


def accounting(ctx, **query):
    """Jobs from slurmdbd (``sacct``), or [] when the site has no accounting, ``sacct`` fails or ``accounting`` is
    off: everything works without it, as before. Says once why it did without."""
    if not ctx.params.get('accounting', True):
        return []
    try:
        return ctx.cli.sacct(**query)
    except SlurmAccountingUnavailable as exc:
        if not ctx.accounting_said:
            ctx.accounting_said = True
            ctx.log('accounting not used: %s' % exc.msg)
        return []


def why_ended(job):
    """``TIMEOUT: it reached its time limit (--time 8:00:00) at 2026-12-01T18:00:00 after 8:00:00 (exit code 0:0)``."""
    state = job.get('state') or 'UNKNOWN'
    meaning = wr.STATE_MEANINGS.get(state, '')
    if state == 'TIMEOUT' and job.get('time_limit'):
        meaning = 'it reached its time limit (--time %s)' % job['time_limit']
    elif state == 'CANCELLED' and job.get('cancelled_by'):
        meaning = 'it was cancelled by uid %s (scancel, a teardown, or an administrator)' % job['cancelled_by']
    elif state == 'FAILED' and job.get('exit_code'):
        meaning = 'it exited with code %s' % job['exit_code'].split(':')[0]
    elif state == 'COMPLETED':
        meaning = 'it exited 0'
    text = '%s%s' % (state, (': ' + meaning) if meaning else '')
    if job.get('reason') and job['reason'] not in ('None', 'NonZeroExitCode'):
        text += ' (reason %s)' % job['reason']
    if job.get('end_time'):
        text += ' at %s' % job['end_time']
    if job.get('elapsed'):
        text += ' after %s' % job['elapsed']
    if job.get('exit_code') and state != 'FAILED':
        text += ', exit code %s' % job['exit_code']
    if job.get('nodes'):
        text += ', on %s' % job['nodes']
    return text


def report_previous(ctx, result):
    """Before a new submission: how the last job this module submitted under the name ended (its submit record's
    job), from slurmctld while it remembers it (``scontrol --local show job``), else from accounting (``sacct``,
    slurmdbd). A job that did not complete is reported with a warning: the deploy says what happened before it
    submits the new one. No record, or no answer: nothing said."""
    job_id = record_id(ctx)
    if not job_id:
        return None
    looked = ctx.record_lookup
    job = looked[1] if looked and looked[0] == job_id else lookup(ctx, job_id)
    if job is None:
        rows = [r for r in accounting(ctx, job_ids=[job_id]) if r.get('job_id') == job_id]
        job = rows[-1] if rows else None
    if job is None or job.get('state') not in sp.TERMINAL_STATES or job.get('name') != ctx.name:
        return None
    previous = dict((k, job.get(k)) for k in ('job_id', 'state', 'reason', 'exit_code', 'start_time', 'end_time',
                                              'elapsed', 'time_limit', 'nodes'))
    previous['source'] = job.get('source') or 'slurmctld'
    previous['why'] = why_ended(job)
    result['previous'] = previous
    if job.get('state') != 'COMPLETED':
        ctx.warn('the last %s job, %s, ended %s; a new one is submitted' % (ctx.name, job_id, previous['why']))
    return previous


def record_id(ctx, name=None):
    record = read_record(ctx, name)
    return str(record['job_id']) if record and record.get('job_id') else None


def recorded_live(ctx):
    """The live job of the submit record (one ``scontrol --local show job``), or None: no record, or its job ended
    (then the caller looks up by name, as a job submitted by hand or by an older module has no record)."""
    job_id = record_id(ctx)
    if not job_id:
        return None
    job = lookup(ctx, job_id)
    ctx.record_lookup = (job_id, job)       # for report_previous, should this run submit: no second call
    if job is None or not is_live(job) or job.get('name') != ctx.name or (ctx.user and job.get('user') != ctx.user):
        return None
    return job


def shared_lookup(ctx):
    """The live jobs of name from ``lookup`` (an earlier task's listing), or None when it cannot stand for a lookup
    now: another user, name or folder, older than LOOKUP_MAX_AGE, or the submit record of name changed since it was
    read (a run, on this login node or another sharing the folder, submitted under the lock after the listing)."""
    shared = ctx.params.get('lookup')
    if not shared or not isinstance(shared, dict):
        return None
    try:
        age = time.time() - float(shared.get('taken_at'))
    except (TypeError, ValueError):
        return None
    records = shared.get('records') or {}
    if (shared.get('user') != ctx.user or ctx.name not in (shared.get('names') or []) or not 0 <= age <= LOOKUP_MAX_AGE
            or shared.get('folder') != lock_folder(ctx.params) or ctx.name not in records
            or records.get(ctx.name) != record_id(ctx)):
        return None
    return newest_live(ctx, [dict(r) for r in shared.get('jobs') or [] if isinstance(r, dict)], [ctx.name])


def start_requeued_now(ctx, job, result):
    """A live job that Slurm requeued (its node failed; Restarts > 0) waits for a begin time Slurm set some 2 min
    ahead, although another node may be free. Adopting it, the module sets its begin time to now (one ``scontrol
    update``, as its owner may), so that it starts at once where it can; it says so. A job that waits for a begin
    time its user asked for (``--begin``, never requeued) is left alone. Returns the job's row."""
    shown = ctx.retry(ctx.cli.show_job, job['job_id'])
    if not shown:
        return job
    job = dict(job, **dict((k, v) for k, v in shown.items() if v is not None and job.get(k) is None))
    try:
        restarts = int(shown.get('restarts') or 0)
    except (TypeError, ValueError):
        restarts = 0
    if restarts < 1 or shown.get('state') != 'PENDING' or shown.get('reason') != 'BeginTime':
        return job
    result['changed'] = True
    result['started_now'] = {'job_id': job['job_id'], 'was': shown.get('start_time'), 'restarts': restarts}
    ctx.warn('job %s (%s) was requeued by Slurm (restarts %d: its node failed or an administrator requeued it) and was '
             'held until its begin time %s; %s to now, so that it starts at once on a free node' % (
                 job['job_id'], ctx.name, restarts, shown.get('start_time') or '?',
                 'it would be set' if ctx.check_mode else 'that was set'))
    if not ctx.check_mode:
        ctx.retry(ctx.cli.start_now, job['job_id'])
    return job


def keep_oldest(ctx, job, to_cancel, result):
    """After sbatch: when another live job of name+user appeared meanwhile (a run on another login node, without
    the shared lock), keep the oldest and cancel ours if it is not, so that one job remains."""
    try:
        live = find_live(ctx)
    except SlurmError:
        return job
    others = [j for j in live if j['job_id'] != job['job_id'] and j['job_id'] not in to_cancel and not is_dead_pending(j)]
    if not others:
        return job
    oldest = min(others, key=lambda j: _id_key(j['job_id']))
    if _id_key(oldest['job_id']) > _id_key(job['job_id']):
        return job  # ours is the oldest: the other run cancels its own
    ctx.retry(ctx.cli.cancel, [job['job_id']])
    ctx.warn('job %s of name %s was submitted by another run at the same time: it is adopted, and job %s (this run\'s) '
             'was cancelled' % (oldest['job_id'], ctx.name, job['job_id']))
    result['cancelled'].append(job['job_id'])
    result['submitted'] = False
    result['cluster'] = None
    return oldest


def submit(ctx, to_cancel, result):
    """Cancel to_cancel, then sbatch. Returns the new job dict ({'job_id': None} in check mode)."""
    params, cli = ctx.params, ctx.cli
    script = params.get('script')
    if not script:
        raise ActionError('state=present needs script (the batch script path on the host) to submit job %s' % ctx.name)
    chdir = params.get('chdir') or os.path.dirname(os.path.abspath(script))
    umask = parse_umask(params.get('umask') or '0077')
    for path, kind, test in ((script, 'batch script', os.path.isfile), (chdir, 'chdir directory', os.path.isdir)):
        if ctx.check_mode and kind == 'batch script' and params.get('script_content') is not None:
            continue   # it would be written first
        if not test(path):
            if ctx.check_mode:
                ctx.warn('the %s %s does not exist (yet): in a real run the task would fail unless it is created first' % (kind, path))
            else:
                raise ActionError('the %s %s does not exist on the host' % (kind, path))
    argv = cli.sbatch_argv(script, ctx.name, params.get('dependency'), params.get('kill_on_invalid_dep', True),
                           sbatch_args_avoiding(ctx, result))
    result['changed'] = True
    result['submitted'] = True
    result['cancelled'] = list(to_cancel)
    result['sbatch_cmd'] = argv
    if ctx.check_mode:
        return {'job_id': None, 'name': ctx.name, 'user': ctx.user}
    digest = script_digest(text=ctx.script_text())
    if to_cancel:
        ctx.retry(cli.cancel, to_cancel)
    deadline = ctx.clock.now() + ctx.retry_timeout
    delay = 1.0
    while True:
        try:
            job_id, cluster = cli.submit(argv, chdir, umask)
            break
        except SlurmTransientError:
            if ctx.clock.now() >= deadline:
                raise
            ctx.clock.sleep(delay)
            delay = min(delay * 2, 30.0)
            # the request may have reached the controller before the answer was lost: adopt, never submit twice
            try:
                live = [j for j in find_live(ctx, retry_timeout=0) if j['job_id'] not in to_cancel]
            except SlurmTransientError:
                live = []
            if live:
                ctx.warn('sbatch lost its answer; job %s of that name has appeared and was adopted' % live[0]['job_id'])
                result['cluster'] = None
                return live[0]
    result['cluster'] = cluster
    write_record(ctx, job_id, digest)
    # work_dir: the output path follows from the script's --output without asking Slurm (local_output_path)
    # restarts 0: a job is submitted never requeued, so a later row with Restarts=1 is a requeue even when the first
    # row the wait sees is already the requeued one (its node went DOWN before a round saw it RUNNING)
    return {'job_id': job_id, 'name': ctx.name, 'user': ctx.user, 'state': 'PENDING', 'work_dir': os.path.abspath(chdir),
            'restarts': '0'}


def absent(ctx):
    """Cancel the live jobs of name+user (or the job ``job_id``); with ``wait``, until Slurm has let them go."""
    params = ctx.params
    result = base_result(ctx)
    try:
        if params.get('job_id'):
            job = lookup(ctx, params['job_id'])
            jobs = [job] if job else []
            if not job:
                result['job_id'] = str(params['job_id'])
                result['state'] = 'PURGED'
        else:
            if not ctx.name:
                raise ActionError('state=absent needs job_id or name')
            jobs = find_live(ctx)
        targets = [j for j in jobs if is_live(j)]
        if jobs:
            fill_job(result, jobs[0])
            result['chain'] = chain_entries(jobs)
        if targets:
            result['changed'] = True
            result['cancelled'] = [j['job_id'] for j in targets]
            if not ctx.check_mode:
                ctx.retry(ctx.cli.cancel, result['cancelled'])
                if params.get('wait'):
                    start = ctx.clock.now()
                    for job in targets:
                        remaining = max(0, params['wait_timeout'] - (ctx.clock.now() - start))
                        run_wait(ctx, result, Target(job['job_id'], known=job), until_gone=True, timeout=remaining)
                    result['duration'] = round(ctx.clock.now() - start, 3)
                    result['chain'] = chain_entries(
                        [dict(j, state=result['state']) if j['job_id'] == result['job_id'] else j for j in targets])
    except Exception as exc:
        exc.result = result
        raise
    finally:
        result['polls'] = ctx.cli.polls
    return result


def info(ctx):
    """The jobs asked for (ids, name, user), oldest first, each marked ``live``/``ending``; with ``probe``, the
    server's answer of each RUNNING job."""
    params, cli = ctx.params, ctx.cli
    job_ids = [str(j) for j in (params.get('job_ids') or [])]
    user = None if params.get('all_users') else (params.get('user') or (None if job_ids else current_user()))
    rows = ctx.retry(cli.squeue, job_ids=job_ids or None, name=params.get('name'), user=user, all_states=True)
    found = set(r['job_id'] for r in rows)
    missing = []
    for job_id in job_ids:
        if job_id not in found:
            shown = ctx.retry(cli.show_job, job_id)
            if shown:
                rows.append(shown)
            else:
                missing.append(job_id)
    wanted_live = params.get('live')
    # What slurmctld forgot (MinJobAge after the end), from accounting: the ids asked for, or the newest ended jobs of
    # the name/user. Not for live-only listings: accounting adds no live job.
    if wanted_live is not True and (missing or (not job_ids and (params.get('name') or user))):
        known = set(r['job_id'] for r in rows)
        query = {'job_ids': missing} if missing else {'name': params.get('name'), 'user': user}
        extra = [r for r in accounting(ctx, **query) if r['job_id'] not in known and r.get('state') in sp.TERMINAL_STATES]
        if not missing:
            extra = sorted(extra, key=lambda r: _id_key(r['job_id']))[-ACCOUNTING_MAX:]
        rows.extend(extra)
        found_ids = set(r['job_id'] for r in extra)
        missing = [j for j in missing if j not in found_ids]
    # the key is read only when there is a server to ask (a missing key file does not hide the jobs)
    try:
        match = re.compile(params['probe_match']) if params.get('probe_match') else None
    except re.error as exc:
        raise ActionError('probe_match=%r is not a valid regular expression (%s): give a Python regular expression '
                          'of the job names to ask, e.g. ^glm-serve(-[0-9]+)?$' % (params['probe_match'], exc))

    def asked(row):
        return row.get('state') == 'RUNNING' and (match is None or match.search(row.get('name') or '') is not None)
    running = any(asked(r) and (wanted_live is None or is_live(r) == wanted_live) for r in rows)
    probe = make_probe(params.get('probe'))[0] if running else None
    jobs = []
    for row in sorted(rows, key=lambda r: _id_key(r['job_id'])):
        if wanted_live is not None and is_live(row) != wanted_live:
            continue
        if params.get('details', True) and row.get('source') != 'accounting':
            row = details(ctx, row)
        job = dict((k, row.get(k)) for k in INFO_KEYS)
        job['source'] = row.get('source') or 'slurmctld'
        job.update(live=is_live(row), ending=is_ending(row))
        if params.get('probe'):
            job['probe'] = probe_job(probe, row) if probe is not None and asked(row) else None
        jobs.append(job)
    return {'changed': False, 'jobs': jobs, 'missing': missing, 'slurm_version': cli.version()[0], 'polls': cli.polls,
            'accounting_calls': cli.accounting_calls}


def probe_job(probe, job):
    """The server's answer on a RUNNING job's first node, as a dict (None for a job that does not run)."""
    node = sp.first_host(job.get('nodes') or job.get('batch_host'))
    if job.get('state') != 'RUNNING' or not node:
        return None
    answer = probe.check(node)
    return {'status': answer.status, 'detail': answer.detail, 'answered': answer.answered,
            'endpoint': probe.endpoint(node), 'models': answer.models, 'max_model_len': answer.max_model_len}


def fail_kwargs(exc, result=None):
    """The fail_json keyword arguments for an exception raised by present/absent/info."""
    kwargs = dict(result if result is not None else getattr(exc, 'result', None) or {})
    if isinstance(exc, SlurmError):
        kwargs.update(exc.kwargs())
    elif isinstance(exc, WaitFailed):
        kwargs['msg'] = exc.msg
        kwargs['timed_out'] = exc.timed_out
        kwargs['failure'] = exc.as_dict()
        if exc.log_tail:
            kwargs['log_tail'] = exc.log_tail
    else:
        kwargs['msg'] = getattr(exc, 'msg', str(exc))
    return kwargs
