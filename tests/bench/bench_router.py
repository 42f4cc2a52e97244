# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Benchmark: the latency the router adds. SGLang's Model Gateway (the REAL smg 1.13, .venv-router) started
by the router role's launcher (roles/router/files/glm_router.py) in front of two SGLang stand-ins on this machine;
the same requests sent straight to a replica and through the router, interleaved, in the same run. Prints figures
(p50, p99, mean, in ms); it is not a test. No Slurm: the network hop between nodes is not in it (on a cluster
add one round trip on the cluster network, ~0.05-0.2 ms), and the stand-ins answer at once, so what is measured
is the router's own cost per request.

    .venv/bin/python tests/bench/bench_router.py [--requests 300] [--json FILE] [--router LABEL=PYTHON ...] [--tls]
                                                 [--proxy]

--router (repeatable): the gateways to measure side by side, each a Python whose venv has one (smg, or sglang-router
0.3.2 for the figures before issue 24), each with its own launcher process in front of the same two replicas, the
requests interleaved over all of them in one run (default: the one in .venv-router).

--tls: each gateway also a second time with HTTPS (router_tls_cert/router_tls_key: a self-signed certificate made
with openssl at the start), its requests over one keep-alive TLS connection (the handshake once, in the warm-up).

--hold: each gateway also a second time behind the hold of scale to zero (the launcher's --scale-config with least 0
and --hold: roles/router/files/glm_hold.py on the public port, the gateway on a loopback port behind it; replicas
serving, so every request is relayed as bytes), label+hold; and a throughput figure: --concurrency clients at once,
each over its own keep-alive connection, chat requests a second through the gateway alone and behind the hold.

--proxy: each gateway also a second time behind LiteLLM's proxy (router_proxy=litellm, the role's default: the
launcher's --proxy litellm, the gateway on a loopback port behind it, the key checked against a registry), label+proxy.

