# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The act of ``state=present``: write the script, then adopt the live job of name+user or submit a new one.

Each step returns what it did as result fields (a dict) beside its value; the verb puts them in its result. A step
that fails attaches the fields it had (:func:`slurm_errors.carrying`), so the failure still says them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import os
import tempfile
import time

from ansible_collections.glm.serve.plugins.module_utils import slurm_parse as sp
from ansible_collections.glm.serve.plugins.module_utils.accounting import report_previous
from ansible_collections.glm.serve.plugins.module_utils.backoff import Backoff, retry
from ansible_collections.glm.serve.plugins.module_utils.bad_nodes import sbatch_args_avoiding
from ansible_collections.glm.serve.plugins.module_utils.job_lookup import (after_deps, current_jobs, find_live, id_key, is_dead_pending,
                                                                           live_jobs, lookup)
from ansible_collections.glm.serve.plugins.module_utils.slurm_cli import SlurmError, SlurmTransientError
from ansible_collections.glm.serve.plugins.module_utils.slurm_errors import ActionError, carrying
from ansible_collections.glm.serve.plugins.module_utils.submit_lock import SubmitLock, lock_path
from ansible_collections.glm.serve.plugins.module_utils.submit_record import recorded, script_digest, write_record


def parse_umask(value):
    try:
        return int(str(value), 8)
    except ValueError:
        raise ActionError('umask must be an octal string such as "0077", got %r' % (value,))


def _same_file(path, content):
    try:
        with open(path, 'rb') as handle:
            return handle.read() == content.encode('utf-8')
    except (IOError, OSError):
        return False


def _write_atomically(path, folder, content):
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


def write_script(ctx):
    """Write ``script_content`` to ``script`` (0600, atomically) when the file differs; in check mode, only say so.
    Returns the result fields (``changed``, ``script_written``)."""
    content, path = ctx.params.get('script_content'), ctx.params.get('script')
    if content is None:
        return {}
    if not path:
        raise ActionError('script_content needs script, the path to write it to on the host')
    if _same_file(path, content):
        return {}
    fields = {'changed': True, 'script_written': True}
    with carrying(fields):
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            if ctx.check_mode:
                ctx.warn('the folder %s does not exist (yet): in a real run the task would fail unless it is created first' % folder)
                return fields
            raise ActionError('the folder %s of script does not exist on the host: create it first' % folder)
        if not ctx.check_mode:
            _write_atomically(path, folder, content)
    return fields


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


def _restarts(shown):
    try:
        return int(shown.get('restarts') or 0)
    except (TypeError, ValueError):
        return 0


#: slurm.conf(5)'s KillWait default, when the cluster's cannot be read; and what a stopped run's stepd needs beyond it
DEFAULT_KILL_WAIT = 30
SETTLE_MARGIN = 5


def settle_delay(requeued_at, begin_at, settle, now):
    """Seconds to wait, from ``now``, before a requeued job's begin time is set to now: until ``settle`` seconds after
    its requeue (0 when passed or the moment is unknown), never more than ``settle`` (a moment misread, across a change
    of daylight saving time, makes it no longer); None when Slurm's own begin time (``begin_at``) comes first.

    Slurm holds a requeued batch job ``cred_expire`` + 1 s (121 s by default) so that its earlier run is gone from its
    node first (job_mgr.c ``batch_requeue_fini``: the new credential must be later than the revoke, the I/O cleared,
    the credential purged), and slurmd refuses a second copy while a step of the earlier run lives there (req.c
    ``_rpc_batch_job``, ``ESLURM_DUPLICATE_JOB_ID``: the job is requeued again, held). A node that failed and came
    back (``ReturnToService=2``) may be chosen again, so the job may start once its earlier run's steps have been
    given ``KillWait`` to stop, plus a margin: the usual case (a node that hangs may hold them longer)."""
    moment = sp.parse_time(requeued_at)
    if moment is None:
        return 0
    delay = min(settle, max(0, int(math.ceil(moment + settle - now))))
    begin = sp.parse_time(begin_at)
    return None if delay and begin is not None and begin - now <= delay + 1 else delay


def _settle(ctx, requeued_at):
    """KillWait + SETTLE_MARGIN; the cluster's KillWait (one ``scontrol show config``) only for a requeue of the
    last 5 minutes, when it can matter."""
    moment = sp.parse_time(requeued_at)
    recent = moment is not None and time.time() - moment < 300
    return ((ctx.retry(ctx.cli.kill_wait) if recent else None) or DEFAULT_KILL_WAIT) + SETTLE_MARGIN


