# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The errors of slurm_job and slurm_job_info, and how a module fails with them (:func:`fail_kwargs`).

A step that had found something when an error cut it short attaches what it found (:func:`carrying`): the
failure's result still says it (the ``sbatch_cmd`` of an sbatch that failed, the nodes it excluded).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from contextlib import contextmanager

from ansible_collections.glm.serve.plugins.module_utils.slurm_cli import SlurmError
from ansible_collections.glm.serve.plugins.module_utils.job_waiter import WaitFailed


class ActionError(Exception):
    """A user error found before any Slurm command ran (bad path, missing option)."""

    def __init__(self, msg, **extra):
        super(ActionError, self).__init__(msg)
        self.msg = msg
        self.extra = extra


def attach(exc, fields):
    """Put ``fields`` (what a step had found) on ``exc``; fields a deeper step attached first win."""
    exc.fields = dict(fields, **(getattr(exc, 'fields', None) or {}))
    return exc


@contextmanager
def carrying(fields):
    """Within the block, an exception leaves with ``fields`` (the dict as it is when the exception passes)."""
    try:
        yield fields
    except Exception as exc:
        attach(exc, fields)
        raise


def failed_result(exc, result):
    """The verb's result with what the failed steps had found; set as ``exc.result`` for :func:`fail_kwargs`."""
    result.update(getattr(exc, 'fields', None) or {})
    exc.result = result
    return result


def fail_kwargs(exc, result=None):
    """The fail_json keyword arguments for an exception raised by present/absent/info."""
    kwargs = dict(result if result is not None else getattr(exc, 'result', None) or {})
    if isinstance(exc, SlurmError):
        kwargs.update(exc.kwargs())
    elif isinstance(exc, WaitFailed):
        kwargs['msg'] = exc.msg
        kwargs['timed_out'] = exc.timed_out
        kwargs['failure'] = exc.as_dict()
        if exc.log_tail:
            kwargs['log_tail'] = exc.log_tail
    else:
        kwargs['msg'] = getattr(exc, 'msg', str(exc))
    return kwargs
