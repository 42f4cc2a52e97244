# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""deployment (glm.serve.deployment_info's logic) and status_report over a fake Slurm client: no cluster."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import time

from ansible_collections.glm.serve.plugins.module_utils import deployment, status_report
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


def job(job_id, name, state='RUNNING', comment=None, nodes='node1', **extra):
    return dict({'job_id': job_id, 'name': name, 'state': state, 'comment': comment, 'nodes': nodes if state == 'RUNNING' else None,
                 'reason': 'None', 'user': 'u'}, **extra)


def params(**extra):
    return dict({'work_dir': None, 'model_dir': None, 'endpoint_file': None, 'port': 30000, 'router_port': 30000,
                 'router_metrics_port': 29000, 'bad_node_ttl': 86400, 'probe': None, 'user': 'u', 'retry_timeout': 5,
                 'accounting': True}, **extra)


def view(tmp_path, rows, accounting=(), **extra):
    cli = FakeCli(rows, accounting)
    ctx = Context(cli, params(work_dir=str(tmp_path), **extra))
    return deployment.View(ctx, Layout(str(tmp_path), 'glm-serve', 'glm-download'), ctx.params).build(), cli


def test_one_squeue_and_membership_by_comment(tmp_path):
    rows = [job('10', 'glm-download', 'COMPLETED', 'glm.serve:glm-serve:download'),
            job('11', 'glm-serve', comment='glm.serve:glm-serve:replica:1'),
            job('12', 'glm-serve-2', comment='glm.serve:glm-serve:replica:2', nodes='node2'),
            job('13', 'glm-serve-2', comment='glm.serve:glm-serve-2:replica:1', nodes='node3'),   # another deployment
            job('14', 'glm-serve-router', 'PENDING', 'glm.serve:glm-serve:router'),
            job('15', 'unrelated')]
    out, cli = view(tmp_path, rows)
    assert [c[0] for c in cli.calls] == ['squeue'] and out['polls'] == 1 and out['accounting_calls'] == 0
    assert cli.calls[0][1]['all_states'] and cli.calls[0][1]['user'] == 'u'
    assert [(j['job_id'], j['role'], j['replica']) for j in out['jobs']] == [
        ('10', 'download', None), ('11', 'replica', 1), ('12', 'replica', 2), ('14', 'router', None)]
    assert out['server']['job_id'] == '11' and [r['job_id'] for r in out['replicas']] == ['12']
    assert out['router']['job']['job_id'] == '14' and out['router']['workers'] == []
    assert out['endpoint'] == 'http://node1:30000/v1' and out['tunnel_to'] == 'node1:30000'
    assert out['layout']['files']['bad_nodes'] == str(tmp_path / 'bad-nodes.json')


def test_sacct_only_when_slurmctld_forgot(tmp_path):
    old = [job(str(i), 'glm-serve', 'COMPLETED') for i in range(1, 8)]
    out, cli = view(tmp_path, [job('20', 'glm-download', 'COMPLETED')], accounting=old)
    assert [c[0] for c in cli.calls] == ['squeue', 'sacct'] and cli.calls[1][1]['name'] == 'glm-serve,glm-download'
    servers = [j for j in out['jobs'] if j['role'] == 'replica']
    assert [j['job_id'] for j in servers] == ['3', '4', '5', '6', '7'] and servers[0]['source'] == 'accounting'
    assert out['server'] is None and out['endpoint'] is None and out['router'] is None