def _held(shown):
    return bool(shown) and _restarts(shown) >= 1 and shown.get('state') == 'PENDING' and shown.get('reason') == 'BeginTime'


def start_requeued_now(ctx, job):
    """A live job that Slurm requeued (its node failed; Restarts > 0) waits for a begin time Slurm set some 2 min
    ahead, although another node may be free. Adopting it, the module sets its begin time to now (one ``scontrol
    update``, as its owner may, which also starts a scheduling pass) once ``KillWait`` + 5 s have passed since the
    requeue (:func:`settle_delay`; often already; it waits the rest, then asks again whether the job still waits);
    it says so. A job that waits for a begin time its user asked for (``--begin``, never requeued), or whose begin
    time comes first, is left alone. Returns (the job's row, result fields)."""
    shown = ctx.retry(ctx.cli.show_job, job['job_id'])
    if not shown:
        return job, {}
    job = dict(job, **dict((k, v) for k, v in shown.items() if v is not None and job.get(k) is None))
    if not _held(shown):
        return job, {}
    settle = _settle(ctx, shown.get('submit_time'))
    delay = settle_delay(shown.get('submit_time'), shown.get('start_time'), settle, time.time())
    if delay is None:
        return job, {}
    fields = {'changed': True, 'started_now': {'job_id': job['job_id'], 'was': shown.get('start_time'),
                                               'restarts': _restarts(shown), 'waited': 0 if ctx.check_mode else delay}}
    if not ctx.check_mode:
        ctx.clock.sleep(delay)
        if delay and not _held(ctx.retry(ctx.cli.show_job, job['job_id'])):
            return job, {}                      # started (or ended) meanwhile: nothing to do
        with carrying(fields):
            if not ctx.retry(ctx.cli.start_now, job['job_id']):
                return job, {}                  # no longer pending: it started at the same moment
    ctx.warn('job %s (%s) was requeued by Slurm (restarts %d: its node failed or an administrator requeued it) and was '
             'held until its begin time %s; %s to now%s, so that it starts at once on a free node' % (
                 job['job_id'], ctx.name, _restarts(shown), shown.get('start_time') or '?',
                 'it would be set' if ctx.check_mode else 'that was set',
                 ' after %d s (%d s after the requeue, the cluster\'s KillWait + 5 s for its earlier run to stop on '
                 'its node)' % (delay, settle) if delay else ''))
    return job, fields


def keep_oldest(ctx, job, to_cancel, cancelled):
    """After sbatch: when another live job of name+user appeared meanwhile (a run on another login node, without
    the shared lock), keep the oldest and cancel ours if it is not, so that one job remains. ``cancelled``: the
    result's list so far. Returns (the job kept, result fields)."""
    try:
        live = find_live(ctx)
    except SlurmError:
        return job, {}
    others = [j for j in live if j['job_id'] != job['job_id'] and j['job_id'] not in to_cancel and not is_dead_pending(j)]
    if not others:
        return job, {}
    oldest = min(others, key=lambda j: id_key(j['job_id']))
    if id_key(oldest['job_id']) > id_key(job['job_id']):
        return job, {}  # ours is the oldest: the other run cancels its own
    ctx.retry(ctx.cli.cancel, [job['job_id']])
    ctx.warn('job %s of name %s was submitted by another run at the same time: it is adopted, and job %s (this run\'s) '
             'was cancelled' % (oldest['job_id'], ctx.name, job['job_id']))
    return oldest, {'cancelled': list(cancelled) + [job['job_id']], 'submitted': False, 'cluster': None}


def _check_paths(ctx, script, chdir):
    for path, kind, test in ((script, 'batch script', os.path.isfile), (chdir, 'chdir directory', os.path.isdir)):
        if ctx.check_mode and kind == 'batch script' and ctx.params.get('script_content') is not None:
            continue   # it would be written first
        if not test(path):
            if ctx.check_mode:
                ctx.warn('the %s %s does not exist (yet): in a real run the task would fail unless it is created first' % (kind, path))
            else:
                raise ActionError('the %s %s does not exist on the host' % (kind, path))


