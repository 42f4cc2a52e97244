# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A read-only view of one deployment (the module glm.serve.deployment_info): its jobs by role, its files, where the
deploy stands, and what its servers and router answer.

Controller calls: one ``squeue --local -t all -u USER`` (the user's jobs, with their comments: layout.py decides
which belong to the deployment); one ``sacct`` (slurmdbd, not slurmctld) only when slurmctld no longer knows any job of
the server or the download (MinJobAge after their end), for their newest ended jobs. Everything else is files in the
work dir and HTTP to the compute nodes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import time

from ansible_collections.glm.serve.plugins.module_utils import layout as lay
from ansible_collections.glm.serve.plugins.module_utils import model_probe as mp
from ansible_collections.glm.serve.plugins.module_utils import serve_progress
from ansible_collections.glm.serve.plugins.module_utils import slurm_parse as sp
from ansible_collections.glm.serve.plugins.module_utils import usage as usage_file
from ansible_collections.glm.serve.plugins.module_utils.accounting import ACCOUNTING_MAX
from ansible_collections.glm.serve.plugins.module_utils.bad_nodes import read_bad_nodes
from ansible_collections.glm.serve.plugins.module_utils.job_actions import INFO_KEYS, probe_job
from ansible_collections.glm.serve.plugins.module_utils.job_lookup import after_deps, current_jobs, is_ending, is_live
from ansible_collections.glm.serve.plugins.module_utils.job_wait import make_probe
from ansible_collections.glm.serve.plugins.module_utils.slurm_errors import ActionError

#: squeue's detailed fields and the job's comment (%k), the name last (it takes the rest of the line)
FIELDS = tuple(f for f in sp.SQUEUE_FIELDS if f[0] != 'name') + (('comment', '%k'), ('name', '%j'))
#: the gateway (smg 1.13, as sglang-router 0.3.2) counts each request it passed to a worker, by worker URL
SERVED_RE = re.compile(r'(?m)^smg_worker_cb_outcomes_total\{worker="([^"]+)",outcome="success"\} ([0-9]+)')
#: and each answer it gave its clients, by path and HTTP status (smg_http_responses_total{path=...,status_code=...})
ANSWERED_RE = re.compile(r'(?m)^smg_http_responses_total\{[^}]*status_code="([0-9]+)"[^}]*\} ([0-9.e+]+)')


def _id_key(job_id):
    return [int(p) if p.isdigit() else 0 for p in re.split(r'[_+]', str(job_id))]


def row(job, member):
    """A job as slurm_job_info returns it (details=false), with its role, replica index and comment."""
    out = dict((k, job.get(k)) for k in INFO_KEYS)
    out.update(source=job.get('source') or 'slurmctld', live=is_live(job), ending=is_ending(job), comment=job.get('comment'),
               role=member[0], replica=member[1])
    return out


def list_jobs(ctx, layout):
    """The deployment's jobs, oldest first: one squeue, and one sacct when slurmctld knows no job of the server or the
    download (their newest ended ones, at most ACCOUNTING_MAX of each)."""
    rows = ctx.retry(ctx.cli.squeue, user=ctx.user, all_states=True, fields=FIELDS)
    jobs = [(r, layout.membership(r)) for r in rows]
    jobs = [(r, m) for r, m in jobs if m is not None]
    names = [layout.serve_name, layout.download_name]
    known = set(j['name'] for j, m in jobs if m in (('replica', 1), ('download', None)))
    if any(n not in known for n in names):
        extra = [r for r in ctx.accounting.rows(name=','.join(names), user=ctx.user) if r.get('state') in sp.TERMINAL_STATES]
        for name in names:
            if name not in known:
                of_name = sorted((r for r in extra if r.get('name') == name), key=lambda r: _id_key(r['job_id']))
                jobs += [(r, layout.role_of_name(name)) for r in of_name[-ACCOUNTING_MAX:]]
    return [row(j, m) for j, m in sorted(jobs, key=lambda jm: _id_key(jm[0]['job_id']))]


def live_last(jobs):
    """The newest live job of a list (oldest first) that is no other's successor (``service_until``: it serves while
    its successor waits), else {}."""
    current = current_jobs([j for j in jobs if j['live']])
    return current[-1] if current else {}