Requests: GET /v1/models (the router answers it itself, from its registry) and a short POST /v1/chat/completions
(proxied to a replica, round_robin), each with the key, over one keep-alive connection per target (as an OpenAI
client holds one).
"""

from __future__ import absolute_import, division, print_function

import argparse
import http.client
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, 'tests', 'doubles_tests'))

from router_helpers import make_certificate, team, write_registry  # noqa: E402  pylint: disable=wrong-import-position
from standin_helpers import SEED_MODEL, Server, free_port, run_hf, wait_for
from standin_helpers import http as request  # noqa: E402  pylint: disable=wrong-import-position

ROUTER_PYTHON = os.path.join(REPO, '.venv-router', 'bin', 'python')
LAUNCHER = os.path.join(REPO, 'roles', 'router', 'files', 'glm_router.py')
KEY = 'bench' * 10
CHAT = json.dumps({'model': 'glm-5.3-flash', 'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 8})


def timed(conn, method, path, body=None):
    headers = {'Authorization': 'Bearer ' + KEY}
    if body is not None:
        headers['Content-Type'] = 'application/json'
    started = time.perf_counter()
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    response.read()
    took = (time.perf_counter() - started) * 1000.0
    if response.status != 200:
        raise SystemExit('%s %s answered %s' % (method, path, response.status))
    return took


def figures(samples):
    ordered = sorted(samples)
    return {'p50': round(statistics.median(ordered), 2), 'p99': round(ordered[max(0, int(len(ordered) * 0.99) - 1)], 2),
            'mean': round(statistics.mean(ordered), 2), 'n': len(ordered)}


def scale_config(tmp, label, folder):
    """The autoscaler's settings of a launcher with the hold: least 0 (the hold), two replicas, and windows that never
    end within a run (no decision: the replicas are the bench's own)."""
    path = tmp / ('scale-%s.json' % label)
    path.write_text(json.dumps({
        'least': 0, 'most': 2, 'target': 1000, 'up_after': 36000, 'down_after': 36000, 'cooldown': 36000,
        'coming_timeout': 36000, 'script': str(tmp / 'serve.sbatch'), 'sbatch_args': [], 'bad_nodes_file': '',
        'bad_node_ttl': 1, 'umask': '0077', 'replicas': [['r0', 'c:replica:1'], ['r1', 'c:replica:2']],
        'log': str(tmp / ('scale-%s.log' % label)), 'service_end': str(tmp / 'service-end'), 'hold': 60}))
    return path


def throughput(connect, clients, each):
    """(chat requests a second, latency figures) of CLIENTS threads at once, EACH requests each, each thread over its
    own keep-alive connection (CONNECT())."""
    import threading  # pylint: disable=import-outside-toplevel
    samples, errors = [], []

    def client():
        conn = connect()
        try:
            for _i in range(each):
                samples.append(timed(conn, 'POST', '/v1/chat/completions', CHAT))
        except BaseException as error:  # pylint: disable=broad-except
            errors.append(error)
        finally:
            conn.close()
    threads = [threading.Thread(target=client) for _c in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    took = time.perf_counter() - started
    if errors:
        raise SystemExit('throughput: %s' % errors[0])
    return len(samples) / took, figures(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--requests', type=int, default=300, help='requests of each kind to each target (default 300)')
    parser.add_argument('--json', metavar='FILE', help='also write the figures as JSON')
    parser.add_argument('--router', action='append', metavar='LABEL=PYTHON',
                        help='a gateway to measure (repeatable; default: smg=.venv-router/bin/python)')
    parser.add_argument('--tls', action='store_true', help='each gateway also with HTTPS (label+tls), side by side')
    parser.add_argument('--proxy', action='store_true', help="each gateway also behind LiteLLM's proxy (label+proxy)")
    parser.add_argument('--hold', action='store_true', help='each gateway also behind the hold of scale to zero (label+hold)')
    parser.add_argument('--concurrency', type=int, default=16, help='clients at once for the throughput figure (--hold)')
    opts = parser.parse_args()
    routers = [r.split('=', 1) for r in (opts.router or ['smg=' + ROUTER_PYTHON])]
    for _label, python in routers:
        if not os.access(python, os.X_OK):
            raise SystemExit('no %s: make .venv-router/.installed' % python)
    tmp = Path(tempfile.mkdtemp(prefix='bench-router-'))
    model = tmp / 'model'
    assert run_hf(['download', SEED_MODEL, '--local-dir', str(model), '--quiet'], tmp / 'control').returncode == 0
    args = ['--model-path', str(model), '--served-model-name', 'glm-5.3-flash', '--tp-size', '8', '--ep-size', '8',
            '--api-key', KEY, '--host', '127.0.0.1']
    replicas = [Server(args, tmp, GLM_STANDIN_SGLANG_WARMUP='0.2') for _replica in range(2)]
    key_file = tmp / 'key'
    key_file.write_text(KEY + '\n')
    os.chmod(key_file, 0o600)
    started = []
    cert, key_pem = make_certificate(tmp) if opts.tls else (None, None)
    runs = [(label, python, False) for label, python in routers] + [(label + '+tls', python, True) for label, python in routers
                                                                    if opts.tls]
    runs += [(label + '+proxy', python, False) for label, python in routers if opts.proxy]
    runs += [(label + '+hold', python, False) for label, python in routers if opts.hold]
    registry = tmp / 'gateway-keys.json'
    write_registry(registry, {'default': team(KEY)})
    for label, python, tls in runs:
        folder = tmp / ('replicas-' + label)
        folder.mkdir()
        port = free_port()
        proxied = ['--proxy', 'litellm', '--gateway-keys', str(registry), '--usage-file', str(tmp / ('usage-' + label)),
                   '--gateway-config', str(tmp / ('gateway-config-%s.json' % label))] if label.endswith('+proxy') else []
        if label.endswith('+hold'):
            proxied = ['--scale-config', str(scale_config(tmp, label, folder)), '--hold']
        started.append((label, port, folder, subprocess.Popen(
            [python, LAUNCHER, '--key-file', str(key_file), '--replicas-dir', str(folder),
             '--endpoint-file', str(tmp / ('endpoint-' + label)), '--workers-file', str(tmp / ('workers-' + label)),
             '--sync-interval', '0.5', '--advertise', '127.0.0.1'] + proxied
            + ['--', '--host', '127.0.0.1', '--port', str(port), '--policy', 'round_robin', '--prometheus-port', str(free_port())]
            + (['--tls-cert-path', str(cert), '--tls-key-path', str(key_pem)] if tls else []),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
    trusting = ssl.create_default_context(cafile=str(cert)) if cert else None

    def connect(label, port):
        if label.endswith('+tls'):
            return http.client.HTTPSConnection('127.0.0.1', port, context=trusting)
        return http.client.HTTPConnection('127.0.0.1', port)
    try:
        for index, server in enumerate(replicas):
            server.wait_ready()
            for _label, _port, folder, _proc in started:
                (folder / ('r%d.url' % index)).write_text(server.url + '\n')

        def both_in(label, port):
            if label.endswith(('+tls', '+proxy', '+hold')):   # its launcher's workers file (HTTPS, behind the proxy or hold)
                path = tmp / ('workers-' + label)
                return path.exists() and len([w for w in json.loads(path.read_text())['workers'] if w['healthy']]) == 2
            status, body = request("GET", 'http://127.0.0.1:%d/workers' % port, key=KEY)
            return status == 200 and len([w for w in json.loads(body)['workers'] if w['is_healthy']]) == 2
        for label, port, _folder, _proc in started:
            wait_for(lambda label=label, port=port: both_in(label, port), 60)
        targets = [('direct', http.client.HTTPConnection('127.0.0.1', replicas[0].port))]
        targets += [(label, connect(label, port)) for label, port, _folder, _proc in started]
        samples = {(t, k): [] for t, _conn in targets for k in ('models', 'chat')}
        for _target, conn in targets:                       # warm-up: connections, the router's first picks
            for _i in range(20):
                timed(conn, 'GET', '/v1/models')
                timed(conn, 'POST', '/v1/chat/completions', CHAT)
        for _i in range(opts.requests):
            for target, conn in targets:
                samples[(target, 'models')].append(timed(conn, 'GET', '/v1/models'))
                samples[(target, 'chat')].append(timed(conn, 'POST', '/v1/chat/completions', CHAT))
        result = {'%s_%s' % key: figures(values) for key, values in samples.items()}
        print('\n## Router latency: %s in front of 2 SGLang stand-ins, %d requests each, interleaved, same run' % (
            ', '.join(label for label, _port, _folder, _proc in started), opts.requests))
        print('| request | router | direct p50 | router p50 | added p50 | direct p99 | router p99 | added p99 |')
        print('|---|---|---|---|---|---|---|---|')
        for kind, name in (('models', 'GET /v1/models'), ('chat', 'POST /v1/chat/completions (8 tokens)')):
            d = result['direct_' + kind]
            for label, _port, _folder, _proc in started:
                r = result[label + '_' + kind]
                print('| %s | %s | %.2f ms | %.2f ms | %+.2f ms | %.2f ms | %.2f ms | %+.2f ms |' % (
                    name, label, d['p50'], r['p50'], r['p50'] - d['p50'], d['p99'], r['p99'], r['p99'] - d['p99']))
        if opts.hold:
            print('\n## Throughput: %d clients at once, each over its own keep-alive connection, POST /v1/chat/completions, '
                  '%d requests each, one target after the other' % (opts.concurrency, opts.requests // 4))
            print('| target | requests/s | p50 | p99 |')
            print('|---|---|---|---|')
            for label, port, _folder, _proc in started:
                if label.endswith(('+tls', '+proxy')):
                    continue
                rate, lat = throughput(lambda port=port, label=label: connect(label, port), opts.concurrency, opts.requests // 4)
                result['throughput_' + label] = {'rps': rate, 'latency': lat}
                print('| %s | %.0f | %.2f ms | %.2f ms |' % (label, rate, lat['p50'], lat['p99']))
        if opts.json:
            with open(opts.json, 'w') as handle:
                json.dump(result, handle, indent=1)
    finally:
        for _label, _port, _folder, proc in started:
            proc.terminate()
            proc.wait(30)
        for server in replicas:
            server.stop()
    return 0


if __name__ == '__main__':
    sys.exit(main())
