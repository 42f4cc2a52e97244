# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The cheap signals of the waiter: each says "something changed" and costs slurmctld nothing.

* :class:`OutputWatcher`: one job's output file on the shared home. It appears when the job starts, and a
  failing job usually prints an error-looking line (``Traceback``, ``srun: error``, ``CANCELLED AT`` ...).
* :class:`OutputSignals`: the watchers of every job of a wait, checked together, as a list of :class:`Signal`.
* :class:`PortSignal`: the server's HTTP port, asked every ``probe_interval`` while the job runs; it answers
  when the server is ready, and stops answering when the server died.

The file system is injected (:class:`LocalFiles` on the host, a fake in tests). Each signal saves itself
(:class:`wait_state.Saved`) for the next slice of a wait.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.glm.serve.plugins.module_utils import slurm_parse as sp
from ansible_collections.glm.serve.plugins.module_utils import model_probe as mp
from ansible_collections.glm.serve.plugins.module_utils.wait_state import Saved


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


def read_tail(path, files=None, count=20, secrets=(), chunk=64 * 1024):
    """The last ``count`` lines of a file on the host (within its last ``chunk`` bytes), secrets redacted ([] when
    missing)."""
    files = files or LocalFiles()
    if not path:
        return []
    st = files.stat(path)
    if st is None:
        return []
    size = st[1]
    data = files.read(path, max(0, size - chunk), chunk)
    text = data.decode('utf-8', 'replace') if isinstance(data, bytes) else data
    return sp.tail_lines(sp.redact(text, secrets), count)


class OutputWatcher(Saved):
    """Watches one output file: reports when it appears (or is replaced) and new error-looking lines."""

    MAX_READ = 256 * 1024
    CONTEXT = ('files',)
    TIMES = ('grew_at',)

    def __init__(self, path, files=None):
        self.path = path
        self.files = files or LocalFiles()
        self.state = self.files.stat(path) if path else None
        self.offset = self.state[1] if self.state else 0
        self.appeared = False
        self.partial = ''
        #: when the file was last seen to appear or grow during the wait (None: never; a file that never
        #: grows tells nothing about the job's life)
        self.grew_at = None
        self.stall_reported = False

    def check(self, now=None):
        """Returns (appeared_now, error_lines) since the last check; ``now`` stamps a growth in ``grew_at``."""
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
            self.partial = ''
        self.state = st
        if appeared:
            self.appeared = True
        errors = []
        if (appeared or st[1] > self.offset) and now is not None:
            self.grew_at = now
            self.stall_reported = False
        if st[1] > self.offset:
            data = self.files.read(self.path, self.offset, min(st[1] - self.offset, self.MAX_READ))
            self.offset += len(data)
            text = self.partial + (data.decode('utf-8', 'replace') if isinstance(data, bytes) else data)
            lines = text.split('\n')
            self.partial = lines.pop()[-4096:]
            errors = [line for line in lines if sp.ERROR_LINE_RE.search(line)]
        return appeared, errors

    def save_field(self, key, value, now):
        if key == 'state':
            return list(value) if value else None
        return super(OutputWatcher, self).save_field(key, value, now)

    def load_field(self, key, value, base):
        if key == 'state':
            return tuple(value) if value else None
        return super(OutputWatcher, self).load_field(key, value, base)


class Signal:
    """Something a cheap signal saw: ``kind`` is APPEARED, ERROR_LINE or PORT_LOST; ``text`` says what."""

    APPEARED = 'appeared'
    ERROR_LINE = 'error_line'
    STALLED = 'stalled'
    PORT_LOST = 'port_lost'

    def __init__(self, kind, job_id, text):
        self.kind = kind
        self.job_id = job_id
        self.text = text

    def __repr__(self):
        return 'Signal(%r, %r, %r)' % (self.kind, self.job_id, self.text)


