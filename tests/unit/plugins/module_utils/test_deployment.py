# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""deployment (glm.serve.deployment_info's logic) over a fake Slurm client: no cluster."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import time

from ansible_collections.glm.serve.plugins.module_utils import deployment
from ansible_collections.glm.serve.plugins.module_utils import model_probe as mp


def test_one_squeue_and_membership_by_comment(tmp_path, view, job):
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


def test_sacct_only_when_slurmctld_forgot(tmp_path, view, job):
    old = [job(str(i), 'glm-serve', 'COMPLETED') for i in range(1, 8)]
    out, cli = view(tmp_path, [job('20', 'glm-download', 'COMPLETED')], accounting=old)
    assert [c[0] for c in cli.calls] == ['squeue', 'sacct'] and cli.calls[1][1]['name'] == 'glm-serve,glm-download'
    servers = [j for j in out['jobs'] if j['role'] == 'replica']
    assert [j['job_id'] for j in servers] == ['3', '4', '5', '6', '7'] and servers[0]['source'] == 'accounting'
    assert out['server'] is None and out['endpoint'] is None and out['router'] is None


def test_files_bad_nodes_within_ttl_workers_and_endpoint(tmp_path, view):
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


def test_unreadable_key_still_shows_the_jobs(tmp_path, view, job):
    out, _cli = view(tmp_path, [job('11', 'glm-serve')],
                     probe={'port': 30000, 'key_file': str(tmp_path / 'nope'), 'model': 'm', 'path': '/v1/models', 'timeout': 1})
    assert out['server']['job_id'] == '11' and out['server']['probe'] is None
    assert 'cannot read the API key file' in out['probe_error']


def test_the_router_is_asked_over_https_pinned_or_not_at_all(tmp_path, make_certificate):
    cert, _key = make_certificate(tmp_path, 'router')
    plain = mp.ModelProbe(30000, '/v1/models', 'k' * 48, 'glm-5.3-flash')
    endpoint = tmp_path / 'endpoint'
    view = deployment.View(None, None, {'endpoint_file': str(endpoint), 'router_port': 30000})
    assert view.router_probe(plain, None).endpoint('node3', '7') == 'http://node3:30000'   # plain router: the replicas' probe
    assert view.router_probe(None, cert) is None                         # no probe asked for
    assert view.router_probe(plain, cert).endpoint('node3') == 'https://node3:30000'
    assert view.router_probe(plain, str(tmp_path / 'gone.pem')) is None  # HTTPS router, no certificate: not asked
    # a router successor on its predecessor's node moved its ports: the endpoint file that names it says where
    endpoint.write_text('GLM_BASE_URL=https://node3:30010/v1\nGLM_MODEL=m\nGLM_ROUTER_JOB=7\nGLM_ROUTER_STARTED=1\n')
    assert view.router_probe(plain, cert).endpoint('node3', '7') == 'https://node3:30010'
    named = mp.read_endpoint_file(str(endpoint))[0]
    assert view.router_moved({'job_id': '7'}, named) == 10 and view.router_moved({'job_id': '6'}, named) == 0
    assert view.router_moved({'job_id': '7'}, None) == 0
    routers = [{'job_id': '7', 'live': True}, {'job_id': '8', 'live': True}]
    assert view.serving_router(routers, named)['job_id'] == '7'       # the one the file names, not the newest
    assert view.serving_router(routers, None)['job_id'] == '8'


def test_a_replica_is_its_serving_job_while_its_successor_waits():
    serving = dict(job_id='9', state='RUNNING', live=True, dependency=None)
    successor = dict(job_id='12', state='PENDING', live=True, dependency='after:9+58(unfulfilled)')
    assert deployment.live_last([serving, successor]) is serving
    # the successor started (both running, it loads): it is the replica's newest job
    started = dict(successor, state='RUNNING', dependency=None)
    assert deployment.live_last([serving, started]) is started
    assert deployment.live_last([dict(serving, live=False)]) == {}


def test_the_routers_answers_by_status_from_its_metrics():
    text = ('smg_http_responses_total{path="/v1/chat/completions",status_code="200"} 1700\n'
            'smg_http_responses_total{path="/v1/models",status_code="200"} 9\n'
            'smg_http_responses_total{path="/v1/chat/completions",status_code="503"} 2\n'
            'smg_http_responses_total{path="/v1/chat/completions",status_code="429"} 4\n')
    assert deployment.router_answers(text) == {'total': 1715, 'failed': 2}
    assert deployment.router_answers('smg_worker_health{worker="x"} 1\n') is None and deployment.router_answers(None) is None


def test_the_routers_metrics_through_its_door_when_its_port_is_on_the_loopback(tmp_path, monkeypatch):
    """router_proxy=glm (issue 37 item 7): the gateway's metrics port is on its node's loopback, so nothing answers on
    the node's address; the router's door serves them to the operator's key (the router's probe: its key, its port)."""
    from ansible_collections.glm.serve.plugins.module_utils import layout as lay
    asked = []

    def opener(host, port, path, headers, timeout):
        asked.append((host, port, path, headers.get('Authorization')))
        return 200, b'smg_worker_cb_outcomes_total{worker="http://node1:30000",outcome="success"} 7\n'
    monkeypatch.setattr(deployment, 'http_status', lambda *a, **k: (None, None))     # the metrics port: no answer
    door = mp.ModelProbe(30000, '/v1/models', 'k' * 48, 'glm-5.3-flash', opener=opener)
    view = deployment.View(None, lay.Layout(str(tmp_path)), {'router_metrics_port': 29000})
    router = {'job_id': '7', 'state': 'RUNNING', 'nodes': 'node3'}
    got = view.router_view(router, [], 0, door)
    assert got['requests_served'] == {'http://node1:30000': '7'} and asked == [('node3', 30000, '/metrics', 'Bearer ' + 'k' * 48)]
    assert view.router_view(router, [], 0, None)['requests_served'] == {}          # no probe: not asked
