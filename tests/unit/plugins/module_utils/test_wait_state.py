# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Each part of the wait saves and restores EVERY field of its state (wait_state.Saved), so that a field added to
a part cannot be lost silently between two slices of a wait: each test sets every state field of a part to a value
other than a fresh part's (it fails when a new field is left at its default), goes through JSON, and compares all
the fields of the restored part with the original's."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest

from ansible_collections.glm.serve.plugins.module_utils import job_waiter as jw
from ansible_collections.glm.serve.plugins.module_utils import model_probe as mp
from ansible_collections.glm.serve.plugins.module_utils.wait_jobs import JobBook, Target
from ansible_collections.glm.serve.plugins.module_utils.wait_policy import PollSchedule, WaitPolicy
from ansible_collections.glm.serve.plugins.module_utils.wait_rules import RequeueTracker
from ansible_collections.glm.serve.plugins.module_utils.wait_signals import OutputSignals, OutputWatcher, PortSignal
from ansible_collections.glm.serve.plugins.module_utils.wait_state import Saved, absolute, relative

from ansible_collections.glm.serve.tests.unit.plugins.module_utils.test_job_waiter import FakeCli, FakeClock, FakeFiles, FakeProbe, job

NOW = 1000.0


class WallClock(FakeClock):
    """The fake clock with a wall clock that moves with it (the host's time.time() and monotonic clock do)."""

    def wall(self):
        return 1.8e9 + self.t


