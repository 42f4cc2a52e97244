# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The jobs of a wait: each :class:`Target` (a job waited for, and what the wait learnt of it) and the
:class:`JobBook` (the last row seen of every job of the wait, parents included, and their output files).

Both save themselves (:class:`wait_state.Saved`) for the next slice of a wait.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.glm.serve.plugins.module_utils import slurm_parse as sp
from ansible_collections.glm.serve.plugins.module_utils import wait_rules as wr
from ansible_collections.glm.serve.plugins.module_utils.slurm_cli import SlurmAccountingUnavailable
from ansible_collections.glm.serve.plugins.module_utils.wait_signals import read_tail
from ansible_collections.glm.serve.plugins.module_utils.wait_state import Saved

#: states in which a job's row can be refreshed by the state-only query (Slurm 23.11.5+)
_STATE_ONLY_OK = ('RUNNING', 'COMPLETING', 'CONFIGURING')


class Target(Saved):
    """One job to wait for.

    :param success: states that end the wait well (with ``probe``, RUNNING also needs the server to answer)
    :param parents: job ids it depends on (more are found in its Dependency field)
    :param probe: a ModelProbe, asked while the job runs
    :param known: a job row already observed (the lookup just before the wait): saves the first call

    It saves itself, its parts (``requeue``, ``port``) with their own dicts.
    """

    CONTEXT = ('success', 'probe', 'known')
    PARTS = ('requeue', 'port')

    def __init__(self, job_id, success=('RUNNING',), parents=(), probe=None, known=None):
        self.job_id = str(job_id)
        self.success = frozenset(success)
        self.parent_ids = [str(p) for p in parents if p]
        self.probe = probe
        self.known = dict(known) if known else None
        self.requeue = wr.RequeueTracker(self.known.get('restarts') if self.known else None)
        self.port = None           # PortSignal, once the start of the wait is known
        self.verdict = None        # the last rule's verdict (wr.WAIT, wr.PROBE, wr.SUCCESS)
        self.skipped = 0           # rounds that asked for the parents alone
        self.parent_changed = False
        self.own_signal = False    # its own output file showed something: the next round asks for it
        self.changed = False
        self.summary = None        # the last event said of its chain
        self.accounted = False     # accounting was asked about it once, when slurmctld no longer knew it

    def save_field(self, key, value, now):
        if key in self.PARTS:
            return None if value is None else value.to_dict(now)
        return super(Target, self).save_field(key, value, now)

    def load_field(self, key, value, base):
        if key in self.PARTS:
            part = getattr(self, key)   # made by the waiter with its context (the port: the probe, the policy)
            return part.from_dict(value, base) if part is not None and value is not None else part
        return super(Target, self).load_field(key, value, base)

    def ids_to_ask(self, book):
        """The ids the next round asks about. A job PENDING on a parent that is still PENDING: ask for the parents
        alone (their start and node are news), and for the job every third round (someone may cancel or hold it),
        once a parent changed or its file spoke. Once every parent runs, ask for the job alone: a parent's end
        shows in the job's own row (it starts, or can no longer run), one call where asking for the parents too
        makes two (a failure reads the parent again, JobWaiter._fail_dependency). After a parent's file spoke (an
        error line, a stall) or the job's own file appeared, the parents too: Slurm marks the job a few seconds after
        a parent failed, the parent's row says it at once."""
        parents = [p for p in self.parent_ids if book.state(p) not in sp.TERMINAL_STATES]
        job = book.jobs.get(self.job_id) or {}
        if parents and job.get('state') == 'PENDING' and all(book.state(p) == 'RUNNING' for p in parents) \
                and not self.parent_changed:
            self.skipped = 0
            self.parent_changed = self.own_signal = False
            return [self.job_id]
        alone = parents and job.get('state') == 'PENDING' and job.get('reason') == sp.DEPENDENCY \
            and self.skipped < 2 and not self.parent_changed and not self.own_signal
        self.skipped = self.skipped + 1 if alone else 0
        self.parent_changed = self.own_signal = False
        return parents if alone else [self.job_id] + parents


