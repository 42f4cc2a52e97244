# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How a part of the wait saves and restores itself, so that a wait cut into slices (one module run each) goes on.

A part (:class:`wait_policy.PollSchedule`, :class:`wait_signals.OutputWatcher` ...) derives from :class:`Saved` and
names the fields that are not its state (``CONTEXT``: what its constructor is given again, such as the policy or
the file system) and the fields that hold a clock reading (``TIMES``). Every other field is saved: a new field of
a part is carried between slices without any edit elsewhere. Clock readings are saved relative to the moment of
the snapshot (``now``) and restored against the new process's clock (``base``, that moment in its readings).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy


def relative(value, now):
    """A clock reading as seconds from ``now`` (JSON; None stays None)."""
    return None if value is None else round(value - now, 3)


def absolute(value, base):
    """The reading of a saved :func:`relative` time on a clock where the snapshot's moment is ``base``."""
    return None if value is None else base + float(value)


class Saved:
    """A part of the wait whose state is plain data: ``to_dict(now)``, then ``Part(context...).from_dict(data, base)``."""

    #: fields given to the constructor again, not saved (the policy, the file system, the probe)
    CONTEXT = ()
    #: fields that hold a reading of the clock, saved relative to the snapshot's moment
    TIMES = ()

    def state_fields(self):
        return sorted(key for key in vars(self) if key not in self.CONTEXT)

    def to_dict(self, now):
        """Every field but ``CONTEXT``, as JSON-able data; times relative to ``now``."""
        return dict((key, self.save_field(key, getattr(self, key), now)) for key in self.state_fields())

    def from_dict(self, data, base):
        """Take the state of ``data`` (a :meth:`to_dict`, through JSON); returns self. Keys it lacks keep their value."""
        for key in self.state_fields():
            if key in data:
                setattr(self, key, self.load_field(key, data[key], base))
        return self

    def save_field(self, key, value, now):
        """One field as data (a part with nested parts or tuples overrides this and :meth:`load_field`)."""
        return relative(value, now) if key in self.TIMES else copy.deepcopy(value)

    def load_field(self, key, value, base):
        return absolute(value, base) if key in self.TIMES else copy.deepcopy(value)
