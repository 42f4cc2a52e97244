# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The router job of glm.serve: SGLang's Model Gateway (the smg wheel) in front of the server replicas.

    python glm_router.py --key-file KEY --replicas-dir DIR --endpoint-file FILE [--workers-file JSON] [--model NAME]
                         [--sync-interval S] -- ROUTER FLAGS (--host, --port, --policy, --prometheus-port, ...)

What it adds to ``python -m smg.launch_router`` (or ``sglang_router.launch_router``, the gateway's package up to 0.3.2):

- The API key comes from KEY (a file only its owner reads), never from argv: the gateway's CLI takes its key
  only as ``--api-key`` (no variable, no file), so this parses the other flags with the router's own parser
  (``parse_router_args``) and sets ``api_key`` on the result before ``launch_router``. The router then asks that
  key of every client (``Authorization: Bearer``) and sends it to the replicas, which serve the same key file (smg
  passes a request's own Authorization on to the replica it picks). Behind a front door (--proxy) KEY is the
  replicas' own, which the door sends and no client holds; without one, the operator's.
- The replicas join as they come: each replica's job writes one file ``DIR/NAME.url`` (its ``http://NODE:PORT``)
  when it starts and removes it when it ends. Every S seconds this compares the files with the router's workers
  (``GET /workers``): a replica whose ``/health`` answers 200 is added (``POST /workers`` with the key, as the
  router's REST API wants it), a worker whose file is gone, or whose file now names another node (the replica was
  submitted again), is removed (``DELETE /workers/{id}``). A replica that dies without removing its file (its node
  failed) stays listed until its job is replaced; the router marks it unhealthy meanwhile and sends it nothing.
- A replica taken out (its file removed: a scale-down) is drained: it stays listed as ``draining`` until the router
  no longer has it (the gateway removes a worker in the background) and the replica's own ``/metrics`` shows no
  running or queued request, or --drain-timeout seconds have passed.
- JSON (with --workers-file) says after every comparison which replicas the router has, whether they are healthy
  and which are draining (``{"time", "job_id", "workers": [{"url", "replica", "healthy", "draining"}]}``, no key; job_id:
  the router job that wrote it, $SLURM_JOB_ID): the deploy
  reads it to cancel a replica it scales away only once it is drained, and the status playbook shows it, without
  asking the router (whose worker list wants the key) or Slurm. The file is removed when the router exits.
- FILE (``GLM_BASE_URL=http://NODE:PORT/v1``, ``GLM_MODEL``, and under Slurm ``GLM_ROUTER_JOB=$SLURM_JOB_ID`` and
  ``GLM_ROUTER_STARTED=EPOCH``; mode 0600, replaced whole) is written once the router answers ``/liveness``: the
  router logs "Router ready" before it binds its port, so the log is not proof. The router job it names serves the
  endpoint, and only that one writes the workers file.
- Handover (router_successors_until; the job's script submits the successor with ``after:ID+MINUTES``, and Slurm
  starts it with ``GLM_SUCCESSOR_OF`` set): the successor, on a node where the router's port is taken (the job it
  succeeds runs there), moves its ports by --port-offset. It answers, adds the replicas to its own gateway, and
  takes FILE once every replica is healthy in it (after --takeover-timeout: with those that are, if one is; when
  the router FILE names has not answered three rounds in a row, with none). The router it succeeds sees FILE name
  another job at its next round: it stops writing the workers file, appends ``END NAME OLD_ID NEW_ID NEW_START 0``
  to --handovers-file (the replicas' format: 0 GPUs), serves two more rounds, then stops its children as scancel
  would, the proxy first (each stops accepting, finishes the requests it has and closes idle connections, within
  --drain-timeout), and exits 0. New connections follow FILE: the tunnel's relay reads it for each, clients on the
  cluster read it again (docs/replicas.md). With --service-end (the teardown's end of the service, glm_stop_at), the
  router stops once that time has come: a successor that started before it, whose end the teardown could not set.
- HTTPS: with the gateway's ``--tls-cert-path``/``--tls-key-path`` among the router's flags, the endpoint is
  ``https://NODE:PORT/v1`` and FILE also says ``GLM_TLS_CERT=CERT``; this process's own calls to the router accept
  exactly that certificate (pinned: its DER bytes compared after the handshake, before anything is sent; no name
  check, it calls 127.0.0.1), so the key goes to nothing else that may hold the port.

- Autoscaling (``--scale-config FILE``; server_replicas_max): while this router serves the endpoint, glm_scale.py
  (beside this file) adds a replica of the deploy's script when the requests running and queued per serving replica
  stay above the target, and takes the highest one it may away (out of the router, drained, then cancelled) when the
  load would fit in one fewer; each decision and its reason goes to the scale log. FILE is read again when it
  changes: a deploy that changes the settings does not restart this job. No Slurm call in steady state.

- The proxy (``--proxy litellm``): LiteLLM's proxy takes the router's address, port and certificate (its ``--host``,
  ``--port``, ``--tls-cert-path``/``--tls-key-path``), started as a second child with the config of glm_gateway.py
  (beside this file; written to --gateway-config) and the key in its environment; the gateway moves to a free port of
  127.0.0.1, plain HTTP, where only this node's processes reach it. The proxy asks every request but its health routes
  for a key of --gateway-keys (the registry of the teams' key hashes and limits, read again when it changes) and
  counts each team's requests and tokens in --usage-file. The endpoint file is written once the proxy answers
  ``/health/liveliness``; this process keeps the replicas in step through the gateway's loopback port. When either
  child exits, the other is stopped and the job ends.

The router's Rust runtime holds the GIL for as long as it runs (a Python thread beside ``launch_router`` never
runs again), so the router runs in a child process (fork) and this process, the job's main one, keeps the replicas
in step; SIGTERM and SIGINT (scancel, the time limit) are passed on to the router, which shuts down gracefully.
Standard library only, besides smg (or sglang_router) in the child.
"""

import argparse
import atexit
import ctypes
import http.client as http_client
import json
import os
import re
import resource
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.parse

import glm_ports  # pylint: disable=import-error  # beside this file (the role copies both)

LOG_PREFIX = '[glm.serve] router:'
#: A replica whose file names a new address (its successor took its place: server_successors_until) keeps its old
#: worker until the new one is healthy in the router, at most this many seconds: less than the 10 s the old job waits
#: after it leaves before it looks for requests still running (serve_ready.bash, glm_drain).
SWAP_HOLD = 8.0


def log(message):
    sys.stdout.write('%s %s %s\n' % (time.strftime('%Y-%m-%d %H:%M:%S'), LOG_PREFIX, message))
    sys.stdout.flush()


def read_key(path):
    try:
        with open(path, encoding='utf-8') as handle:
            key = handle.readline().strip()
    except OSError as error:
        raise SystemExit('%s cannot read the API key file %s: %s' % (LOG_PREFIX, path, error.strerror))
    if not key:
        raise SystemExit('%s no API key in %s; run the deploy playbook to make one' % (LOG_PREFIX, path))
    return key


def http(method, url, key=None, body=None, timeout=5.0, pin=None):
    """(status, parsed JSON or text); status None when nothing answers (then the text says why, for a log line).
    PIN: with an https URL, the DER bytes of the one certificate the server may present; another one gets nothing
    sent, not even the request line."""
    parts = urllib.parse.urlsplit(url)
    data = json.dumps(body).encode() if body is not None else None
    headers = {'Authorization': 'Bearer %s' % key} if key else {}
    if data is not None:
        headers['Content-Type'] = 'application/json'
    try:
        if parts.scheme == 'https':
            conn = http_client.HTTPSConnection(parts.hostname, parts.port or 443, timeout=timeout, context=unpinned_tls())
        else:
            conn = http_client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
        try:
            conn.connect()
            if parts.scheme == 'https' and conn.sock.getpeercert(True) != pin:
                return None, 'the router presents another TLS certificate than the one it was given'
            conn.request(method, (parts.path or '/') + ('?' + parts.query if parts.query else ''), body=data, headers=headers)
            response = conn.getresponse()
            status, text = response.status, response.read().decode('utf-8', 'replace')
        finally:
            conn.close()
    except Exception as error:  # pylint: disable=broad-except
        # nothing usable answered (refused, reset, timed out, a broken HTTP answer): the caller tries again later
        return None, '%s: %s' % (type(error).__name__, error)
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def unpinned_tls():
    """The TLS context of this process's HTTPS calls: no CA chain, no name (http() compares the certificate itself)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def read_pin(cert_file):
    """The DER bytes of the first certificate in the PEM file CERT_FILE (the server's own; a chain file starts with it),
    as the deploy's probe reads it (glm.serve's module_utils/model_probe.py). Raises ValueError."""
    with open(cert_file, encoding='utf-8') as handle:
        found = re.search(r'-----BEGIN CERTIFICATE-----[A-Za-z0-9+/=\s]+-----END CERTIFICATE-----', handle.read())
    if not found:
        raise ValueError('no PEM certificate in it')
    return ssl.PEM_cert_to_DER_cert(found.group(0))


def replica_urls(folder):
    """{url: replica name} from DIR/NAME.url files (one URL each; unreadable or odd ones are skipped)."""
    found = {}
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return found
    for name in names:
        if not name.endswith('.url'):
            continue
        try:
            with open(os.path.join(folder, name), encoding='utf-8') as handle:
                url = handle.readline().strip().rstrip('/')
        except OSError:
            continue
        if url.startswith('http://') or url.startswith('https://'):
            found[url] = name[:-len('.url')]
    return found


def busy_requests(url):
    """Requests a replica is running or queueing, from its /metrics (no key; SGLang serves it with --enable-metrics);
    None when it does not say (no metrics, or it does not answer: then nothing can be waited for)."""
    status, text = http('GET', url + '/metrics', timeout=5.0)
    if status != 200 or not isinstance(text, str):
        return None
    total, seen = 0.0, False
    for line in text.splitlines():
        if not (line.startswith('sglang:num_running_reqs') or line.startswith('sglang:num_queue_reqs')):
            continue
        if re.search(r'[{,]priority="[^"]', line.split('}', 1)[0]):
            # --enable-priority-scheduling: one series per priority beside the total (priority=""); SGLang 0.5.21's
            # observability/metrics_collector.py L1178-1190. The total is enough.
            continue
        try:
            total += float(line.rsplit(None, 1)[-1])
            seen = True
        except ValueError:
            pass
    return int(total) if seen else None


class Sync(object):
    """Keeps the router's workers in step with the replica files."""

    def __init__(self, base, key, folder, workers_file=None, drain_timeout=120.0, pin=None, gateway_pid=None):
        self.base, self.key, self.folder, self.workers_file = base, key, folder, workers_file
        self.pin = pin             # with HTTPS: the DER bytes of the router's certificate (read_pin), else None
        self.drain_timeout = drain_timeout
        self.waiting = {}      # url -> the last /health status seen while it did not answer 200 (to log changes only)
        self.names = {}        # url -> replica name, kept after its file goes (until the replica is drained)
        self.draining = {}     # url -> when it was taken out of the router (time.monotonic())
        self.adding = {}       # url -> when its addition was asked (the router adds in the background)
        self.swapping = {}     # url -> when its replica's file first named another address (kept until that one is healthy)
        self.current = None    # the router's workers as this round saw them ({url: worker}), None when it did not answer
        self.gateway_pid = gateway_pid  # the gateway this launcher forked (the front door's check of its port)

    def workers(self):
        status, body = http('GET', self.base + '/workers', self.key, pin=self.pin)
        if status != 200 or not isinstance(body, dict):
            return None
        return {w.get('url', '').rstrip('/'): w for w in body.get('workers', []) if isinstance(w, dict)}

    def step(self):
        current = self.current = self.workers()
        if current is None:
            return
        wanted = replica_urls(self.folder)
        now = time.monotonic()
        self.remove(current, wanted, now)
        self.drain(current, wanted)
        for url, name in sorted(wanted.items()):
            if url in current:
                self.waiting.pop(url, None)
                self.adding.pop(url, None)
                continue
            if now - self.adding.get(url, -60.0) < 30.0:
                continue                            # asked already; the router is still adding it
            # SGLang 0.5.21's /health waits for an output of the running requests on a busy replica: up to 20 s
            health = http('GET', url + '/health', timeout=25.0)[0]
            if health != 200:
                if self.waiting.get(url, 'new') != health:
                    log('replica %s at %s does not answer /health yet (%s)' % (name, url, health or 'no answer'))
                self.waiting[url] = health
                continue
            status, body = http('POST', self.base + '/workers', self.key, {'url': url, 'api_key': self.key}, pin=self.pin)
            worker_id = body.get('worker_id') if isinstance(body, dict) else None
            log('adding replica %s at %s: HTTP %s%s' % (name, url, status, ' (worker %s)' % worker_id if worker_id else ''))
            self.waiting.pop(url, None)
            if status is not None and (200 <= status < 300 or status == 409):   # 409: it has it (still adding it)
                self.adding[url] = now
        if self.workers_file:
            self.record()

    def remove(self, current, wanted, now):
        """The workers whose replica file is gone, or names another address (held until that one is healthy), out."""
        for url in [u for u in self.swapping if u not in current]:
            del self.swapping[url]
        for url in sorted(current):
            if url not in wanted:
                self.hold(url, current, wanted, now)
        self.names.update(wanted)
        for url, worker in sorted(current.items()):
            # asked again every round while the router lists it: the gateway adds and removes workers in
            # background workflows, and an addition still running when the removal ran lists the worker again
            if url not in wanted and url not in self.swapping:
                status = http('DELETE', '%s/workers/%s' % (self.base, worker.get('id')), self.key, pin=self.pin)[0]
                if url not in self.draining:
                    log('removing worker %s (its replica file is gone): HTTP %s' % (url, status))
                self.draining.setdefault(url, now)

    def hold(self, url, current, wanted, now):
        """The worker URL, whose replica's file now names another address (its successor), stays in the router (in
        self.swapping) until that address is a healthy worker, at most SWAP_HOLD seconds; else it is let go."""
        name = self.names.get(url)
        new = [u for u, n in wanted.items() if n == name and u != url] if name else []
        if not new or (current.get(new[0]) or {}).get('is_healthy') or now - self.swapping.get(url, now) >= SWAP_HOLD:
            self.swapping.pop(url, None)
            return
        if url not in self.swapping:
            log('replica %s moves from %s to %s: the old worker stays until the new one is healthy (at most %d s)' % (
                name, url, new[0], SWAP_HOLD))
            self.swapping[url] = now

    def drain(self, current, wanted):
        """A worker taken out stays draining until the router no longer lists it (its removal runs in the background)
        and the replica has no request left (its /metrics), or drain_timeout has passed."""
        for url, since in sorted(self.draining.items()):
            if url in wanted:                       # announced again (same address): it is a worker again
                del self.draining[url]
                continue
            if url in current:
                continue
            busy = busy_requests(url)
            waited = time.monotonic() - since
            if busy and waited < self.drain_timeout:
                continue
            del self.draining[url]
            log('replica %s at %s is out of the router%s' % (
                self.names.pop(url, '?'), url,
                ' (%s requests still running after %d s: drain_timeout)' % (busy, waited) if busy else ''))

    def record(self):
        """The router's workers now (after this round's changes), and the replicas still draining, for the deploy
        and the status playbook: a replica scaled away is named here until it has no request left."""
        current = self.workers()
        if current is None:
            return
        rows = [{'url': url, 'replica': self.names.get(url), 'healthy': bool(worker.get('is_healthy')),
                 'draining': url in self.draining} for url, worker in sorted(current.items())]
        rows += [{'url': url, 'replica': self.names.get(url), 'healthy': False, 'draining': True}
                 for url in sorted(self.draining) if url not in current]
        # job_id: which router job wrote it (a router being replaced may still write its own for a few seconds while
        # the new one starts: the deploy waits for the file of the job it submitted)
        write_atomic(self.workers_file, json.dumps({'time': int(time.time()), 'job_id': os.environ.get('SLURM_JOB_ID'),
                                                    'workers': rows}, indent=1) + '\n')


def write_atomic(path, text):
    """PATH with TEXT, mode 0600, replaced at once (a reader sees the old file or the new one)."""
    tmp = '%s.%d' % (path, os.getpid())
    old = os.umask(0o077)
    try:
        with open(tmp, 'w', encoding='utf-8') as handle:
            handle.write(text)
        os.replace(tmp, path)
    finally:
        os.umask(old)


def write_endpoint(path, url, model, tls_cert=None, job_id=None, started=None):
    """The endpoint file: GLM_BASE_URL and GLM_MODEL (what clients read), GLM_TLS_CERT with HTTPS, and which router job
    serves it (GLM_ROUTER_JOB, GLM_ROUTER_STARTED: the epoch second it started), for its successor and the deploy."""
    write_atomic(path, 'GLM_BASE_URL=%s/v1\nGLM_MODEL=%s\n%s%s' % (
        url, model, 'GLM_TLS_CERT=%s\n' % tls_cert if tls_cert else '',
        'GLM_ROUTER_JOB=%s\nGLM_ROUTER_STARTED=%d\n' % (job_id, started) if job_id else ''))


def endpoint_vars(path):
    """The endpoint file's VAR=VALUE lines as a dict ({} when there is no file or it cannot be read)."""
    try:
        with open(path, encoding='utf-8') as handle:
            return dict(line.rstrip('\n').split('=', 1) for line in handle if '=' in line)
    except (OSError, ValueError):
        return {}


def shift_ports(router_argv, offset, flags=('--port', '--prometheus-port')):
    """ROUTER_ARGV with the values of FLAGS (``--flag N`` or ``--flag=N``) moved by OFFSET."""
    out = list(router_argv)
    for index, arg in enumerate(out):
        if arg in flags and index + 1 < len(out):
            out[index + 1] = str(int(out[index + 1]) + offset)
        elif '=' in arg and arg.split('=', 1)[0] in flags:
            flag, value = arg.split('=', 1)
            out[index] = '%s=%d' % (flag, int(value) + offset)
    return out


def parse_options(argv):
    """(our options, the router's flags): those before '--' are ours, the rest the router's, never --api-key."""
    ours, router_argv = (argv[:argv.index('--')], argv[argv.index('--') + 1:]) if '--' in argv else (argv, [])
    parser = argparse.ArgumentParser(prog='glm_router.py', description=__doc__.split('\n', 1)[0])
    parser.add_argument('--key-file', required=True)
    parser.add_argument('--replicas-dir', required=True)
    parser.add_argument('--endpoint-file', required=True)
    parser.add_argument('--workers-file', default=None)
    parser.add_argument('--model', default='glm-5.3-flash')
    parser.add_argument('--sync-interval', type=float, default=5.0)
    parser.add_argument('--drain-timeout', type=float, default=120.0,
                        help='seconds a replica taken out may finish its requests before it counts as out')
    parser.add_argument('--advertise', default=None, help='the host name clients use (default: this node, SLURMD_NODENAME)')
    parser.add_argument('--port-offset', type=int, default=0,
                        help="a router successor whose node's router port is taken (by the job it succeeds) moves its "
                             "ports by this much (0: it does not, and fails to bind)")
    parser.add_argument('--takeover-timeout', type=float, default=120.0,
                        help='seconds a router successor waits for every replica to be healthy in it before it takes '
                             'the endpoint with those that are')
    parser.add_argument('--service-end', default=None,
                        help="the teardown's end of the service (empty: now; else YYYY-MM-DDTHH:MM[:SS], local time): "
                             "the router ends then")
    parser.add_argument('--handovers-file', default=None,
                        help='where a router that handed the endpoint to its successor records it (a line, as replicas do)')
    scale_options(parser)
    door_options(parser)
    opts = parser.parse_args(ours)
    if opts.proxy == 'litellm' and not (opts.gateway_keys and opts.usage_file and opts.gateway_config):
        parser.error('--proxy litellm needs --gateway-keys, --usage-file and --gateway-config')
    if opts.proxy == 'glm' and not (opts.gateway_keys and opts.usage_file):
        parser.error('--proxy glm needs --gateway-keys and --usage-file')
    if any(a == '--api-key' or a.startswith('--api-key=') for a in router_argv):
        parser.error('give the key in --key-file, not --api-key: a command line is visible to every user of the node')
    return opts, router_argv


def door_options(parser):
    """The front door (glm_front.py, --proxy glm) or LiteLLM's proxy (--proxy litellm) and their files; the door's
    bounds (its request timeout is the gateway's own flag)."""
    parser.add_argument('--proxy', choices=['none', 'glm', 'litellm'], default='none',
                        help="the front door (glm_front.py, in this process) or LiteLLM's proxy on the router's address "
                             "and port, the gateway on the loopback behind it")
    parser.add_argument('--gateway-keys', default=None, help="the proxy's registry of key hashes and limits (JSON)")
    parser.add_argument('--usage-file', default=None, help='where the proxy counts the usage per team and day (JSON)')
    parser.add_argument('--gateway-config', default=None, help="where the proxy's config is written (no secret in it)")
    parser.add_argument('--proxy-metrics-port', type=int, default=None,
                        help="the proxy's Prometheus /metrics (requests and tokens per team), on the router's address")
    parser.add_argument('--max-body-mb', type=int, default=32, help="the front door's largest request body (MiB)")
    parser.add_argument('--max-connections', type=int, default=4096, help="the front door's connections at most")
    parser.add_argument('--max-connections-per-peer', type=int, default=1024,
                        help="the front door's connections at most from one address")
    parser.add_argument('--head-timeout', type=float, default=15.0,
                        help="seconds the front door gives a request's whole head, from its first byte")


def scale_options(parser):
    """The autoscaler's options (glm_scale.py; server_replicas_max): its settings file, written by the router role,
    and the hold's bound (glm_hold.py; server_replicas=0, scale to zero)."""
    parser.add_argument('--scale-config', default=None,
                        help="the autoscaler's settings (JSON, read again when it changes); none: no autoscaling")
    parser.add_argument('--hold', action='store_true',
                        help="scale to zero: the hold keeps the public port, and a request that comes while no replica "
                             "serves waits for the first one, at most the settings' hold seconds (then 503)")


def make_scaler(opts):
    """The autoscaler (glm_scale.Scaler, beside this file) when --scale-config is given, else None. Settings that
    cannot be read are said, and the router serves the replicas it has without it. Sets opts.hold to the hold's bound
    (--hold, scale to zero: the settings' hold seconds), 0 without the autoscaler that wakes the service (the router
    then takes the port itself)."""
    hold, opts.hold = opts.hold, 0
    if not opts.scale_config:
        return None
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import glm_scale  # pylint: disable=import-error,import-outside-toplevel
    try:
        cfg, mtime = glm_scale.Config.read(opts.scale_config, opts.replicas_dir, opts.key_file)
        policy = glm_scale.Policy(cfg.least, cfg.most, cfg.target, cfg.up_after, cfg.down_after, cfg.cooldown)
    except ValueError as error:
        log('autoscaling is off: %s; the router serves the replicas it has' % error)
        return None
    log('autoscaling: %d to %d replicas, %g requests per replica; up after %d s above, down after %d s at half, '
        '%d s between decisions (%s, read again when it changes)' % (
            cfg.least, cfg.most, cfg.target, cfg.up_after, cfg.down_after, cfg.cooldown, opts.scale_config))
    slurm = glm_scale.Slurm(os.path.dirname(cfg.script), int(cfg.umask, 8))
    opts.hold = cfg.hold if hold else 0
    return glm_scale.Scaler(cfg, policy, slurm, log, opts.scale_config, mtime)


def scale_round(scaler, sync, hold=None):
    """One round of the autoscaler, after the replicas were kept in step; a bad round must not end the job. HOLD
    (scale to zero): the requests it keeps while no replica serves count as the load that wakes the service. With
    the front door (HOLD has ``load``), the load is the teams' requests it let in, not the replicas' gauges."""
    try:
        scaler.refresh()
        if hold is not None:
            hold.bound = scaler.cfg.hold or hold.bound
        scaler.round(time.monotonic(), sync, busy_requests, hold.take_demand() if hold else 0,
                     hold.take_traffic() if hold else False, load=hold.load() if hasattr(hold, 'load') else None)
    except Exception as error:  # pylint: disable=broad-except
        log('autoscaling failed this round (%s: %s); trying again' % (type(error).__name__, error))


def serving_now(sync):
    """For the hold: the replicas the router has healthy this round whose address file is still there (not taken
    out); 0 only once no replica has a file (the last one left or ended); None when this round does not tell (the
    router did not answer, or the replicas there are not healthy in it yet, or not this round): the hold keeps its
    state, so that one bad round does not send requests to a router with no worker, nor hold them needlessly."""
    if sync.current is None:
        return None
    wanted = replica_urls(sync.folder)
    healthy = sum(1 for url in wanted if (sync.current.get(url) or {}).get('is_healthy'))
    return healthy if healthy or not wanted else None


def start_hold(opts, public, front, key):
    """The hold (glm_hold.py, beside this file; --hold) on the router's PUBLIC (host, port, cert, key), in front of
    FRONT (the gateway, or LiteLLM's proxy, on this node's loopback); started, or SystemExit when it cannot bind.
    KEY: the one the gateway asks for, with which the hold lists the model while no replica serves (none behind
    LiteLLM's proxy: the teams' keys are the proxy's)."""
    import glm_hold  # pylint: disable=import-error,import-outside-toplevel
    host, port, tls_cert, tls_key = public
    upstream = urllib.parse.urlsplit(front)
    log('starting the hold on %s:%d%s in front of %s: a request that comes while no replica serves waits at most '
        '%d s for the first one' % (host, port, ' (HTTPS)' if tls_cert else '', front, opts.hold))
    try:
        proxied = opts.proxy == 'litellm'
        check = None
        if proxied:         # the teams' keys: the proxy's registry (SHA-256 hashes), read again when it changes
            import glm_gateway  # pylint: disable=import-error,import-outside-toplevel
            check = glm_gateway.shared_registry(opts.gateway_keys).lookup
        return glm_hold.Hold(host, port, (upstream.hostname, upstream.port), opts.hold, log,
                             tls=(tls_cert, tls_key) if tls_cert else None, model=opts.model,
                             key=None if proxied else key, check=check).start()
    except (OSError, ValueError, ssl.SSLError) as error:
        raise SystemExit('%s the hold cannot serve %s:%d: %s' % (LOG_PREFIX, host, port, error))


def start_door(opts, public, base, key, router_argv):
    """The front door (glm_front.py, beside this file; --proxy glm) on the router's PUBLIC (host, port, cert, key), in
    front of the gateway at BASE (this node's loopback), with the teams' keys of --gateway-keys and the usage book of
    --usage-file; the request timeout and the concurrency its shares divide are the gateway's own flags. Started (the
    port bound in this process: no other listener can take it after this), or SystemExit when it cannot bind."""
    import glm_front  # pylint: disable=import-error,import-outside-toplevel
    import glm_gateway  # pylint: disable=import-error,import-outside-toplevel
    host, port, tls_cert, tls_key = public
    upstream = urllib.parse.urlsplit(base)
    concurrency = int(args_value(router_argv, '--max-concurrent-requests', 256))
    settings = glm_front.Settings(
        request_timeout=float(args_value(router_argv, '--request-timeout-secs', 1800)), max_body_mb=opts.max_body_mb,
        max_connections=opts.max_connections, max_per_peer=opts.max_connections_per_peer,
        concurrency=concurrency if concurrency > 0 else 256, head_timeout=opts.head_timeout)
    log('starting the front door on %s:%d%s in front of the gateway at %s, keys from %s (request timeout %d s, body at '
        'most %d MiB, %d connections, %d from one address)%s' % (
            host, port, ' (HTTPS)' if tls_cert else '', base, opts.gateway_keys, settings.request_timeout,
            opts.max_body_mb, settings.max_connections, settings.max_per_peer,
            '; a request that comes while no replica serves waits at most %d s for the first one' % opts.hold
            if opts.hold else ''))
    try:
        door = glm_front.FrontDoor(host, port, (upstream.hostname, upstream.port), log,
                                   glm_gateway.shared_registry(opts.gateway_keys),
                                   glm_gateway.shared_usage_book(opts.usage_file), key, opts.model,
                                   tls=(tls_cert, tls_key) if tls_cert else None, bound=opts.hold, settings=settings)
        # the gateway's metrics (on the loopback: --prometheus-host) through the door, for the operator's key
        door.metrics_port = int(args_value(router_argv, '--prometheus-port', 0)) or None
        return door.start()
    except (OSError, ValueError, ssl.SSLError) as error:
        raise SystemExit('%s the front door cannot serve %s:%d: %s' % (LOG_PREFIX, host, port, error))


def raise_open_files():
    """The soft limit of open files up to the hard one, before any child starts (the gateway and the front door hold
    two descriptors per relayed request)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def die_with_parent(parent, prctl):
    """In a child just forked by PARENT's main thread: SIGTERM when that thread ends, however it ends (a SIGKILL, the
    kernel's OOM killer), so no gateway or proxy outlives its launcher holding the router's port (a cluster that
    tracks a job's processes by parentage, proctrack/linuxproc, loses an orphan and leaves it running after the job).
    SIGTERM and SIGINT are set back to their defaults first (the launcher's forwarding handler, inherited, would take
    the death signal). PRCTL: libc's prctl, looked up before the fork (c_prctl); Linux's PR_SET_PDEATHSIG (1); where
    it is missing, nothing."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if prctl is None or prctl(1, int(signal.SIGTERM), 0, 0, 0) != 0:
        return
    if os.getppid() != parent:           # the launcher died before the prctl: nobody is there to stop this child
        os._exit(1)  # pylint: disable=protected-access


def c_prctl():
    """libc's prctl (ctypes), for die_with_parent; None where there is none."""
    try:
        return getattr(ctypes.CDLL(None, use_errno=True), 'prctl', None)
    except OSError:
        return None


def start_router(router_argv, key, replicas_dir, proxied=False, stopping=None):
    """Forks the router (launch_router with KEY as its api_key); (the child's pid, the URL this node reaches it at,
    the certificate it serves HTTPS with or None, that certificate's DER bytes or None, the router's parsed args).
    PROXIED: the gateway listens on a free port of 127.0.0.1 over plain HTTP instead (the proxy takes its --host,
    --port and certificate; gateway_on_loopback), and the certificate returned is the one the proxy is to serve.
    STOPPING: the signals that came (forward_signals)."""
    try:  # smg (1.13: router_package's default), else sglang-router (0.3.2, a router_venv made before it)
        from smg.launch_router import launch_router, parse_router_args  # pylint: disable=import-error,import-outside-toplevel
    except ImportError:
        from sglang_router.launch_router import launch_router, parse_router_args  # pylint: disable=import-error,import-outside-toplevel
    args = parse_router_args(router_argv)
    args.api_key = key
    tls_cert = getattr(args, 'server_cert_path', None)      # --tls-cert-path (smg; sglang-router 0.3.2 has none)
    try:
        pin = read_pin(tls_cert) if tls_cert else None
    except (ValueError, OSError) as error:
        raise SystemExit('%s cannot use the TLS certificate %s: %s' % (LOG_PREFIX, tls_cert, getattr(error, 'strerror', None) or error))
    public = (args.host, args.port, tls_cert, getattr(args, 'server_key_path', None))
    glm_ports.wait_for_ports(args.host, [args.port], log)
    glm_ports.wait_for_ports(getattr(args, 'prometheus_host', None) or args.host, [getattr(args, 'prometheus_port', None)], log)
    if proxied:
        args.host, args.server_cert_path, args.server_key_path = '127.0.0.1', None, None
    base = '%s://%s:%d' % ('https' if tls_cert and not proxied else 'http', '127.0.0.1' if args.host in (
        '0.0.0.0', '::', '127.0.0.1', 'localhost') else args.host, args.port)
    said = ', policy %s, replicas from %s' % (args.policy, replicas_dir)
    if not proxied:
        https = ' (HTTPS, certificate %s)' % tls_cert if tls_cert else ''
        log('starting SGLang Model Gateway on %s:%d%s%s' % (args.host, args.port, https, said))
        return fork_gateway(launch_router, args), base, tls_cert, pin, public
    child = gateway_on_loopback(launch_router, args, stopping or [], said)
    return child, 'http://127.0.0.1:%d' % args.port, tls_cert, pin, public


#: tries of a gateway on a loopback port before the last one, which the job's main loop watches as before
LOOPBACK_TRIES = 3
#: seconds a gateway may take to listen before the launcher goes on without knowing (smg: about 1 s here)
LOOPBACK_WAIT = 30.0


def gateway_on_loopback(launch_router, args, stopping, said='', listens=glm_ports.listens):
    """The gateway forked on a loopback port (args.port, chosen here: glm_ports.loopback_port); the child's pid. A
    gateway that exits before it listens (another process took its port first) is started again on another port, at
    most LOOPBACK_TRIES times, unless a signal came (STOPPING); the last try is the main loop's to watch. SAID: the
    start line's end."""
    for attempt in range(1, LOOPBACK_TRIES + 1):
        args.port = glm_ports.loopback_port()
        log('starting SGLang Model Gateway on 127.0.0.1:%d%s' % (args.port, said))
        child = fork_gateway(launch_router, args)
        # STOPPING asked again after the wait: a signal that came meanwhile is the main loop's to pass on
        if attempt == LOOPBACK_TRIES or stopping or listens(child, args.port, LOOPBACK_WAIT) != 'exited' or stopping:
            return child
        os.waitpid(child, 0)
        log('the gateway exited before it listened on 127.0.0.1:%d (another process took that port first?): '
            'starting it again on another loopback port (%d of %d)' % (args.port, attempt + 1, LOOPBACK_TRIES))
    return child


def fork_gateway(launch_router, args):
    """The gateway (LAUNCH_ROUTER(ARGS)) in a forked child that ends with this process; the child's pid."""
    sys.stdout.flush()
    sys.stderr.flush()
    parent, prctl = os.getpid(), c_prctl()
    child = os.fork()
    if child == 0:
        # the signals as a process starts with them (not the parent's forwarding, installed before the fork): the
        # gateway handles SIGTERM and SIGINT itself
        die_with_parent(parent, prctl)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            launch_router(args)
            os._exit(0)  # pylint: disable=protected-access
        except BaseException:  # pylint: disable=broad-except
            os._exit(1)  # pylint: disable=protected-access
    return child


def start_proxy(opts, key, upstream, public):
    """Starts LiteLLM's proxy (a child process) on the router's PUBLIC (host, port, cert, key), in front of the gateway
    at UPSTREAM; returns (the Popen, the URL this node reaches the proxy at). Its config (glm_gateway.proxy_config: no
    secret, it names the variables) is written to --gateway-config; the key is in its environment only."""
    import glm_gateway  # pylint: disable=import-error,import-outside-toplevel  # beside this file (the role copies both)
    host, port, tls_cert, tls_key = public
    metrics = opts.proxy_metrics_port
    write_atomic(opts.gateway_config, json.dumps(glm_gateway.proxy_config(opts.model, upstream + '/v1', metrics=bool(metrics)),
                                                 indent=1) + '\n')
    # the metrics' samples: a private folder of this job (mkdtemp: 0700), removed when the job ends
    metrics_dir = tempfile.mkdtemp(prefix='glm-gateway-metrics-') if metrics else None
    if metrics_dir:
        atexit.register(shutil.rmtree, metrics_dir, True)
    env = glm_gateway.proxy_env(os.environ, key, opts.gateway_keys, opts.usage_file, metrics_dir)
    argv = glm_gateway.proxy_argv(sys.executable, opts.gateway_config, host, port, tls_cert, tls_key, metrics)
    log("starting LiteLLM's proxy on %s:%d%s, keys from %s, in front of the gateway at %s%s" % (
        host, port, ' (HTTPS, certificate %s)' % tls_cert if tls_cert else '', opts.gateway_keys, upstream,
        ', metrics on port %d' % metrics if metrics else ''))
    sys.stdout.flush()
    sys.stderr.flush()
    parent, prctl = os.getpid(), c_prctl()
    proc = subprocess.Popen(argv, env=env, cwd=os.path.dirname(os.path.abspath(opts.gateway_config)),  # pylint: disable=consider-using-with
                            preexec_fn=lambda: die_with_parent(parent, prctl))  # pylint: disable=subprocess-popen-preexec-fn
    local = '127.0.0.1' if host in ('0.0.0.0', '::', '127.0.0.1', 'localhost') else host
    return proc, '%s://%s:%d' % ('https' if tls_cert else 'http', local, port)


def forward_signals(children):
    """SIGTERM and SIGINT passed on to the CHILDREN (pids, a list the caller adds to as they start); the list
    returned gets each signal that came."""
    stopping = []

    def forward(signum, _frame):
        stopping.append(signum)                 # no more rounds: the router is going (teardown removes its files)
        for child in children:
            try:
                os.kill(child, signum)
            except OSError:
                pass
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    return stopping


def stop_child(pid, timeout=20.0):
    """SIGTERM to PID (the other child, when one exited), SIGKILL after TIMEOUT seconds; waits for it."""
    try:
        os.kill(pid, signal.SIGTERM)
    except OSError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
        except OSError:
            return
        time.sleep(0.2)
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except OSError:
        pass


#: The launcher's exit status when its gateway or proxy was killed by a signal not of ours (the OOM killer): the router
#: job's loop (router.sbatch) starts the launcher again, as when the launcher itself is killed. EX_TEMPFAIL.
CHILD_KILLED = 75


def router_exited(status, files):
    """The job's exit status once the router exited with wait STATUS (0 when a signal of ours stopped it,
    CHILD_KILLED for another signal); FILES left (leave)."""
    code = os.waitstatus_to_exitcode(status) if hasattr(os, 'waitstatus_to_exitcode') else status >> 8
    log('the router exited (%s)' % code)
    return leave(0 if code in (0, -signal.SIGTERM, -signal.SIGINT) else (code if code > 0 else CHILD_KILLED), files)


def leave(ended, files):
    """ENDED (the job's exit status), FILES (Turn.own_files: the workers file and the endpoint file while this router
    serves the endpoint) removed, the endpoint file unless the launcher starts again in its job (CHILD_KILLED: it
    takes its ports from that file). No file names a router that is gone: a client or the relay finds no endpoint
    rather than a NODE:PORT another user of the node may bind next."""
    for index, path in enumerate(tuple(files)[:1 if ended == CHILD_KILLED else 2]):
        if not path:                      # no --workers-file
            continue
        try:
            os.unlink(path)               # no router, no workers: status and the deploy see it at once
        except OSError:
            continue
        if index == 1:
            log('the endpoint file %s removed: no router serves it now' % path)
    return ended


def sync_round(sync):
    """One round of keeping the replicas in step; one bad round (a file system hiccup, an odd answer) must not end
    the job and its router."""
    try:
        sync.step()
    except Exception as error:  # pylint: disable=broad-except
        log('keeping the replicas in step failed this round (%s: %s); trying again' % (type(error).__name__, error))


#: a site's HTTP proxy, from the login node's environment: the gateway (reqwest) would send its calls to the replicas,
#: the key in them, through it; this job talks to the cluster's own nodes and its loopback only
PROXY_ENV = ('http_proxy', 'https_proxy', 'all_proxy', 'HTTP_PROXY', 'HTTPS_PROXY', 'ALL_PROXY')


def start_children(opts, router_argv, key, children, stopping):
    """The gateway, and the proxy in front of it (--proxy litellm), their pids added to CHILDREN as they start; a
    signal that came before (in STOPPING) passed on to them. (gateway pid, its URL, certificate, pin, the proxy's
    Popen or None, the URL the endpoint's readiness is asked at)."""
    proxied, held, door = opts.proxy == 'litellm', bool(opts.hold), opts.proxy == 'glm'
    raise_open_files()
    child, base, tls_cert, pin, public = start_router(router_argv, key, opts.replicas_dir, proxied or held or door, stopping)
    children.append(child)
    proxy, front = (None, base)
    if door and not stopping:
        hold = start_door(opts, public, base, key, router_argv)
        local = '127.0.0.1' if public[0] in ('0.0.0.0', '::', '127.0.0.1', 'localhost') else public[0]
        return child, base, tls_cert, pin, None, '%s://%s:%d' % ('https' if tls_cert else 'http', local, public[1]), hold
    if proxied and not stopping:
        # behind the hold (scale to zero), the proxy too is on the loopback, plain HTTP: the hold serves the public port
        proxy, front = start_proxy(opts, key, base, ('127.0.0.1', glm_ports.loopback_port(), None, None) if held else public)
        children.append(proxy.pid)
    for signum in stopping[:1]:                 # it came before a child was there to get it
        for pid in children:
            os.kill(pid, signum)
    hold = start_hold(opts, public, front, key) if held and not stopping else None
    return child, base, tls_cert, pin, proxy, front, hold


def said_restart(turn, environ=None):
    """This launcher started again in its job (router.sbatch: the one before was killed by a signal not of the job's
    end, GLM_ROUTER_KILLED in ENVIRON, os.environ by default): said in the job's log and the scale log (the
    controller's own log)."""
    environ = os.environ if environ is None else environ
    killed, restarts = environ.get('GLM_ROUTER_KILLED', ''), environ.get('GLM_ROUTER_RESTARTS', '')
    if not killed:
        return
    line = ('restart: the controller started again in router job %s (restart %s), %s; the replicas are taken from their '
            'address files' % (turn.job_id or '?', restarts or '?', 'the gateway or proxy of the launcher before it killed'
                               if killed == 'child' else 'the launcher before it killed by signal %s' % killed))
    if turn.scaler is not None:
        turn.scaler.record(time.time(), line)
    else:
        log(line)


def drop_site_proxy(environ):
    """PROXY_ENV out of ENVIRON: the gateway and this process talk to the cluster's nodes and the loopback only."""
    for name in PROXY_ENV:
        environ.pop(name, None)


def gateway_first(sync, base, proxy, live, door=None):
    """Before LiteLLM's PROXY answers clients: the replicas added to the gateway at BASE as soon as it answers, so
    that the first requests find them (a launcher started again under load got 404s for a second or more before).
    The front door (DOOR, --proxy glm) passes nothing on until the gateway's loopback port is held by the gateway this
    launcher forked and by nothing else (gateway_is_ours): a port another user bound first gets no key."""
    if door is not None:
        door.gateway_pid = sync.gateway_pid
        if not door.said_foreign and not door.gateway_ours() and door.listening_sockets(door.upstream[1]):
            door.said_foreign = True
            log('the gateway\'s loopback port (%s) is held by a process that is not this job\'s gateway: nothing is '
                'passed on to it' % base)
    if not live and proxy is not None and http('GET', base + '/liveness')[0] == 200:
        sync_round(sync)


def main(argv=None):
    opts, router_argv = parse_options(sys.argv[1:] if argv is None else argv)
    drop_site_proxy(os.environ)
    key = read_key(opts.key_file)
    host = opts.advertise or os.environ.get('SLURMD_NODENAME') or socket.gethostname()
    # a successor (GLM_SUCCESSOR_OF: submitted by the router job it succeeds) takes the endpoint only once its replicas
    # are healthy in it; any other router takes it once it answers
    turn = Turn(opts, os.environ.get('SLURM_JOB_ID', ''), int(time.time()), os.environ.get('GLM_SUCCESSOR_OF', ''))
    turn.scaler = make_scaler(opts)
    said_restart(turn)
    router_argv = successor_ports(opts, router_argv)
    proxied, door = opts.proxy == 'litellm', opts.proxy == 'glm'
    # the handlers first: a scancel while the children start is passed on to those started (the list grows)
    children = []
    stopping = forward_signals(children)
    child, base, tls_cert, pin, proxy, front, turn.hold = start_children(opts, router_argv, key, children, stopping)
    # the gateway's own calls (workers, health) go to it directly: the loopback behind the proxy (or the hold), or its
    # own port
    sync = Sync(base, key, opts.replicas_dir, None, opts.drain_timeout, None if proxied or door or opts.hold else pin, child)
    ready = '/health/liveliness' if proxied else '/liveness'    # LiteLLM's spelling (proxy/health_endpoints)
    url = '%s://%s:%d' % ('https' if tls_cert else 'http', host, args_port(router_argv))
    live, said = False, None
    while True:
        ended = children_ended(child, proxy, stopping, turn.own_files)
        if ended is not None:
            return gateway_gone(turn, ended)
        gateway_first(sync, base, proxy, live, turn.hold if door else None)
        answer = http('GET', front + ready, pin=pin if door or not opts.hold else None) if not live else (None, None)
        if tls_cert and answer[0] is None and ('TLS' in str(answer[1]) or 'SSL' in str(answer[1])) and answer[1] != said:
            said = answer[1]                    # a TLS failure says so once, instead of waiting in silence
            log('the router does not answer over HTTPS yet: %s' % said)
        if not live and answer[0] == 200:
            live = True
            turn.live_at = time.monotonic()
            log('answering at %s/v1%s' % (url, '' if not turn.successor_of else
                                          ': the endpoint stays with job %s until the replicas are healthy here' % turn.successor_of))
        ended = live_round(turn, sync, (url, tls_cert, pin), children, stopping) if live and not stopping else None
        if ended is not None:
            return ended
        pause(turn, live)


def gateway_gone(turn, ended):
    """The gateway has exited: the front door (--proxy glm) opens no connection to its port from now (another user
    could bind it); ENDED, the job's exit status."""
    if turn.hold is not None and hasattr(turn.hold, 'gateway_pid'):
        turn.hold.gateway_pid = None
    return ended


def pause(turn, live):
    """The wait between two rounds: --sync-interval once the router answers (half a second before); with the hold,
    less when a request comes while none serves (the autoscaler acts at once), and a second while requests are held
    (they go on at the round that finds a replica healthy)."""
    interval = turn.opts.sync_interval if live else 0.5
    if turn.hold is None:
        time.sleep(interval)
    else:
        turn.hold.wait(1.0 if live and turn.hold.held else interval)


def children_ended(child, proxy, stopping, own_files):
    """The job's exit status once the gateway (CHILD) or the proxy exited (the other one stopped), else None.
    OWN_FILES: a function, the files to remove then (Turn.own_files)."""
    done, status = os.waitpid(child, os.WNOHANG)
    if done:
        if proxy:
            stop_child(proxy.pid)
        return router_exited(status, own_files())
    if proxy and proxy.poll() is not None:
        log("LiteLLM's proxy exited (%s); stopping the gateway" % proxy.returncode)
        stop_child(child)
        log('the router exited (0)')
        return leave(0 if stopping else (proxy.returncode if proxy.returncode > 0 else CHILD_KILLED), own_files())
    return None


def successor_ports(opts, router_argv, environ=None):
    """The router's flags, its ports moved by --port-offset when this node's router port is taken (the router job this
    one succeeds runs here: two routers of a deployment at a time, so two sets of ports). A launcher started again in
    its job (GLM_ROUTER_KILLED) keeps the ports it had (the endpoint file's, when it names this job; else the router's
    port): the port taken is its own gateway's, still finishing its requests."""
    port = args_port(router_argv)
    environ = os.environ if environ is None else environ
    if environ.get('GLM_ROUTER_KILLED'):
        had = endpoint_vars(opts.endpoint_file)
        moved = had.get('GLM_ROUTER_JOB') == environ.get('SLURM_JOB_ID') and \
            urllib.parse.urlsplit(had.get('GLM_BASE_URL', '')).port == port + (opts.port_offset or 0)
    else:
        moved = bool(opts.port_offset) and glm_ports.port_taken(args_value(router_argv, '--host', '0.0.0.0'), port)
    if not moved:
        return router_argv
    if opts.proxy_metrics_port:
        opts.proxy_metrics_port += opts.port_offset
    moved = shift_ports(router_argv, opts.port_offset)
    log('port %d of this node is taken (the router job this one succeeds?): this router takes port %d (router_port + '
        'router_port_offset), its metrics port %s' % (port, args_port(moved), args_value(moved, '--prometheus-port', '?')))
    return moved


class Turn(object):
    """Which router job serves the endpoint: the one the endpoint file names (GLM_ROUTER_JOB). OWNER: this one."""

    def __init__(self, opts, job_id, started, successor_of):
        self.opts, self.job_id, self.started, self.successor_of = opts, job_id, started, successor_of
        self.owner = False
        self.live_at = None
        self.said_waiting = False
        self.unanswered = 0     # rounds in a row in which the router serving the endpoint did not answer
        self.scaler = None      # the autoscaler (--scale-config), which acts only while this router serves the endpoint
        self.hold = None        # the hold in front of the router (--hold: scale to zero), glm_hold.Hold

    def may_take(self, sync, pin=None):
        """True once this router may take the endpoint: at once unless it is a successor. A successor takes it once
        every replica (a file in the replicas dir) is a healthy worker of its own; after --takeover-timeout, with
        those that are if one is (a replica busy with long requests may answer /health late); at once when the
        router that serves the endpoint has not answered three rounds in a row (its job ended: better a router that
        is joining than none; PIN: with HTTPS, the certificate it presents, the same as this one's)."""
        if not self.successor_of:
            return True
        wanted = replica_urls(self.opts.replicas_dir)
        current = sync.workers() or {}
        healthy = [u for u in wanted if (current.get(u) or {}).get('is_healthy')]
        if len(healthy) == len(wanted):
            return True
        serving = endpoint_vars(self.opts.endpoint_file).get('GLM_BASE_URL', '')
        answered = http('GET', serving.rsplit('/v1', 1)[0] + '/liveness', timeout=5.0, pin=pin)[0] if serving else None
        self.unanswered = 0 if answered is not None else self.unanswered + 1
        if self.unanswered >= 3:
            log('the endpoint %s has not answered 3 rounds in a row: taking it with %d of %d replicas healthy here' % (
                serving or '(none)', len(healthy), len(wanted)))
            return True
        if time.monotonic() - self.live_at < self.opts.takeover_timeout:
            return False
        if healthy:
            log('%d of %d replicas are healthy here after %d s (--takeover-timeout): taking the endpoint with them' % (
                len(healthy), len(wanted), self.opts.takeover_timeout))
            return True
        if not self.said_waiting:
            self.said_waiting = True
            log('no replica is healthy here after %d s: the endpoint stays with job %s until one is' % (
                self.opts.takeover_timeout, self.successor_of))
        return False

    def take(self, url, tls_cert, sync):
        """The endpoint file names this router (atomically: a client reads the old file or the new one)."""
        write_endpoint(self.opts.endpoint_file, url, self.opts.model, tls_cert, self.job_id, self.started)
        self.owner = True
        sync.workers_file = self.opts.workers_file
        if sync.workers_file:
            sync.record()
        log('listening: %s/v1 (written to %s)%s' % (url, self.opts.endpoint_file, ': taken over from job %s' % self.successor_of
                                                    if self.successor_of else ''))

    def service_ended(self):
        """True once the service's end has come (--service-end: the teardown's glm_stop_at, or empty for now): the
        router it names ends then, the successor it may have started before it included (the teardown set the end
        time of the jobs running then, not of one that was waiting)."""
        if not self.opts.service_end:
            return False
        try:
            with open(self.opts.service_end, encoding='utf-8') as handle:
                text = handle.readline().strip()
        except OSError:
            return False
        try:
            return not text or time.mktime(time.strptime(text[:19], '%Y-%m-%dT%H:%M:%S' if len(text) > 16
                                                         else '%Y-%m-%dT%H:%M')) <= time.time()
        except ValueError:
            return True

    def own_files(self):
        """(the workers file, the endpoint file) when they are this router's to remove as it exits (it serves the
        endpoint, no successor took it), else ()."""
        return (self.opts.workers_file, self.opts.endpoint_file) if self.owner and not self.taken_by() else ()

    def taken_by(self):
        """The router job that took the endpoint from this one (its successor), or None."""
        other = endpoint_vars(self.opts.endpoint_file).get('GLM_ROUTER_JOB')
        return other if other and self.job_id and other != self.job_id else None


def live_round(turn, sync, endpoint, children, stopping):
    """A round of the router that answers: it takes the endpoint when it may, keeps the replicas in step, hands over
    to its successor or ends with the service; the job's exit status when it is to end, else None. ENDPOINT: (its
    URL, its certificate or None, that certificate's DER bytes or None)."""
    url, tls_cert, pin = endpoint
    if not turn.owner and turn.may_take(sync, pin):
        turn.take(url, tls_cert, sync)
    if turn.owner and turn.taken_by():
        return hand_over(turn, sync, children, stopping)
    sync_round(sync)
    if turn.owner and turn.scaler is not None:
        scale_round(turn.scaler, sync, turn.hold)
    serving = serving_now(sync) if turn.hold is not None else None
    if serving is not None:
        turn.hold.set_serving(serving)
    return end_of_service(children, turn) if turn.service_ended() else None


def stop_children(children, timeout):
    """The children stopped as scancel would, the front one first (LiteLLM's proxy, then the gateway: each stops
    accepting and finishes the requests it has), each given TIMEOUT seconds."""
    for pid in reversed(children):
        stop_child(pid, timeout=timeout)


def end_of_service(children, turn):
    """The service has ended (teardown): the children stop as a scancel would, the front one first; the job ends 0."""
    log('the service has ended (teardown, %s): the router stops' % turn.opts.service_end)
    stop_front_first(turn, children)
    return router_exited(0, turn.own_files())


def stop_front_first(turn, children):
    """The hold (scale to zero) stops taking connections, the children stop as scancel would (the front one first,
    each given --drain-timeout), then the hold ends with the last bytes of what the router answered."""
    if turn.hold is not None:
        turn.hold.stop()
    stop_children(children, turn.opts.drain_timeout)
    gateway_gone(turn, None)
    if turn.hold is not None:
        turn.hold.stop(timeout=10.0)


def hand_over(turn, sync, children, stopping=()):
    """This router's successor has taken the endpoint: new connections go there (the relay reads the file for each,
    clients on the cluster read it again). This one records the handover first (a line in --handovers-file: the
    time limit's SIGKILL during the stop would lose nothing), keeps its replicas in step for two more rounds without
    writing the workers file (the successor's now; clients that read the endpoint file a moment before still come),
    then stops its children as a scancel would, the front one first: LiteLLM's proxy (uvicorn: it stops accepting,
    finishes the requests it has and closes idle keep-alive connections), then the gateway (smg: the same, within its
    shutdown_grace_period_secs), each given --drain-timeout seconds. A client whose idle keep-alive connection is
    closed opens a new one, which the relay sends to the successor. The job ends COMPLETED."""
    other = turn.taken_by()
    new_start = endpoint_vars(turn.opts.endpoint_file).get('GLM_ROUTER_STARTED', '-')
    sync.workers_file = None
    if turn.opts.handovers_file:
        with open(turn.opts.handovers_file, 'a', encoding='utf-8') as handle:
            handle.write('%d %s %s %s %s 0\n' % (time.time(), os.environ.get('SLURM_JOB_NAME', 'router'), turn.job_id, other,
                                                 new_start if str(new_start).isdigit() else '-'))
    log('job %s has taken over the endpoint: this router finishes the requests it has (at most %d s), then ends' % (
        other, turn.opts.drain_timeout))
    for _round in range(2):
        if stopping:
            break
        time.sleep(turn.opts.sync_interval)
        sync_round(sync)
    since = time.monotonic()
    stop_front_first(turn, children)
    log('handed over to job %s: stopped after %d s' % (other, time.monotonic() - since))
    return 0


def args_value(router_argv, flag, default=None):
    """The value of FLAG in the router's flags (``--flag V`` or ``--flag=V``), else DEFAULT."""
    for index, arg in enumerate(router_argv):
        if arg == flag and index + 1 < len(router_argv):
            return router_argv[index + 1]
        if arg.startswith(flag + '='):
            return arg.split('=', 1)[1]
    return default


def args_port(router_argv):
    """The router's port as its parser reads it (the default 30000 when not given)."""
    return int(args_value(router_argv, '--port', 30000))


if __name__ == '__main__':
    sys.exit(main())