def sbatch(ctx, argv, chdir, umask, to_cancel):
    """Cancel to_cancel, then sbatch, riding out the controller's outages. Returns (job, cluster); an sbatch that
    lost its answer while the job did appear adopts that job (cluster None): never two submissions."""
    digest = script_digest(text=ctx.script_text())
    if to_cancel:
        ctx.retry(ctx.cli.cancel, to_cancel)

    def appeared(exc):
        # the request may have reached the controller before the answer was lost: adopt, never submit twice
        try:
            live = [j for j in find_live(ctx, retry_timeout=0) if j['job_id'] not in to_cancel]
        except SlurmTransientError:
            live = []
        return ('adopted', live[0]) if live else None

    (kind, value), _errors = retry(lambda: ('submitted', ctx.cli.submit(argv, chdir, umask)), ctx.clock,
                                   ctx.retry_timeout, SlurmTransientError, Backoff(1.0, 30.0), between=appeared, clip=False)
    if kind == 'adopted':
        ctx.warn('sbatch lost its answer; job %s of that name has appeared and was adopted' % value['job_id'])
        return value, None
    job_id, cluster = value
    write_record(ctx, job_id, digest)
    # work_dir: the output path follows from the script's --output without asking Slurm (local_output_path)
    # restarts 0: a job is submitted never requeued, so a later row with Restarts=1 is a requeue even when the first
    # row the wait sees is already the requeued one (its node went DOWN before a round saw it RUNNING)
    return {'job_id': job_id, 'name': ctx.name, 'user': ctx.user, 'state': 'PENDING', 'work_dir': os.path.abspath(chdir),
            'restarts': '0'}, cluster


def submit(ctx, to_cancel):
    """Cancel to_cancel, then sbatch. Returns (the new job ({'job_id': None} in check mode), result fields)."""
    params = ctx.params
    script = params.get('script')
    if not script:
        raise ActionError('state=present needs script (the batch script path on the host) to submit job %s' % ctx.name)
    chdir = params.get('chdir') or os.path.dirname(os.path.abspath(script))
    umask = parse_umask(params.get('umask') or '0077')
    _check_paths(ctx, script, chdir)
    extra, excluded = sbatch_args_avoiding(params)
    argv = ctx.cli.sbatch_argv(script, ctx.name, params.get('dependency'), params.get('kill_on_invalid_dep', True), extra)
    fields = {'changed': True, 'submitted': True, 'cancelled': list(to_cancel), 'sbatch_cmd': argv}
    if excluded:
        fields['excluded_nodes'] = excluded
    if ctx.check_mode:
        return {'job_id': None, 'name': ctx.name, 'user': ctx.user}, fields
    with carrying(fields):
        job, fields['cluster'] = sbatch(ctx, argv, chdir, umask, to_cancel)
    return job, fields


def adopt_live(ctx, live):
    """The newest live job that is no other's successor (:func:`job_lookup.successor_ids`: the one its successor
    follows), adopted (None: its script changed, it is to be replaced), and the result fields. With
    ``change_strategy=start_first`` see :func:`adopt_current`; with ``fail`` a changed script is refused."""
    current = current_jobs(live)
    compare = ctx.params.get('recreate_on_change') and ctx.params.get('script')
    if compare and ctx.params.get('change_strategy') == 'start_first':
        return adopt_current(ctx, live, current)
    job = current[0]
    if len(current) > 1:
        ctx.warn('%d live jobs are named %s for user %s (%s): using the newest' % (
            len(current), ctx.name, ctx.user, ', '.join(j['job_id'] for j in current)))
    if compare and script_changed(ctx, job):
        if ctx.params.get('change_strategy') == 'fail':
            raise ActionError('the batch script %s differs from the one job %s (%s) runs, and replacing that job ends it '
                              'first (change_strategy=fail): nothing was cancelled or submitted' % (
                                  ctx.params['script'], job['job_id'], ctx.name))
        return None, {'script_changed': True}
    return _begin_now(ctx, job)


def _begin_now(ctx, job):
    if job.get('state') == 'PENDING' and job.get('reason') == 'BeginTime':
        return start_requeued_now(ctx, job)
    return job, {}


def adopt_current(ctx, live, current):
    """``change_strategy=start_first``: the newest live job that runs the script as it is now is adopted, and the
    other live jobs of the name (but that job's own successors) are the ones it replaces (RV ``replacing``: the
    caller ends them once it serves; an interrupted run's rerun finds them so too). None when no job runs the
    script: a new one is submitted beside them, which replaces them all. Returns (job or None, result fields)."""
    job = next((j for j in current if not script_changed(ctx, j)), None)
    if job is None:
        return None, {'script_changed': True, 'replacing': [j['job_id'] for j in live]}
    # not the adopted job's own successors (PENDING on after:ITS_ID)
    others = [j['job_id'] for j in live if j is not job and str(job['job_id']) not in [i for i, _m in after_deps(j)]]
    job, fields = _begin_now(ctx, job)
    if others:
        fields['replacing'] = others
    return job, fields


