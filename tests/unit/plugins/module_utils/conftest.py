# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fakes shared by the module_utils tests: for job_actions' parts a clock, a Slurm client that answers from tables,
and a factory of action contexts over them; for deployment and status_report a Slurm client that answers squeue and
sacct (DeploymentCli) and a view over it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import subprocess

import pytest

from ansible_collections.glm.serve.plugins.module_utils import job_actions
from ansible_collections.glm.serve.plugins.module_utils import deployment
from ansible_collections.glm.serve.plugins.module_utils import slurm_parse as sp
from ansible_collections.glm.serve.plugins.module_utils.job_actions import Context
from ansible_collections.glm.serve.plugins.module_utils.layout import Layout


class FakeClock:
    """now() and sleep(s): time passes only when slept; ``sleeps`` lists the pauses."""

    def __init__(self, start=0.0):
        self.t = start
        self.sleeps = []

    def now(self):
        return self.t

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.t += seconds


class FakeCli:
    """The SlurmCli methods the actions call, answering from ``jobs`` (id -> row); ``calls`` lists them."""

    def __init__(self, clock=None, jobs=None, accounting=None):
        self.clock = clock or FakeClock()
        self.jobs = dict(jobs or {})
        self.accounting = list(accounting or [])
        self.calls = []
        self.polls = 0
        self.accounting_calls = 0
        self.on_outage = None
        self.submitted = []
        self.next_id = 5000
        self.kill_wait_seconds = 30
        self.start_now_answer = True

    def retry(self, func, timeout, *args, **kwargs):
        return func(*args, **kwargs)

    def version(self):
        return ('22.05.8', (22, 5, 8))

    def squeue(self, job_ids=None, name=None, user=None, all_states=False):
        self.calls.append(('squeue', name, user))
        self.polls += 1
        names = name.split(',') if name else None
        return [dict(r) for r in self.jobs.values() if (names is None or r.get('name') in names)
                and (user is None or r.get('user') == user)]

    def show_job(self, job_id):
        self.calls.append(('show_job', str(job_id)))
        self.polls += 1
        row = self.jobs.get(str(job_id))
        return dict(row) if row else None

    def sacct(self, **query):
        self.calls.append(('sacct', query))
        self.accounting_calls += 1
        return [dict(r) for r in self.accounting]

    def cancel(self, job_ids):
        self.calls.append(('cancel', list(job_ids)))

    def signal_batch(self, job_ids, signal):
        self.calls.append(('signal_batch', list(job_ids), signal))

    def start_now(self, job_id):
        self.calls.append(('start_now', job_id))
        return self.start_now_answer

    def kill_wait(self):
        self.calls.append(('kill_wait',))
        return self.kill_wait_seconds

    def update_end_time(self, job_id, end_time):
        self.calls.append(('update_end_time', job_id, end_time))

    def batch_script(self, job_id):
        self.calls.append(('batch_script', job_id))
        return (self.jobs.get(str(job_id)) or {}).get('script')

    def sbatch_argv(self, script, name, dependency=None, kill_on_invalid_dep=True, extra_args=None):
        return ['sbatch', '--parsable', '--job-name=%s' % name] + list(extra_args or []) + [script]

    def submit(self, argv, chdir, umask):
        self.calls.append(('submit', argv, chdir, umask))
        self.next_id += 1
        self.submitted.append(str(self.next_id))
        return str(self.next_id), None

    def names(self):
        return [c[0] for c in self.calls]


def row(job_id, name='srv', state='RUNNING', user='u', **extra):
    """A squeue/scontrol row."""
    return dict(job_id=str(job_id), name=name, state=state, user=user, **extra)


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def cli(clock):
    return FakeCli(clock)


@pytest.fixture
def make_ctx(cli):
    """make_ctx(**params) -> a job_actions.Context over the fake client (user ``u``, name ``srv``)."""
    warnings = []

    def make(**params):
        params.setdefault('name', 'srv')
        params.setdefault('user', 'u')
        ctx = job_actions.Context(cli, params, check_mode=params.pop('check_mode', False), warn=warnings.append)
        ctx.warnings = warnings
        return ctx
    return make


class DeploymentCli(object):
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
    cli = DeploymentCli(rows, accounting)
    ctx = Context(cli, _params(work_dir=str(tmp_path), **extra))
    return deployment.View(ctx, Layout(str(tmp_path), 'glm-serve', 'glm-download'), ctx.params).build(), cli


@pytest.fixture
def job():
    """A squeue row: job(job_id, name, state='RUNNING', comment=None, nodes='node1', **extra)."""
    return _job


@pytest.fixture
def view():
    """deployment_info's result over DeploymentCli: view(tmp_path, rows, accounting=(), **params) -> (result, cli)."""
    return _view


@pytest.fixture(scope='session')
def make_certificate():
    """make_certificate(folder, name): a self-signed certificate for NAME (not an address) and its key, made now with
    openssl; (cert path, key path). Skips the test without an openssl command."""
    def make(folder, name):
        if not shutil.which('openssl'):
            pytest.skip('no openssl command to make a certificate')
        cert, key = os.path.join(str(folder), name + '.pem'), os.path.join(str(folder), name + '.key')
        subprocess.run(['openssl', 'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
                        '-days', '1', '-subj', '/CN=' + name, '-keyout', key, '-out', cert], check=True, capture_output=True)
        return cert, key
    return make
