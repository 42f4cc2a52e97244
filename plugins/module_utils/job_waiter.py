# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Wait for Slurm jobs (and the chains of jobs they depend on) while asking slurmctld as little as possible.

The waiter composes its parts (see docs/waiter.md):

* :mod:`wait_policy`: the tuning (:class:`WaitPolicy`) and when to ask the controller next (:class:`PollSchedule`);
* :mod:`wait_signals`: the cheap signals (output files, the server's port) that say "something changed";
* :mod:`wait_jobs`: the jobs waited for (:class:`Target`) and what is known of every job (:class:`JobBook`);
* :mod:`wait_rules`: what a job's state means (:func:`decide` over a table of rules);
* :mod:`wait_failures`: :class:`WaitFailed` and the words of each kind of failure.

Each part saves itself (:mod:`wait_state`): the waiter's :meth:`JobWaiter.snapshot` is theirs, plus two fields.
It waits for one or several :class:`Target` jobs (success when every one succeeds, failure at the first that
fails), and reports through one callback, ``on_event``. Clock and file system are injected (tests run in ms).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.glm.serve.plugins.module_utils import slurm_parse as sp
from ansible_collections.glm.serve.plugins.module_utils import model_probe as mp
from ansible_collections.glm.serve.plugins.module_utils import wait_failures as wf
from ansible_collections.glm.serve.plugins.module_utils import wait_rules as wr
from ansible_collections.glm.serve.plugins.module_utils.slurm_cli import (
    SlurmError, SlurmTransientError, SystemClock)
from ansible_collections.glm.serve.plugins.module_utils.wait_jobs import JobBook, Target
from ansible_collections.glm.serve.plugins.module_utils.wait_policy import PollSchedule, RoundOutcome, SliceEnd, WaitPolicy
from ansible_collections.glm.serve.plugins.module_utils.wait_signals import (
    LocalFiles, OutputSignals, OutputWatcher, PortSignal, Signal, read_tail)
from ansible_collections.glm.serve.plugins.module_utils.wait_failures import (
    STATE_MEANINGS, WaitFailed, chain_summary, describe, waiting_for_node)
from ansible_collections.glm.serve.plugins.module_utils.wait_rules import never_satisfiable

#: :meth:`JobWaiter.snapshot`'s layout (2: the parts' own dicts); a snapshot of another version is not resumed
SNAPSHOT_VERSION = 2

__all__ = ['JobWaiter', 'Target', 'WaitPolicy', 'WaitFailed', 'OutputWatcher', 'LocalFiles', 'Signal', 'read_tail',
           'describe', 'chain_summary', 'never_satisfiable', 'waiting_for_node', 'STATE_MEANINGS']


class JobWaiter:
    """Waits for ``targets`` (a :class:`Target` or a list of them) to succeed, or, with ``until_gone``, to be gone.

    :param cli: a SlurmCli (or a fake with ``show_job``, ``states``, ``poll``, ``cancel``; ``sacct`` optional)
    :param policy: a :class:`WaitPolicy`
    :param clock: ``now()`` and ``sleep(s)``; ``files``: ``stat`` and ``read`` (the host's by default)
    :param secrets: strings redacted from every log line the waiter reports
    :param on_event: called with each progress event ``{'elapsed': s, 'text': ..., 'line': '+1.0s ...'}``
    :param cancel_dead: cancel a job whose dependency can never be satisfied (a parent failed)
    :param accounting: ask accounting (``cli.sacct``, slurmdbd, not slurmctld) once about a job slurmctld no longer
        knows before calling it lost (the module's ``accounting`` option)
    """

    #: the waiter's own state in a snapshot; the rest is its parts' (PARTS). ``test_wait_state`` checks that every
    #: field of a waiter is one of these, a part, or given to the constructor (CONTEXT)
    SAVED = ('covered', 'last_error')
    PARTS = ('book', 'schedule', 'outputs', 'targets', 'start', 'events', 'earlier_events')
    CONTEXT = ('cli', 'policy', 'clock', 'files', 'secrets', 'on_event', 'until_gone', 'cancel_dead', 'accounting')

    def __init__(self, cli, targets, policy=None, clock=None, files=None, secrets=(), on_event=None,
                 until_gone=False, cancel_dead=False, accounting=True):
        self.cli = cli
        self.targets = list(targets) if isinstance(targets, (list, tuple)) else [targets]
        self.policy = policy or WaitPolicy()
        self.clock = clock or SystemClock()
        self.files = files or LocalFiles()
        self.secrets = tuple(secrets)
        self.on_event = on_event
        self.until_gone = until_gone
        self.cancel_dead = cancel_dead
        self.accounting = accounting
        self.book = JobBook(cli, self.files, self.secrets, on_merge=self._add_parents)
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

    @property
    def jobs(self):
        """job id -> the last row seen (the book's)."""
        return self.book.jobs

    @property
    def output_paths(self):
        """job id -> its output file (None: unknown)."""
        return self.book.output_paths

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
            self._begin(now)
        deadline = self.start + self.policy.timeout
        cut = SliceEnd(now, slice_seconds, phase, phase_every)
        while not self._all_succeeded():
            if not self._step(deadline):
                break
            now = self.clock.now()
            if cut.over(now):
                return None
            self.clock.sleep(max(0.0, cut.wake(self.schedule.wake(now, deadline, self._wake_times(now))) - now))
        return self._result()

    def _begin(self, now):
        self.start = now
        for target in self.targets:
            target.port = PortSignal(target.probe, self.policy.probe_interval, self.start) if target.probe else None
        self.schedule = PollSchedule(self.policy, self._first_round())

    def _step(self, deadline):
        """A round if one is due, then the cheap signals, then the deadline. False when every target succeeded."""
        schedule = self.schedule
        now = self.clock.now()
        if schedule.due(now):
            outcome = self._round()
            now = self.clock.now()
            self._decide_all()
            if self._all_succeeded():
                return False
            outcome.covered = self.covered = self._covered(now)
            outcome.held = not self.until_gone and self.book.held(self._open(), self.outputs.readable)
            schedule.done(now, outcome)
        if self._look_at_signals():
            schedule.signal(self.clock.now())
        if self._all_succeeded():
            return False
        now = self.clock.now()
        if now >= deadline:
            if self._last_round(schedule, now):
                return False
            self._fail_timeout()
        return True

    # -- cutting a wait into slices --------------------------------------------------------------

    def _wall(self):
        wall = getattr(self.clock, 'wall', None)
        return wall() if wall else time.time()

    def snapshot(self):
        """All the wait knows, as plain data (JSON): the parts' own dicts (the rows, the schedule, the output files,
        each target with its port and requeue tracker) and the waiter's SAVED fields. Times are relative to the
        wall clock, so another process can go on."""
        now = self.clock.now()
        return {
            'version': SNAPSHOT_VERSION,
            'wall': self._wall(),
            'elapsed': round(now - self.start, 3),
            'waiter': dict((key, getattr(self, key)) for key in self.SAVED),
            'events': self.recent_events(20),
            'book': self.book.to_dict(now),
            'schedule': self.schedule.to_dict(now),
            'outputs': self.outputs.to_dict(now),
            'targets': [t.to_dict(now) for t in self.targets],
        }

    def restore(self, snap):
        """Go on from a :meth:`snapshot` (of a waiter for the same targets). False, changing nothing, when the
        snapshot does not fit (another version, other jobs): the wait then starts afresh. The schedule comes back
        with its times: the first round of the restored wait comes when the last slice's was due, not at once."""
        if not isinstance(snap, dict) or snap.get('version') != SNAPSHOT_VERSION or \
                [t.get('job_id') for t in snap.get('targets') or []] != [t.job_id for t in self.targets]:
            return False
        now = self.clock.now()
        base = now - max(0.0, self._wall() - float(snap['wall']))
        self.start = base - float(snap['elapsed'])
        for key in self.SAVED:
            setattr(self, key, snap['waiter'][key])
        self.earlier_events = list(snap.get('events') or [])
        self.book.from_dict(snap['book'], base)
        self.schedule = PollSchedule(self.policy, None).from_dict(snap['schedule'], base)
        self.outputs.from_dict(snap['outputs'], base)
        for target, saved in zip(self.targets, snap['targets']):
            target.port = PortSignal(target.probe, self.policy.probe_interval, self.start) if target.probe else None
            target.from_dict(saved, base)
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

    # -- what is known of the jobs (the book) ----------------------------------------------------

    def chain(self, target=None):
        return self.book.chain(target or self.targets[0])

    def tail(self, job_id):
        return self.book.tail(job_id)

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

    def _watch(self, job_id):
        if not self.outputs.watching(job_id):
            self.outputs.watch(job_id, self.book.output_path(job_id))

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

    def _observe(self):
        """Known ids are read with one ``scontrol --local show job`` each (1 RPC, all details), or, on Slurm 23.11.5+
        when every one of them runs, with one ``squeue --only-job-state`` call; a job whose state changed is then
        read in detail."""
        before = self.book.states()
        open_targets = self._open()
        ids = []
        for target in open_targets:
            ids += [i for i in target.ids_to_ask(self.book) if i not in ids]
        detail, seen = self.book.refresh(ids)
        for target in open_targets:
            if target.job_id in detail and target.job_id not in seen:
                self._gone(target)
        self.book.read_released(open_targets, before, detail)
        outcome = self._outcome(open_targets, before, self.book.states())
        self._event_chains()
        if not self.until_gone:
            for target in open_targets:
                for jid in [target.job_id] + target.parent_ids:
                    if jid in self.jobs and (self.book.state(jid) not in sp.TERMINAL_STATES or jid == target.job_id):
                        self._watch(jid)
        return outcome

    def _outcome(self, open_targets, before, after):
        """What the round saw, for the schedule (and each target's ``changed``/``parent_changed``)."""
        outcome = RoundOutcome(changed=after != before)
        for target in open_targets:
            target.parent_changed = any(before.get(p) != after.get(p) for p in target.parent_ids if p in before)
            target.changed = before.get(target.job_id) != after.get(target.job_id)
            if target.changed:
                outcome.target_changed = True
                outcome.target_running = self.book.state(target.job_id) == 'RUNNING'
            ended = any(self.book.state(p) in sp.TERMINAL_STATES for p in target.parent_ids)
            outcome.parent_ended = outcome.parent_ended or (target.parent_changed and ended and not target.changed)
        return outcome

    def _gone(self, target):
        """slurmctld no longer knows the job: gone (a teardown's success), else its end from accounting, asked once
        (it ended and was purged between two rounds), else lost."""
        job = self.jobs.get(target.job_id)
        if self.until_gone:
            self.jobs[target.job_id] = dict(job or {'job_id': target.job_id, 'name': None}, state='PURGED')
            return
        final = None
        if self.accounting and not target.accounted:
            target.accounted = True   # asked once: a job accounting does not know yet is lost at the next round
            final = self.book.accounted(target.job_id)
        if final is not None:
            self._event('job %s is no longer known to slurmctld; accounting says %s' % (target.job_id, describe(final)))
            self.book.merge(final)
            return
        raise wf.gone(target.job_id, job, self.chain(target), self.tail(target.job_id),
                      self.output_paths.get(target.job_id))

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
            self.book.learn(target.parent_ids)   # a job Slurm cancelled because a parent failed: name that parent
        view = wr.JobView(job, [self.jobs[p] for p in target.parent_ids if p in self.jobs], target.success,
                          self.until_gone, target.probe is not None, requeued)
        rule = wr.decide(view)
        if rule.verdict == wr.FAIL:
            if rule.kind == wr.DEPENDENCY:
                self._fail_dependency(target, job, view.dead_parent)
            if rule.kind == wr.REQUEUED:
                raise wf.requeued(job, self.chain(target), self.tail(target.job_id), self.book.output_path(target.job_id))
            self._fail_ended(target, job)
        target.verdict = rule.verdict

    def _covered(self, now):
        """True when the cheap signals cover every event of each open target but a silent death (JobBook.covered)."""
        targets = self._open()
        return not self.until_gone and bool(targets) and self.book.covered(targets, self.outputs.alive, now)

    # -- cheap signals ---------------------------------------------------------------------------

    def _look_at_signals(self):
        """Check the output files and the ports; True when one of them asks for a round of calls."""
        if self.until_gone:
            return False
        wanted = False
        for target in self._open():
            if target.job_id not in self.jobs:
                continue
            wanted = self._look_at_outputs(target) or wanted
            if target.verdict == wr.PROBE and target.port.due(self.clock.now()):
                wanted = self._ask_port(target) or wanted
        return wanted

    def _look_at_outputs(self, target):
        """The output files of the target and its live parents; True when they ask for a round of calls."""
        wanted = False
        ids = [i for i in [target.job_id] + target.parent_ids if self.book.state(i) not in sp.TERMINAL_STATES]
        for signal in self.outputs.check(ids, self.clock.now()):
            if signal.job_id != target.job_id and signal.kind == Signal.APPEARED:
                continue  # a parent's start says nothing new about the job (its end does, in its own file)
            if signal.kind == Signal.STALLED and (not self.covered or (
                    signal.job_id != target.job_id and self.book.state(target.job_id) != 'PENDING')):
                continue  # without the backstop the ramp asks soon enough; a parent of a started job is done
            self._event(signal.text)
            wanted = True
            own = signal.job_id == target.job_id   # the next round asks for it; once the job started, the parents too
            target.own_signal = target.own_signal or own
            target.parent_changed = target.parent_changed or not own or signal.kind == Signal.APPEARED
        return wanted

    def _ask_port(self, target):
        """Ask the server's port; True when the server stopped answering (worth a round of calls)."""
        job = self.jobs[target.job_id]
        port = target.port
        result = port.check(sp.first_host(job.get('nodes') or job.get('batch_host')), target.job_id)
        port.checked(self.clock.now())
        if result is None:
            return False
        if port.news:
            self._event('probe %s%s: %s' % (port.endpoint, target.probe.path, result.detail))
        if result.status == mp.READY:
            target.verdict = wr.SUCCESS
        elif result.status in (mp.UNAUTHORIZED, mp.WRONG_MODEL):
            raise wf.probe_refused(port.endpoint, target.probe, result, job, self.chain(target))
        return port.lost

    # -- failures (their words: wait_failures) ---------------------------------------------------

    def _fail_ended(self, target, job):
        path = self.book.output_path(target.job_id)
        endpoint = target.port.endpoint if target.port is not None else None
        raise wf.ended(job, target.success, self.chain(target), self.tail(target.job_id), path, endpoint=endpoint,
                       probe_path=target.probe.path if endpoint else None)

    def _fail_dependency(self, target, job, parent):
        parent_id = parent.get('job_id')
        # the parent's row may be old (a covered wait asks for the job alone): read it again unless it is final
        if parent_id and (parent.get('state') not in sp.TERMINAL_STATES or 'exit_code' not in parent):
            shown = self.cli.show_job(parent_id)
            if shown:
                parent = self.book.merge(shown)
        path = self.book.output_path(parent_id) if parent_id else None
        cancelled, error = self._cancel_dead(job)
        raise wf.dependency(job, parent, self.chain(target), read_tail(path, self.files, secrets=self.secrets) if path else [],
                            path, cancelled=cancelled, cancel_error=error)

    def _cancel_dead(self, job):
        """Cancel a child that can never start (with ``cancel_dead``, unless Slurm did): (ids cancelled, error)."""
        if job.get('state') == 'CANCELLED' or not self.cancel_dead:
            return [], None
        try:
            self.cli.cancel([job['job_id']])
        except SlurmError as exc:
            return [], exc.msg
        return [job['job_id']], None

    def _fail_timeout(self):
        target = self._open()[0]
        job = self.jobs.get(target.job_id) or {'job_id': target.job_id}
        want = 'gone' if self.until_gone else '/'.join(sorted(target.success))
        raise wf.timed_out(self.policy.timeout, want, job, self.chain(target), self.tail(target.job_id),
                           self.output_paths.get(target.job_id), port=target.port, probe=target.probe,
                           last_error=self.last_error)

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
