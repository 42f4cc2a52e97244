# -*- coding: utf-8 -*-
# Copyright (c) glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Wait for a Slurm job (and the chain of jobs it depends on) while asking slurmctld as little as possible.

Two kinds of signal drive the loop:

* controller calls (squeue/scontrol), spaced by an exponential backoff 1, 2, 4 ... ``sleep_cap`` seconds
  that restarts at 1 s whenever the observed state changes;
* signals that cost the controller nothing, checked every ``tick`` (0.5 s): the job's output file on the
  shared home (it appears when the job starts; error-looking lines appear when it fails) and, while a
  probe is configured and the job runs, the HTTP port of the server (polled every ``probe_interval``).
  A cheap signal makes the waiter ask Slurm at once (at most one call per ``min_gap`` second; error lines
  have their own doubling budget so a chatty log cannot flood the controller).

The clock and the file system are injected, so the unit tests run the whole loop in no time.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.glm.serve.plugins.module_utils import slurm_parse as sp
from ansible_collections.glm.serve.plugins.module_utils.slurm_cli import SlurmError, SlurmTransientError, SystemClock
from ansible_collections.glm.serve.plugins.module_utils import model_probe as mp


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


class WaitFailed(Exception):
    """The wait ended without success. Carries what was last observed, for the module's result."""

    def __init__(self, msg, job=None, chain=None, log_tail=None, timed_out=False, log_path=None, failed_job=None,
                 cancelled=None):
        super(WaitFailed, self).__init__(msg)
        self.msg = msg
        self.job = job
        self.chain = chain or []
        self.log_tail = log_tail or []
        self.log_path = log_path
        self.timed_out = timed_out
        #: the job whose state and log explain the failure: the job waited for, or the parent that failed
        self.failed_job = failed_job if failed_job is not None else job
        #: ids the waiter cancelled because they could never run
        self.cancelled = list(cancelled or [])


class LocalFiles:
    """The host's file system, as the waiter sees it (replaced in tests)."""

    @staticmethod
    def stat(path):
        """(inode, size, mtime) or None when the file does not exist or cannot be read."""
        try:
            st = os.stat(path)
        except (IOError, OSError):
            return None
        return (st.st_ino, st.st_size, st.st_mtime)

    @staticmethod
    def read(path, offset, size):
        try:
            with open(path, 'rb') as handle:
                handle.seek(offset)
                return handle.read(size)
        except (IOError, OSError):
            return b''


def read_tail(path, files=None, count=20, secrets=()):
    """The last ``count`` lines of a file on the host, secrets redacted ([] when missing)."""
    files = files or LocalFiles()
    if not path:
        return []
    st = files.stat(path)
    if st is None:
        return []
    size = st[1]
    chunk = 64 * 1024
    data = files.read(path, max(0, size - chunk), chunk)
    text = data.decode('utf-8', 'replace') if isinstance(data, bytes) else data
    return sp.tail_lines(sp.redact(text, secrets), count)


class OutputWatcher:
    """Watches one output file: reports when it appears (or is replaced) and new error-looking lines."""

    MAX_READ = 256 * 1024

    def __init__(self, path, files=None):
        self.path = path
        self.files = files or LocalFiles()
        self.state = self.files.stat(path) if path else None
        self.offset = self.state[1] if self.state else 0
        self.appeared = False
        self._partial = ''

    def check(self):
        """Returns (appeared_now, error_lines) since the last check."""
        if not self.path:
            return False, []
        st = self.files.stat(self.path)
        if st is None:
            self.state = None
            return False, []
        appeared = False
        if self.state is None or st[0] != self.state[0] or st[1] < self.offset:
            appeared = self.state is None or st[0] != self.state[0]
            self.offset = 0
            self._partial = ''
        self.state = st
        if appeared:
            self.appeared = True
        errors = []
        if st[1] > self.offset:
            data = self.files.read(self.path, self.offset, min(st[1] - self.offset, self.MAX_READ))
            self.offset += len(data)
            text = self._partial + (data.decode('utf-8', 'replace') if isinstance(data, bytes) else data)
            lines = text.split('\n')
            self._partial = lines.pop()[-4096:]
            errors = [line for line in lines if sp.ERROR_LINE_RE.search(line)]
        return appeared, errors


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


