# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How a wait fails, in words: :class:`WaitFailed` (the failure's parts as fields, rendered once) and one builder
per kind of failure (:func:`ended`, :func:`dependency`, :func:`requeued`, :func:`gone`, :func:`probe_refused`,
:func:`timed_out`). The builders are pure: they get the rows and the log tail the waiter read and return the
failure; the waiter raises it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.glm.serve.plugins.module_utils import slurm_parse as sp
from ansible_collections.glm.serve.plugins.module_utils import model_probe as mp

# kinds of failure (WaitFailed.kind, the module's failure.kind)
TIMEOUT = 'timeout'
ENDED = 'ended'                # the job reached a terminal state it was not waited for
DEPENDENCY = 'dependency'      # a parent failed: the job can never start
REQUEUED = 'requeued'          # Slurm put the job back in the queue after it had started
PURGED = 'purged'              # Slurm no longer knows the job
UNAUTHORIZED = 'unauthorized'  # the server refused the key
WRONG_MODEL = 'wrong_model'    # the server serves another model
FAILURE_KINDS = (TIMEOUT, ENDED, DEPENDENCY, REQUEUED, PURGED, UNAUTHORIZED, WRONG_MODEL)

#: What a failure state means, in words (Slurm's state names are terse).
STATE_MEANINGS = {
    'CANCELLED': 'it was cancelled (scancel by you, another session or an administrator, or a teardown)',
    'TIMEOUT': 'it reached its time limit (--time)',
    'NODE_FAIL': 'its node failed',
    'OUT_OF_MEMORY': 'it used more host memory than it asked for (--mem)',
    'BOOT_FAIL': 'its node failed to boot',
    'DEADLINE': 'it reached its --deadline',
    'PREEMPTED': 'a job of higher priority preempted it',
    'FAILED': 'it exited with a non-zero code',
}


def describe(job):
    """``glm-serve 4124 PENDING (Dependency)``."""
    if job is None:
        return 'unknown job'
    text = '%s %s %s' % (job.get('name') or '?', job.get('job_id'), job.get('state') or 'UNKNOWN')
    reason = job.get('reason')
    if reason and reason != 'None' and job.get('state') in ('PENDING', 'CANCELLED', 'FAILED', 'TIMEOUT', 'NODE_FAIL', 'REQUEUE_HOLD'):
        text += ' (%s)' % reason
    if job.get('state') == 'RUNNING' and job.get('nodes'):
        text += ' on %s' % job['nodes']
    return text


def chain_summary(chain):
    return '; '.join(describe(j) for j in chain)


def waiting_for_node(job):
    """True for a PENDING job that waits for a free node (a reason of RESOURCE_REASONS)."""
    return bool(job) and job.get('state') == 'PENDING' and job.get('reason') in sp.RESOURCE_REASONS


def with_hints(text, hints):
    """TEXT, then "What to do:" and each hint as a sentence (TEXT as it is without hints): a failed wait's message,
    and a refusal's (job_actions.hint_refusal)."""
    if not hints:
        return text
    return text.rstrip('.') + '. What to do: %s' % ' '.join(h.strip().rstrip('.') + '.' for h in hints)


