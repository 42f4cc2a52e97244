# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""When the waiter asks slurmctld next: the tuning (:class:`WaitPolicy`) and the schedule (:class:`PollSchedule`).

The schedule is a pure object over the clock's readings: it is told when a round of controller calls happened
and what that round saw, and when a cheap signal fired; it answers when the next round is due and how long the
loop may sleep. It runs no command and reads no clock of its own, so its tests need neither Slurm nor time.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.glm.serve.plugins.module_utils.backoff import grow
from ansible_collections.glm.serve.plugins.module_utils.wait_state import Saved


class WaitPolicy:
    """The waiter's tuning, one value.

    :param timeout: seconds the whole wait may take
    :param cap: the longest pause between two rounds of controller calls (the module's ``wait_sleep``)
    :param base: the first pause of the backoff ramp
    :param tick: how often the cheap signals (output files) are looked at
    :param probe_interval: how often the server's port is asked, while the job runs
    :param min_gap: the shortest pause between two rounds (a signal never brings calls closer than this)
    :param backstop: the pause between rounds while the cheap signals cover every event but a silent one and the
        output files show the jobs alive (default ``5 * cap``); a silent death still stops the output, which is
        noticed within ``cap``
    """

    def __init__(self, timeout=600, cap=60, base=1.0, tick=0.5, probe_interval=1.0, min_gap=1.0, backstop=None):
        self.timeout = timeout
        self.base = float(base)
        self.cap = max(float(cap), self.base)
        self.tick = tick
        self.probe_interval = probe_interval
        self.min_gap = min_gap
        self.backstop = max(float(backstop), self.cap) if backstop is not None else 5 * self.cap

    def __repr__(self):
        return 'WaitPolicy(timeout=%r, cap=%r, base=%r, tick=%r, probe_interval=%r, min_gap=%r, backstop=%r)' % (
            self.timeout, self.cap, self.base, self.tick, self.probe_interval, self.min_gap, self.backstop)


class RoundOutcome:
    """What one round of controller calls saw, as the schedule needs it.

    :param target_changed: the state or reason of a job waited for changed
    :param target_running: that job now RUNS (its failures print error lines; its start was usually seen already)
    :param changed: anything changed (a parent too)
    :param parent_ended: a parent just reached a terminal state (the job starts or is cancelled within seconds)
    :param covered: every job waited for is in a phase whose events the cheap signals cover, and their output
        files show them alive (the next round can wait for the backstop)
    :param held: every job waited for is held by a dependency on parents that have not ended: nothing of its own
        changes before a parent ends, and that end shows without a call (the next round can wait for ``cap``)
    """

    def __init__(self, target_changed=False, target_running=False, changed=False, parent_ended=False, covered=False,
                 held=False):
        self.target_changed = target_changed
        self.target_running = target_running
        self.changed = changed or target_changed
        self.parent_ended = parent_ended
        self.covered = covered
        self.held = held


class PollSchedule(Saved):
    """The backoff ramp of the controller calls, and the earlier calls that cheap signals ask for.

    * With nothing new, the pause doubles from ``base`` up to ``cap``.
    * A change of the job itself restarts the ramp at ``base``; once the job runs it only steps back by half
      (at least ``4 * base``): its start was usually seen in its output file, and its failures print error lines.
    * A change of a parent does not touch the ramp, but a parent that ended brings a round ``min_gap`` later.
    * A cheap signal brings a round at once, at most one per ``gap`` after the last round; that gap doubles
      (up to ``cap``) while signals keep coming without any change, so a chatty log cannot flood the controller.
    * While the signals cover every event (``covered``), the next round is a ``backstop`` away; the ramp is kept
      for when they no longer do.
    * While the jobs are held by their dependencies (``held``), the next round is at least ``cap`` away: the ramp
      looks for a job's own quick changes, and a held job has none before a parent ends; that end shows in the
      files (the job's own output appears, a parent's shows an error line), and what does not show (a parent
      that dies without a word, the job cancelled while it waits) is seen within ``cap``, as after the ramp.

    It saves itself (:class:`wait_state.Saved`): a slice restored from it makes its first round when this one's
    was due, not at its start.
    """

    CONTEXT = ('policy',)
    TIMES = ('next_round', 'trigger_at', 'last_round')

    def __init__(self, policy, first_round):
        self.policy = policy
        self.interval = policy.base
        self.gap = policy.min_gap
        self.next_round = first_round
        self.trigger_at = None
        self.last_round = None

    @property
    def triggered(self):
        return self.trigger_at is not None

    def due(self, now):
        return now >= self.next_round or (self.trigger_at is not None and now >= self.trigger_at)

    def signal(self, now):
        """A cheap signal fired: ask the controller as soon as the gap allows (once per round)."""
        if self.trigger_at is None:
            self.trigger_at = max(now, (self.last_round or 0) + self.gap)

    def done(self, now, outcome):
        """A round ended at ``now`` and saw ``outcome`` (a :class:`RoundOutcome`): plan the next one."""
        policy = self.policy
        if outcome.target_changed:
            self.interval = max(policy.base * 4, self.interval / 2) if outcome.target_running else policy.base
            self.gap = policy.min_gap
        elif outcome.changed:
            self.gap = policy.min_gap
        elif self.triggered:
            self.gap = self.backoff(self.gap)
        else:
            self.interval = self.backoff(self.interval)
        if outcome.parent_ended:
            self.next_round = now + policy.min_gap
        elif outcome.covered:
            self.next_round = now + max(self.interval, policy.backstop)
        elif outcome.held:
            self.next_round = now + max(self.interval, policy.cap)
        else:
            self.next_round = now + self.interval
        self.trigger_at = None
        self.last_round = now

    def backoff(self, pause):
        """The next pause of a ramp with nothing new: doubled, at most ``cap`` (backoff.grow, the collection's one
        backoff rule, also under slurm_cli's retries and the submit lock)."""
        return grow(pause, self.policy.cap)

    def wake(self, now, deadline, other=()):
        """When the loop should look again: the next round, a pending trigger, the deadline or ``other`` times."""
        times = [self.next_round, deadline] + [t for t in other if t is not None]
        if self.trigger_at is not None:
            times.append(self.trigger_at)
        return min(times)


class SliceEnd:
    """Where a slice of a wait ends: after ``seconds`` (None: never), or when ``phase()`` (asked every ``every``
    seconds) changes."""

    def __init__(self, now, seconds, phase, every):
        self.end = now + seconds if seconds else None
        self.phase = phase if self.end is not None else None
        self.start_phase = phase() if phase else None
        self.every = every
        self.phase_at = now + every

    def over(self, now):
        if self.end is None:
            return False
        if now >= self.end:
            return True
        if self.phase and now >= self.phase_at:
            self.phase_at = now + self.every
            return self.phase() != self.start_phase
        return False

    def wake(self, wake):
        """The loop's next wake-up ``wake``, brought forward to the slice's end or its next look at the phase."""
        if self.end is None:
            return wake
        return min(wake, self.end, self.phase_at if self.phase else self.end)
