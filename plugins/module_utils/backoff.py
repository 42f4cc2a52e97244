# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one retry/backoff primitive: a capped ramp of pauses (:class:`Backoff`) and :func:`retry`, which calls a
function again after each error of the kinds it is told to ride out, until a deadline.

It runs on the module's one clock (an object with ``now()`` and ``sleep(s)``), so its tests use a fake clock.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import random


class Backoff:
    """Pauses of ``base``, ``base * factor``, ... up to ``cap`` seconds (``factor=1``: a steady poll).

    ``jitter`` (0 to 1) takes up to that fraction off each pause at random, so that runs started together do not
    ask together; 0 (the default) keeps the ramp exact. ``rand``: the random source (tests pass their own).
    """

    def __init__(self, base=1.0, cap=30.0, factor=2.0, jitter=0.0, rand=None):
        self.base = float(base)
        self.cap = max(float(cap), self.base)
        self.factor = factor
        self.jitter = jitter
        self.rand = rand or random.random
        self.delay = self.base

    def next(self):
        """The next pause; the one after it grows by ``factor``, up to ``cap``."""
        pause = self.delay
        self.delay = grow(self.delay, self.cap, self.factor)
        if self.jitter:
            pause *= 1.0 - self.jitter * self.rand()
        return pause

    def reset(self):
        self.delay = self.base


def grow(delay, cap, factor=2.0):
    """One step of a capped ramp: ``delay * factor``, at most ``cap``."""
    return min(delay * factor, cap)


def retry(call, clock, timeout, retry_on, backoff=None, between=None, clip=True):
    """``call()``, called again after each error of the classes ``retry_on`` until ``timeout`` seconds have passed
    since the first call; then that last error is raised.

    :param backoff: the pauses (a :class:`Backoff`; 1, 2, 4 ... 30 s by default)
    :param between: called with the error after each pause; a value other than None ends the retries and is
        returned (e.g. the request did reach its goal though its answer was lost)
    :param clip: no pause runs past the deadline (False: the whole pause is slept, the deadline checked after it)
    :returns: ``(value, errors)``: what ``call`` or ``between`` returned, and the errors that were ridden out
    """
    backoff = backoff or Backoff()
    deadline = clock.now() + timeout
    errors = []
    while True:
        try:
            return call(), errors
        except retry_on as exc:
            remaining = deadline - clock.now()
            if remaining <= 0:
                raise
            errors.append(exc)
            pause = backoff.next()
            clock.sleep(min(pause, remaining) if clip else pause)
        if between is not None:
            value = between(errors[-1])
            if value is not None:
                return value, errors