class JobBook(Saved):
    """What the wait knows of its jobs: the last row of each (``jobs``: job id -> row) and its output file
    (``output_paths``). ``on_merge(row)`` is told of each row merged (the waiter learns parents from it).

    :param cli: what the rows are read with: ``poll``/``states`` (a round), ``show_job`` (a row or an output path
        missing), ``sacct`` (accounting, for a job slurmctld forgot; optional)
    """

    CONTEXT = ('cli', 'files', 'secrets', 'on_merge')

    def __init__(self, cli, files, secrets=(), on_merge=None):
        self.cli = cli
        self.files = files
        self.secrets = tuple(secrets)
        self.on_merge = on_merge
        self.jobs = {}             # job_id -> the last row seen
        self.output_paths = {}     # job_id -> output file path (None: unknown)

    def state(self, job_id):
        return (self.jobs.get(job_id) or {}).get('state')

    def states(self):
        """job id -> (state, reason): what a round compares before and after."""
        return dict((i, (j.get('state'), j.get('reason'))) for i, j in self.jobs.items())

    def refresh(self, ids):
        """A round's calls: the rows of ``ids`` read again and merged. Returns (the ids read in detail, those found):
        an id read and not found is no longer known to slurmctld."""
        detail = self._changed_only(ids)
        seen = set()
        for row in self.cli.poll(detail) if detail else []:
            seen.add(row['job_id'])
            self.merge(row)
        return detail, seen

    def _changed_only(self, ids):
        """The ids to read in detail: all, or on 23.11.5+ when all of them run, those whose state changed."""
        if not all(self.state(i) in _STATE_ONLY_OK and 'output_path' in self.jobs[i] for i in ids):
            return ids
        rows = self.cli.states(ids)
        if rows is None:
            return ids
        by_id = dict((r['job_id'], r) for r in rows)
        return [i for i in ids if i not in by_id or by_id[i]['state'] != self.state(i)]

    def read_released(self, targets, before, asked):
        """After a round that read ``asked``: the parents of the ``targets`` that left their Dependency since
        ``before`` (job id -> (state, reason)), read once more for their final rows (the chain says how they
        ended; a round that asks for the job alone leaves them as they were)."""
        stale = sorted(set(p for t in targets for p in self.released(t, before.get(t.job_id)) if p not in asked))
        if stale:
            self.refresh(stale)

    def learn(self, ids):
        """Read the rows of the ``ids`` never seen (the parents of a job Slurm cancelled)."""
        for job_id in ids:
            if not self.state(job_id):
                shown = self.cli.show_job(job_id)
                if shown:
                    self.merge(shown)

    def accounted(self, job_id):
        """The job's final row from accounting (``sacct``: slurmdbd, not slurmctld), or None when accounting has no
        final state for it, cannot answer, or the client has no ``sacct``."""
        if not hasattr(self.cli, 'sacct'):
            return None
        try:
            rows = self.cli.sacct(job_ids=[job_id])
        except SlurmAccountingUnavailable:
            return None
        rows = [r for r in rows if r.get('job_id') == job_id and r.get('state') in sp.TERMINAL_STATES]
        return rows[-1] if rows else None

    def chain(self, target):
        """The rows of the target's parents (those known) and of the target, in that order."""
        ids = [p for p in target.parent_ids if p in self.jobs] + [target.job_id]
        return [self.jobs.get(i) or {'job_id': i, 'name': None, 'state': None} for i in ids]

    def merge(self, job):
        """Take a new row of a job: its values over the last row's (an unset reason or node list too)."""
        merged = dict(self.jobs.get(job['job_id']) or {})
        for key, value in job.items():
            if value is not None or key in ('reason', 'nodes'):
                merged[key] = value
        self.jobs[job['job_id']] = merged
        if self.on_merge is not None:
            self.on_merge(merged)
        return merged

    def output_path(self, job_id):
        """The job's stdout path: from scontrol once, expanded if Slurm shows the raw pattern. Cached."""
        if job_id not in self.output_paths:
            job = self.jobs.get(job_id) or {}
            path = job.get('output_path')
            if path is None:
                shown = self.cli.show_job(job_id)
                if shown:
                    job = self.merge(shown)
                    path = shown.get('output_path')
            if path and '%' in path:
                path = sp.expand_output_pattern(path, job_id, job.get('name'), job.get('user'), job.get('work_dir'))
            self.output_paths[job_id] = path
        return self.output_paths[job_id]

    def tail(self, job_id):
        """The last lines of the job's output file (secrets redacted; [] when there is none)."""
        return read_tail(self.output_paths.get(job_id) or (self.jobs.get(job_id) or {}).get('output_path'),
                         self.files, secrets=self.secrets)

    def held(self, targets, readable):
        """True when each of ``targets`` is PENDING (Dependency) on parents that have not ended, and the files show
        a parent's end: the job's own output file is watched (it appears when the job starts) and so is each
        parent's, there once the parent runs (its error lines show). ``readable(job_id, running)`` says so.
        Nothing of the job's own changes before a parent ends: PollSchedule then keeps rounds ``cap`` apart."""
        for target in targets:
            job = self.jobs.get(target.job_id) or {}
            parents = [p for p in target.parent_ids if self.state(p) not in sp.TERMINAL_STATES]
            if not (parents and job.get('state') == 'PENDING' and job.get('reason') == sp.DEPENDENCY and
                    readable(target.job_id, False) and all(readable(p, self.state(p) == 'RUNNING') for p in parents)):
                return False
        return bool(targets)

    def released(self, target, before):
        """The parents to read again now that ``target`` left its Dependency (a parent ended) since ``before`` (its
        (state, reason)): those that a round asking for the job alone still shows as not ended."""
        was, now = before, (self.state(target.job_id), (self.jobs.get(target.job_id) or {}).get('reason'))
        if was != ('PENDING', sp.DEPENDENCY) or now == was:
            return []
        return [p for p in target.parent_ids if p in self.jobs and self.state(p) not in sp.TERMINAL_STATES]

    def covered(self, targets, alive, now):
        """True when the cheap signals cover every event of each of ``targets`` but a silent death, and their output
        files show the jobs alive (``alive(job_id, now)``; a silent death stops the output: a STALLED signal within
        ``cap``):

        * a server starting (probe verdict) whose output grows: its answer, its errors and its end all show;
        * a job PENDING on running parents whose outputs grow: a parent's end shows as the job's output file
          appearing (or as an error line). The job's own cancellation while it waits has no signal: it is seen
          at the backstop round.
        """
        for target in targets:
            job = self.jobs.get(target.job_id) or {}
            if target.verdict == wr.PROBE:
                if not alive(target.job_id, now):
                    return False
                continue
            parents = [p for p in target.parent_ids if self.state(p) not in sp.TERMINAL_STATES]
            if not (job.get('state') == 'PENDING' and job.get('reason') == sp.DEPENDENCY and parents and
                    all(self.state(p) == 'RUNNING' and alive(p, now) for p in parents)):
                return False
        return True
