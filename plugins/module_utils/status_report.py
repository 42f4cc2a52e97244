# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The status playbook's lines and its JSON document (schema glm.serve/status/v1, docs/status.md), from what
glm.serve.deployment_info returned: pure functions, run on the controller by the filter glm.serve.status_report."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.glm.serve.plugins.module_utils import usage as usage_file

SCHEMA = 'glm.serve/status/v1'
ACCOUNTING_NOTE = ' (from accounting: slurmctld has forgotten it)'


def _set(value):
    return value not in (None, '', 'None')


def job_line(job):
    """``glm-serve job 42: RUNNING on node1, ends 2026-12-01T18:00:00``, with how an ended job ended."""
    reason = ' (%s)' % job['reason'] if _set(job.get('reason')) else ''
    where = ' on %s, ends %s' % (job.get('nodes'), job.get('end_time')) if job.get('state') == 'RUNNING' else ''
    ended = ''
    if not job.get('live') and not job.get('ending'):
        ended = ''.join([
            ', exit code %s' % job['exit_code'] if job.get('exit_code') else '',
            ', ended %s' % job['end_time'] if job.get('end_time') else '',
            ' after %s' % job['elapsed'] if job.get('elapsed') else '',
            ' on %s' % job['nodes'] if job.get('nodes') else '',
            ACCOUNTING_NOTE if job.get('source') == 'accounting' else ''])
    return '%s job %s: %s%s%s%s' % (job.get('name'), job.get('job_id'), job.get('state'), reason, where, ended)


def router_lines(router, replicas, policy):
    """The router, what it has (draining: being taken out), then each replica job; nothing without a router."""
    if router is None:
        return []
    job = router.get('job')
    if job:
        where = ' on %s' % job['nodes'] if job.get('nodes') else ''
        answer = (job.get('probe') or {}).get('status') or 'not asked'
        if answer == 'ready' and not [w for w in router.get('workers') or [] if w.get('healthy') and not w.get('draining')]:
            # LiteLLM's proxy in front (router_proxy=litellm) lists the model itself: it answers with no replica behind it
            answer += ', but no healthy replica behind it'
        lines = ['router: job %s %s%s, policy %s, /v1/models %s' % (job['job_id'], job['state'], where, policy, answer)]
    else:
        lines = ['router: no live job']
    served = router.get('requests_served') or {}
    for w in router.get('workers') or []:
        health = 'draining' if w.get('draining') else ('healthy' if w.get('healthy') else 'unhealthy')
        count = served.get(w.get('url'), '?')
        lines.append('router has: %s (%s, %s, requests served: %s)' % (w.get('url'), w.get('replica'), health, count))
    for job in replicas:
        where = ' on %s' % job['nodes'] if job.get('state') == 'RUNNING' and job.get('nodes') else ''
        asked = ', /v1/models %s' % job['probe']['status'] if job.get('probe') else ''
        lines.append('%s job %s: %s%s%s' % (job['name'], job['job_id'], job['state'], where, asked))
    return lines


def continuity_lines(info):
    """The service's continuity (server_successors_until): the next handovers (the successors waiting), the handovers
    so far and their overlap, the router's failed answers; nothing when no successor was ever there."""
    waiting, done = info.get('successors') or [], info.get('handovers')
    if not waiting and not done:
        return []
    out = ['next handover: %s job %s (after job %s) starts %s' % (
        s['replica'], s['job_id'], s['after'], 'about %s' % s['starts'] if s.get('starts') else 'once that job runs')
        for s in waiting] or ['next handover: none waiting']
    if done:
        last = done['last']
        out.append('handovers: %d (%s), overlap %.2f GPU-hours; the last %s, %s job %s to %s%s' % (
            done['count'], ', '.join('%s %d' % kv for kv in sorted(done['by_replica'].items())), done['overlap_gpu_hours'],
            last['time'], last['replica'], last['from'], last['to'],
            ' (%d s overlap)' % last['overlap_seconds'] if last.get('overlap_seconds') is not None else ''))
    answers = (info.get('router') or {}).get('answers')
    if answers:
        out.append('router answers since it started: %d, failed (5xx) %d' % (answers['total'], answers['failed']))
    return out