class OutputSignals(Saved):
    """The output files of the jobs of a wait (the jobs waited for and their parents).

    A file that grows shows its job alive: ``alive`` is true while it grew within ``stall_after`` seconds, and a
    STALLED signal fires once when a file that grew stays still that long (the job may have died silently).
    Its state is its watchers' (``watchers``: job id -> the watcher's own dict).
    """

    CONTEXT = ('files', 'secrets', 'stall_after')

    def __init__(self, files=None, secrets=(), stall_after=60.0):
        self.files = files or LocalFiles()
        self.secrets = tuple(secrets)
        self.stall_after = stall_after
        self.watchers = {}   # job_id -> OutputWatcher

    def watch(self, job_id, path):
        if job_id not in self.watchers:
            self.watchers[job_id] = OutputWatcher(path, self.files)
        return self.watchers[job_id]

    def save_field(self, key, value, now):
        if key == 'watchers':
            return dict((job_id, watcher.to_dict(now)) for job_id, watcher in value.items())
        return super(OutputSignals, self).save_field(key, value, now)

    def load_field(self, key, value, base):
        if key == 'watchers':
            return dict((job_id, OutputWatcher(saved.get('path'), self.files).from_dict(saved, base))
                        for job_id, saved in value.items())
        return super(OutputSignals, self).load_field(key, value, base)

    def watching(self, job_id):
        return job_id in self.watchers

    def readable(self, job_id, running):
        """True when the job's output file is watched at a known path, and there if the job ``running``: its
        appearance and its lines can speak for the job."""
        watcher = self.watchers.get(job_id)
        return watcher is not None and bool(watcher.path) and (not running or watcher.state is not None)

    def alive(self, job_id, now):
        watcher = self.watchers.get(job_id)
        return watcher is not None and watcher.grew_at is not None and now - watcher.grew_at < self.stall_after

    def check(self, job_ids, now=None):
        """Signals of the watched files among ``job_ids``, in that order (appearance, errors, a stall)."""
        found = []
        for job_id in job_ids:
            watcher = self.watchers.get(job_id)
            if watcher is None:
                continue
            appeared, errors = watcher.check(now)
            if appeared:
                found.append(Signal(Signal.APPEARED, job_id, 'output file %s appeared' % watcher.path))
            if errors:
                found.append(Signal(Signal.ERROR_LINE, job_id, 'output of job %s: %s' % (
                    job_id, sp.redact(errors[-1], self.secrets)[:200])))
            if now is not None and watcher.grew_at is not None and not watcher.stall_reported \
                    and now - watcher.grew_at >= self.stall_after:
                watcher.stall_reported = True
                found.append(Signal(Signal.STALLED, job_id, 'output of job %s still for %ds' % (job_id, self.stall_after)))
        return found


class PortSignal(Saved):
    """The server's port on the job's node: asked at most every ``interval`` seconds.

    ``check`` returns the :class:`model_probe.ProbeResult` (None when not due or the node is unknown) and keeps
    the last one; ``lost`` is true when the server answered before and no longer does.
    """

    CONTEXT = ('probe', 'interval')
    TIMES = ('next_check',)
    ANSWERS = ('last', 'previous')

    def __init__(self, probe, interval, start):
        self.probe = probe
        self.interval = interval
        self.next_check = start
        self.last = None
        self.previous = None
        self.endpoint = None

    def due(self, now):
        return now >= self.next_check

    def check(self, node, job_id=None):
        if not node:
            return None
        self.endpoint = self.probe.endpoint(node, job_id)
        result = self.probe.check(node, job_id)
        self.previous, self.last = self.last, result
        return result

    def checked(self, now):
        self.next_check = now + self.interval

    def save_field(self, key, value, now):
        if key in self.ANSWERS:
            return None if value is None else dict(vars(value))
        return super(PortSignal, self).save_field(key, value, now)

    def load_field(self, key, value, base):
        if key in self.ANSWERS:
            return None if value is None else mp.ProbeResult(**value)
        return super(PortSignal, self).load_field(key, value, base)

    @property
    def news(self):
        """True when the last answer differs from the one before (worth an event)."""
        return self.previous is None or self.previous.detail != self.last.detail

    @property
    def lost(self):
        return self.previous is not None and self.previous.answered and not self.last.answered

    @property
    def ready(self):
        return self.last is not None and self.last.status == mp.READY