def _outdated(ctx, live):
    """The ``recreate_if_older_than`` file when the newest live job was submitted before it changed, else None."""
    older_than = ctx.params.get('recreate_if_older_than')
    if live and not ctx.params.get('recreate') and older_than and submitted_before(ctx, live[0], older_than):
        return older_than
    return None


def find_or_submit(ctx, locked=True, report=True):
    """Adopt the live job of name+user, or cancel what must go and submit. Run under SubmitLock (``locked``: held).
    ``report``: before a submission, say how the job of an earlier run ended (not for a resubmission of this run's).
    Returns (job, result fields)."""
    found = live_jobs(ctx)
    fields = {'lookup': found.listing} if found.listing else {}
    with carrying(fields):
        to_cancel = [j['job_id'] for j in found.jobs if is_dead_pending(j)]
        live = [j for j in found.jobs if not is_dead_pending(j)]
        older_than = _outdated(ctx, live)
        if older_than:
            fields['older_than'] = older_than
            to_cancel, live = to_cancel + [j['job_id'] for j in live], []
        job = None
        if live and not ctx.params.get('recreate'):
            job, more = adopt_live(ctx, live)
            fields.update(more)
        if job is None:
            # start_first leaves the live jobs it replaces (fields' replacing) to the caller
            kept = fields.get('replacing') or []
            job = _replace(ctx, fields, found.record if not live else None,
                           to_cancel + [j['job_id'] for j in live if j['job_id'] not in kept], locked, report and not live)
    return job, fields


def _replace(ctx, fields, looked, to_cancel, locked, report):
    """Report the earlier job (``report``; ``looked``: the record's lookup), submit, and keep the oldest of a race.
    Returns the job; ``fields`` (find_or_submit's) take what was done."""
    if report and not ctx.check_mode:
        previous = report_previous(ctx, looked)      # once, for the job of an earlier run
        if previous is not None:
            fields['previous'] = previous
    job, more = submit(ctx, to_cancel)
    fields.update(more)
    if not ctx.check_mode and job.get('job_id') and (ctx.params.get('duplicate_check') == 'always' or not locked):
        job, more = keep_oldest(ctx, job, to_cancel + (fields.get('replacing') or []), fields['cancelled'])
        fields.update(more)
    return job


def adopt_by_id(ctx):
    job = lookup(ctx, ctx.params['job_id'])
    if job is None:
        raise ActionError('job %s is not known to Slurm (Invalid job id specified): it never existed or was purged '
                          'after it ended; drop job_id to submit a new job' % ctx.params['job_id'])
    return job


def adopt_or_submit(ctx, report=True):
    """find_or_submit under the submit lock of name+user. Returns (job, result fields)."""
    if not ctx.name:
        raise ActionError('state=present needs name (the job name, with user the idempotency key) or job_id')
    with SubmitLock(None if ctx.check_mode else lock_path(ctx.params, ctx.name, ctx.user), ctx.clock, ctx.retry_timeout,
                    ctx.warn) as lock:
        return find_or_submit(ctx, lock.held, report)


def _norm_time(value):
    if not value:
        return None
    value = str(value).strip().replace(' ', 'T')
    if len(value) == 16:  # YYYY-MM-DDTHH:MM
        value += ':00'
    return value


def apply_end_time(ctx, job):
    """Set the RUNNING job's end time to ``end_time`` when it differs. Returns the result fields."""
    wanted = _norm_time(ctx.params.get('end_time'))
    if not wanted or not job:
        return {}
    if job.get('state') != 'RUNNING':
        ctx.warn('end_time applies to a RUNNING job; job %s is %s, so its end time was not changed' % (job['job_id'], job.get('state')))
        return {}
    if _norm_time(job.get('end_time')) == wanted:
        return {}
    fields = {'changed': True, 'end_time_changed': {'before': job.get('end_time'), 'after': wanted}}
    if not ctx.check_mode:
        with carrying(fields):
            ctx.cli.update_end_time(job['job_id'], wanted)
    return fields


def dependency_ids(params):
    return [str(i).split(';', 1)[0] for d in (params.get('dependency') or []) for i in (d.get('job_ids') or [])]