def test_files_bad_nodes_within_ttl_workers_and_endpoint(tmp_path):
    now = time.time()
    (tmp_path / 'bad-nodes.json').write_text(json.dumps({'node1': {'since': now - 10, 'cause': 'ECC'},
                                                         'node2': {'since': now - 100000, 'cause': 'old'}}))
    (tmp_path / 'router-workers.json').write_text(json.dumps({'workers': [{'url': 'http://node2:30000', 'replica': 'glm-serve',
                                                                           'healthy': True}]}))
    (tmp_path / 'endpoint').write_text('GLM_BASE_URL=http://node2:30000/v1\nGLM_MODEL=glm-5.3-flash\n')
    out, _cli = view(tmp_path, [], endpoint_file=str(tmp_path / 'endpoint'))
    assert list(out['bad_nodes']) == ['node1']
    assert out['router']['workers'][0]['replica'] == 'glm-serve' and out['router']['job'] is None
    assert out['endpoint_file'] == {'GLM_BASE_URL': 'http://node2:30000/v1', 'GLM_MODEL': 'glm-5.3-flash'}
    assert out['phase'] == 'none' and out['progress'] == 'no job: deploy to start one' and out['relay'] is False


def test_unreadable_key_still_shows_the_jobs(tmp_path):
    out, _cli = view(tmp_path, [job('11', 'glm-serve')],
                     probe={'port': 30000, 'key_file': str(tmp_path / 'nope'), 'model': 'm', 'path': '/v1/models', 'timeout': 1})
    assert out['server']['job_id'] == '11' and out['server']['probe'] is None
    assert 'cannot read the API key file' in out['probe_error']


SETTINGS = {'host': 'local', 'model': 'glm-5.3-flash', 'port': 30000, 'api_key_file': '~/glm/api-key',
            'tunnel_command': 'ssh ...', 'router_policy': 'cache_aware'}


def test_status_lines_and_document(tmp_path):
    out, _cli = view(tmp_path, [job('11', 'glm-serve', end_time='2026-12-01T18:00:00'),
                                job('9', 'glm-download', 'COMPLETED', end_time='2026-12-01T10:00:00')])
    out['server']['probe'] = {'status': 'ready', 'max_model_len': 8192, 'endpoint': 'http://node1:30000', 'detail': 'serves x'}
    out['without_key_status'] = 401
    lines = status_report.lines(out, None, SETTINGS)
    assert lines[0] == 'glm-serve job 11: RUNNING on node1, ends 2026-12-01T18:00:00'
    # squeue has no exit code (the listing asks no scontrol per job, as status always did)
    assert lines[1] == 'glm-download job 9: COMPLETED, ended 2026-12-01T10:00:00'
    assert 'load: not asked (no server answering)' in lines and 'endpoint: http://node1:30000/v1' in lines
    assert 'model: glm-5.3-flash (max_model_len 8192)' in lines
    assert '/v1/models: answers (HTTP 200 with the key, 401 without)' in lines and 'nodes avoided: none' in lines
    assert 'tunnel: no relay in %s (installed by a deploy of this release): run glm.serve.deploy once, it changes nothing else' % (
        tmp_path / 'glm_relay.py') in lines
    doc = status_report.document(out, None, SETTINGS, now=0)
    assert sorted(doc) == sorted(['schema', 'time', 'host', 'model', 'phase', 'progress', 'load', 'activity', 'jobs', 'server',
                                  'endpoint_file', 'nodes_avoided', 'router', 'replicas'])
    assert doc['time'] == '1970-01-01T00:00:00Z' and doc['server']['answers'] == 'ready' and doc['router'] is None
    assert [j['job_id'] for j in doc['jobs']] == ['11', '9']


def test_load_and_idle_texts():
    load = {'running': 1, 'queued': None, 'gen_throughput': 12.4, 'token_usage': 0.25, 'requests_total': 7}
    assert status_report.load_line(load, 200, {'idle_for': 3, 'idle_timeout': 12}) == (
        'load: 1 running, 0 queued, 12 tokens/s generated, KV cache 25% used, 7 requests since the start; '
        'last request 3 s ago; stops after 12 s idle (server_idle_timeout)')
    assert status_report.idle_text({'idle_for': 130, 'idle_timeout': 7200}) == 'last request 2 min ago; stops after 2 h idle (server_idle_timeout)'
    assert status_report.load_line(None, 404, None).startswith('load: unknown (the server runs without --enable-metrics')
