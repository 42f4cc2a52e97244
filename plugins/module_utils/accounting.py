# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What slurmdbd remembers (``sacct``): the jobs slurmctld forgot, and how the last job of a name ended."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.glm.serve.plugins.module_utils import slurm_parse as sp
from ansible_collections.glm.serve.plugins.module_utils import wait_rules as wr
from ansible_collections.glm.serve.plugins.module_utils.job_lookup import lookup
from ansible_collections.glm.serve.plugins.module_utils.slurm_cli import SlurmAccountingUnavailable
from ansible_collections.glm.serve.plugins.module_utils.submit_record import record_id

#: At most this many ended jobs per listing come from accounting (the newest), beside what slurmctld remembers.
ACCOUNTING_MAX = 5

PREVIOUS_KEYS = ('job_id', 'state', 'reason', 'exit_code', 'start_time', 'end_time', 'elapsed', 'time_limit', 'nodes')


class Accounting:
    """Jobs from slurmdbd (``sacct``), or [] when the site has no accounting, ``sacct`` fails or ``enabled`` (the
    ``accounting`` option) is off: everything works without it, as before. Says once (``log``) why it did without."""

    def __init__(self, cli, enabled=True, log=None):
        self.cli = cli
        self.enabled = enabled
        self.log = log or (lambda msg: None)
        self.said = False

    def rows(self, **query):
        if not self.enabled:
            return []
        try:
            return self.cli.sacct(**query)
        except SlurmAccountingUnavailable as exc:
            if not self.said:
                self.said = True
                self.log('accounting not used: %s' % exc.msg)
            return []


def _meaning(job, state):
    if state == 'TIMEOUT' and job.get('time_limit'):
        return 'it reached its time limit (--time %s)' % job['time_limit']
    if state == 'CANCELLED' and job.get('cancelled_by'):
        return 'it was cancelled by uid %s (scancel, a teardown, or an administrator)' % job['cancelled_by']
    if state == 'FAILED' and job.get('exit_code'):
        return 'it exited with code %s' % job['exit_code'].split(':')[0]
    if state == 'COMPLETED':
        return 'it exited 0'
    return wr.STATE_MEANINGS.get(state, '')


def why_ended(job):
    """``TIMEOUT: it reached its time limit (--time 8:00:00) at 2026-12-01T18:00:00 after 8:00:00 (exit code 0:0)``."""
    state = job.get('state') or 'UNKNOWN'
    meaning = _meaning(job, state)
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


def report_previous(ctx, looked=None):
    """Before a new submission: how the last job this module submitted under the name ended (its submit record's
    job), from slurmctld while it remembers it (``scontrol --local show job``; ``looked``, (job id, row), when the
    lookup already asked), else from accounting (``sacct``, slurmdbd). A job that did not complete is reported with
    a warning: the deploy says what happened before it submits the new one. Returns the result's ``previous``, or
    None: no record, or no answer."""
    job_id = record_id(ctx)
    if not job_id:
        return None
    job = looked[1] if looked and looked[0] == job_id else lookup(ctx, job_id)
    if job is None:
        rows = [r for r in ctx.accounting.rows(job_ids=[job_id]) if r.get('job_id') == job_id]
        job = rows[-1] if rows else None
    if job is None or job.get('state') not in sp.TERMINAL_STATES or job.get('name') != ctx.name:
        return None
    previous = dict((k, job.get(k)) for k in PREVIOUS_KEYS)
    previous['source'] = job.get('source') or 'slurmctld'
    previous['why'] = why_ended(job)
    if job.get('state') != 'COMPLETED':
        ctx.warn('the last %s job, %s, ended %s; a new one is submitted' % (ctx.name, job_id, previous['why']))
    return previous
