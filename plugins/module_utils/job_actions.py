# -*- coding: utf-8 -*-
# Copyright (c) glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What slurm_job and slurm_job_info do: present, absent and info, on top of SlurmCli and JobWaiter.

The functions take the module's parameters as a dict and return the result dict; they raise
SlurmError or WaitFailed, which the modules turn into ``fail_json``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import pwd
import re

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None

from ansible_collections.glm.serve.plugins.module_utils import slurm_parse as sp
from ansible_collections.glm.serve.plugins.module_utils.slurm_cli import SlurmError, SlurmTransientError
from ansible_collections.glm.serve.plugins.module_utils.job_waiter import JobWaiter, WaitFailed
from ansible_collections.glm.serve.plugins.module_utils import model_probe as mp

RESULT_JOB_KEYS = ('job_id', 'name', 'user', 'state', 'reason', 'nodes', 'exit_code', 'output_path')
INFO_KEYS = ('job_id', 'name', 'user', 'state', 'reason', 'nodes', 'partition', 'elapsed', 'time_limit',
             'end_time', 'output_path', 'work_dir', 'dependency', 'exit_code')


class ActionError(Exception):
    """A user error found before any Slurm command ran (bad path, missing option)."""

    def __init__(self, msg, **extra):
        super(ActionError, self).__init__(msg)
        self.msg = msg
        self.extra = extra


def current_user():
    return pwd.getpwuid(os.geteuid()).pw_name


