# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Shared fakes of the module_utils tests: a Slurm client that answers squeue and sacct (deployment, status_report)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.glm.serve.plugins.module_utils import deployment
from ansible_collections.glm.serve.plugins.module_utils import slurm_parse as sp
from ansible_collections.glm.serve.plugins.module_utils.job_actions import Context
from ansible_collections.glm.serve.plugins.module_utils.layout import Layout


class FakeCli(object):
    """squeue and sacct answers, and the calls made (the argv is the real client's, tested in test_slurm_cli)."""

    def __init__(self, rows, accounting=()):
        self.rows, self.accounting_rows = rows, list(accounting)
        self.calls, self.polls, self.accounting_calls = [], 0, 0
        self.clock, self.on_outage = None, None

    def retry(self, func, timeout, *args, **kwargs):
        return func(*args, **kwargs)

    def squeue(self, **kwargs):
        self.calls.append(('squeue', kwargs))
        self.polls += 1
        # what the real client would parse from squeue -o with these fields
        text = '\n'.join(sp.SEP.join(r.get(k) or '' for k, _c in kwargs['fields']) for r in self.rows)
        return sp.parse_squeue(text, kwargs['fields'])

    def sacct(self, **kwargs):
        self.calls.append(('sacct', kwargs))
        self.accounting_calls += 1
        return [dict(r, source='accounting') for r in self.accounting_rows]

    def version(self):
        return ('22.05.8', (22, 5, 8))


def _job(job_id, name, state='RUNNING', comment=None, nodes='node1', **extra):
    return dict({'job_id': job_id, 'name': name, 'state': state, 'comment': comment, 'nodes': nodes if state == 'RUNNING' else None,
                 'reason': 'None', 'user': 'u'}, **extra)


def _params(**extra):
    return dict({'work_dir': None, 'model_dir': None, 'endpoint_file': None, 'port': 30000, 'router_port': 30000,
                 'router_metrics_port': 29000, 'bad_node_ttl': 86400, 'probe': None, 'user': 'u', 'retry_timeout': 5,
                 'accounting': True}, **extra)


def _view(tmp_path, rows, accounting=(), **extra):
    cli = FakeCli(rows, accounting)
    ctx = Context(cli, _params(work_dir=str(tmp_path), **extra))
    return deployment.View(ctx, Layout(str(tmp_path), 'glm-serve', 'glm-download'), ctx.params).build(), cli


@pytest.fixture
def job():
    """A squeue row: job(job_id, name, state='RUNNING', comment=None, nodes='node1', **extra)."""
    return _job


@pytest.fixture
def view():
    """deployment_info's result over FakeCli: view(tmp_path, rows, accounting=(), **params) -> (result, cli)."""
    return _view
