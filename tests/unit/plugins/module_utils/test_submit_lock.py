# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The submit lock: contention between two runs, its file, and going on without it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os

from ansible_collections.glm.serve.plugins.module_utils import submit_lock
from ansible_collections.glm.serve.plugins.module_utils.submit_lock import SubmitLock, lock_folder, lock_path

from ansible_collections.glm.serve.tests.unit.plugins.module_utils.conftest import FakeClock


def test_a_second_run_waits_for_the_first_then_goes_on_without_it(tmp_path):
    path = str(tmp_path / '.slurm_job-u-n.lock')
    warnings, clock = [], FakeClock()
    with SubmitLock(path, FakeClock()) as first:
        assert first.held
        second = SubmitLock(path, clock, timeout=1, warn=warnings.append)
        with second:
            assert not second.held
    assert clock.t >= 1 and set(clock.sleeps) == {0.2}         # a steady poll until the timeout
    assert warnings == ['%s stayed locked for 1s by another run: submitting without it' % path]
    assert oct(os.stat(path).st_mode & 0o777) == '0o600'


def test_the_lock_is_taken_as_soon_as_the_holder_lets_go(tmp_path):
    path = str(tmp_path / 'l.lock')
    holder = SubmitLock(path, FakeClock()).__enter__()

    class ReleasingClock(FakeClock):
        def sleep(self, seconds):
            FakeClock.sleep(self, seconds)
            if len(self.sleeps) == 3:
                holder.__exit__(None, None, None)
    clock = ReleasingClock()
    with SubmitLock(path, clock, timeout=10) as second:
        assert second.held and abs(second.waited - 0.6) < 1e-9 and len(clock.sleeps) == 3


def test_a_lock_that_cannot_be_taken_is_warned_about(tmp_path, monkeypatch):
    def no_flock(fd, op):
        raise IOError(errno.ENOLCK, 'No locks available')
    monkeypatch.setattr(submit_lock.fcntl, 'flock', no_flock)
    warnings = []
    with SubmitLock(str(tmp_path / 'l.lock'), FakeClock(), warn=warnings.append) as lock:
        assert not lock.held
    assert 'No locks available' in warnings[0] and warnings[0].startswith('cannot lock')


def test_a_lock_file_that_cannot_be_made_is_warned_about(tmp_path):
    warnings = []
    with SubmitLock(str(tmp_path / 'missing' / 'l.lock'), FakeClock(), warn=warnings.append) as lock:
        assert not lock.held
    assert warnings[0].startswith('cannot create the lock file')


def test_no_path_no_lock():
    with SubmitLock(None, FakeClock()) as lock:
        assert not lock.held


def test_lock_path_is_next_to_where_sbatch_runs(tmp_path):
    script = tmp_path / 'job.sbatch'
    assert lock_folder({'script': str(script)}) == str(tmp_path)
    assert lock_folder({'script': str(script), 'chdir': '/elsewhere'}) == '/elsewhere'
    assert lock_folder({}) is None
    assert lock_path({'script': str(script)}, 'glm serve/1', 'u') == str(tmp_path / '.slurm_job-u-glm_serve_1.lock')
    assert lock_path({'chdir': str(tmp_path)}, 'n', 'u', '.json') == str(tmp_path / '.slurm_job-u-n.json')
    assert lock_path({'chdir': str(tmp_path / 'missing')}, 'n', 'u') is None