def base_result(cli, user, name=None):
    return {
        'changed': False, 'job_id': None, 'cluster': None, 'name': name, 'user': user, 'state': None,
        'reason': None, 'nodes': None, 'exit_code': None, 'output_path': None, 'submitted': False,
        'cancelled': [], 'chain': [], 'duration': 0.0, 'slurm_version': cli.version()[0], 'polls': 0,
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
    return job.get('state') in sp.LIVE_STATES


def is_dead_pending(job):
    """A PENDING job whose dependency can never be satisfied: it will never run."""
    return job.get('state') == 'PENDING' and job.get('reason') == sp.NEVER_SATISFIED


def find_live(cli, name, user, retry_timeout):
    """Live jobs of name+user, newest first."""
    rows = cli.retry(cli.squeue, retry_timeout, name=name, user=user)
    rows = [r for r in rows if r.get('name') == name and (not user or r.get('user') == user) and is_live(r)]
    return sorted(rows, key=lambda r: _id_key(r['job_id']), reverse=True)


def _id_key(job_id):
    head = str(job_id).split('_', 1)[0].split('+', 1)[0]
    return int(head) if head.isdigit() else 0


def lookup(cli, job_id, retry_timeout):
    """The job with this id (finished ones too, while Slurm remembers them), or None."""
    return cli.retry(cli.show_job, retry_timeout, str(job_id))


def details(cli, job, retry_timeout):
    """Add output_path and exit_code (scontrol show job) to a squeue row."""
    if job is None or job.get('output_path'):
        return job
    shown = cli.retry(cli.show_job, retry_timeout, job['job_id'])
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


def lock_path(params, name, user):
    """The lock file of name+user: next to where sbatch runs (chdir, else the script's folder)."""
    folder = params.get('chdir') or (os.path.dirname(os.path.abspath(params['script'])) if params.get('script') else None)
    if not folder or not os.path.isdir(folder):
        return None
    safe = re.sub(r'[^A-Za-z0-9._-]', '_', '%s-%s' % (user, name))
    return os.path.join(folder, '.slurm_job-%s.lock' % safe)


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
    the log tail; a hint with ``job`` applies only when that job (name or id) is the one that failed."""
    failed = getattr(exc, 'failed_job', None) or getattr(exc, 'job', None) or {}
    text = '\n'.join(['%s %s %s' % (failed.get('state') or '', failed.get('reason') or '', failed.get('exit_code') or ''),
                      exc.msg] + list(getattr(exc, 'log_tail', None) or []))
    found = []
    for pattern, hint, job in hints:
        if job and job not in (failed.get('name'), failed.get('job_id')):
            continue
        if pattern.search(text):
            hint = hint.replace('{job_id}', str(failed.get('job_id') or '?')).replace('{name}', str(failed.get('name') or '?'))
            hint = hint.replace('{log}', str(getattr(exc, 'log_path', None) or failed.get('output_path') or '?'))
            if hint not in found:
                found.append(hint)
    return found


def add_hints(msg, hints):
    """The message with the hints inserted before the log tail (or at the end)."""
    if not hints:
        return msg
    text = '. What to do: %s' % ' '.join(h.strip().rstrip('.') + '.' for h in hints)
    cut = msg.find('. Last lines of ')
    if cut < 0:
        cut = msg.find('. Its output file ')
    if cut < 0:
        return msg.rstrip('.') + text
    return msg[:cut] + text[:-1] + msg[cut:]


def submitted_before(cli, job, path, retry_timeout):
    """True when the job was submitted before path was last modified (a job submitted after it starts with what
    the file holds now). A missing file or an unknown submit time: False."""
    try:
        mtime = os.stat(path).st_mtime
    except (IOError, OSError):
        return False
    submitted = sp.parse_time(job.get('submit_time'))
    if submitted is None:
        shown = cli.retry(cli.show_job, retry_timeout, job['job_id'])
        submitted = sp.parse_time((shown or {}).get('submit_time'))
    # Slurm's times have whole seconds: a job submitted in the same second as the change counts as after it
    return submitted is not None and submitted < int(mtime)


def script_changed(cli, job, script, warn):
    """True when the script Slurm stored for the live job differs from the script file now."""
    try:
        with open(script, 'rb') as handle:
            current = handle.read().decode('utf-8', 'replace')
    except (IOError, OSError):
        return False
    stored = cli.batch_script(job['job_id'])
    if stored is None:
        warn('Slurm did not give the batch script of job %s (scontrol write batch_script): it is kept as it is' % job['job_id'])
        return False
    return stored != current


def make_probe(params):
    probe = params.get('probe')
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


def run_wait(cli, params, job_id, result, known=None, parents=(), until_gone=False, clock=None, log=None, files=None,
             probe=None, secrets=(), timeout=None, hints=()):
    waiter = JobWaiter(
        cli, job_id, success=params.get('wait_condition') or ['RUNNING'],
        timeout=timeout if timeout is not None else params['wait_timeout'], sleep_cap=params['wait_sleep'],
        parents=parents, probe=probe, clock=clock, files=files, log=log, secrets=secrets, until_gone=until_gone, known=known,
        cancel_dead=params.get('kill_on_invalid_dep', True) and not until_gone)
    try:
        outcome = waiter.wait()
    except WaitFailed as exc:
        found = matching_hints(hints, exc)
        if found:
            exc.msg = add_hints(exc.msg, found)
            result['hints'] = found
        for cancelled in exc.cancelled:
            if cancelled not in result['cancelled']:
                result['cancelled'].append(cancelled)
                result['changed'] = True
        fill_job(result, exc.job)
        result['chain'] = chain_entries(exc.chain)
        result['events'] = list(waiter.events)
        result['duration'] = round(waiter.clock.now() - waiter.start, 3) if waiter.start is not None else 0.0
        if waiter.endpoint:
            result['endpoint'] = waiter.endpoint
        if exc.log_tail:
            result['log_tail'] = exc.log_tail
        raise
    fill_job(result, outcome['job'])
    if outcome.get('output_path'):
        result['output_path'] = outcome['output_path']
    result['chain'] = chain_entries(outcome['chain'])
    result['events'] = outcome['events']
    result['duration'] = outcome['duration']
    if probe is not None:
        result['endpoint'] = outcome['endpoint']
        result['models'] = outcome['models']
        result['max_model_len'] = outcome['max_model_len']
    return outcome


def _norm_time(value):
    if not value:
        return None
    value = str(value).strip().replace(' ', 'T')
    if len(value) == 16:  # YYYY-MM-DDTHH:MM
        value += ':00'
    return value


def apply_end_time(cli, params, job, result, check_mode, warn):
    wanted = _norm_time(params.get('end_time'))
    if not wanted or not job:
        return
    if job.get('state') != 'RUNNING':
        warn('end_time applies to a RUNNING job; job %s is %s, so its end time was not changed' % (job['job_id'], job.get('state')))
        return
    if _norm_time(job.get('end_time')) == wanted:
        return
    result['changed'] = True
    result['end_time_changed'] = {'before': job.get('end_time'), 'after': wanted}
    if not check_mode:
        cli.update_end_time(job['job_id'], wanted)


def present(cli, params, check_mode=False, clock=None, log=None, warn=None, files=None):
    warn = warn or (lambda msg: None)
    retry_timeout = params.get('retry_timeout') or 120
    user = params.get('user') or current_user()
    name = params.get('name')
    result = base_result(cli, user, name)
    hints = compile_hints(params.get('hints'))
    probe, secrets = make_probe(params) if params.get('wait') and not check_mode else (None, ())
    dep_ids = [str(i).split(';', 1)[0] for d in (params.get('dependency') or []) for i in (d.get('job_ids') or [])]
    try:
        job = None
        if params.get('job_id'):
            job = lookup(cli, params['job_id'], retry_timeout)
            if job is None:
                raise ActionError('job %s is not known to Slurm (Invalid job id specified): it never existed or was purged '
                                  'after it ended; drop job_id to submit a new job' % params['job_id'])
        else:
            if not name:
                raise ActionError('state=present needs name (the job name, with user the idempotency key) or job_id')
            lock = SubmitLock(None if check_mode else lock_path(params, name, user), cli.clock, retry_timeout, warn)
            with lock:
                job = find_or_submit(cli, params, name, user, result, check_mode, retry_timeout, warn)
        if job is not None and job.get('job_id'):
            result['job_id'] = job['job_id']
            if not check_mode or not result['submitted']:
                job = details(cli, job, retry_timeout)
            fill_job(result, job)
            result['chain'] = chain_entries([job])
        if params.get('wait') and not check_mode and result['job_id']:
            outcome = run_wait(cli, params, result['job_id'], result, known=job, parents=dep_ids, clock=clock, log=log,
                               files=files, probe=probe, secrets=secrets, hints=hints)
            job = outcome['job']
        if job is not None and job.get('job_id') and params.get('end_time'):
            apply_end_time(cli, params, job, result, check_mode, warn)
    except Exception as exc:
        exc.result = result
        raise
    finally:
        result['polls'] = cli.polls
    return result


def find_or_submit(cli, params, name, user, result, check_mode, retry_timeout, warn):
    """Adopt the live job of name+user, or cancel what must go and submit. Run under SubmitLock."""
    live = find_live(cli, name, user, retry_timeout)
    dead = [j for j in live if is_dead_pending(j)]
    live = [j for j in live if not is_dead_pending(j)]
    to_cancel = [j['job_id'] for j in dead]
    job = None
    older_than = params.get('recreate_if_older_than')
    if live and not params.get('recreate') and older_than and submitted_before(cli, live[0], older_than, retry_timeout):
        result['older_than'] = older_than
        to_cancel += [j['job_id'] for j in live]
        live = []
    if live and not params.get('recreate'):
        job = live[0]
        if len(live) > 1:
            warn('%d live jobs are named %s for user %s (%s): using the newest' % (
                len(live), name, user, ', '.join(j['job_id'] for j in live)))
        if params.get('recreate_on_change') and params.get('script') and script_changed(cli, job, params['script'], warn):
            result['script_changed'] = True
            job = None
    if job is None:
        to_cancel += [j['job_id'] for j in live]
        job = submit(cli, params, name, user, to_cancel, result, check_mode, retry_timeout, warn)
        if not check_mode and job.get('job_id'):
            job = keep_oldest(cli, job, name, user, to_cancel, result, retry_timeout, warn)
    return job


def keep_oldest(cli, job, name, user, to_cancel, result, retry_timeout, warn):
    """After sbatch: when another live job of name+user appeared meanwhile (a run on another login node, without
    the shared lock), keep the oldest and cancel ours if it is not, so that one job remains."""
    try:
        live = find_live(cli, name, user, retry_timeout)
    except SlurmError:
        return job
    others = [j for j in live if j['job_id'] != job['job_id'] and j['job_id'] not in to_cancel and not is_dead_pending(j)]
    if not others:
        return job
    oldest = min(others, key=lambda j: _id_key(j['job_id']))
    if _id_key(oldest['job_id']) > _id_key(job['job_id']):
        return job  # ours is the oldest: the other run cancels its own
    cli.retry(cli.cancel, retry_timeout, [job['job_id']])
    warn('job %s of name %s was submitted by another run at the same time: it is adopted, and job %s (this run\'s) '
         'was cancelled' % (oldest['job_id'], name, job['job_id']))
    result['cancelled'].append(job['job_id'])
    result['submitted'] = False
    result['cluster'] = None
    return oldest


def submit(cli, params, name, user, to_cancel, result, check_mode, retry_timeout, warn):
    """Cancel to_cancel, then sbatch. Returns the new job dict ({'job_id': None} in check mode)."""
    script = params.get('script')
    if not script:
        raise ActionError('state=present needs script (the batch script path on the host) to submit job %s' % name)
    chdir = params.get('chdir') or os.path.dirname(os.path.abspath(script))
    umask = parse_umask(params.get('umask') or '0077')
    for path, kind, test in ((script, 'batch script', os.path.isfile), (chdir, 'chdir directory', os.path.isdir)):
        if not test(path):
            if check_mode:
                warn('the %s %s does not exist (yet): in a real run the task would fail unless it is created first' % (kind, path))
            else:
                raise ActionError('the %s %s does not exist on the host' % (kind, path))
    argv = cli.sbatch_argv(script, name, params.get('dependency'), params.get('kill_on_invalid_dep', True), params.get('sbatch_args'))
    result['changed'] = True
    result['submitted'] = True
    result['cancelled'] = list(to_cancel)
    result['sbatch_cmd'] = argv
    if check_mode:
        return {'job_id': None, 'name': name, 'user': user}
    if to_cancel:
        cli.retry(cli.cancel, retry_timeout, to_cancel)
    deadline = cli.clock.now() + retry_timeout
    delay = 1.0
    while True:
        try:
            job_id, cluster = cli.submit(argv, chdir, umask)
            break
        except SlurmTransientError:
            if cli.clock.now() >= deadline:
                raise
            cli.clock.sleep(delay)
            delay = min(delay * 2, 30.0)
            # the request may have reached the controller before the answer was lost: adopt, never submit twice
            try:
                live = [j for j in find_live(cli, name, user, 0) if j['job_id'] not in to_cancel]
            except SlurmTransientError:
                live = []
            if live:
                warn('sbatch lost its answer; job %s of that name has appeared and was adopted' % live[0]['job_id'])
                result['cluster'] = None
                return live[0]
    result['cluster'] = cluster
    return {'job_id': job_id, 'name': name, 'user': user, 'state': 'PENDING'}


def absent(cli, params, check_mode=False, clock=None, log=None, warn=None, files=None):
    retry_timeout = params.get('retry_timeout') or 120
    user = params.get('user') or current_user()
    name = params.get('name')
    result = base_result(cli, user, name)
    try:
        if params.get('job_id'):
            job = lookup(cli, params['job_id'], retry_timeout)
            jobs = [job] if job else []
            if not job:
                result['job_id'] = str(params['job_id'])
                result['state'] = 'PURGED'
        else:
            if not name:
                raise ActionError('state=absent needs job_id or name')
            jobs = find_live(cli, name, user, retry_timeout)
        targets = [j for j in jobs if is_live(j)]
        if jobs:
            fill_job(result, jobs[0])
            result['chain'] = chain_entries(jobs)
        if targets:
            result['changed'] = True
            result['cancelled'] = [j['job_id'] for j in targets]
            if not check_mode:
                cli.retry(cli.cancel, retry_timeout, result['cancelled'])
                if params.get('wait'):
                    start = cli.clock.now()
                    for job in targets:
                        remaining = max(0, params['wait_timeout'] - (cli.clock.now() - start))
                        run_wait(cli, params, job['job_id'], result, known=job, until_gone=True, clock=clock, log=log,
                                 files=files, timeout=remaining)
                    result['duration'] = round(cli.clock.now() - start, 3)
                    result['chain'] = chain_entries(
                        [dict(j, state=result['state']) if j['job_id'] == result['job_id'] else j for j in targets])
    except Exception as exc:
        exc.result = result
        raise
    finally:
        result['polls'] = cli.polls
    return result


def info(cli, params):
    retry_timeout = params.get('retry_timeout') or 120
    job_ids = [str(j) for j in (params.get('job_ids') or [])]
    user = None if params.get('all_users') else (params.get('user') or (None if job_ids else current_user()))
    rows = cli.retry(cli.squeue, retry_timeout, job_ids=job_ids or None, name=params.get('name'), user=user, all_states=True)
    found = set(r['job_id'] for r in rows)
    missing = []
    for job_id in job_ids:
        if job_id not in found:
            shown = cli.retry(cli.show_job, retry_timeout, job_id)
            if shown:
                rows.append(shown)
            else:
                missing.append(job_id)
    jobs = []
    for row in sorted(rows, key=lambda r: _id_key(r['job_id'])):
        if params.get('details', True):
            row = details(cli, row, retry_timeout)
        jobs.append(dict((k, row.get(k)) for k in INFO_KEYS))
    return {'changed': False, 'jobs': jobs, 'missing': missing, 'slurm_version': cli.version()[0], 'polls': cli.polls}


def fail_kwargs(exc, result=None):
    """The fail_json keyword arguments for an exception raised by present/absent/info."""
    kwargs = dict(result if result is not None else getattr(exc, 'result', None) or {})
    if isinstance(exc, SlurmError):
        kwargs.update(exc.kwargs())
    elif isinstance(exc, WaitFailed):
        kwargs['msg'] = exc.msg
        kwargs['timed_out'] = exc.timed_out
        if exc.log_tail:
            kwargs['log_tail'] = exc.log_tail
    else:
        kwargs['msg'] = getattr(exc, 'msg', str(exc))
    return kwargs