def router_answers(text):
    """{'total': N, 'failed': M} of the gateway's answers to its clients since it started (M: 5xx), None without."""
    counts = [(int(code), float(n)) for code, n in ANSWERED_RE.findall(text or '')]
    if not counts:
        return None
    return {'total': int(sum(n for _c, n in counts)), 'failed': int(sum(n for c, n in counts if c >= 500))}


def read_handovers(path):
    """The handovers of the deployment's replicas to their successors (the layout's handovers file, a line each:
    END NAME OLD_ID NEW_ID NEW_START GPUS): {'count', 'by_replica', 'overlap_gpu_hours', 'last'}; None when the file
    is not there (no successor has taken over since the service started)."""
    try:
        with open(path) as handle:
            text = handle.read()
    except (IOError, OSError, TypeError):
        return None
    entries = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 6 or not parts[0].isdigit():
            continue
        end, name, old, new, start, gpus = parts
        overlap = int(end) - int(start) if start.isdigit() and int(start) <= int(end) else None
        entries.append({'time': time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(int(end))), 'replica': name, 'from': old,
                        'to': new, 'overlap_seconds': overlap, 'gpus': int(gpus) if gpus.isdigit() else None})
    by_replica = {}
    for entry in entries:
        by_replica[entry['replica']] = by_replica.get(entry['replica'], 0) + 1
    gpu_seconds = sum(e['overlap_seconds'] * e['gpus'] for e in entries if e['overlap_seconds'] is not None and e['gpus'])
    return {'count': len(entries), 'by_replica': by_replica, 'overlap_gpu_hours': round(gpu_seconds / 3600.0, 3),
            'last': entries[-1] if entries else None}


def read_scale_log(path, keep=5):
    """The autoscaler's decisions (the layout's scale log, a line each: EPOCH ISO-TIME WHAT: WHY): {'count', 'last'
    (the KEEP newest, oldest first: {'time', 'line'}), 'zero_since' (scale to zero: when the last replica left, None
    while one serves or comes)}; None when the file is not there (no autoscaling, or nothing decided yet)."""
    try:
        with open(path) as handle:
            text = handle.read()
    except (IOError, OSError, TypeError):
        return None
    entries = [line.split(' ', 2) for line in text.splitlines()]
    entries = [{'time': e[1], 'line': e[2]} for e in entries if len(e) == 3 and e[0].isdigit()]
    # scale to zero: the time its last replica drained, unless a replica was submitted or adopted after it
    zero = None
    for entry in entries:
        if entry['line'].startswith('zero:'):
            zero = entry['time']
        elif entry['line'].startswith('up: ') and (' submitted as job ' in entry['line'] or ' already queued' in entry['line']):
            zero = None
    return {'count': len(entries), 'last': entries[-keep:], 'zero_since': zero}


def successors(jobs):
    """The successors waiting in a deployment's jobs (server_successors_until): [{'replica', 'job_id', 'after',
    'starts'}], 'starts' the time Slurm lets it start (the job it follows started, END - LIMIT, plus the minutes of
    its after:ID+MINUTES), None when that job's times are not known."""
    by_id = dict((str(j['job_id']), j) for j in jobs)
    out = []
    for job in jobs:
        found = next(((i, minutes) for i, minutes in after_deps(job) if minutes is not None), None)
        before = by_id.get(found[0]) if found else None
        if before is None:
            continue
        starts = None
        end, limit = sp.parse_time(before.get('end_time')), before.get('time_limit')
        if end is not None and before.get('state') == 'RUNNING':
            try:
                seconds = sp.duration_seconds(limit)
            except ValueError:
                seconds = None
            if seconds is not None:
                starts = time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(end - seconds + found[1] * 60))
        out.append({'replica': job.get('name'), 'job_id': job['job_id'], 'after': before['job_id'], 'starts': starts})
    return out


