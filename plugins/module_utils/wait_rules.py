# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a job's state means for a wait: the rules (as data), and failures (as data, rendered once).

:func:`decide` walks :data:`RULES` in order; the first rule whose predicate holds for the job's
:class:`JobView` gives the verdict: go on waiting, success, probe the server, or fail with a kind of failure.
The predicates are pure: the view holds everything they read. Carrying out a verdict (reading a log tail,
cancelling a child that can never run) is the waiter's business.

:class:`WaitFailed` carries the failure's parts as fields (kind, summary, state, reason, notes, hints, log
tail); ``msg`` renders them into one message, at the edge, and ``as_dict()`` gives them to the module's result.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.glm.serve.plugins.module_utils import slurm_parse as sp

# -- verdicts ------------------------------------------------------------------------------------

WAIT = 'wait'
SUCCESS = 'success'
PROBE = 'probe'          # the job runs; success needs the server to answer
FAIL = 'fail'

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


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


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


def never_satisfiable(job, parents):
    """The parent (job dict) that makes ``job``'s dependency impossible, else None.

    Slurm's own reason DependencyNeverSatisfied or a ``(failed)`` mark wins; otherwise an ``afterok``
    parent that ended in a failure state, or an ``afternotok`` parent that COMPLETED, is reported
    before Slurm notices (it takes it about 2 s).
    """
    deps = sp.parse_dependency(job.get('dependency'))
    by_id = dict((p.get('job_id'), p) for p in parents)
    failed = [d for d in deps if d.get('status') == 'failed']
    for dep in failed:
        if dep['job_id'] in by_id:
            return by_id[dep['job_id']]
    for dep in deps:
        parent = by_id.get(dep['job_id'])
        if not parent:
            continue
        if dep['type'] == 'afterok' and parent.get('state') in sp.FAILED_STATES:
            return parent
        if dep['type'] == 'afternotok' and parent.get('state') == 'COMPLETED':
            return parent
    if job.get('reason') == sp.NEVER_SATISFIED:
        if failed:
            return {'job_id': failed[0]['job_id'], 'name': None, 'state': None}
        for parent in parents:
            if parent.get('state') in sp.TERMINAL_STATES:
                return parent
        return parents[0] if parents else {'job_id': None, 'name': None, 'state': None}
    return None


class RequeueTracker:
    """Remembers whether a job ran and its first Restarts count: a later PENDING means Slurm requeued it."""

    def __init__(self, restarts=None):
        self.ran = False
        self.restarts = _int(restarts)   # from the submission (0) when known, else from the first row seen

    def requeued(self, job):
        state = job.get('state')
        if state == 'RUNNING':
            self.ran = True
        restarts = _int(job.get('restarts'))
        if self.restarts is None:
            self.restarts = restarts
        return state in sp.REQUEUE_STATES or (state == 'PENDING' and (
            self.ran or (restarts is not None and self.restarts is not None and restarts > self.restarts)))


class JobView:
    """What the rules read of one job waited for: its last row, its parents' rows and what the wait wants."""

    def __init__(self, job, parents=(), success=('RUNNING',), until_gone=False, probing=False, requeued=False):
        self.job = job
        self.state = job.get('state')
        self.parents = list(parents)
        self.success = frozenset(success)
        self.until_gone = until_gone
        self.probing = probing
        self.requeued = requeued
        self._dead_parent = False

    @property
    def dead_parent(self):
        """The parent that makes the job's dependency impossible (computed once), else None."""
        if self._dead_parent is False:
            self._dead_parent = never_satisfiable(self.job, self.parents)
        return self._dead_parent


class Rule:
    def __init__(self, name, applies, verdict, kind=None):
        self.name = name
        self.applies = applies
        self.verdict = verdict
        self.kind = kind

    def __repr__(self):
        return 'Rule(%r)' % self.name


#: The rules, first match wins. A teardown waits ``until_gone``; everything else waits for ``success`` states.
RULES = (
    Rule('gone', lambda v: v.until_gone and v.state not in sp.LIVE_STATES and v.state not in sp.ENDING_STATES, SUCCESS),
    Rule('still there', lambda v: v.until_gone, WAIT),
    Rule('requeued after it started', lambda v: v.requeued and not (v.success & (sp.REQUEUE_STATES | set(['PENDING']))),
         FAIL, REQUEUED),
    Rule('a parent failed', lambda v: v.state in ('PENDING', 'CANCELLED') and v.dead_parent is not None, FAIL, DEPENDENCY),
    Rule('runs: ask the server', lambda v: v.state == 'RUNNING' and v.probing and 'RUNNING' in v.success, PROBE),
    Rule('reached', lambda v: v.state in v.success, SUCCESS),
    Rule('ended', lambda v: v.state in sp.TERMINAL_STATES, FAIL, ENDED),
    Rule('on its way', lambda v: True, WAIT),
)


def decide(view, rules=RULES):
    """The first rule of ``rules`` that applies to ``view``."""
    for rule in rules:
        if rule.applies(view):
            return rule
    raise AssertionError('no rule applies')  # pragma: no cover - the last rule always applies


# -- failures ------------------------------------------------------------------------------------


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
        if self.hints:
            text = text.rstrip('.') + '. What to do: %s' % ' '.join(h.strip().rstrip('.') + '.' for h in self.hints)
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