def plain(value):
    """A part as nested plain data (its context fields left out), to compare a part with its restored copy."""
    if isinstance(value, (Saved, mp.ProbeResult)):
        context = getattr(value, 'CONTEXT', ())
        return (type(value).__name__, dict((k, plain(v)) for k, v in vars(value).items() if k not in context))
    if isinstance(value, dict):
        return dict((k, plain(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [plain(v) for v in value])
    return value


def round_trip(part, fresh, base=NOW):
    """``fresh()``: a new part with the same context. Checks that every state field of ``part`` differs from a fresh
    part's, then returns the fresh part restored from ``part``'s dict, through JSON."""
    blank = fresh()
    unset = [key for key in part.state_fields() if plain(getattr(part, key)) == plain(getattr(blank, key))]
    assert not unset, 'give these fields a value in the test, so that their round trip is checked: %s' % unset
    assert sorted(part.to_dict(NOW)) == part.state_fields() == sorted(set(vars(part)) - set(part.CONTEXT))
    return blank.from_dict(json.loads(json.dumps(part.to_dict(NOW))), base)


def test_times_are_saved_relative_to_the_snapshot_and_restored_against_the_new_clock():
    assert relative(None, 5.0) is None and absolute(None, 7.0) is None
    assert relative(12.5, 10.0) == 2.5 and absolute(2.5, 100.0) == 102.5
    assert relative(9.0, 10.0) == -1.0


def test_poll_schedule_round_trips_every_field_and_its_times_move_with_the_clock():
    policy = WaitPolicy(cap=60)
    schedule = PollSchedule(policy, NOW + 12.0)
    schedule.interval, schedule.gap = 8.0, 4.0
    schedule.trigger_at, schedule.last_round = NOW + 3.5, NOW - 4.0
    restored = round_trip(schedule, lambda: PollSchedule(policy, None))
    assert plain(restored) == plain(schedule) and restored.policy is policy
    # in a process whose clock reads 50 at the snapshot's moment, the next round is due at 62, not at once
    moved = PollSchedule(policy, None).from_dict(json.loads(json.dumps(schedule.to_dict(NOW))), 50.0)
    assert (moved.next_round, moved.trigger_at, moved.last_round) == (62.0, 53.5, 46.0)
    assert not moved.due(53.4) and moved.due(53.5)          # the signal's round, held back by the gap
    assert not PollSchedule(policy, None).from_dict(schedule.to_dict(NOW), 50.0).due(50.0)


def test_output_watcher_round_trips_every_field():
    clock = FakeClock()
    files = FakeFiles(clock, {'/w/job1.out': [(0, 'one\ntwo\npart')]})
    watcher = OutputWatcher('/w/job1.out', files)
    watcher.offset, watcher.partial = 8, 'part'      # 'one\ntwo\n' read, a line begun
    watcher.appeared, watcher.stall_reported = True, True
    watcher.grew_at = NOW - 2.25
    restored = round_trip(watcher, lambda: OutputWatcher(None, files))
    assert plain(restored) == plain(watcher) and restored.files is files
    assert isinstance(restored.state, tuple) and restored.partial == 'part'


def test_output_signals_say_whether_a_file_can_speak_for_its_job():
    clock = FakeClock()
    signals = OutputSignals(FakeFiles(clock, {'/w/job1.out': [(0, 'x\n')]}))
    signals.watch('1', '/w/job1.out')
    signals.watch('2', '/w/job2.out')
    signals.watch('3', None)
    assert signals.readable('1', True) and signals.readable('2', False) and not signals.readable('2', True)
    assert not signals.readable('3', False) and not signals.readable('4', False)


def test_output_signals_round_trip_their_watchers():
    clock = FakeClock()
    files = FakeFiles(clock, {'/w/job1.out': [(0, 'x\n')]})
    signals = OutputSignals(files, secrets=('s3cret',), stall_after=60.0)
    signals.watch('1', '/w/job1.out').grew_at = NOW - 1.0
    signals.watch('2', '/w/job2.out')
    restored = round_trip(signals, lambda: OutputSignals(files, secrets=('s3cret',), stall_after=60.0))
    assert plain(restored) == plain(signals)
    assert restored.watchers['1'].files is files and restored.alive('1', NOW)


def test_port_signal_round_trips_every_field_with_its_answers():
    probe = FakeProbe(FakeClock())
    port = PortSignal(probe, 1.0, NOW - 30.0)
    port.next_check = NOW + 0.5
    port.endpoint = 'http://node1:30000'
    port.previous = mp.ProbeResult(mp.STARTING, 'HTTP 503', answered=True)
    port.last = mp.ProbeResult(mp.READY, 'serves glm-5.3-flash', answered=True, models=['glm-5.3-flash'], max_model_len=8)
    restored = round_trip(port, lambda: PortSignal(probe, 1.0, NOW))
    assert plain(restored) == plain(port) and restored.probe is probe
    assert restored.ready and not restored.lost and restored.last.models == ['glm-5.3-flash']


def test_requeue_tracker_round_trips_every_field():
    tracker = RequeueTracker(restarts='0')
    tracker.requeued({'state': 'RUNNING', 'restarts': '0'})
    restored = round_trip(tracker, RequeueTracker)
    assert plain(restored) == plain(tracker) and restored.ran and restored.restarts == 0
    assert restored.requeued({'state': 'PENDING', 'restarts': '1'})


def test_target_round_trips_every_field_with_its_parts():
    probe = FakeProbe(FakeClock())
    target = Target('2', parents=['1'], probe=probe, known=job('2', 'PENDING', reason='Dependency'))
    target.requeue.ran, target.requeue.restarts = True, 3
    target.port = PortSignal(probe, 1.0, NOW)
    target.port.endpoint, target.port.next_check = 'http://node1:30000', NOW + 1.0
    target.parent_ids.append('0')
    target.verdict, target.skipped, target.summary = 'probe', 2, 'dl 1 RUNNING on node2; job2 2 PENDING (Dependency)'
    target.parent_changed = target.own_signal = target.changed = target.accounted = True

    def fresh():
        again = Target('3', probe=probe)
        again.port = PortSignal(probe, 1.0, NOW)
        return again
    restored = round_trip(target, fresh)
    assert plain(restored) == plain(target) and restored.probe is probe and restored.job_id == '2'


def test_job_book_round_trips_every_field():
    clock = FakeClock()
    cli = FakeCli(clock, {})
    book = JobBook(cli, FakeFiles(clock), secrets=('k',))
    book.merge(job('1', 'RUNNING', name='dl', nodes='node2'))
    book.output_paths['1'] = '/w/job1.out'
    restored = round_trip(book, lambda: JobBook(cli, FakeFiles(clock), secrets=('k',)))
    assert plain(restored) == plain(book) and restored.cli is cli
    restored.jobs['1']['state'] = 'COMPLETED'
    assert book.jobs['1']['state'] == 'RUNNING'      # the restored rows are a copy


def test_every_field_of_the_waiter_is_saved_a_part_or_context():
    """A field added to the waiter must be named in SAVED (saved), PARTS (a part that saves itself, or rebuilt by
    restore) or CONTEXT (given to the constructor again): else this test fails."""
    clock = FakeClock()
    cli = FakeCli(clock, {'2': [(0, job('2', 'RUNNING', nodes='node1'))]})
    waiter = jw.JobWaiter(cli, jw.Target('2', success=('COMPLETED',)), clock=clock, files=FakeFiles(clock))
    named = set(jw.JobWaiter.SAVED + jw.JobWaiter.PARTS + jw.JobWaiter.CONTEXT)
    assert set(vars(waiter)) == named
    assert waiter.wait(slice_seconds=5) is None
    assert set(vars(waiter)) == named
    snap = json.loads(json.dumps(waiter.snapshot()))
    assert sorted(snap) == ['book', 'elapsed', 'events', 'outputs', 'schedule', 'targets', 'version', 'waiter', 'wall']
    assert sorted(snap['waiter']) == sorted(jw.JobWaiter.SAVED)


def test_a_restored_waiter_makes_its_first_round_when_it_was_due_not_at_its_start():
    """The controller load of a deploy in slices: a slice (a new module run) restores the schedule and asks the
    controller no sooner than the wait in one piece would have."""
    clock = WallClock()
    timeline = {'2': [(0, job('2', 'RUNNING', nodes='node1')), (200, job('2', 'COMPLETED', nodes='node1'))]}
    files = FakeFiles(clock, {'/w/job2.out': [(0, 'started\n')]})
    cli = FakeCli(clock, timeline)
    first = jw.JobWaiter(cli, jw.Target('2', success=('COMPLETED',)), clock=clock, files=files)
    assert first.wait(slice_seconds=20) is None
    assert cli.poll_times() == [0, 4, 12]                   # the ramp: the next round is due at 28
    snap = json.loads(json.dumps(first.snapshot()))
    clock.t += 1.5                                          # the module's start-up between two slices
    second = jw.JobWaiter(cli, jw.Target('2', success=('COMPLETED',)), clock=clock, files=files)
    assert second.restore(snap)
    assert second.wait(slice_seconds=20) is None
    assert cli.poll_times() == [0, 4, 12, 28]               # nothing at the slice's start (21.5), the round at 28


def _chain_in_slices(download, logs, ready_at, slice_seconds, phase_every=None):
    """The deploy's chain (a download job of ``download`` s, the server RUNNING 0.5 s after it, its port answering at
    ``ready_at``; ``logs``: the two output files' entries) waited for in one piece (``slice_seconds`` None) or in
    slices that also end at every change of phase (every ``phase_every`` s); each slice a new waiter restored from
    the last one's JSON snapshot, 0.7 s after it. Returns (slices, the controller calls, the result, the clock)."""
    timeline = {
        '1': [(0, job('1', 'RUNNING', name='dl', nodes='node2')), (download, job('1', 'COMPLETED', name='dl', nodes='node2'))],
        '2': [(0, job('2', 'PENDING', reason='Dependency', dependency='afterok:1(unfulfilled)')),
              (download + 0.5, job('2', 'RUNNING', nodes='node1'))],
    }
    clock = WallClock()
    cli = FakeCli(clock, timeline)
    files = FakeFiles(clock, {'/w/job1.out': logs[0], '/w/job2.out': logs[1]})
    probe = FakeProbe(clock, ready_at=ready_at)
    snap, slices, result = None, 0, None
    while result is None:
        target = jw.Target('2', parents=['1'], probe=probe,
                           known=None if snap else job('2', 'PENDING', reason='Dependency', dependency='afterok:1'))
        waiter = jw.JobWaiter(cli, target, policy=WaitPolicy(timeout=3600, cap=60), clock=clock, files=files)
        if snap is not None:
            assert waiter.restore(json.loads(json.dumps(snap)))
        phase = (lambda: int(clock.t // phase_every)) if phase_every else None
        result = waiter.wait(slice_seconds=slice_seconds, phase=phase)
        slices += 1
        if result is None:
            snap = waiter.snapshot()
            clock.t += 0.7
    return slices, cli.calls, result, clock


def _deploy_chain(slice_seconds, phase_every=None):
    """The deploy the issue measured (130 s download logging every 10 s, 120 s of loading logging every 15 s, 60-s
    cap), in one piece or in slices (_chain_in_slices): (slices, calls)."""
    from ansible_collections.glm.serve.tests.unit.plugins.module_utils.test_job_waiter import _growing
    logs = (_growing(0, 131, step=10), _growing(130.5, 400, step=15))
    slices, calls, _result, _clock = _chain_in_slices(130, logs, 255, slice_seconds, phase_every)
    return slices, calls


@pytest.mark.parametrize('phase_every', [None, 20, 7])
def test_a_slice_costs_no_query_that_the_wait_in_one_piece_would_not_make(phase_every):
    whole_slices, whole = _deploy_chain(None)
    slices, sliced = _deploy_chain(60, phase_every)
    assert whole_slices == 1 and slices >= 5
    assert [(kind, ids) for _t, kind, ids in sliced] == [(kind, ids) for _t, kind, ids in whole]
    assert all(abs(a[0] - b[0]) <= 1.5 for a, b in zip(sliced, whole)), (sliced, whole)


def _bar(start, end, every, text=''):
    """A log of tqdm segments (a carriage return each, no newline), one every ``every`` seconds from ``start``."""
    entries = [(start, text)]
    t = start
    while t + every < end:
        t += every
        text += '\rFetching 13 files: %d%%|' % len(entries)
        entries.append((t, text))
    return entries


def test_the_real_deploys_13_minute_chain_asks_the_controller_five_times():
    """bench_deploy.py's chain as the real deploy.yml meets it (issue 22: 13 RPCs of the wait on 3572221): the
    download job started, its log written, 2 s before the server's wait begins; then a bar segment every 37 s
    (480 s over 13 files); the server loads for 300 s, a segment every 37.5 s. In 60-s slices: a round at the start
    (the download), one at the cap (the server alone: held by its dependency, the download runs), the backstop
    (the download's log grows: covered), the server's start (its file appears) with the download's final row,
    and the port says when it answers. On 3572221 the same chain made 11 rounds (the ramp at 1, 3, 7, 15, 31, 63 s
    while the download's log had not yet grown within the wait, both jobs every third round)."""
    head = '[glm.serve] saving the container image\npyxis: imported docker image\n'
    download = _bar(-1.0, 479, 480 / 13.0, head)
    download.append((479.5, download[-1][1] + '\ndownload complete\n'))
    _slices, calls, result, clock = _chain_in_slices(480, (download, _bar(481, 780, 300 / 8.0, 'sglang\n')), 778, 60)
    assert [(round(t), ids) for t, _kind, ids in calls] == [
        (0, ('1',)), (60, ('2',)), (360, ('2',)), (481, ('2',)), (481, ('1',))], calls
    assert [(j['job_id'], j['state']) for j in result['chain']] == [('1', 'COMPLETED'), ('2', 'RUNNING')]
    assert 778 <= clock.t <= 780