def read_json(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (IOError, OSError, ValueError):
        return None


def http_status(url_host, port, path, timeout=5, headers=None, body=False):
    """(status, text) of GET, (None, None) when nothing answers."""
    try:
        code, data = mp.http_get(url_host, port, path, headers or {}, timeout)
    except Exception:  # pylint: disable=broad-except  # socket and http.client errors: no answer
        return None, None
    text = data.decode('utf-8', 'replace') if body and isinstance(data, bytes) else None
    return code, text


def progress(layout, download, server, model_dir, ready=False, endpoint=None, model=None):
    """phase, the progress line and the activity of the server job (what glm.serve.deploy_progress returns), asking
    Slurm nothing: the jobs' logs, the model dir and the activity file."""
    jobs = [dict(j, job_id=str(j['job_id'])) if j and j.get('job_id') else None for j in (download, server)]
    if not any(jobs):
        return {'phase': 'none', 'progress': 'no job: deploy to start one', 'activity': None}

    def read_log(job):
        if not job.get('name'):
            return ''
        return serve_progress.log_end(job.get('output_path') or layout.log_file(job['name'], job['job_id']))

    said = serve_progress.Progress(model_dir=model_dir, read_log=read_log).describe(jobs, ready=ready, endpoint=endpoint,
                                                                                    model=model)
    server = jobs[1]
    activity = serve_progress.read_activity(layout.activity_file(server['name'], server['job_id'])) \
        if server and server.get('name') else None
    return {'phase': said['phase'], 'progress': said['line'], 'activity': activity}


class View(object):
    """What deployment_info returns, built in steps that each return values (no shared result)."""

    def __init__(self, ctx, layout, params):
        self.ctx, self.layout, self.params = ctx, layout, params

    def probe(self, jobs):
        """(probe or None, why not): the key is read only when a job is there to ask."""
        if not self.params.get('probe') or not any(j['state'] == 'RUNNING' for j in jobs):
            return None, None
        try:
            return make_probe(self.params['probe'])[0], None
        except ActionError as exc:
            return None, exc.msg

    def replica_probe(self, probe, routed):
        """The probe for the replicas: behind a router (ROUTED) with a front door they serve their own key
        (replica_key_file, which no client holds; read only here, never returned), a single server the probe's."""
        path = self.params.get('replica_key_file')
        if probe is None or not routed or not path:
            return probe
        try:
            return make_probe(dict(self.params['probe'], key_file=path))[0]
        except ActionError:
            return probe

    def router_probe(self, probe, tls_cert):
        """The probe for the router: with TLS_CERT (its endpoint file's GLM_TLS_CERT, else router_tls_cert), over HTTPS
        pinned to it; never plain HTTP to a router that serves HTTPS (None: not asked, when the file holds no
        certificate); else the replicas' probe. Either asks the port of the endpoint file while it names the router
        job (a successor on its predecessor's node moved its ports: router_port_offset)."""
        if probe is None:
            return probe
        try:
            probe = probe.over_tls(tls_cert) if tls_cert else probe
        except ValueError:
            return None
        return probe.following(self.params.get('endpoint_file'))

    @staticmethod
    def serving_router(routers, endpoint_vars):
        """The router job the endpoint file (ENDPOINT_VARS, read_endpoint_file) names (GLM_ROUTER_JOB) when it is live:
        while a router hands over to its successor both run, and the one that serves the endpoint is the one to show;
        else the newest live one."""
        owner = (endpoint_vars or {}).get('GLM_ROUTER_JOB')
        return next((j for j in routers if j['live'] and owner and j.get('job_id') == owner), None) or live_last(routers)

    def router_moved(self, router, endpoint_vars):
        """How far the ROUTER job moved its ports (router_port_offset), from the endpoint file (ENDPOINT_VARS) when it
        names that job (GLM_ROUTER_JOB, GLM_BASE_URL's port): 0 when it names another job or none."""
        named = bool(router) and (endpoint_vars or {}).get('GLM_ROUTER_JOB') == router.get('job_id')
        port = mp.url_port(endpoint_vars.get('GLM_BASE_URL')) if named else None
        return port - self.params['router_port'] if port else 0

    def asked(self, probe, job):
        return probe_job(probe, job) if probe is not None and job['state'] == 'RUNNING' else None

    def server_http(self, server, probe):
        """The replica-1 server's metrics text and status, and the status of /v1/models without the key."""
        answer = server.get('probe') or {}
        if not answer.get('answered'):
            return {'metrics_status': None, 'metrics_text': None, 'without_key_status': None}
        node, port = sp.first_host(server['nodes']), probe.port
        metrics_status, text = http_status(node, port, '/metrics', body=True)
        without_key, _text = http_status(node, port, probe.path)
        return {'metrics_status': metrics_status, 'metrics_text': text if metrics_status == 200 else None,
                'without_key_status': without_key}

    def router_view(self, router, replicas, moved, probe=None):
        """The router's part: its job, workers file and metrics - on its metrics port, else (router_proxy=glm: the
        port is on its node's loopback) through its front door with the operator's key (PROBE, the router's)."""
        workers_doc = read_json(self.layout.router_workers_file)
        workers = (workers_doc or {}).get('workers') or [] if isinstance(workers_doc, dict) else []
        if workers_doc is None and not router and not replicas:
            return None
        served, answers = {}, None
        if router and router['state'] == 'RUNNING' and router.get('nodes'):
            node = sp.first_host(router['nodes'])
            code, text = http_status(node, self.params['router_metrics_port'] + moved, '/metrics', body=True)
            if code is None and probe is not None:
                code, text = probe.text(node, '/metrics', router.get('job_id'))
            served = dict((u, n) for u, n in SERVED_RE.findall(text or '')) if code == 200 else {}
            answers = router_answers(text) if code == 200 else None
        return {'job': router or None, 'workers': workers, 'requests_served': served, 'answers': answers}

    def ask_jobs(self, probe, servers, others, router, endpoint_vars):
        """Each running one of SERVERS (replica 1's jobs) and OTHERS (the other replicas' live ones) asked with their
        key, the ROUTER (when it listens on the probe's port) with the operator's; (the replicas' probe, the router's or
        None)."""
        params = self.params
        routed = bool(router or others or os.path.exists(self.layout.router_workers_file))
        replicas_probe = self.replica_probe(probe, routed)
        for job in servers + others:
            job['probe'] = self.asked(replicas_probe, job)
        if not router:
            return replicas_probe, None
        tls_cert = (endpoint_vars or {}).get('GLM_TLS_CERT') or params.get('router_tls_cert')
        door = self.router_probe(probe, tls_cert) if params['router_port'] == (params.get('probe') or {}).get('port') else None
        router['probe'] = self.asked(door, router)
        return replicas_probe, door

    def build(self):
        layout, params = self.layout, self.params
        jobs = list_jobs(self.ctx, layout)
        roles = lay.by_role(layout, jobs)
        servers = roles['replicas'].get(1, [])
        endpoint_vars, endpoint_text = mp.read_endpoint_file(params.get('endpoint_file'))
        router = self.serving_router(roles['router'], endpoint_vars)
        moved = self.router_moved(router, endpoint_vars)
        others = [j for k in sorted(roles['replicas']) if k > 1 for j in roles['replicas'][k] if j['live']]
        probe, probe_error = self.probe([j for j in servers if j['live']] + others + ([router] if router else []))
        replicas_probe, door = self.ask_jobs(probe, servers, others, router, endpoint_vars)
        server = live_last(servers)
        download = roles['download']
        http = self.server_http(server, replicas_probe) if server else self.server_http({}, None)
        answer = server.get('probe') or {}
        running = dict((j['role'], j) for j in (server, router) if j and j['state'] == 'RUNNING' and j.get('nodes'))
        tunnel_to = ('%s:%s' % (running['router']['nodes'], params['router_port'] + moved)
                     if 'router' in running else
                     '%s:%s' % (running['replica']['nodes'], params['port']) if 'replica' in running else '')
        said = progress(layout, (live_last(download) or (download[-1] if download else None)) or None,
                        server or (servers[-1] if servers else None), params.get('model_dir'),
                        ready=answer.get('status') == 'ready', endpoint=answer.get('endpoint'),
                        model=(params.get('probe') or {}).get('model'))
        return dict(
            changed=False, layout=layout.as_dict(), jobs=jobs,
            server=server or None, download=download, replicas=others,
            endpoint=('http://%s:%s/v1' % (server['nodes'], params['port'])) if server.get('state') == 'RUNNING' else None,
            endpoint_file=endpoint_vars, endpoint_file_text=endpoint_text, tunnel_to=tunnel_to, relay=os.path.exists(layout.relay_file),
            router=self.router_view(router, others, moved, door), bad_nodes=read_bad_nodes(layout.bad_nodes_file, params['bad_node_ttl']),
            usage=usage_file.view(usage_file.read_usage(layout.usage_file)),
            handovers=read_handovers(layout.handovers_file), successors=successors(jobs),
            scaling=read_scale_log(layout.scale_log_file),
            bad_node_ttl=params['bad_node_ttl'], probe_error=probe_error, time=int(time.time()),
            polls=self.ctx.cli.polls, accounting_calls=self.ctx.cli.accounting_calls, **dict(said, **http))
