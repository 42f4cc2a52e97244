# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""status_report (and its filter): the status lines and the glm.serve/status/v1 document from deployment_info's result."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.glm.serve.plugins.module_utils import deployment, status_report

SETTINGS = {'host': 'local', 'model': 'glm-5.3-flash', 'port': 30000, 'api_key_file': '~/glm/api-key',
            'tunnel_command': 'ssh ...', 'router_policy': 'cache_aware'}


def test_status_lines_and_document(tmp_path, view, job):
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
                                  'endpoint_file', 'nodes_avoided', 'router', 'replicas', 'usage', 'continuity', 'scaling'])
    assert doc['continuity'] == {'successors': [], 'handovers': None, 'router_answers': None}
    assert doc['scaling'] is None and not [line for line in lines if line.startswith('autoscaling')]    # never scaled
    assert not [line for line in lines if line.startswith(('next handover', 'handovers'))]     # no successor ever
    assert doc['time'] == '1970-01-01T00:00:00Z' and doc['server']['answers'] == 'ready' and doc['router'] is None
    assert [j['job_id'] for j in doc['jobs']] == ['11', '9']


def test_load_and_idle_texts():
    load = {'running': 1, 'queued': None, 'gen_throughput': 12.4, 'token_usage': 0.25, 'requests_total': 7}
    assert status_report.load_line(load, 200, {'idle_for': 3, 'idle_timeout': 12}) == (
        'load: 1 running, 0 queued, 12 tokens/s generated, KV cache 25% used, 7 requests since the start; '
        'last request 3 s ago; stops after 12 s idle (server_idle_timeout)')
    assert status_report.idle_text({'idle_for': 130, 'idle_timeout': 7200}) == 'last request 2 min ago; stops after 2 h idle (server_idle_timeout)'
    assert status_report.load_line(None, 404, None).startswith('load: unknown (the server runs without --enable-metrics')


def test_the_tunnel_line_says_https_when_the_endpoint_file_names_a_certificate():
    settings = {'tunnel_command': 'ssh -L 30000:127.0.0.1:40000 login', 'port': 30000}
    plain = {'tunnel_to': 'node3:30000', 'relay': True, 'endpoint_file': {'GLM_BASE_URL': 'http://node3:30000/v1'}}
    assert status_report.tunnel_line(plain, settings) == (
        'from your machine: ssh -L 30000:127.0.0.1:40000 login, then http://localhost:30000/v1 while it runs')
    tls = dict(plain, endpoint_file={'GLM_BASE_URL': 'https://node3:30000/v1', 'GLM_TLS_CERT': '/home/u/router.pem'})
    assert status_report.tunnel_line(tls, settings) == (
        'from your machine: ssh -L 30000:127.0.0.1:40000 login, then https://localhost:30000/v1 while it runs'
        ' (trusting the router certificate /home/u/router.pem)')


def test_the_router_line_says_when_no_healthy_replica_is_behind_a_router_that_answers():
    """With the proxy in front (router_proxy=litellm), /v1/models lists the model with no replica behind it."""
    job = {'job_id': '7', 'state': 'RUNNING', 'nodes': 'node3', 'probe': {'status': 'ready'}}
    healthy = {'url': 'http://node1:30000', 'replica': 'glm-serve', 'healthy': True}
    assert status_report.router_lines({'job': job, 'workers': [healthy]}, [], 'round_robin')[0] == (
        'router: job 7 RUNNING on node3, policy round_robin, /v1/models ready')
    for workers in ([], [dict(healthy, healthy=False)], [dict(healthy, draining=True)]):
        assert status_report.router_lines({'job': job, 'workers': workers}, [], 'round_robin')[0] == (
            'router: job 7 RUNNING on node3, policy round_robin, /v1/models ready, but no healthy replica behind it')


