# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What slurm_job and slurm_job_info do: the verbs present, absent and info, each resolve -> act -> wait.

Each verb takes one :class:`Context` (the CLI client, the module's parameters, check mode, warn, the clock) and
returns the result dict; it raises SlurmError, WaitFailed or ActionError, which the modules turn into
``fail_json`` with :func:`fail_kwargs`. The steps live by concern beside this file: submit_lock, submit_record,
job_lookup, job_submit, job_wait, bad_nodes, hints, accounting, job_specs, slurm_errors (names other files import
from here are re-exported).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import pwd
import re

from ansible_collections.glm.serve.plugins.module_utils import slurm_parse as sp
from ansible_collections.glm.serve.plugins.module_utils.accounting import ACCOUNTING_MAX, Accounting
from ansible_collections.glm.serve.plugins.module_utils.bad_nodes import avoid_and_retry, read_bad_nodes
from ansible_collections.glm.serve.plugins.module_utils.hints import compile_hints, matching_hints
from ansible_collections.glm.serve.plugins.module_utils.job_lookup import (
    chain_entries, details, find_live, id_key, is_ending, is_live, job_fields, lookup)
from ansible_collections.glm.serve.plugins.module_utils.job_specs import bad_nodes_options, probe_options
from ansible_collections.glm.serve.plugins.module_utils.job_submit import (
    adopt_by_id, adopt_or_submit, apply_end_time, dependency_ids, write_script)
from ansible_collections.glm.serve.plugins.module_utils.job_waiter import Target, WaitFailed
from ansible_collections.glm.serve.plugins.module_utils.job_wait import ATTEMPT_KEYS, make_probe, wait_into
from ansible_collections.glm.serve.plugins.module_utils.slurm_errors import ActionError, carrying, failed_result, fail_kwargs
from ansible_collections.glm.serve.plugins.module_utils.submit_lock import SubmitLock, fcntl, lock_path
from ansible_collections.glm.serve.plugins.module_utils.submit_record import script_digest, script_output_pattern
from ansible_collections.glm.serve.plugins.module_utils.wait_failures import with_hints

#: The verbs and what the modules build them with; the rest are names that other files import from here.
__all__ = ['Context', 'present', 'absent', 'info', 'fail_kwargs', 'ActionError', 'current_user',
           'probe_options', 'bad_nodes_options', 'compile_hints', 'matching_hints', 'SubmitLock', 'fcntl', 'lock_path',
           'read_bad_nodes', 'script_digest', 'script_output_pattern']

INFO_KEYS = ('job_id', 'name', 'user', 'state', 'reason', 'nodes', 'partition', 'elapsed', 'time_limit',
             'end_time', 'output_path', 'work_dir', 'dependency', 'exit_code', 'start_time', 'submit_time', 'source')


def current_user():
    return pwd.getpwuid(os.geteuid()).pw_name


class Context:
    """What every step of an action needs: the CLI client, the module's parameters, check mode, ``warn`` and
    ``log`` (the module's), the file system the waiter watches, and one clock (the client's). Besides these it
    holds only caches whose answers do not depend on which step asks first (the user, the submit records' checks,
    whether accounting said why it is not used)."""

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
        self.recorded = {}          # job id -> what its submit record says (see submit_record.recorded())
        self.accounting = Accounting(cli, params.get('accounting', True), self.log)
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


# -- present ----------------------------------------------------------------------------------------------------


class WaitFor:
    """How present waits: the probe of the server (None), the secrets to redact, the compiled hints."""

    def __init__(self, probe=None, secrets=(), hints=()):
        self.probe, self.secrets, self.hints = probe, secrets, hints


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
        job, fields = resumed(resume) if resume else resolve(ctx)
        result.update(fields)
        if waits and result['job_id']:
            job = wait_present(ctx, result, job, resume, WaitFor(probe, secrets, hints))
        if job is not None and job.get('job_id') and params.get('end_time'):
            result.update(apply_end_time(ctx, job))
    except Exception as exc:
        failed_result(exc, result)
        hint_refusal(exc, hints, result)
        raise
    finally:
        result['polls'] = ctx.cli.polls
    return result


def hint_refusal(exc, hints, result):
    """A refusal before anything was done (an ActionError, such as change_strategy=fail's) gets the ``hints`` its
    message matches, after "What to do:", as a failed wait does."""
    found = matching_hints(hints, exc) if isinstance(exc, ActionError) else []
    if found:
        exc.msg = with_hints(exc.msg, found)
        result['hints'] = found


def resumed(resume):
    """(job, result fields) of the next slice of a sliced wait: the job of ``wait_resume``, its bad-node findings."""
    if not resume.get('job_id'):
        raise ActionError('wait_resume must be the resume value a slice of this task returned (it has no job_id)')
    fields = {'job_id': str(resume['job_id']), 'bad_nodes': list(resume.get('bad_nodes') or [])}
    if resume.get('excluded_nodes'):
        fields['excluded_nodes'] = list(resume['excluded_nodes'])
    return {'job_id': fields['job_id']}, fields


def resolve(ctx):
    """(job, result fields): the script written, the job adopted (``job_id``) or adopted/submitted by name."""
    with carrying(write_script(ctx)) as fields:
        if ctx.params.get('job_id'):
            job = adopt_by_id(ctx)
        else:
            job, found = adopt_or_submit(ctx)
            fields.update(found)
        if job is not None and job.get('job_id'):
            fields['job_id'] = job['job_id']
            if not ctx.check_mode or not fields.get('submitted'):
                job = details(ctx, job)
            fields.update(job_fields(job), chain=chain_entries([job]))
    return job, fields


def wait_present(ctx, result, job, resume, how):
    """Wait for the job; after a failure caused by its node, submit it again without that node (``bad_nodes``).
    Returns the job as the wait left it (None when the slice is over and the wait is not)."""
    params = ctx.params
    known = None if resume else first_known(params, job, result['submitted'])
    attempt = int(resume.get('attempt') or 0) if resume else 0
    snapshot = resume.get('waiter') if resume else None
    while True:
        target = Target(result['job_id'], success=params.get('wait_condition') or ['RUNNING'],
                        parents=dependency_ids(params), probe=how.probe, known=known)
        try:
            outcome = wait_into(ctx, result, target, secrets=how.secrets, hints=how.hints, snapshot=snapshot)
            return outcome['job'] if outcome is not None else slice_over(result, attempt)
        except WaitFailed as exc:
            if not params.get('bad_nodes') or not bad_node_again(ctx, result, exc, attempt):
                raise
        attempt, snapshot = attempt + 1, None
        for key in ATTEMPT_KEYS:
            result.pop(key, None)
        job, fields = resubmit(ctx)
        result.update(fields)
        known = job


def first_known(params, job, submitted):
    """What the wait's first round may take as known: a job just submitted after other jobs is PENDING
    (Dependency) until Slurm says otherwise, so the first round asks the parents only."""
    if submitted and dependency_ids(params) and not job.get('reason'):
        return dict(job, reason=sp.DEPENDENCY)
    return job


def slice_over(result, attempt):
    """The slice is over, the wait is not: the ``resume`` also carries the attempt and the bad-node findings."""
    result['resume'].update(attempt=attempt, bad_nodes=result.get('bad_nodes') or [],
                            excluded_nodes=result.get('excluded_nodes') or [])


def bad_node_again(ctx, result, exc, attempt):
    """True when the failed job's node goes on the bad-node list and another attempt is due."""
    again, entry = avoid_and_retry(ctx.params['bad_nodes'], exc, result['job_id'], attempt, ctx.warn)
    if entry is not None:
        result.setdefault('bad_nodes', []).append(entry)
    return again


def resubmit(ctx):
    """(job, result fields) of the next attempt after a bad node: adopted or submitted again, with its details."""
    job, fields = adopt_or_submit(ctx, report=False)
    fields['job_id'] = job['job_id']
    with carrying(fields):
        if not job.get('output_path'):
            job = details(ctx, job)
    fields.update(job_fields(job))
    return job, fields


# -- absent -----------------------------------------------------------------------------------------------------


def absent(ctx):
    """Cancel the live jobs of name+user (or the job ``job_id``); with ``wait``, until Slurm has let them go."""
    result = base_result(ctx)
    try:
        jobs, fields = absent_targets(ctx)
        result.update(fields)
        targets = [j for j in jobs if is_live(j)]
        if targets:
            signalled = signal_targets(ctx, targets)
            result.update(changed=True, cancelled=[j['job_id'] for j in targets if j['job_id'] not in signalled])
            if signalled:
                result['signalled'] = signalled
            if not ctx.check_mode:
                if result['cancelled']:
                    ctx.retry(ctx.cli.cancel, result['cancelled'])
                if signalled:
                    ctx.retry(ctx.cli.signal_batch, signalled, ctx.params['signal'])
                if ctx.params.get('wait'):
                    wait_gone(ctx, result, targets)
    except Exception as exc:
        failed_result(exc, result)
        raise
    finally:
        result['polls'] = ctx.cli.polls
    return result


def signal_targets(ctx, targets):
    """The ids of the targets that get ``signal`` instead of a cancel: those RUNNING (a pending job has no script
    running to signal: it is cancelled)."""
    signal = ctx.params.get('signal')
    if not signal:
        return []
    if not re.match(r'^((SIG)?[A-Z][A-Z0-9+-]*|[0-9]+)$', signal):
        raise ActionError('signal must be a signal name or number as scancel takes it (USR1, SIGTERM, 10), got %r' % signal)
    return [j['job_id'] for j in targets if j.get('state') == 'RUNNING']


def absent_targets(ctx):
    """(the jobs of job_id or of name+user, result fields); a job_id Slurm no longer knows is PURGED."""
    fields = {}
    if ctx.params.get('job_id'):
        job = lookup(ctx, ctx.params['job_id'])
        jobs = [job] if job else []
        if not job:
            fields.update(job_id=str(ctx.params['job_id']), state='PURGED')
    else:
        if not ctx.name:
            raise ActionError('state=absent needs job_id or name')
        jobs = find_live(ctx)
    if jobs:
        fields.update(job_fields(jobs[0]), chain=chain_entries(jobs))
    return jobs, fields


def wait_gone(ctx, result, targets):
    """Wait until Slurm has let the cancelled jobs go, within one ``wait_timeout``."""
    start = ctx.clock.now()
    for job in targets:
        remaining = max(0, ctx.params['wait_timeout'] - (ctx.clock.now() - start))
        wait_into(ctx, result, Target(job['job_id'], known=job), until_gone=True, timeout=remaining)
    result['duration'] = round(ctx.clock.now() - start, 3)
    result['chain'] = chain_entries([dict(j, state=result['state']) if j['job_id'] == result['job_id'] else j for j in targets])


# -- info -------------------------------------------------------------------------------------------------------


def info(ctx):
    """The jobs asked for (ids, name, user), oldest first, each marked ``live``/``ending``; with ``probe``, the
    server's answer of each RUNNING job."""
    params, cli = ctx.params, ctx.cli
    rows, missing = info_rows(ctx)
    asked = probe_filter(params.get('probe_match'))
    wanted_live = params.get('live')
    shown = [r for r in sorted(rows, key=lambda r: id_key(r['job_id'])) if wanted_live is None or is_live(r) == wanted_live]
    # the key is read only when there is a server to ask (a missing key file does not hide the jobs)
    probe = make_probe(params.get('probe'))[0] if any(asked(r) for r in shown) else None
    jobs = [info_job(ctx, row, probe, asked) for row in shown]
    return {'changed': False, 'jobs': jobs, 'missing': missing, 'slurm_version': cli.version()[0], 'polls': cli.polls,
            'accounting_calls': cli.accounting_calls}


def info_rows(ctx):
    """(the rows of the ids/name/user asked for, the ids no one knows): slurmctld's, then what it forgot (MinJobAge
    after the end) from accounting. Not for live-only listings: accounting adds no live job."""
    params = ctx.params
    job_ids = [str(j) for j in (params.get('job_ids') or [])]
    user = None if params.get('all_users') else (params.get('user') or (None if job_ids else current_user()))
    rows, missing = slurmctld_rows(ctx, job_ids, user)
    if params.get('live') is not True and (missing or (not job_ids and (params.get('name') or user))):
        missing = accounting_rows(ctx, rows, missing, user)
    return rows, missing


def slurmctld_rows(ctx, job_ids, user):
    """(the rows slurmctld has of the ids/name/user, the ids it does not know)."""
    rows = ctx.retry(ctx.cli.squeue, job_ids=job_ids or None, name=ctx.params.get('name'), user=user, all_states=True)
    found = set(r['job_id'] for r in rows)
    missing = []
    for job_id in job_ids:
        if job_id not in found:
            shown = ctx.retry(ctx.cli.show_job, job_id)
            if shown:
                rows.append(shown)
            else:
                missing.append(job_id)
    return rows, missing


def accounting_rows(ctx, rows, missing, user):
    """Add to ``rows`` what slurmctld forgot (MinJobAge after the end), from accounting: the ids asked for, or the
    newest ended jobs of the name/user. Returns the ids still missing."""
    known = set(r['job_id'] for r in rows)
    query = {'job_ids': missing} if missing else {'name': ctx.params.get('name'), 'user': user}
    extra = [r for r in ctx.accounting.rows(**query) if r['job_id'] not in known and r.get('state') in sp.TERMINAL_STATES]
    if not missing:
        extra = sorted(extra, key=lambda r: id_key(r['job_id']))[-ACCOUNTING_MAX:]
    rows.extend(extra)
    found_ids = set(r['job_id'] for r in extra)
    return [j for j in missing if j not in found_ids]


def probe_filter(probe_match):
    """asked(row): a RUNNING job whose name ``probe_match`` matches (every RUNNING job without it)."""
    try:
        match = re.compile(probe_match) if probe_match else None
    except re.error as exc:
        raise ActionError('probe_match=%r is not a valid regular expression (%s): give a Python regular expression '
                          'of the job names to ask, e.g. ^glm-serve(-[0-9]+)?$' % (probe_match, exc))
    return lambda row: row.get('state') == 'RUNNING' and (match is None or match.search(row.get('name') or '') is not None)


def info_job(ctx, row, probe, asked):
    """One job of info's list."""
    if ctx.params.get('details', True) and row.get('source') != 'accounting':
        row = details(ctx, row)
    job = dict((k, row.get(k)) for k in INFO_KEYS)
    job['source'] = row.get('source') or 'slurmctld'
    job.update(live=is_live(row), ending=is_ending(row))
    if ctx.params.get('probe'):
        job['probe'] = probe_job(probe, row) if probe is not None and asked(row) else None
    return job


def probe_job(probe, job):
    """The server's answer on a RUNNING job's first node, as a dict (None for a job that does not run)."""
    node = sp.first_host(job.get('nodes') or job.get('batch_host'))
    if job.get('state') != 'RUNNING' or not node:
        return None
    answer = probe.check(node, job.get('job_id'))
    return {'status': answer.status, 'detail': answer.detail, 'answered': answer.answered,
            'endpoint': probe.endpoint(node, job.get('job_id')), 'models': answer.models, 'max_model_len': answer.max_model_len}