def waiting_for_node(job):
    """True for a PENDING job that waits for a free node (a reason of RESOURCE_REASONS)."""
    return bool(job) and job.get('state') == 'PENDING' and job.get('reason') in sp.RESOURCE_REASONS


def chain_summary(chain):
    return '; '.join(describe(j) for j in chain)


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


class JobWaiter:
    """Waits for ``job_id`` to reach one of ``success`` states (or to be gone, with ``until_gone``).

    :param cli: a SlurmCli (squeue/scontrol calls are counted in ``cli.polls``)
    :param parents: job ids the job depends on (more are found in its Dependency field)
    :param probe: a ModelProbe, checked while the job RUNS; success then needs the probe to succeed
    :param known: a job dict already observed (e.g. from the lookup before the wait), saves a call
    """

    def __init__(self, cli, job_id, success=('RUNNING',), timeout=600, sleep_cap=60, parents=(), probe=None,
                 clock=None, files=None, log=None, secrets=(), until_gone=False, known=None,
                 base=1.0, tick=0.5, probe_interval=1.0, min_gap=1.0, cancel_dead=False):
        self.cli = cli
        self.job_id = str(job_id)
        self.success = set(success)
        self.timeout = timeout
        self.cap = max(float(sleep_cap), base)
        self.parent_ids = [str(p) for p in parents if p]
        self.probe = probe
        self.clock = clock or SystemClock()
        self.files = files or LocalFiles()
        self.log = log or (lambda msg: None)
        self.secrets = tuple(secrets)
        self.until_gone = until_gone
        self.base = base
        self.tick = tick
        self.probe_interval = probe_interval
        self.min_gap = min_gap
        self.cancel_dead = cancel_dead

        self.jobs = {}             # job_id -> last job dict seen
        if known:
            self.jobs[self.job_id] = dict(known)
        self.output_paths = {}     # job_id -> output file path (None: unknown)
        self.watchers = {}         # job_id -> OutputWatcher
        self.events = []
        self.last_error = None
        self.start = None
        self.endpoint = None
        self.last_probe = None
        self.models = []
        self.max_model_len = None
        self._skipped = 0
        self._parent_changed = False
        self._target_signal = False  # the job's own output file showed something: ask for the job itself
        self.target_changed = False
        self._ran = False          # the job was seen RUNNING (a later PENDING means Slurm requeued it)
        self._restarts = None      # its Restarts count when first seen

    # -- helpers ---------------------------------------------------------------------------------

    def _elapsed(self):
        return self.clock.now() - self.start

    def _event(self, text):
        line = '+%.1fs %s' % (self._elapsed(), text)
        if not self.events or self.events[-1].split(' ', 1)[1] != text:
            self.events.append(line)
            del self.events[:-50]
            self.log('slurm_job wait: %s' % line)

    def chain(self):
        ids = [p for p in self.parent_ids if p in self.jobs] + [self.job_id]
        return [self.jobs.get(i) or {'job_id': i, 'name': None, 'state': None} for i in ids]

    def _add_parents(self, job):
        for dep in sp.parse_dependency(job.get('dependency')):
            pid = dep.get('job_id')
            if pid and pid not in self.parent_ids and pid != self.job_id and len(self.parent_ids) < 10:
                self.parent_ids.append(pid)

    def _output_path(self, job_id):
        """The job's stdout path: from scontrol once, expanded if Slurm shows the raw pattern. Cached."""
        if job_id not in self.output_paths:
            job = self.jobs.get(job_id) or {}
            path = job.get('output_path')
            if path is None:
                shown = self.cli.show_job(job_id)
                if shown:
                    self._merge(shown)
                    job = self.jobs[job_id]
                    path = shown.get('output_path')
            if path and '%' in path:
                path = sp.expand_output_pattern(path, job_id, job.get('name'), job.get('user'), job.get('work_dir'))
            self.output_paths[job_id] = path
        return self.output_paths[job_id]

    def _merge(self, job):
        old = self.jobs.get(job['job_id']) or {}
        merged = dict(old)
        for key, value in job.items():
            if value is not None or key in ('reason', 'nodes'):
                merged[key] = value
        self.jobs[job['job_id']] = merged
        self._add_parents(merged)
        return merged

    def _watch(self, job_id):
        if job_id not in self.watchers:
            self.watchers[job_id] = OutputWatcher(self._output_path(job_id), self.files)
        return self.watchers[job_id]

    def tail(self, job_id):
        return read_tail(self.output_paths.get(job_id) or (self.jobs.get(job_id) or {}).get('output_path'),
                         self.files, secrets=self.secrets)

    # -- observing -------------------------------------------------------------------------------

    def _observe(self):
        """One round of controller calls. Returns True when something changed.

        Known ids are polled with one ``scontrol --local show job`` each (1 RPC, all details), or, on
        Slurm 23.11+ when every polled job runs, with one ``squeue --only-job-state`` call for all of
        them; a job whose state changed is then read in detail.
        """
        before = dict((i, (j.get('state'), j.get('reason'))) for i, j in self.jobs.items())
        parents = [p for p in self.parent_ids if (self.jobs.get(p) or {}).get('state') not in sp.TERMINAL_STATES]
        target = self.jobs.get(self.job_id) or {}
        # A job PENDING on a running parent changes only after that parent ends: ask for the parents alone,
        # and for the job every third round (someone may cancel or hold it) or once a parent changed.
        if parents and target.get('state') == 'PENDING' and target.get('reason') == 'Dependency' \
                and self._skipped < 2 and not self._parent_changed and not self._target_signal:
            ids = parents
            self._skipped += 1
        else:
            ids = [self.job_id] + parents
            self._skipped = 0
        self._parent_changed = False
        self._target_signal = False
        detail = ids
        if all((self.jobs.get(i) or {}).get('state') in ('RUNNING', 'COMPLETING', 'CONFIGURING') and
               'output_path' in self.jobs[i] for i in ids):
            rows = self.cli.states(ids)
            if rows is not None:
                by_id = dict((r['job_id'], r) for r in rows)
                detail = [i for i in ids if i not in by_id or by_id[i]['state'] != self.jobs[i].get('state')]
        seen = set()
        for row in self.cli.poll(detail) if detail else []:
            seen.add(row['job_id'])
            self._merge(row)
        if self.job_id in detail and self.job_id not in seen:
            self._gone()
        after = dict((i, (j.get('state'), j.get('reason'))) for i, j in self.jobs.items())
        self._parent_changed = any(before.get(p) != after.get(p) for p in self.parent_ids if p in before)
        self.target_changed = before.get(self.job_id) != after.get(self.job_id)
        summary = chain_summary(self.chain())
        if waiting_for_node(self.jobs.get(self.job_id)):
            summary += ': waiting for a free node'
        self._event(summary)
        if not self.until_gone:
            for jid in [self.job_id] + self.parent_ids:
                if jid in self.jobs and (self.jobs[jid].get('state') not in sp.TERMINAL_STATES or jid == self.job_id):
                    self._watch(jid)
        return after != before

    def _parent_ended(self):
        return any((self.jobs.get(p) or {}).get('state') in sp.TERMINAL_STATES for p in self.parent_ids)

    def _gone(self):
        job = self.jobs.get(self.job_id)
        if self.until_gone:
            self.jobs[self.job_id] = dict(job or {'job_id': self.job_id, 'name': None}, state='PURGED')
            return
        path = self.output_paths.get(self.job_id)
        msg = 'job %s is no longer known to Slurm (%s): it ended more than MinJobAge ago and was purged, so its final state is unknown' % (
            self.job_id, 'squeue -t all and scontrol show job: Invalid job id specified')
        if job and job.get('state'):
            msg = 'job %s (%s), last seen %s, is no longer known to Slurm: it ended and was purged from the controller' % (
                self.job_id, job.get('name'), job.get('state'))
        tail = self.tail(self.job_id)
        if path:
            msg += '. Its output file %s %s' % (path, 'ends with:\n' + '\n'.join(tail) if tail else 'is missing or empty')
        raise WaitFailed(msg, job=job or {'job_id': self.job_id}, chain=self.chain(), log_tail=tail, log_path=path)

    # -- deciding --------------------------------------------------------------------------------

    def _fail_terminal(self, job):
        path = self._output_path(self.job_id)
        tail = self.tail(self.job_id)
        msg = 'job %s (%s) ended %s (reason %s, exit code %s)' % (
            job['job_id'], job.get('name'), job.get('state'), job.get('reason') or 'none', job.get('exit_code') or 'unknown')
        if job.get('state') in STATE_MEANINGS:
            msg += ': %s' % STATE_MEANINGS[job['state']]
        if job.get('state') == 'COMPLETED':
            msg = 'job %s (%s) COMPLETED (exit code %s) before reaching %s: the job ended before reaching %s; ' \
                  'add COMPLETED to wait_condition if a finished job is what you wait for' % (
                      job['job_id'], job.get('name'), job.get('exit_code') or '0:0',
                      '/'.join(sorted(self.success)), '/'.join(sorted(self.success)))
        if self.probe is not None and self.endpoint:
            msg += '. The server at %s had not answered %s' % (self.endpoint, self.probe.path)
        msg += self._tail_text(path, tail)
        raise WaitFailed(msg, job=job, chain=self.chain(), log_tail=tail, log_path=path)

    def _tail_text(self, path, tail):
        if not path:
            return ''
        if not tail:
            return '. Its output file %s is missing or empty' % path
        return '. Last lines of %s:\n%s' % (path, '\n'.join(tail))

    def _fail_dependency(self, job, parent):
        parent_id = parent.get('job_id')
        if parent_id and (parent.get('state') is None or 'exit_code' not in parent):
            shown = self.cli.show_job(parent_id)
            if shown:
                parent = self._merge(shown)
        path = self._output_path(parent_id) if parent_id else None
        tail = read_tail(path, self.files, secrets=self.secrets) if path else []
        cancelled = []
        if job.get('state') == 'CANCELLED':
            how = 'Slurm cancelled it (kill_on_invalid_dep)'
        elif self.cancel_dead:
            # Slurm would keep it PENDING (DependencyNeverSatisfied) forever where the site lacks kill_invalid_depend
            # and the sbatch flag did not apply: it would hold its place in the queue for nothing.
            try:
                self.cli.cancel([job['job_id']])
                cancelled.append(job['job_id'])
                how = 'so it was cancelled (scancel %s), since it could never run' % job['job_id']
            except SlurmError as exc:
                how = 'it stays PENDING (DependencyNeverSatisfied) and cancelling it failed (%s): run scancel %s' % (
                    exc.msg, job['job_id'])
        else:
            how = 'it stays PENDING (DependencyNeverSatisfied) until cancelled: run scancel %s' % job['job_id']
        parent_state = parent.get('state')
        msg = 'job %s (%s) can never start: its dependency %s failed: %s, exit code %s%s; %s' % (
            job['job_id'], job.get('name'), job.get('dependency') or '?', describe(parent) if parent_state else
            'job %s (purged)' % parent_id, parent.get('exit_code') or 'unknown',
            ' (%s)' % STATE_MEANINGS[parent_state] if parent_state in STATE_MEANINGS else '', how)
        msg += self._tail_text(path, tail)
        raise WaitFailed(msg, job=job, chain=self.chain(), log_tail=tail, log_path=path, failed_job=parent,
                         cancelled=cancelled)

    def _fail_requeued(self, job):
        path = self._output_path(self.job_id)
        tail = self.tail(self.job_id)
        msg = 'job %s (%s) was requeued by Slurm after it had started (now %s, restarts %s): its node failed or an ' \
              'administrator requeued it, so what it ran is gone. Slurm starts it again when a node is free; ' \
              'wait for it again (the job is adopted), or cancel it with scancel %s' % (
                  job['job_id'], job.get('name'), describe(job), job.get('restarts') or '?', job['job_id'])
        msg += self._tail_text(path, tail)
        raise WaitFailed(msg, job=job, chain=self.chain(), log_tail=tail, log_path=path)

    def _decide(self):
        """None to go on, 'success', 'probe' (job runs, probe pending); raises WaitFailed."""
        job = self.jobs[self.job_id]
        state = job.get('state')
        if self.until_gone:
            if state in sp.LIVE_STATES or state in sp.ENDING_STATES:
                return None
            return 'success'
        if state == 'RUNNING':
            self._ran = True
        restarts = _int(job.get('restarts'))
        if self._restarts is None:
            self._restarts = restarts
        requeued = state in sp.REQUEUE_STATES or (state == 'PENDING' and (
            self._ran or (restarts is not None and self._restarts is not None and restarts > self._restarts)))
        if requeued and not (self.success & (sp.REQUEUE_STATES | set(['PENDING']))):
            self._fail_requeued(job)
        if state in sp.FAILED_STATES:
            # a job cancelled by Slurm because a parent failed: read the parents not seen yet, to name the one
            for pid in self.parent_ids:
                if not (self.jobs.get(pid) or {}).get('state'):
                    shown = self.cli.show_job(pid)
                    if shown:
                        self._merge(shown)
        parents = [self.jobs[p] for p in self.parent_ids if p in self.jobs]
        if state in ('PENDING', 'CANCELLED'):
            parent = never_satisfiable(job, parents)
            if parent is not None:
                self._fail_dependency(job, parent)
        if state == 'RUNNING' and self.probe is not None and 'RUNNING' in self.success:
            return 'probe'
        if state in self.success:
            return 'success'
        if state in sp.TERMINAL_STATES:
            self._fail_terminal(job)
        return None

    def _probe(self):
        job = self.jobs[self.job_id]
        node = sp.first_host(job.get('nodes') or job.get('batch_host'))
        if not node:
            return None
        self.endpoint = self.probe.endpoint(node)
        result = self.probe.check(node)
        previous = self.last_probe
        self.last_probe = result
        if previous is None or previous.detail != result.detail:
            self._event('probe %s%s: %s' % (self.endpoint, self.probe.path, result.detail))
        if result.status == mp.READY:
            self.models = result.models
            self.max_model_len = result.max_model_len
            return 'success'
        if result.status == mp.UNAUTHORIZED:
            raise WaitFailed(
                'the server at %s answered %s with %s: the server runs with another key than %s: restart the server job '
                '(deploy with rotation) or fix the key file' % (self.endpoint, self.probe.path, result.detail, self.probe.key_file),
                job=job, chain=self.chain())
        if result.status == mp.WRONG_MODEL:
            raise WaitFailed('the server at %s %s: check the served model name of the server job' % (self.endpoint, result.detail),
                             job=job, chain=self.chain(), log_tail=[])
        # the server stopped answering: maybe the job ended; ask Slurm soon
        return 'lost' if previous is not None and previous.answered and not result.answered else None

    def _timeout(self):
        job = self.jobs.get(self.job_id) or {'job_id': self.job_id}
        want = 'gone' if self.until_gone else '/'.join(sorted(self.success))
        msg = 'timed out after %ds waiting for job %s (%s) to be %s; last seen: %s' % (
            self.timeout, self.job_id, job.get('name'), want, chain_summary(self.chain()))
        if job.get('state') == 'PENDING' and job.get('reason') in sp.RESOURCE_REASONS:
            msg += '. The job is waiting for a free node (PENDING %s): no node of partition %s that fits the job is free; ' \
                   '`sinfo -p %s` shows the nodes, `squeue -p %s` who uses them. The job stays queued and starts when a node ' \
                   'frees (wait again to adopt it); cancel it with `scancel %s` if you do not want it' % (
                       job.get('reason'), job.get('partition'), job.get('partition'), job.get('partition'), self.job_id)
        elif job.get('state') == 'PENDING' and job.get('reason') == 'Dependency':
            running = [describe(p) for p in self.chain()[:-1] if p.get('state') not in sp.TERMINAL_STATES]
            if running:
                msg += '. It waits for its dependency: %s' % '; '.join(running)
        if self.probe is not None and job.get('state') == 'RUNNING' and self.last_probe is not None:
            msg += '. The job runs but %s%s did not list %s; last answer: %s' % (
                self.endpoint, self.probe.path, self.probe.model, self.last_probe.detail)
        if self.last_error is not None:
            msg += '. The last controller call failed: %s' % self.last_error
        tail = self.tail(self.job_id) if job.get('state') == 'RUNNING' else []
        raise WaitFailed(msg, job=job, chain=self.chain(), log_tail=tail, timed_out=True,
                         log_path=self.output_paths.get(self.job_id))

    # -- the loop --------------------------------------------------------------------------------

    def wait(self):
        clock = self.clock
        self.start = clock.now()
        deadline = self.start + self.timeout
        interval = self.base
        trigger_gap = self.min_gap
        last_poll = None
        next_poll = self.start
        triggered = False
        trigger_at = None
        next_probe = self.start
        phase = None
        known = self.jobs.get(self.job_id)
        if known and 'output_path' in known and known.get('state'):
            # fresh details from the caller (scontrol show job just before): no need to ask again at once
            self._add_parents(known)
            self._event(chain_summary(self.chain()))
            if not self.until_gone:
                self._watch(self.job_id)
            phase = self._decide()
            if phase == 'success':
                return self._result()
            next_poll = self.start + (self.base if not self.parent_ids else 0)
        while True:
            now = clock.now()
            due = now >= next_poll or (triggered and trigger_at is not None and now >= trigger_at)
            if due:
                try:
                    changed = self._observe()
                    self.last_error = None
                except SlurmTransientError as exc:
                    self.last_error = exc.msg
                    self._event('controller call failed, retrying: %s' % exc.msg)
                    changed = False
                finally:
                    now = clock.now()
                    last_poll = now
                if self.job_id in self.jobs:
                    phase = self._decide()
                    if phase == 'success':
                        return self._result()
                if changed and self.target_changed:
                    # the job itself changed: look again soon (a job that just started may fail at once).
                    # Once it runs, its failures print error lines (which trigger a call at once) and its start
                    # was usually seen in its output file, so the backoff only steps back by half (at least 4 s):
                    # a chain does not pay for a second ramp from 1 s.
                    state = (self.jobs.get(self.job_id) or {}).get('state')
                    interval = max(self.base * 4, interval / 2) if state == 'RUNNING' else self.base
                    trigger_gap = self.min_gap
                elif changed:
                    # a parent changed; the job's own start shows in its output file, no need to hurry
                    trigger_gap = self.min_gap
                elif triggered:
                    trigger_gap = min(trigger_gap * 2, self.cap)
                else:
                    interval = min(interval * 2, self.cap)
                next_poll = now + interval
                if self._parent_changed and self._parent_ended():
                    # a parent just ended: the job starts (or is cancelled) within a second or two, ask once more
                    next_poll = now + self.min_gap
                triggered = False
                trigger_at = None
            # cheap signals
            if self.job_id in self.jobs and not self.until_gone:
                signal = False
                for jid in [self.job_id] + self.parent_ids:
                    known = self.jobs.get(jid) or {}
                    if known.get('state') in sp.TERMINAL_STATES:
                        continue
                    watcher = self.watchers.get(jid)
                    if watcher is None:
                        continue
                    appeared, errors = watcher.check()
                    if appeared and jid == self.job_id:
                        self._event('output file %s appeared' % watcher.path)
                        signal = self._target_signal = True
                    if errors and jid == self.job_id:
                        self._target_signal = True
                    if errors:
                        self._event('output of job %s: %s' % (jid, sp.redact(errors[-1], self.secrets)[:200]))
                        signal = True
                if phase == 'probe' and clock.now() >= next_probe:
                    outcome = self._probe()
                    next_probe = clock.now() + self.probe_interval
                    if outcome == 'success':
                        return self._result()
                    if outcome == 'lost':
                        signal = True
                if signal and not triggered:
                    triggered = True
                    trigger_at = max(clock.now(), (last_poll or 0) + trigger_gap)
            now = clock.now()
            if now >= deadline:
                if last_poll is None or now - last_poll >= self.min_gap:
                    try:
                        self._observe()
                        if self.job_id in self.jobs:
                            phase = self._decide()
                            if phase == 'success':
                                return self._result()
                            if phase == 'probe' and self.probe is not None:
                                if self._probe() == 'success':
                                    return self._result()
                    except SlurmTransientError as exc:
                        self.last_error = exc.msg
                self._timeout()
            wake = min(next_poll, deadline)
            if trigger_at is not None:
                wake = min(wake, trigger_at)
            if self.job_id in self.jobs and not self.until_gone:
                wake = min(wake, now + self.tick)
                if phase == 'probe':
                    wake = min(wake, next_probe)
            clock.sleep(max(0.0, wake - now))

    def _result(self):
        return {
            'job': self.jobs.get(self.job_id),
            'chain': self.chain(),
            'endpoint': self.endpoint,
            'models': self.models,
            'max_model_len': self.max_model_len,
            'events': list(self.events),
            'duration': round(self._elapsed(), 3),
            'output_path': self.output_paths.get(self.job_id) or (self.jobs.get(self.job_id) or {}).get('output_path'),
        }