class WaitFailed(Exception):
    """The wait ended without success. Its parts are fields; ``msg`` renders them once.

    :param summary: what happened, one sentence (``job 2 (srv) ended FAILED (reason ..., exit code 1:0)``)
    :param kind: one of :data:`FAILURE_KINDS`
    :param reason: why, in words (``it exited with a non-zero code``)
    :param notes: further sentences (what the server last said, what the job waits for, how to cancel it)
    :param hints: what to do, from the module's ``hints`` that matched (added by the caller)
    :param job: the job waited for (last row seen); ``failed_job``: the one whose state and log explain the
        failure (the job, or the parent that failed)
    :param log_path, log_tail: the output file of ``failed_job`` and its last lines (secrets redacted)
    :param tail_style: ``last`` ("Last lines of PATH: ..."), ``ends`` ("Its output file PATH ends with: ...") or
        None (the tail is returned, not written into the message)
    :param cancelled: ids the waiter cancelled because they could never run
    """

    def __init__(self, summary, job=None, chain=None, log_tail=None, timed_out=False, log_path=None, failed_job=None,
                 cancelled=None, kind=None, reason=None, notes=(), hints=(), tail_style='last'):
        super(WaitFailed, self).__init__(summary)
        self.summary = summary
        self.kind = kind or (TIMEOUT if timed_out else ENDED)
        self.reason = reason
        self.notes = [n for n in notes if n]
        self.hints = list(hints)
        self.job = job
        self.chain = chain or []
        self.log_tail = log_tail or []
        self.log_path = log_path
        self.tail_style = tail_style
        self.timed_out = timed_out
        #: the job whose state and log explain the failure: the job waited for, or the parent that failed
        self.failed_job = failed_job if failed_job is not None else job
        self.cancelled = list(cancelled or [])

    def __str__(self):
        return self.msg

    @property
    def msg(self):
        """The message: summary, reason, notes, what to do, then the log tail."""
        text = self.summary
        if self.reason:
            text += ': %s' % self.reason
        for note in self.notes:
            text += '. %s' % note
        text = with_hints(text, self.hints)
        tail = self._tail_text()
        if tail and self.hints:
            text = text[:-1]
        return text + tail

    def _tail_text(self):
        if not self.log_path or not self.tail_style:
            return ''
        if self.tail_style == 'ends':
            return '. Its output file %s %s' % (
                self.log_path, 'ends with:\n' + '\n'.join(self.log_tail) if self.log_tail else 'is missing or empty')
        if not self.log_tail:
            return '. Its output file %s is missing or empty' % self.log_path
        return '. Last lines of %s:\n%s' % (self.log_path, '\n'.join(self.log_tail))

    def as_dict(self):
        """The failure for the module's result (``failure``): every part in its own key."""
        failed = self.failed_job or {}
        return {
            'kind': self.kind,
            'summary': self.summary,
            'reason': self.reason,
            'notes': list(self.notes),
            'job_id': failed.get('job_id'),
            'name': failed.get('name'),
            'state': failed.get('state'),
            'slurm_reason': failed.get('reason'),
            'exit_code': failed.get('exit_code'),
            'log_path': self.log_path,
            'log_tail': list(self.log_tail),
            'hints': list(self.hints),
            'timed_out': self.timed_out,
            'cancelled': list(self.cancelled),
        }


# -- the builders: one per kind of failure ------------------------------------------------------------


def ended(job, success, chain, log_tail, log_path, endpoint=None, probe_path=None):
    """The job reached a terminal state that is not waited for (COMPLETED too early, or a failure state)."""
    state = job.get('state')
    if state == 'COMPLETED':
        want = '/'.join(sorted(success))
        summary = 'job %s (%s) COMPLETED (exit code %s) before reaching %s' % (
            job['job_id'], job.get('name'), job.get('exit_code') or '0:0', want)
        reason = 'the job ended before reaching %s; add COMPLETED to wait_condition if a finished job is what ' \
                 'you wait for' % want
    else:
        summary = 'job %s (%s) ended %s (reason %s, exit code %s)' % (
            job['job_id'], job.get('name'), state, job.get('reason') or 'none', job.get('exit_code') or 'unknown')
        reason = STATE_MEANINGS.get(state)
    notes = ['The server at %s had not answered %s' % (endpoint, probe_path)] if endpoint else []
    return WaitFailed(summary, kind=ENDED, reason=reason, notes=notes, job=job, chain=chain, log_tail=log_tail,
                      log_path=log_path)


def _dead_child(job, cancelled, cancel_error):
    """What became of a job that can never start: Slurm cancelled it, the waiter did, or it stays."""
    if job.get('state') == 'CANCELLED':
        return 'Slurm cancelled it (kill_on_invalid_dep)'
    if cancelled:
        return 'so it was cancelled (scancel %s), since it could never run' % job['job_id']
    if cancel_error is not None:
        # Slurm would keep it PENDING (DependencyNeverSatisfied) forever where the site lacks kill_invalid_depend
        # and the sbatch flag did not apply: it would hold its place in the queue for nothing.
        return 'it stays PENDING (DependencyNeverSatisfied) and cancelling it failed (%s): run scancel %s' % (
            cancel_error, job['job_id'])
    return 'it stays PENDING (DependencyNeverSatisfied) until cancelled: run scancel %s' % job['job_id']


def dependency(job, parent, chain, log_tail, log_path, cancelled=(), cancel_error=None):
    """The job can never start: ``parent`` (its row, or ``{'job_id': ...}`` when purged) failed. ``cancelled``: the
    ids the waiter cancelled; ``cancel_error``: why cancelling failed (None: not tried or done)."""
    state = parent.get('state')
    reason = 'its dependency %s failed: %s, exit code %s%s; %s' % (
        job.get('dependency') or '?', describe(parent) if state else 'job %s (purged)' % parent.get('job_id'),
        parent.get('exit_code') or 'unknown', ' (%s)' % STATE_MEANINGS[state] if state in STATE_MEANINGS else '',
        _dead_child(job, cancelled, cancel_error))
    return WaitFailed('job %s (%s) can never start' % (job['job_id'], job.get('name')), kind=DEPENDENCY, reason=reason,
                      job=job, chain=chain, failed_job=parent, cancelled=cancelled, log_tail=log_tail, log_path=log_path)


