# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The submit lock: one ``flock`` per name+user, held around "look for a live job of this name, else submit"."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import re

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None

from ansible_collections.glm.serve.plugins.module_utils.backoff import Backoff, retry

_BUSY = (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK)


class _Busy(Exception):
    """Another run holds the lock (retried until the timeout)."""


class SubmitLock:
    """An exclusive ``flock`` on a lock file, held around "look for a live job of this name, else submit", so that
    two runs on the same login node (two playbooks started at once) submit one job, not two.

    The file is made 0600 and left in place (removing it would race with the next holder). When it cannot be
    made or locked, the module warns and goes on without it; the check after sbatch still removes a duplicate.
    """

    def __init__(self, path, clock, timeout=120, warn=None, poll=0.2):
        self.path = path
        self.clock = clock
        self.timeout = timeout
        self.warn = warn or (lambda msg: None)
        self.poll = poll
        self.fd = None
        self.waited = 0.0

    def __enter__(self):
        if not self.path or fcntl is None:
            return self
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except (IOError, OSError) as exc:
            self.warn('cannot create the lock file %s (%s): submitting without it' % (self.path, exc))
            return self
        start = self.clock.now()
        try:
            retry(self._try_lock, self.clock, self.timeout, _Busy, Backoff(self.poll, self.poll, factor=1), clip=False)
            self.waited = self.clock.now() - start
        except _Busy:
            self.warn('%s stayed locked for %ds by another run: submitting without it' % (self.path, self.timeout))
            self._close()
        except (IOError, OSError) as exc:
            self.warn('cannot lock %s (%s): submitting without it' % (self.path, exc))
            self._close()
        return self

    def _try_lock(self):
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except (IOError, OSError) as exc:
            if exc.errno in _BUSY:
                raise _Busy()
            raise

    @property
    def held(self):
        """True while this run holds the lock (False when it went on without it)."""
        return self.fd is not None

    def _close(self):
        if self.fd is not None:
            try:
                os.close(self.fd)
            finally:
                self.fd = None

    def __exit__(self, *exc_info):
        if self.fd is not None:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                self._close()
        return False


def lock_folder(params):
    """Where sbatch runs (chdir, else the script's folder): the lock and the submit records live there."""
    return params.get('chdir') or (os.path.dirname(os.path.abspath(params['script'])) if params.get('script') else None)


def lock_path(params, name, user, suffix='.lock'):
    """The lock file of name+user: next to where sbatch runs (chdir, else the script's folder)."""
    folder = lock_folder(params)
    if not folder or not os.path.isdir(folder):
        return None
    safe = re.sub(r'[^A-Za-z0-9._-]', '_', '%s-%s' % (user, name))
    return os.path.join(folder, '.slurm_job-%s%s' % (safe, suffix))
