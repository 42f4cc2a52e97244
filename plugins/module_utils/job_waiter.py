# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Wait for Slurm jobs (and the chains of jobs they depend on) while asking slurmctld as little as possible.

The waiter composes three parts (see docs/waiter.md):

* :mod:`wait_policy`: the tuning (:class:`WaitPolicy`) and when to ask the controller next (:class:`PollSchedule`);
* :mod:`wait_signals`: the cheap signals (output files, the server's port) that say "something changed";
* :mod:`wait_rules`: what a job's state means (:func:`decide` over a table of rules), and :class:`WaitFailed`.

It waits for one or several :class:`Target` jobs at once (success when every one succeeds, failure at the first
that fails), and reports what it sees through one callback, ``on_event``. The clock and the file system are
injected, so the unit tests run whole waits of minutes in milliseconds.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.glm.serve.plugins.module_utils import slurm_parse as sp
from ansible_collections.glm.serve.plugins.module_utils import model_probe as mp
from ansible_collections.glm.serve.plugins.module_utils import wait_rules as wr
from ansible_collections.glm.serve.plugins.module_utils.slurm_cli import SlurmError, SlurmTransientError, SystemClock
from ansible_collections.glm.serve.plugins.module_utils.wait_policy import PollSchedule, RoundOutcome, WaitPolicy
from ansible_collections.glm.serve.plugins.module_utils.wait_signals import (
    LocalFiles, OutputSignals, OutputWatcher, PortSignal, Signal, read_tail)
from ansible_collections.glm.serve.plugins.module_utils.wait_rules import (
    STATE_MEANINGS, WaitFailed, chain_summary, describe, never_satisfiable, waiting_for_node)

#: the version of :meth:`JobWaiter.snapshot`'s layout; a snapshot of another version is not resumed
SNAPSHOT_VERSION = 1

__all__ = ['JobWaiter', 'Target', 'WaitPolicy', 'WaitFailed', 'OutputWatcher', 'LocalFiles', 'Signal', 'read_tail',
           'describe', 'chain_summary', 'never_satisfiable', 'waiting_for_node', 'STATE_MEANINGS']

#: states in which a job's row can be refreshed by the state-only query (Slurm 23.11.5+)
_STATE_ONLY_OK = ('RUNNING', 'COMPLETING', 'CONFIGURING')


class Target:
    """One job to wait for.

    :param success: states that end the wait well (with ``probe``, RUNNING also needs the server to answer)
    :param parents: job ids it depends on (more are found in its Dependency field)
    :param probe: a ModelProbe, asked while the job runs
    :param known: a job row already observed (the lookup just before the wait): saves the first call
    """

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


class JobWaiter:
    """Waits for ``targets`` (a :class:`Target` or a list of them) to succeed, or, with ``until_gone``, to be gone.

    :param cli: a SlurmCli (or a fake with ``show_job``, ``states``, ``poll``, ``cancel``)
    :param policy: a :class:`WaitPolicy`
    :param clock: ``now()`` and ``sleep(s)``; ``files``: ``stat`` and ``read`` (the host's by default)
    :param secrets: strings redacted from every log line the waiter reports
    :param on_event: called with each progress event ``{'elapsed': s, 'text': ..., 'line': '+1.0s ...'}``
    :param cancel_dead: cancel a job whose dependency can never be satisfied (a parent failed)
    """

    def __init__(self, cli, targets, policy=None, clock=None, files=None, secrets=(), on_event=None,
                 until_gone=False, cancel_dead=False):
        self.cli = cli
        self.targets = list(targets) if isinstance(targets, (list, tuple)) else [targets]
        self.policy = policy or WaitPolicy()
        self.clock = clock or SystemClock()
        self.files = files or LocalFiles()
        self.secrets = tuple(secrets)
        self.on_event = on_event
        self.until_gone = until_gone
        self.cancel_dead = cancel_dead
        self.jobs = {}             # job_id -> the last row seen
        self.output_paths = {}     # job_id -> output file path (None: unknown)
        self.outputs = OutputSignals(self.files, self.secrets, stall_after=self.policy.cap)
        self.events = []
        self.last_error = None
        self.start = None
        self.covered = False       # the last round found every event covered (rounds a backstop apart)
        self.schedule = None       # the PollSchedule, once the wait started
        self.earlier_events = []   # the last events of the slices before a restore
        for target in self.targets:
            if target.known:
                self.jobs[target.job_id] = dict(target.known)

    # -- the loop --------------------------------------------------------------------------------

    def wait(self, slice_seconds=None, phase=None, phase_every=2.0):
        """Returns the result of the first target (with ``targets``: every target's); raises WaitFailed.

        With ``slice_seconds``, waits at most that long and returns None when the wait is not over: either the
        slice is up, or ``phase()`` (asked at most every ``phase_every`` seconds, costs no controller call) gave
        another value than at the slice's start. :meth:`snapshot` then holds all the wait knows, and a new waiter
        given it through :meth:`restore` goes on where this one stopped: its first round comes when this one's
        would have, so a wait cut into slices asks the controller no more than one wait in one piece.
        """
        now = self.clock.now()
        if self.start is None:
            self.start = now
            for target in self.targets:
                target.port = PortSignal(target.probe, self.policy.probe_interval, self.start) if target.probe else None
            self.schedule = PollSchedule(self.policy, self._first_round())
        deadline = self.start + self.policy.timeout
        schedule = self.schedule
        slice_end = now + slice_seconds if slice_seconds else None
        start_phase = phase() if phase else None
        phase_at = now + phase_every
        while not self._all_succeeded():
            now = self.clock.now()
            if schedule.due(now):
                outcome = self._round()
                now = self.clock.now()
                self._decide_all()
                if self._all_succeeded():
                    break
                outcome.covered = self.covered = self._covered(now)
                schedule.done(now, outcome)
            if self._look_at_signals():
                schedule.signal(self.clock.now())
            if self._all_succeeded():
                break
            now = self.clock.now()
            if now >= deadline:
                if self._last_round(schedule, now):
                    break
                self._fail_timeout()
            if slice_end is not None:
                if now >= slice_end:
                    return None
                if phase and now >= phase_at:
                    phase_at = now + phase_every
                    if phase() != start_phase:
                        return None
            wake = schedule.wake(now, deadline, self._wake_times(now))
            if slice_end is not None:
                wake = min(wake, slice_end, phase_at if phase else slice_end)
            self.clock.sleep(max(0.0, wake - now))
        return self._result()

    # -- cutting a wait into slices --------------------------------------------------------------

    def _wall(self):
        wall = getattr(self.clock, 'wall', None)
        return wall() if wall else time.time()

    def snapshot(self):
        """All the wait knows, as plain data (JSON): the rows, the schedule, the output files' positions, the
        ports' last answers. Times are kept relative to the wall clock, so another process can go on."""
        now = self.clock.now()

        def rel(value):
            return None if value is None else round(value - now, 3)

        schedule = self.schedule
        return {
            'version': SNAPSHOT_VERSION,
            'wall': self._wall(),
            'elapsed': round(now - self.start, 3),
            'schedule': {'interval': schedule.interval, 'gap': schedule.gap, 'next_round': rel(schedule.next_round),
                         'trigger_at': rel(schedule.trigger_at), 'last_round': rel(schedule.last_round)},
            'covered': self.covered,
            'last_error': self.last_error,
            'events': self.recent_events(20),
            'jobs': self.jobs,
            'output_paths': self.output_paths,
            'watchers': dict((job_id, {'path': w.path, 'state': list(w.state) if w.state else None, 'offset': w.offset,
                                       'appeared': w.appeared, 'grew_at': rel(w.grew_at),
                                       'stall_reported': w.stall_reported, 'partial': w.partial})
                             for job_id, w in self.outputs.watchers.items()),
            'targets': [{
                'job_id': t.job_id, 'parent_ids': t.parent_ids, 'verdict': t.verdict, 'skipped': t.skipped,
                'parent_changed': t.parent_changed, 'own_signal': t.own_signal, 'summary': t.summary,
                'requeue': {'ran': t.requeue.ran, 'restarts': t.requeue.restarts},
                'port': None if t.port is None else {
                    'next_check': rel(t.port.next_check), 'endpoint': t.port.endpoint,
                    'last': None if t.port.last is None else {
                        'status': t.port.last.status, 'detail': t.port.last.detail, 'answered': t.port.last.answered}},
            } for t in self.targets],
        }

    def restore(self, snap):
        """Go on from a :meth:`snapshot` (of a waiter for the same targets). False, changing nothing, when the
        snapshot does not fit (another version, other jobs): the wait then starts afresh."""
        if not isinstance(snap, dict) or snap.get('version') != SNAPSHOT_VERSION or \
                [t.get('job_id') for t in snap.get('targets') or []] != [t.job_id for t in self.targets]:
            return False
        now = self.clock.now()
        base = now - max(0.0, self._wall() - float(snap['wall']))

        def at(value):
            return None if value is None else base + float(value)

        self.start = base - float(snap['elapsed'])
        sched = snap['schedule']
        self.schedule = PollSchedule(self.policy, at(sched['next_round']))
        self.schedule.interval, self.schedule.gap = sched['interval'], sched['gap']
        self.schedule.trigger_at, self.schedule.last_round = at(sched['trigger_at']), at(sched['last_round'])
        self.covered = snap['covered']
        self.last_error = snap['last_error']
        self.earlier_events = list(snap.get('events') or [])
        self.jobs = dict(snap['jobs'])
        self.output_paths = dict(snap['output_paths'])
        for job_id, saved in snap['watchers'].items():
            watcher = self.outputs.watch(job_id, saved['path'])
            watcher.state = tuple(saved['state']) if saved['state'] else None
            watcher.offset = saved['offset']
            watcher.appeared = saved['appeared']
            watcher.grew_at = at(saved['grew_at'])
            watcher.stall_reported = saved['stall_reported']
            watcher.partial = saved.get('partial') or ''
        for target, saved in zip(self.targets, snap['targets']):
            target.parent_ids = list(saved['parent_ids'])
            target.verdict, target.skipped, target.summary = saved['verdict'], saved['skipped'], saved['summary']
            target.parent_changed, target.own_signal = saved['parent_changed'], saved['own_signal']
            target.requeue.ran, target.requeue.restarts = saved['requeue']['ran'], saved['requeue']['restarts']
            target.known = None
            if target.probe is not None:
                port = target.port = PortSignal(target.probe, self.policy.probe_interval, self.start)
                if saved['port']:
                    port.next_check = at(saved['port']['next_check'])
                    port.endpoint = saved['port']['endpoint']
                    last = saved['port']['last']
                    if last:
                        port.last = mp.ProbeResult(last['status'], last['detail'], last['answered'])
        return True

    def _first_round(self):
        """When the first round is due: at once, unless every target came with fresh details (decided now)."""
        if not all(self._fresh(t) for t in self.targets):
            return self.start
        for target in self.targets:
            self._add_parents(self.jobs[target.job_id])
        self._event_chains()
        if not self.until_gone:
            for target in self.targets:
                self._watch(target.job_id)
        self._decide_all()
        has_parents = any(t.parent_ids for t in self.targets)
        return self.start + (0 if has_parents else self.policy.base)

    def _fresh(self, target):
        known = self.jobs.get(target.job_id)
        return bool(known and 'output_path' in known and known.get('state'))

    def _last_round(self, schedule, now):
        """At the deadline: one more round (unless one just ran), then the last probe. True on success."""
        if schedule.last_round is not None and now - schedule.last_round < self.policy.min_gap:
            return False
        try:
            self._round()
            self._decide_all()
            for target in self._open(wr.PROBE):
                self._ask_port(target)
        except SlurmTransientError as exc:
            self.last_error = exc.msg
        return self._all_succeeded()

    def _all_succeeded(self):
        return all(t.verdict == wr.SUCCESS for t in self.targets)

    def _open(self, verdict=None):
        return [t for t in self.targets if t.verdict != wr.SUCCESS and (verdict is None or t.verdict == verdict)]

    def _wake_times(self, now):
        times = []
        if not self.until_gone and any(t.job_id in self.jobs for t in self._open()):
            times.append(now + self.policy.tick)
        times += [t.port.next_check for t in self._open(wr.PROBE) if t.port]
        return times

    # -- events ----------------------------------------------------------------------------------

    def _elapsed(self):
        return self.clock.now() - self.start

    def recent_events(self, count=50):
        """The last ``count`` event lines, those of the slices before a restore included."""
        return (self.earlier_events + self.events)[-count:]

    def _event(self, text):
        recent = self.recent_events(1)
        if recent and recent[0].split(' ', 1)[1] == text:
            return
        elapsed = self._elapsed()
        line = '+%.1fs %s' % (elapsed, text)
        self.events.append(line)
        del self.events[:-50]
        if self.on_event is not None:
            self.on_event({'elapsed': round(elapsed, 3), 'text': text, 'line': line})

    def _event_chains(self):
        for target in self.targets:
            summary = chain_summary(self.chain(target))
            if waiting_for_node(self.jobs.get(target.job_id)):
                summary += ': waiting for a free node'
            if len(self.targets) == 1 or summary != target.summary:
                self._event(summary)
            target.summary = summary

    # -- what is known of the jobs ---------------------------------------------------------------

    def chain(self, target=None):
        target = target or self.targets[0]
        ids = [p for p in target.parent_ids if p in self.jobs] + [target.job_id]
        return [self.jobs.get(i) or {'job_id': i, 'name': None, 'state': None} for i in ids]

    def _state(self, job_id):
        return (self.jobs.get(job_id) or {}).get('state')

    def _add_parents(self, job):
        target = self._target(job['job_id'])
        if target is None:
            return
        for dep in sp.parse_dependency(job.get('dependency')):
            pid = dep.get('job_id')
            if pid and pid not in target.parent_ids and pid != target.job_id and len(target.parent_ids) < 10:
                target.parent_ids.append(pid)

    def _target(self, job_id):
        for target in self.targets:
            if target.job_id == job_id:
                return target
        return None

    def _merge(self, job):
        merged = dict(self.jobs.get(job['job_id']) or {})
        for key, value in job.items():
            if value is not None or key in ('reason', 'nodes'):
                merged[key] = value
        self.jobs[job['job_id']] = merged
        self._add_parents(merged)
        return merged

    def _output_path(self, job_id):
        """The job's stdout path: from scontrol once, expanded if Slurm shows the raw pattern. Cached."""
        if job_id not in self.output_paths:
            job = self.jobs.get(job_id) or {}
            path = job.get('output_path')
            if path is None:
                shown = self.cli.show_job(job_id)
                if shown:
                    job = self._merge(shown)
                    path = shown.get('output_path')
            if path and '%' in path:
                path = sp.expand_output_pattern(path, job_id, job.get('name'), job.get('user'), job.get('work_dir'))
            self.output_paths[job_id] = path
        return self.output_paths[job_id]

    def _watch(self, job_id):
        if not self.outputs.watching(job_id):
            self.outputs.watch(job_id, self._output_path(job_id))

    def tail(self, job_id):
        return read_tail(self.output_paths.get(job_id) or (self.jobs.get(job_id) or {}).get('output_path'),
                         self.files, secrets=self.secrets)

    # -- a round of controller calls -------------------------------------------------------------

    def _round(self):
        """Ask the controller about the jobs of the wait; returns a RoundOutcome (empty if the controller failed)."""
        try:
            outcome = self._observe()
            self.last_error = None
            return outcome
        except SlurmTransientError as exc:
            self.last_error = exc.msg
            self._event('controller call failed, retrying: %s' % exc.msg)
            return RoundOutcome()

    def _ids_to_ask(self, target):
        """A job PENDING on a running parent changes only after that parent ends: ask for the parents alone, and
        for the job every third round (someone may cancel or hold it), once a parent changed or its file spoke.
        While the signals cover the wait (the parents' outputs grow), ask for the job alone."""
        parents = [p for p in target.parent_ids if self._state(p) not in sp.TERMINAL_STATES]
        job = self.jobs.get(target.job_id) or {}
        alone = parents and job.get('state') == 'PENDING' and job.get('reason') == sp.DEPENDENCY \
            and target.skipped < 2 and not target.parent_changed and not target.own_signal
        target.skipped = target.skipped + 1 if alone else 0
        target.parent_changed = target.own_signal = False
        if self.covered and job.get('state') == 'PENDING':
            # the parents' outputs show them alive and their ends show in the job's own file: the job alone tells
            # whether it was cancelled or can no longer run (DependencyNeverSatisfied)
            return [target.job_id]
        return parents if alone else [target.job_id] + parents

    def _observe(self):
        """Known ids are read with one ``scontrol --local show job`` each (1 RPC, all details), or, on Slurm 23.11.5+
        when every one of them runs, with one ``squeue --only-job-state`` call; a job whose state changed is then
        read in detail."""
        before = dict((i, (j.get('state'), j.get('reason'))) for i, j in self.jobs.items())
        open_targets = self._open()
        ids = []
        for target in open_targets:
            ids += [i for i in self._ids_to_ask(target) if i not in ids]
        detail = ids
        if all(self._state(i) in _STATE_ONLY_OK and 'output_path' in self.jobs[i] for i in ids):
            rows = self.cli.states(ids)
            if rows is not None:
                by_id = dict((r['job_id'], r) for r in rows)
                detail = [i for i in ids if i not in by_id or by_id[i]['state'] != self._state(i)]
        seen = set()
        for row in self.cli.poll(detail) if detail else []:
            seen.add(row['job_id'])
            self._merge(row)
        for target in open_targets:
            if target.job_id in detail and target.job_id not in seen:
                self._gone(target)
        after = dict((i, (j.get('state'), j.get('reason'))) for i, j in self.jobs.items())
        outcome = RoundOutcome(changed=after != before)
        for target in open_targets:
            target.parent_changed = any(before.get(p) != after.get(p) for p in target.parent_ids if p in before)
            target.changed = before.get(target.job_id) != after.get(target.job_id)
            if target.changed:
                outcome.target_changed = True
                outcome.target_running = self._state(target.job_id) == 'RUNNING'
            if target.parent_changed and any(self._state(p) in sp.TERMINAL_STATES for p in target.parent_ids):
                outcome.parent_ended = True
        self._event_chains()
        if not self.until_gone:
            for target in open_targets:
                for jid in [target.job_id] + target.parent_ids:
                    if jid in self.jobs and (self._state(jid) not in sp.TERMINAL_STATES or jid == target.job_id):
                        self._watch(jid)
        return outcome

    def _gone(self, target):
        if self.until_gone:
            job = self.jobs.get(target.job_id)
            self.jobs[target.job_id] = dict(job or {'job_id': target.job_id, 'name': None}, state='PURGED')
            return
        self._fail_gone(target)

    # -- deciding --------------------------------------------------------------------------------

    def _decide_all(self):
        for target in self._open():
            if target.job_id in self.jobs:
                self._decide(target)

    def _decide(self, target):
        """Apply the rules to the target's last row; carry out a failure."""
        job = self.jobs[target.job_id]
        requeued = False if self.until_gone else target.requeue.requeued(job)
        if job.get('state') in sp.FAILED_STATES and not self.until_gone:
            self._learn_parents(target)   # a job Slurm cancelled because a parent failed: name that parent
        view = wr.JobView(job, [self.jobs[p] for p in target.parent_ids if p in self.jobs], target.success,
                          self.until_gone, target.probe is not None, requeued)
        rule = wr.decide(view)
        if rule.verdict == wr.FAIL:
            if rule.kind == wr.DEPENDENCY:
                self._fail_dependency(target, job, view.dead_parent)
            if rule.kind == wr.REQUEUED:
                self._fail_requeued(target, job)
            self._fail_ended(target, job)
        target.verdict = rule.verdict

    def _learn_parents(self, target):
        for pid in target.parent_ids:
            if not self._state(pid):
                shown = self.cli.show_job(pid)
                if shown:
                    self._merge(shown)

    def _covered(self, now):
        """True when the cheap signals cover every event of each open target but a silent death, and the output
        files show the jobs alive (a silent death stops the output: a STALLED signal within ``cap``):

        * a server starting (probe verdict) whose output grows: its answer, its errors and its end all show;
        * a job PENDING on running parents whose outputs grow: a parent's end shows as the job's output file
          appearing (or as an error line). The job's own cancellation while it waits has no signal: it is seen
          at the backstop round.
        """
        targets = self._open()
        if self.until_gone or not targets:
            return False
        for target in targets:
            job = self.jobs.get(target.job_id) or {}
            if target.verdict == wr.PROBE:
                if not self.outputs.alive(target.job_id, now):
                    return False
                continue
            parents = [p for p in target.parent_ids if self._state(p) not in sp.TERMINAL_STATES]
            if not (job.get('state') == 'PENDING' and job.get('reason') == sp.DEPENDENCY and parents and
                    all(self._state(p) == 'RUNNING' and self.outputs.alive(p, now) for p in parents)):
                return False
        return True

    # -- cheap signals ---------------------------------------------------------------------------

    def _look_at_signals(self):
        """Check the output files and the ports; True when one of them asks for a round of calls."""
        if self.until_gone:
            return False
        wanted = False
        for target in self._open():
            if target.job_id not in self.jobs:
                continue
            ids = [i for i in [target.job_id] + target.parent_ids if self._state(i) not in sp.TERMINAL_STATES]
            for signal in self.outputs.check(ids, self.clock.now()):
                if signal.job_id != target.job_id and signal.kind == Signal.APPEARED:
                    continue  # a parent's start says nothing new about the job (its end does, in its own file)
                if signal.kind == Signal.STALLED and (not self.covered or (
                        signal.job_id != target.job_id and self._state(target.job_id) != 'PENDING')):
                    continue  # without the backstop the ramp asks soon enough; a parent of a started job is done
                self._event(signal.text)
                wanted = True
                if signal.job_id == target.job_id:
                    target.own_signal = True
            if target.verdict == wr.PROBE and target.port.due(self.clock.now()):
                wanted = self._ask_port(target) or wanted
        return wanted

    def _ask_port(self, target):
        """Ask the server's port; True when the server stopped answering (worth a round of calls)."""
        job = self.jobs[target.job_id]
        port = target.port
        result = port.check(sp.first_host(job.get('nodes') or job.get('batch_host')))
        port.checked(self.clock.now())
        if result is None:
            return False
        if port.news:
            self._event('probe %s%s: %s' % (port.endpoint, target.probe.path, result.detail))
        if result.status == mp.READY:
            target.verdict = wr.SUCCESS
        elif result.status in (mp.UNAUTHORIZED, mp.WRONG_MODEL):
            self._fail_probe(target, job, result)
        return port.lost

    # -- failures --------------------------------------------------------------------------------

    def _fail_ended(self, target, job):
        path = self._output_path(target.job_id)
        state = job.get('state')
        if state == 'COMPLETED':
            want = '/'.join(sorted(target.success))
            summary = 'job %s (%s) COMPLETED (exit code %s) before reaching %s' % (
                job['job_id'], job.get('name'), job.get('exit_code') or '0:0', want)
            reason = 'the job ended before reaching %s; add COMPLETED to wait_condition if a finished job is what ' \
                     'you wait for' % want
        else:
            summary = 'job %s (%s) ended %s (reason %s, exit code %s)' % (
                job['job_id'], job.get('name'), state, job.get('reason') or 'none', job.get('exit_code') or 'unknown')
            reason = STATE_MEANINGS.get(state)
        notes = []
        if target.port is not None and target.port.endpoint:
            notes.append('The server at %s had not answered %s' % (target.port.endpoint, target.probe.path))
        raise WaitFailed(summary, kind=wr.ENDED, reason=reason, notes=notes, job=job, chain=self.chain(target),
                         log_tail=self.tail(target.job_id), log_path=path)

    def _fail_dependency(self, target, job, parent):
        parent_id = parent.get('job_id')
        # the parent's row may be old (a covered wait asks for the job alone): read it again unless it is final
        if parent_id and (parent.get('state') not in sp.TERMINAL_STATES or 'exit_code' not in parent):
            shown = self.cli.show_job(parent_id)
            if shown:
                parent = self._merge(shown)
        path = self._output_path(parent_id) if parent_id else None
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
        state = parent.get('state')
        reason = 'its dependency %s failed: %s, exit code %s%s; %s' % (
            job.get('dependency') or '?', describe(parent) if state else 'job %s (purged)' % parent_id,
            parent.get('exit_code') or 'unknown', ' (%s)' % STATE_MEANINGS[state] if state in STATE_MEANINGS else '', how)
        raise WaitFailed('job %s (%s) can never start' % (job['job_id'], job.get('name')), kind=wr.DEPENDENCY,
                         reason=reason, job=job, chain=self.chain(target), failed_job=parent, cancelled=cancelled,
                         log_tail=read_tail(path, self.files, secrets=self.secrets) if path else [], log_path=path)

    def _fail_requeued(self, target, job):
        summary = 'job %s (%s) was requeued by Slurm after it had started (now %s, restarts %s)' % (
            job['job_id'], job.get('name'), describe(job), job.get('restarts') or '?')
        reason = 'its node failed or an administrator requeued it, so what it ran is gone. Slurm holds a requeued job ' \
                 'until a begin time some 2 min ahead, then starts it again on a free node; run deploy again to adopt ' \
                 'it and start it at once (its begin time is set to now), or cancel it with scancel %s' % job['job_id']
        raise WaitFailed(summary, kind=wr.REQUEUED, reason=reason, job=job, chain=self.chain(target),
                         log_tail=self.tail(target.job_id), log_path=self._output_path(target.job_id))

    def _fail_gone(self, target):
        job = self.jobs.get(target.job_id)
        if job and job.get('state'):
            summary = 'job %s (%s), last seen %s, is no longer known to Slurm' % (target.job_id, job.get('name'), job.get('state'))
            reason = 'it ended and was purged from the controller'
        else:
            summary = 'job %s is no longer known to Slurm (squeue -t all and scontrol show job: Invalid job id specified)' % (
                target.job_id)
            reason = 'it ended more than MinJobAge ago and was purged, so its final state is unknown'
        raise WaitFailed(summary, kind=wr.PURGED, reason=reason, job=job or {'job_id': target.job_id},
                         chain=self.chain(target), log_tail=self.tail(target.job_id),
                         log_path=self.output_paths.get(target.job_id), tail_style='ends')

    def _fail_probe(self, target, job, result):
        endpoint, path = target.port.endpoint, target.probe.path
        if result.status == mp.UNAUTHORIZED:
            raise WaitFailed('the server at %s answered %s with %s' % (endpoint, path, result.detail), kind=wr.UNAUTHORIZED,
                             reason='the server runs with another key than %s: restart the server job (deploy with '
                                    'rotation) or fix the key file' % target.probe.key_file, job=job, chain=self.chain(target))
        raise WaitFailed('the server at %s %s' % (endpoint, result.detail), kind=wr.WRONG_MODEL,
                         reason='check the served model name of the server job', job=job, chain=self.chain(target))

    def _fail_timeout(self):
        target = self._open()[0]
        job = self.jobs.get(target.job_id) or {'job_id': target.job_id}
        want = 'gone' if self.until_gone else '/'.join(sorted(target.success))
        summary = 'timed out after %ds waiting for job %s (%s) to be %s; last seen: %s' % (
            self.policy.timeout, target.job_id, job.get('name'), want, chain_summary(self.chain(target)))
        notes = []
        state, partition = job.get('state'), job.get('partition')
        if waiting_for_node(job):
            notes.append('The job is waiting for a free node (PENDING %s): no node of partition %s that fits the job is '
                         'free; `sinfo -p %s` shows the nodes, `squeue -p %s` who uses them. The job stays queued and '
                         'starts when a node frees (wait again to adopt it); cancel it with `scancel %s` if you do not '
                         'want it' % (job.get('reason'), partition, partition, partition, target.job_id))
        elif state == 'PENDING' and job.get('reason') == sp.DEPENDENCY:
            running = [describe(p) for p in self.chain(target)[:-1] if p.get('state') not in sp.TERMINAL_STATES]
            if running:
                notes.append('It waits for its dependency: %s' % '; '.join(running))
        port = target.port
        if port is not None and state == 'RUNNING' and port.last is not None:
            notes.append('The job runs but %s%s did not list %s; last answer: %s' % (
                port.endpoint, target.probe.path, target.probe.model, port.last.detail))
        if self.last_error is not None:
            notes.append('The last controller call failed: %s' % self.last_error)
        raise WaitFailed(summary, kind=wr.TIMEOUT, notes=notes, job=job, chain=self.chain(target), timed_out=True,
                         log_tail=self.tail(target.job_id) if state == 'RUNNING' else [],
                         log_path=self.output_paths.get(target.job_id), tail_style=None)

    # -- the result ------------------------------------------------------------------------------

    def _target_result(self, target):
        port = target.port
        return {
            'job': self.jobs.get(target.job_id),
            'chain': self.chain(target),
            'endpoint': port.endpoint if port else None,
            'models': port.last.models if port and port.ready else [],
            'max_model_len': port.last.max_model_len if port and port.ready else None,
            'output_path': self.output_paths.get(target.job_id) or (self.jobs.get(target.job_id) or {}).get('output_path'),
        }

    def _result(self):
        result = self._target_result(self.targets[0])
        result.update(events=self.recent_events(), duration=round(self._elapsed(), 3))
        if len(self.targets) > 1:
            result['targets'] = [self._target_result(t) for t in self.targets]
        return result