def requeued(job, chain, log_tail, log_path):
    summary = 'job %s (%s) was requeued by Slurm after it had started (now %s, restarts %s)' % (
        job['job_id'], job.get('name'), describe(job), job.get('restarts') or '?')
    reason = 'its node failed or an administrator requeued it, so what it ran is gone. Slurm holds a requeued job ' \
             'until a begin time some 2 min ahead, then starts it again on a free node; run deploy again to adopt ' \
             'it and start it sooner (its begin time is set to now once KillWait + 5 s have passed since the requeue, ' \
             'the time its earlier run is given to stop), or cancel it with scancel %s' % job['job_id']
    return WaitFailed(summary, kind=REQUEUED, reason=reason, job=job, chain=chain, log_tail=log_tail, log_path=log_path)


def gone(job_id, job, chain, log_tail, log_path):
    """Slurm no longer knows the job (and accounting, asked once, had no final state for it)."""
    if job and job.get('state'):
        summary = 'job %s (%s), last seen %s, is no longer known to Slurm' % (job_id, job.get('name'), job.get('state'))
        reason = 'it ended and was purged from the controller'
    else:
        summary = 'job %s is no longer known to Slurm (squeue -t all and scontrol show job: Invalid job id specified)' % (
            job_id)
        reason = 'it ended more than MinJobAge ago and was purged, so its final state is unknown'
    return WaitFailed(summary, kind=PURGED, reason=reason, job=job or {'job_id': job_id}, chain=chain, log_tail=log_tail,
                      log_path=log_path, tail_style='ends')


def probe_refused(endpoint, probe, result, job, chain):
    """The server answered, but not as the wait wants: another key (401) or another model."""
    if result.status == mp.UNAUTHORIZED:
        return WaitFailed('the server at %s answered %s with %s' % (endpoint, probe.path, result.detail), kind=UNAUTHORIZED,
                          reason='the server runs with another key than %s: restart the server job (deploy with '
                                 'rotation) or fix the key file' % probe.key_file, job=job, chain=chain)
    return WaitFailed('the server at %s %s' % (endpoint, result.detail), kind=WRONG_MODEL,
                      reason='check the served model name of the server job', job=job, chain=chain)


def _timeout_notes(job, chain, port, probe):
    notes = []
    state, partition = job.get('state'), job.get('partition')
    if waiting_for_node(job):
        notes.append('The job is waiting for a free node (PENDING %s): no node of partition %s that fits the job is '
                     'free; `sinfo -p %s` shows the nodes, `squeue -p %s` who uses them. The job stays queued and '
                     'starts when a node frees (wait again to adopt it); cancel it with `scancel %s` if you do not '
                     'want it' % (job.get('reason'), partition, partition, partition, job['job_id']))
    elif state == 'PENDING' and job.get('reason') == sp.DEPENDENCY:
        running = [describe(p) for p in chain[:-1] if p.get('state') not in sp.TERMINAL_STATES]
        if running:
            notes.append('It waits for its dependency: %s' % '; '.join(running))
    if port is not None and state == 'RUNNING' and port.last is not None:
        notes.append('The job runs but %s%s did not list %s; last answer: %s' % (
            port.endpoint, probe.path, probe.model, port.last.detail))
    return notes


def timed_out(timeout, want, job, chain, log_tail, log_path, port=None, probe=None, last_error=None):
    """The wait's time is up. ``job``: the first job not done (its last row, or ``{'job_id': ...}``); ``want``: what
    it waited for; ``port``/``probe``: its PortSignal and probe (what the server last said); the log tail is kept
    (returned, not written in the message) for a job that runs."""
    summary = 'timed out after %ds waiting for job %s (%s) to be %s; last seen: %s' % (
        timeout, job['job_id'], job.get('name'), want, chain_summary(chain))
    notes = _timeout_notes(job, chain, port, probe)
    if last_error is not None:
        notes.append('The last controller call failed: %s' % last_error)
    return WaitFailed(summary, kind=TIMEOUT, notes=notes, job=job, chain=chain, timed_out=True,
                      log_tail=log_tail if job.get('state') == 'RUNNING' else [], log_path=log_path, tail_style=None)
