# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a job's state means for a wait: the rules (as data).

:func:`decide` walks :data:`RULES` in order; the first rule whose predicate holds for the job's
:class:`JobView` gives the verdict: go on waiting, success, probe the server, or fail with a kind of failure.
The predicates are pure: the view holds everything they read. Carrying out a verdict (reading a log tail,
cancelling a child that can never run) is the waiter's business.

A failing rule names a kind of failure; :mod:`wait_failures` holds the kinds, :class:`WaitFailed` (the failure's
parts as fields, rendered once) and the builder of each failure's words.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.glm.serve.plugins.module_utils import slurm_parse as sp
# the failures' kinds, words and WaitFailed live with the failure builders; named here too, as the rules use them
from ansible_collections.glm.serve.plugins.module_utils.wait_failures import (  # noqa: F401  pylint: disable=unused-import
    DEPENDENCY, ENDED, FAILURE_KINDS, PURGED, REQUEUED, STATE_MEANINGS, TIMEOUT, UNAUTHORIZED, WRONG_MODEL, WaitFailed,
    chain_summary, describe, waiting_for_node)
from ansible_collections.glm.serve.plugins.module_utils.wait_state import Saved

# -- verdicts ------------------------------------------------------------------------------------

WAIT = 'wait'
SUCCESS = 'success'
PROBE = 'probe'          # the job runs; success needs the server to answer
FAIL = 'fail'


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


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


class RequeueTracker(Saved):
    """Remembers whether a job ran and its first Restarts count: a later PENDING means Slurm requeued it. It saves
    itself (:class:`wait_state.Saved`): both fields."""

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