def scaling_lines(info):
    """The autoscaler's decisions so far and the last one (server_replicas_max); nothing before its first."""
    scaling = info.get('scaling')
    if not scaling or not scaling.get('last'):
        return []
    last = scaling['last'][-1]
    # the scale log's last word, unless replicas of the deployment run (a deploy of server_replicas >= 1 since)
    zero = ['scaled to zero since %s: no replica runs; the next request starts one and waits for it' % scaling['zero_since']
            ] if scaling.get('zero_since') and not info.get('replicas') else []
    return zero + ['autoscaling: %d events (decisions and their outcomes); the last, %s: %s' % (
        scaling['count'], last['time'], last['line'])]


def every(seconds):
    """3600 -> '1 h', 120 -> '2 min', 45 -> '45 s'."""
    seconds = int(seconds)
    if seconds % 3600 == 0:
        return '%d h' % (seconds // 3600)
    if seconds % 60 == 0:
        return '%d min' % (seconds // 60)
    return '%d s' % seconds


def idle_text(activity):
    activity = activity or {}
    idle_for = activity.get('idle_for')
    if idle_for is None:
        text = 'last request: unknown (no activity file yet)'
    elif int(idle_for) >= 60:
        text = 'last request %d min ago' % (int(idle_for) // 60)
    else:
        text = 'last request %s s ago' % idle_for
    if int(activity.get('idle_timeout') or 0) > 0:
        text += '; stops after %s idle (server_idle_timeout)' % every(activity['idle_timeout'])
    return text


def load_line(load, metrics_status, activity):
    if load:
        return ('load: %d running, %d queued, %.0f tokens/s generated, KV cache %.0f%% used, %d requests since the start; %s'
                % (int(load.get('running') or 0), int(load.get('queued') or 0), float(load.get('gen_throughput') or 0),
                   100 * float(load.get('token_usage') or 0), int(load.get('requests_total') or 0), idle_text(activity)))
    if metrics_status == 404:
        return ('load: unknown (the server runs without --enable-metrics: server_enable_metrics=true, then deploy with '
                'server_recreate=true)')
    return 'load: not asked (no server answering)'


def answers_text(info, probe, settings):
    if not probe:
        if (info.get('server') or {}).get('state') != 'RUNNING':
            return 'not asked (no running server)'
        return 'not asked: %s (the deploy makes the key)' % (info.get('probe_error') or '')
    without = info.get('without_key_status')
    texts = {
        'ready': 'answers (HTTP 200 with the key, %s without)' % (without if without is not None else 'no answer'),
        'unauthorized': ('refuses the key in %s (HTTP 401): the server runs with an older key; deploy with '
                         'server_recreate=true to restart it with the key in the file' % settings['api_key_file']),
        'wrong_model': ('answers, but serves %s and not %s: another server runs on port %s, or glm_served_model_name '
                        'differs from the one it was started with' % (', '.join(probe.get('models') or []),
                                                                      settings['model'], settings['port'])),
        'starting': 'no answer yet (still starting, or not listening): %s' % (probe.get('detail') or ''),
    }
    return texts.get(probe.get('status'), probe.get('status'))


def bad_text(bad):
    def since(entry):
        return time.strftime('%Y-%m-%d %H:%M', time.localtime(int(entry['since'])))
    return '; '.join('%s (since %s: %s)' % (node, since(e), e.get('cause') or '?') for node, e in bad.items())


def tunnel_line(info, settings):
    if info.get('tunnel_to') and info.get('relay'):
        tls = (info.get('endpoint_file') or {}).get('GLM_TLS_CERT')      # the router serves HTTPS (router_tls_cert)
        return 'from your machine: %s, then %s://localhost:%s/v1 while it runs%s' % (
            settings['tunnel_command'], 'https' if tls else 'http', settings['port'],
            ' (trusting the router certificate %s)' % tls if tls else '')
    if info.get('tunnel_to'):
        return ('tunnel: no relay in %s (installed by a deploy of this release): run glm.serve.deploy once, it changes '
                'nothing else' % info['layout']['files']['relay'])
    return 'tunnel: none (no running server)'


def status_jobs(info):
    """The server's (replica 1's) jobs, then the download's, as status has always listed them."""
    return [j for j in info['jobs'] if j.get('role') == 'replica' and j.get('replica') == 1] + list(info.get('download') or [])


def lines(info, load, settings):
    """The status as the playbook prints it."""
    server = info.get('server') or {}
    probe = server.get('probe') or {}
    jobs = [job_line(j) for j in status_jobs(info)] or ['jobs: none']
    bad = info.get('bad_nodes') or {}
    endpoint_file = info.get('endpoint_file_text')
    return jobs + router_lines(info.get('router'), info.get('replicas') or [], settings['router_policy']) + continuity_lines(info) + scaling_lines(info) + [
        'progress: %s' % info['progress'],
        load_line(load, info.get('metrics_status'), info.get('activity')),
        'endpoint: %s' % (info['endpoint'] if server.get('state') == 'RUNNING' else 'none (no running server)'),
        tunnel_line(info, settings),
        'model: %s%s' % (settings['model'], (' (max_model_len %s)' % probe['max_model_len']) if probe.get('max_model_len') else ''),
        'endpoint file: %s' % (endpoint_file.strip().replace('\n', ', ') if endpoint_file is not None else 'none'),
        '/v1/models: %s' % answers_text(info, probe, settings),
        'nodes avoided: %s' % (('%s. Server jobs exclude them for server_bad_node_ttl (%s s) after they failed; to try them '
                                'sooner: rm %s' % (bad_text(bad), info['bad_node_ttl'], info['layout']['files']['bad_nodes']))
                               if bad else 'none'),
    ] + usage_file.lines(info.get('usage'))


def document(info, load, settings, now=None):
    """The status as data (docs/status.md, schema glm.serve/status/v1)."""
    server = info.get('server') or {}
    probe = server.get('probe') or {}
    running = server.get('state') == 'RUNNING'
    router = info.get('router')
    job = (router or {}).get('job')
    when = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(now if now is not None else time.time()))
    return {
        'schema': SCHEMA, 'time': when, 'host': settings['host'], 'model': settings['model'],
        'phase': info['phase'], 'progress': info['progress'], 'load': load, 'activity': info.get('activity'),
        'jobs': status_jobs(info),
        'server': {
            'job_id': server.get('job_id'), 'state': server.get('state'), 'node': server.get('nodes'),
            'endpoint': info['endpoint'] if running else None,
            'tunnel': settings['tunnel_command'] if info.get('tunnel_to') and info.get('relay') else None,
            'answers': probe.get('status') or 'not_asked', 'detail': probe.get('detail'),
            'max_model_len': probe.get('max_model_len'), 'without_key_status': info.get('without_key_status')},
        'endpoint_file': info.get('endpoint_file'),
        'nodes_avoided': info.get('bad_nodes') or {},
        'router': {'job_id': job['job_id'], 'state': job['state'], 'node': job.get('nodes'),
                   'answers': (job.get('probe') or {}).get('status') or 'not_asked', 'workers': router.get('workers') or [],
                   'requests_served': router.get('requests_served') or {}} if job else None,
        'replicas': info.get('replicas') or [],
        'usage': info.get('usage'),
        'continuity': {'successors': info.get('successors') or [], 'handovers': info.get('handovers'),
                       'router_answers': (router or {}).get('answers')},
        'scaling': info.get('scaling'),
    }