def test_status_says_the_next_handover_and_the_handovers_so_far(tmp_path, view, job):
    """server_successors_until: the successor waiting on after:11+1 of the serving job (its start: end - limit), and
    the handovers file's lines (the overlap: end - the successor's start, times its GPUs)."""
    (tmp_path / 'handovers.log').write_text('1764930090 glm-serve 9 11 1764930060 8\n'
                                            'not a line\n'
                                            '1764930200 glm-serve-2 10 12 1764930155 8\n')
    out, _cli = view(tmp_path, [job('11', 'glm-serve', end_time='2026-12-01T18:02:30', time_limit='2:30'),
                                job('13', 'glm-serve', 'PENDING', reason='Dependency', dependency='after:11+1(unfulfilled)')])
    assert out['server']['job_id'] == '11'                                   # the serving one, not its successor
    assert out['successors'] == [{'replica': 'glm-serve', 'job_id': '13', 'after': '11', 'starts': '2026-12-01T18:01:00'}]
    assert out['handovers']['count'] == 2 and out['handovers']['by_replica'] == {'glm-serve': 1, 'glm-serve-2': 1}
    assert out['handovers']['overlap_gpu_hours'] == round((30 + 45) * 8 / 3600.0, 3)
    assert out['handovers']['last']['from'] == '10' and out['handovers']['last']['overlap_seconds'] == 45
    lines = status_report.continuity_lines(out)
    assert lines[0] == 'next handover: glm-serve job 13 (after job 11) starts about 2026-12-01T18:01:00'
    assert lines[1].startswith('handovers: 2 (glm-serve 1, glm-serve-2 1), overlap 0.17 GPU-hours; the last ')
    assert lines[1].endswith(', glm-serve-2 job 10 to 12 (45 s overlap)')
    # the router's answers to its clients, 5xx counted as failed
    out['router'] = {'answers': {'total': 1711, 'failed': 0}}
    assert status_report.continuity_lines(out)[-1] == 'router answers since it started: 1711, failed (5xx) 0'
    assert status_report.document(out, None, SETTINGS)['continuity']['handovers']['count'] == 2


def test_the_autoscalers_last_decision_is_a_line(tmp_path):
    log = tmp_path / 'scale.log'
    log.write_text('1796510000 2026-12-05T20:40:00 up: s-2 submitted as job 101 (20.0 requests per replica for 60 s)\n'
                   'garbage\n'
                   '1796510090 2026-12-05T20:41:30 up: s-2 (job 101) joined the router, 90 s after it was submitted\n')
    scaling = deployment.read_scale_log(str(log))
    assert scaling == {'count': 2, 'zero_since': None, 'last': [
        {'time': '2026-12-05T20:40:00', 'line': 'up: s-2 submitted as job 101 (20.0 requests per replica for 60 s)'},
        {'time': '2026-12-05T20:41:30', 'line': 'up: s-2 (job 101) joined the router, 90 s after it was submitted'}]}
    assert status_report.scaling_lines({'scaling': scaling}) == [
        'autoscaling: 2 events (decisions and their outcomes); the last, 2026-12-05T20:41:30: up: s-2 (job 101) joined the router, 90 s after it was submitted']
    assert deployment.read_scale_log(str(tmp_path / 'none')) is None


def test_scaled_to_zero_is_said_until_a_replica_is_submitted_again(tmp_path):
    log = tmp_path / 'scale.log'
    log.write_text('1796510000 2026-12-05T20:40:00 down: s (job 101) leaves the router, then ends (no request for 900 s)\n'
                   '1796510010 2026-12-05T20:40:10 down: s drained in 10 s; cancelled job 101\n'
                   '1796510010 2026-12-05T20:40:10 zero: no replica serves; the next request starts one (it waits at most 300 s)\n')
    scaling = deployment.read_scale_log(str(log))
    assert scaling['zero_since'] == '2026-12-05T20:40:10'
    assert status_report.scaling_lines({'scaling': scaling})[0] == (
        'scaled to zero since 2026-12-05T20:40:10: no replica runs; the next request starts one and waits for it')
    # replicas run (a deploy of server_replicas=1 since): not said
    assert len(status_report.scaling_lines({'scaling': scaling, 'replicas': [{'job_id': '5', 'name': 's'}]})) == 1
    with open(str(log), 'a') as handle:
        handle.write('1796513600 2026-12-05T21:40:00 up: s submitted as job 102 (1 request(s) came while no replica serves)\n')
    scaling = deployment.read_scale_log(str(log))
    assert scaling['zero_since'] is None and len(status_report.scaling_lines({'scaling': scaling})) == 1
