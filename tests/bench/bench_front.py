# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Benchmark: streaming through the router's front doors, side by side in one run. The router role's launcher
(roles/router/files/glm_router.py, the REAL smg 1.13 of .venv-router) started once per front door, each in front of
the same fake SGLang replicas on this machine: the gateway alone (smg), LiteLLM's proxy in front of it (litellm:
--proxy litellm, a team key), glm.serve's own front door (glm: --proxy glm, a team key; left out with a note when the
launcher refuses it), and the replicas straight (direct). Prints figures; it is not a test.

    .venv/bin/python tests/bench/bench_front.py [--fronts smg,litellm,glm] [--streams 16,64,256] [--seconds 20]
                                                [--tokens 256] [--interval-ms 10] [--replicas 2] [--rounds 1]
                                                [--loadgen-procs 1] [--repeat-chunk] [--check-repeat] [--json FILE]

The replicas: one asyncio process (standard library only) serving --replicas fake SGLang servers, each on its own
port, that answer as SGLang 0.5.21 does what the launcher and smg ask of a worker (GET /health, /health_generate,
/get_model_info, /get_server_info, /v1/models, /metrics; the key checked as SGLang's --api-key does: all but the health
and metrics routes). POST /v1/chat/completions with "stream": true answers 200, text/event-stream, chunked
transfer-encoding on a kept-alive connection (uvicorn's way): a role chunk and the first content chunk at once (no
prefill time: the first token measures the path), then one content chunk every --interval-ms (one clock for all
streams of a process, as SGLang's batched decode steps), max_tokens of them (--tokens), then the finish_reason
"stop" chunk (and a usage chunk when stream_options.include_usage asks) and ``data: [DONE]``. --repeat-chunk: every
content chunk the same ("tok"), else " t0", " t1", ...

The load: for each concurrency C of --streams, a round in which each target in turn (the order rotated every round)
gets C streaming clients for --seconds, in --loadgen-procs asyncio processes, each client over one kept-alive
connection (direct: client i to replica i mod n), streaming chat requests back to back. Per request: the time to the
first data event with content, the stream's time, its content events, and whether it ended with [DONE] with all
--tokens events (else it counts as an error; one still running at the window's end is cut, not counted). Per target:
content events a second over the window (tokens/s), its ratio to smg's, stream p50, first token p50/p99, errors, and the
CPU seconds of the target's process tree (the launcher and its children, utime+stime from /proc before and after
the window) per 1,000 tokens; the load generator's and the replicas' CPU beside it (a load generator near 100 % of a
core is the limit, not the target: then --loadgen-procs 2).

--check-repeat: instead of the load, one stream of 1,000 identical chunks through each target at once, and whether all
1,000 arrived (LiteLLM cuts such a stream: "The model is repeating the same chunk").
"""

from __future__ import absolute_import, division, print_function

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, 'tests', 'doubles_tests'))

from router_helpers import team, write_registry  # noqa: E402  pylint: disable=wrong-import-position
from standin_helpers import free_port, wait_for  # noqa: E402  pylint: disable=wrong-import-position

ROUTER_PYTHON = os.path.join(REPO, '.venv-router', 'bin', 'python')
LAUNCHER = os.path.join(REPO, 'roles', 'router', 'files', 'glm_router.py')
MODEL = 'glm-5.3-flash'
KEY = 'bench' * 10
TEAM_KEY = 'sk-bench-team-' + 'f' * 32
FRONTS = ('smg', 'litellm', 'glm')
#: the gateway's flags of the router role's defaults (roles/router/defaults/main.yml, router.sbatch.j2) beside the
#: address, port, policy and metrics port: admission (256 at once, 512 queued for 60 s), health checks, retries
ROUTER_ARGS = ['--health-check-interval-secs', '10', '--health-check-timeout-secs', '25', '--retry-max-retries', '3',
               '--max-concurrent-requests', '256', '--queue-size', '512', '--queue-timeout-secs', '60']
CLK_TCK = os.sysconf('SC_CLK_TCK')

# ---------------------------------------------------------------------------------------------------------------------
# The fake SGLang replicas (bench_front.py --serve-replicas ..., a process of their own)


class Hub(object):
    """What the replicas of one process share: the options, the streams running, the decode clock, the counts."""

    def __init__(self, opts):
        self.opts = opts
        self.interval = opts.interval_ms / 1000.0
        self.streams = set()
        self.ticking = False
        self.counts = {}
        self.created = int(time.time())

    def count(self, port, method, path, status):
        name = '%s %s %d' % (method, path, status)
        self.counts.setdefault(port, {})
        self.counts[port][name] = self.counts[port].get(name, 0) + 1

    def start(self, stream):
        self.streams.add(stream)
        if not self.ticking:
            self.ticking = True
            loop = asyncio.get_running_loop()
            loop.call_at(loop.time() + self.interval, self.tick, loop.time() + self.interval)

    def tick(self, when):
        """One decode step: every stream running gets its next chunk; the next step INTERVAL later (never a burst
        to catch up when the process was late)."""
        for stream in list(self.streams):
            stream.step()
        if not self.streams:
            self.ticking = False
            return
        loop = asyncio.get_running_loop()
        when = max(when + self.interval, loop.time())
        loop.call_at(when, self.tick, when)


def chunked(payload):
    """PAYLOAD as one chunk of chunked transfer-encoding."""
    return b'%x\r\n%s\r\n' % (len(payload), payload)


class Stream(object):
    """One streamed chat completion: its chunks, written one a decode step."""

    def __init__(self, replica, tokens, usage):
        self.replica, self.left, self.sent, self.usage = replica, tokens, 0, usage
        hub = replica.hub
        head = '{"id":"%s","object":"chat.completion.chunk","created":%d,"model":"%s","choices":[{"index":0,' % (
            uuid.uuid4().hex, hub.created, MODEL)
        self.head = head.encode()
        self.prefix = b'data: ' + self.head + b'"delta":{"content":"'
        self.suffix = b'"},"logprobs":null,"finish_reason":null}],"usage":null}\n\n'
        self.repeat = hub.opts.repeat_chunk
        role = b'data: ' + self.head + b'"delta":{"role":"assistant","content":""},"logprobs":null,' \
                                       b'"finish_reason":null}],"usage":null}\n\n'
        replica.transport.write(b'HTTP/1.1 200 OK\r\nserver: uvicorn\r\ncontent-type: text/event-stream; charset=utf-8\r\n'
                                b'transfer-encoding: chunked\r\n\r\n' + chunked(role) + self.next_chunk())
        hub.start(self)

    def next_chunk(self):
        content = b'tok' if self.repeat else b' t%d' % self.sent
        self.sent += 1
        self.left -= 1
        return chunked(self.prefix + content + self.suffix)

    def step(self):
        replica = self.replica
        if replica.transport is None or replica.transport.is_closing():
            replica.hub.streams.discard(self)
            return
        if self.left > 0:
            replica.transport.write(self.next_chunk())
            return
        final = b'data: ' + self.head + b'"delta":{},"logprobs":null,"finish_reason":"stop","matched_stop":null}],' \
                                        b'"usage":null}\n\n'
        if self.usage:
            final += b'data: ' + self.head.split(b'"choices"')[0] + (
                b'"choices":[],"usage":{"prompt_tokens":8,"completion_tokens":%d,"total_tokens":%d}}\n\n' % (
                    self.sent, self.sent + 8))
        replica.transport.write(chunked(final + b'data: [DONE]\n\n') + b'0\r\n\r\n')
        replica.hub.streams.discard(self)
        replica.streaming = False
        replica.data_received(b'')            # a request that came while this one streamed (pipelined)


class Replica(asyncio.Protocol):
    """One connection to a fake replica: HTTP/1.1 requests (Content-Length bodies), kept alive."""

    def __init__(self, hub, port):
        self.hub, self.port = hub, port
        self.buf = b''
        self.transport = None
        self.streaming = False

    def connection_made(self, transport):
        self.transport = transport
        sock = transport.get_extra_info('socket')
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc):
        self.transport = None

    def data_received(self, data):
        self.buf += data
        while not self.streaming and self.transport is not None:
            end = self.buf.find(b'\r\n\r\n')
            if end < 0:
                return
            lines = self.buf[:end].decode('latin-1').split('\r\n')
            headers = dict((k.strip().lower(), v.strip()) for k, v in (line.split(':', 1) for line in lines[1:] if ':' in line))
            length = int(headers.get('content-length') or 0)
            if len(self.buf) < end + 4 + length:
                return
            body, self.buf = self.buf[end + 4:end + 4 + length], self.buf[end + 4 + length:]
            method, path = (lines[0].split(' ') + ['', ''])[:2]
            self.answer(method, path.split('?', 1)[0], headers, body)

    def send(self, status, body=b'', content_type='application/json'):
        reason = {200: 'OK', 400: 'Bad Request', 401: 'Unauthorized', 404: 'Not Found'}.get(status, 'Error')
        head = 'HTTP/1.1 %d %s\r\nserver: uvicorn\r\ncontent-length: %d\r\n%s\r\n' % (
            status, reason, len(body), 'content-type: %s\r\n' % content_type if content_type else '')
        self.transport.write(head.encode() + body)

    def answer(self, method, path, headers, body):
        hub, status = self.hub, 200
        open_route = path.startswith(('/health', '/ready', '/metrics'))
        if not open_route and headers.get('authorization') != 'Bearer ' + hub.opts.key:
            status = 401
            self.send(401, b'{"error":"Unauthorized"}')
        elif method == 'POST' and path == '/v1/chat/completions':
            status = self.chat(body)
        elif method in ('GET', 'HEAD') and path in GET_ROUTES:
            text, content_type = GET_ROUTES[path](hub)
            self.send(200, text.encode(), content_type)
        else:
            status = 404
            self.send(404, b'{"detail":"Not Found"}')
        hub.count(self.port, method, path, status)

    def chat(self, raw):
        try:
            body = json.loads(raw or b'null')
            tokens = int(body.get('max_tokens') or body.get('max_completion_tokens') or self.hub.opts.tokens)
        except (ValueError, TypeError, AttributeError):
            self.send(400, b'{"object":"error","message":"The request body is not valid JSON.","code":400}')
            return 400
        if body.get('stream'):
            self.streaming = True
            Stream(self, max(1, tokens), bool((body.get('stream_options') or {}).get('include_usage')))
            return 200
        content = ' '.join(['tok'] * tokens)
        self.send(200, json.dumps({
            'id': uuid.uuid4().hex, 'object': 'chat.completion', 'created': int(time.time()), 'model': MODEL,
            'choices': [{'index': 0, 'message': {'role': 'assistant', 'content': content, 'reasoning_content': None,
                                                 'tool_calls': None}, 'logprobs': None, 'finish_reason': 'stop'}],
            'usage': {'prompt_tokens': 8, 'completion_tokens': tokens, 'total_tokens': tokens + 8}},
            separators=(',', ':')).encode())
        return 200


def model_info(_hub):
    """SGLang 0.5.21's /get_model_info, the fields smg reads."""
    return json.dumps({'model_path': '/models/' + MODEL, 'served_model_name': MODEL, 'tokenizer_path': '/models/' + MODEL,
                       'is_generation': True, 'preferred_sampling_params': None, 'weight_version': 'default',
                       'has_image_understanding': False, 'has_audio_understanding': False, 'model_type': 'glm_moe_dsa',
                       'architectures': ['GlmMoeDsaForCausalLM']}), 'application/json'


def server_info(_hub):
    """SGLang 0.5.21's /get_server_info, cut to what a worker's registration looks at."""
    return json.dumps({'model_path': '/models/' + MODEL, 'served_model_name': MODEL, 'tp_size': 8, 'dp_size': 1,
                       'status': 'ready', 'version': '0.5.21', 'max_total_num_tokens': 1000000,
                       'internal_states': [{'last_gen_throughput': 0.0}]}), 'application/json'


def models(hub):
    return json.dumps({'object': 'list', 'data': [{'id': MODEL, 'object': 'model', 'created': hub.created,
                                                   'owned_by': 'sglang', 'root': MODEL, 'max_model_len': 131072}]}), \
        'application/json'


def metrics(hub):
    """The gauges glm_router's drain reads (sglang:num_running_reqs, sglang:num_queue_reqs)."""
    return ('# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name="%s"} %d\n'
            '# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name="%s"} 0\n' % (
                MODEL, len(hub.streams), MODEL)), 'text/plain; version=0.0.4; charset=utf-8'


def empty(_hub):
    return '', None


GET_ROUTES = {'/health': empty, '/health_generate': empty, '/ready': empty, '/v1/models': models,
              '/get_model_info': model_info, '/model_info': model_info, '/get_server_info': server_info,
              '/server_info': server_info, '/metrics': metrics}


async def serve_replicas(opts):
    """The fake replicas on OPTS.ports until SIGTERM; then the requests each answered (method, path, status: count)
    written to OPTS.stats_file."""
    hub = Hub(opts)
    loop = asyncio.get_running_loop()
    servers = []
    for port in opts.ports:
        servers.append(await loop.create_server(lambda port=port: Replica(hub, port), '127.0.0.1', port, backlog=1024))
    stopping = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    loop.add_signal_handler(signal.SIGINT, stopping.set)
    sys.stdout.write('serving\n')
    sys.stdout.flush()
    await stopping.wait()
    for server in servers:
        server.close()
    if opts.stats_file:
        with open(opts.stats_file, 'w', encoding='utf-8') as handle:
            json.dump(hub.counts, handle, indent=1, sort_keys=True)


# ---------------------------------------------------------------------------------------------------------------------
# The load generator (bench_front.py --loadgen SPEC, or in this process for the probes)

#: a data event with content (not the role chunk's "content":""); "reasoning_content" does not match
CONTENT = re.compile(rb'"content": ?"[^"]')


class Record(object):
    """One request: when it was sent, its first content event, its end; its content events, [DONE], error."""
    __slots__ = ('sent', 'first', 'end', 'events', 'done', 'error', 'cut', 'last')

    def __init__(self):
        self.sent = time.perf_counter()
        self.first = self.end = self.error = self.last = None
        self.events, self.done, self.cut = 0, False, False

    def row(self):
        return [None if self.first is None else round((self.first - self.sent) * 1000, 3),
                None if self.end is None else round((self.end - self.sent) * 1000, 3),
                self.events, self.done, self.error, self.cut, self.last]


class Client(asyncio.Protocol):
    """One kept-alive client connection: sends a request, parses the answer (chunked, Content-Length or until the
    connection closes) and its SSE events into the Record."""

    def __init__(self):
        self.transport, self.record, self.waiter = None, None, None
        self.buf, self.sse = bytearray(), b''
        self.state, self.left, self.keep, self.closed = 'idle', 0, True, False

    def connection_made(self, transport):
        self.transport = transport
        transport.get_extra_info('socket').setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def request(self, raw):
        self.record, self.state, self.sse = Record(), 'head', b''
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(raw)
        return self.waiter

    def finish(self, error=None, cut=False):
        record, self.record, self.state = self.record, None, 'idle'
        if record is None:
            return
        record.end = time.perf_counter()
        record.cut = cut
        if error and not record.error:
            record.error = error
        if not self.waiter.done():
            self.waiter.set_result(record)

    def connection_lost(self, exc):
        self.closed = True
        if self.state == 'eof':
            self.finish()
        elif self.record is not None:
            self.finish('connection closed mid-answer' if self.state != 'head' else 'connection closed')

    def data_received(self, data):
        if self.record is None:
            return
        self.buf += data
        try:
            self.parse()
        except (ValueError, IndexError) as error:
            self.finish('bad HTTP answer: %s' % error)
            self.transport.abort()

    def head(self):
        end = self.buf.find(b'\r\n\r\n')
        if end < 0:
            return False
        lines = bytes(self.buf[:end]).decode('latin-1').split('\r\n')
        del self.buf[:end + 4]
        version, status = lines[0].split(' ', 2)[:2]
        headers = dict((k.strip().lower(), v.strip().lower()) for k, v in (line.split(':', 1) for line in lines[1:] if ':' in line))
        self.keep = version == 'HTTP/1.1' and headers.get('connection') != 'close'
        if status != '200':
            self.record.error = 'HTTP %s' % status
        if 'chunked' in headers.get('transfer-encoding', ''):
            self.state = 'size'
        elif 'content-length' in headers:
            self.state, self.left = 'body', int(headers['content-length'])
        else:
            self.state, self.keep = 'eof', False
        return True

    def parse(self):  # pylint: disable=too-many-branches,too-many-return-statements
        buf = self.buf
        while self.record is not None:
            if self.state == 'head' and not self.head():
                return
            if self.state == 'size':
                end = buf.find(b'\r\n')
                if end < 0:
                    return
                size = int(bytes(buf[:end]).split(b';')[0], 16)
                del buf[:end + 2]
                self.state, self.left = ('data', size) if size else ('trailer', 0)
            elif self.state in ('data', 'body'):
                if not buf and self.left:
                    return
                piece = bytes(buf[:self.left])
                del buf[:len(piece)]
                self.left -= len(piece)
                self.feed(piece)
                if not self.left:
                    if self.state == 'body':
                        self.finish()
                        return
                    self.state = 'crlf'
            elif self.state == 'crlf':
                if len(buf) < 2:
                    return
                del buf[:2]
                self.state = 'size'
            elif self.state == 'trailer':
                end = buf.find(b'\r\n')
                if end < 0:
                    return
                del buf[:end + 2]
                if end == 0:
                    self.finish()
                    return
            else:                                   # 'eof': the body runs until the connection closes
                if buf:
                    piece = bytes(buf)
                    del buf[:]
                    self.feed(piece)
                return

    def feed(self, data):
        """Decoded body bytes: complete SSE events counted."""
        if b'\r' in data:
            data = data.replace(b'\r\n', b'\n')
        events = (self.sse + data).split(b'\n\n')
        self.sse = events.pop()
        record = self.record
        for event in events:
            if CONTENT.search(event):
                record.events += 1
                if record.first is None:
                    record.first = time.perf_counter()
            elif event.startswith(b'data: [DONE]') or event.startswith(b'data:[DONE]'):
                record.done = True
            elif event and not event.startswith(b':') and b'"finish_reason"' not in event and b'"role"' not in event:
                record.last = event[:300].decode('utf-8', 'replace')   # not a chunk of ours: an error event
        if self.state == 'body' and self.record.error and self.sse:
            record.last = self.sse[:300].decode('utf-8', 'replace')


def request_bytes(port, key, tokens):
    body = json.dumps({'model': MODEL, 'messages': [{'role': 'user', 'content': 'Count to %d.' % tokens}],
                       'max_tokens': tokens, 'stream': True}).encode()
    return ('POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAuthorization: Bearer %s\r\n'
            'Content-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: %d\r\n\r\n' % (
                port, key, len(body))).encode() + body


async def connect(port):
    loop = asyncio.get_running_loop()
    return (await asyncio.wait_for(loop.create_connection(Client, '127.0.0.1', port), 10))[1]


class Window(object):
    """The load's window: its end (perf_counter), the connections with a request running, whether it is over."""

    def __init__(self, seconds):
        self.started = time.perf_counter()
        self.end = self.started + seconds
        self.live, self.over = set(), False

    def cut(self):
        """The window's end: the streams still running are cut (their events so far counted), no request after."""
        self.over = True
        for conn in list(self.live):
            conn.finish(cut=True)
            conn.transport.abort()


async def one_client(port, key, tokens, window, conn, records, limit=None):
    """Streaming requests back to back over one kept-alive connection CONN (a new one after one closes) until the
    WINDOW is over or LIMIT requests; each one's Record in RECORDS."""
    raw = request_bytes(port, key, tokens)
    while (limit is None or limit > 0) and not window.over:
        if conn is None or conn.closed:
            try:
                conn = await connect(port)
            except (OSError, asyncio.TimeoutError) as error:
                record = Record()
                record.error = 'connect: %s' % (type(error).__name__,)
                records.append(record)
                await asyncio.sleep(0.2)
                continue
        window.live.add(conn)
        record = await conn.request(raw)
        window.live.discard(conn)
        records.append(record)
        limit = None if limit is None else limit - 1
        if record.error or not record.done or not conn.keep:
            conn.transport.close()
            conn = None
            if record.error and not record.cut:
                await asyncio.sleep(0.1)
    if conn is not None:
        conn.transport.close()


async def load(spec, go=None):
    """SPEC's clients ({'ports', 'key', 'clients', 'tokens', 'seconds', 'limit'}) at once, client i to port i mod n;
    GO: awaited between connecting and the window's start. (records, the window's length in s, the CPU s this
    process used in it)."""
    ports, clients = spec['ports'], spec['clients']
    conns = [await connect(ports[i % len(ports)]) for i in range(clients)]
    if go is not None:
        await go()
    cpu = sum(os.times()[:2])
    window = Window(spec['seconds'])
    loop = asyncio.get_running_loop()
    timer = loop.call_at(loop.time() + spec['seconds'], window.cut)
    records = []
    await asyncio.gather(*[one_client(ports[i % len(ports)], spec['key'], spec['tokens'], window, conns[i], records,
                                      spec.get('limit')) for i in range(clients)])
    timer.cancel()
    return records, min(time.perf_counter(), window.end) - window.started, sum(os.times()[:2]) - cpu


def loadgen_main(spec):
    """The load generator process: connects, says 'ready', starts at a line on stdin, prints its records (JSON)."""
    async def go():
        sys.stdout.write('ready\n')
        sys.stdout.flush()
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    records, took, cpu = asyncio.run(load(spec, go))
    sys.stdout.write(json.dumps({'rows': [r.row() for r in records], 'seconds': took, 'cpu': cpu}) + '\n')
    return 0


# ---------------------------------------------------------------------------------------------------------------------
# The run


def tree_cpu(root):
    """CPU seconds (utime+stime) of ROOT and its descendants alive now, from /proc."""
    parents, times = {}, {}
    for name in os.listdir('/proc'):
        if not name.isdigit():
            continue
        try:
            with open('/proc/%s/stat' % name, encoding='utf-8') as handle:
                fields = handle.read().rsplit(')', 1)[1].split()
        except (OSError, IndexError):
            continue
        parents[int(name)] = int(fields[1])
        times[int(name)] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    tree, total = {root}, 0.0
    for _pass in range(8):
        tree |= {pid for pid, parent in parents.items() if parent in tree}
    for pid in tree:
        total += times.get(pid, 0.0)
    return total


class Target(object):
    """A target of the load: its port(s), key, and the process whose tree's CPU is counted (None: direct)."""

    def __init__(self, name, ports, key, proc=None, log=None):
        self.name, self.ports, self.key, self.proc, self.log = name, ports, key, proc, log


def launcher_accepts_glm(tmp):
    """Whether the launcher's argparse takes --proxy glm (the front door being written now)."""
    argv = [ROUTER_PYTHON, LAUNCHER, '--key-file', str(tmp / 'key'), '--replicas-dir', str(tmp),
            '--endpoint-file', str(tmp / 'probe'), '--proxy', 'glm', '--help']
    return subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False).returncode == 0


def start_front(tmp, front, key_file, registry, replica_urls):
    """The launcher with FRONT (smg: the gateway alone; litellm or glm: --proxy FRONT, the team keys) in a work dir
    of its own, the replicas announced; the Target (its key: the launcher's for smg, the team's behind a proxy)."""
    work = tmp / front
    folder = work / 'replicas'
    folder.mkdir(parents=True)
    for index, url in enumerate(replica_urls):
        (folder / ('r%d.url' % index)).write_text(url + '\n', encoding='utf-8')
    proxied = []
    if front in ('litellm', 'glm'):
        proxied = ['--proxy', front, '--gateway-keys', str(registry), '--usage-file', str(work / 'usage.json')]
    if front == 'litellm':
        proxied += ['--gateway-config', str(work / 'gateway-config.json')]
    port = free_port()
    log = work / 'launcher.log'
    with open(log, 'w', encoding='utf-8') as handle:
        proc = subprocess.Popen(  # pylint: disable=consider-using-with
            [ROUTER_PYTHON, LAUNCHER, '--key-file', str(key_file), '--replicas-dir', str(folder),
             '--endpoint-file', str(work / 'endpoint'), '--workers-file', str(work / 'workers.json'),
             '--sync-interval', '1', '--advertise', '127.0.0.1'] + proxied
            + ['--', '--host', '127.0.0.1', '--port', str(port), '--policy', 'round_robin',
               '--prometheus-port', str(free_port())] + ROUTER_ARGS,
            stdout=handle, stderr=subprocess.STDOUT)
    return Target(front, [port], KEY if front == 'smg' else TEAM_KEY, proc, log)


def ready(target, replicas, tokens=16):
    """True once TARGET's launcher wrote its endpoint file and lists every replica healthy, and a stream through it came
    whole; False while not yet; RuntimeError when the launcher exited."""
    if target.proc.poll() is not None:
        raise RuntimeError('the launcher exited (%s)' % target.proc.returncode)
    work = target.log.parent
    if not (work / 'endpoint').exists() or not (work / 'workers.json').exists():
        return False
    try:
        rows = json.loads((work / 'workers.json').read_text(encoding='utf-8'))['workers']
    except (ValueError, KeyError, OSError):
        return False
    if len([w for w in rows if w['healthy']]) < replicas:
        return False
    try:
        records = asyncio.run(load({'ports': target.ports, 'key': target.key, 'clients': 1, 'tokens': tokens,
                                    'seconds': 30, 'limit': 1}))[0]
    except (OSError, asyncio.TimeoutError):
        return False
    return bool(records) and records[0].done and records[0].events == tokens and not records[0].error


def start_replicas(tmp, opts, repeat=False):
    ports = [free_port() for _r in range(opts.replicas)]
    argv = [sys.executable, os.path.abspath(__file__), '--serve-replicas', ','.join(map(str, ports)), '--key', KEY,
            '--tokens', str(opts.tokens), '--interval-ms', str(opts.interval_ms), '--stats-file', str(tmp / 'replicas.json')]
    proc = subprocess.Popen(argv + (['--repeat-chunk'] if repeat else []),  # pylint: disable=consider-using-with
                            stdout=subprocess.PIPE, stderr=open(tmp / 'replicas.log', 'w', encoding='utf-8'))  # pylint: disable=consider-using-with
    if proc.stdout.readline().strip() != b'serving':
        raise SystemExit('the fake replicas did not start: %s' % (tmp / 'replicas.log').read_text(encoding='utf-8'))
    return proc, ports


def start_targets(tmp, opts, replica_ports):
    """direct and the launchers of opts.fronts, each ready (one whose launcher refuses or fails: a note, left out)."""
    key_file = tmp / 'key'
    key_file.write_text(KEY + '\n', encoding='utf-8')
    os.chmod(key_file, 0o600)
    registry = tmp / 'gateway-keys.json'
    write_registry(registry, {'bench': team(TEAM_KEY)})
    targets, notes = [Target('direct', replica_ports, KEY)], []
    fronts = [f.strip() for f in opts.fronts.split(',') if f.strip()]
    if 'glm' in fronts and not launcher_accepts_glm(tmp):
        fronts.remove('glm')
        notes.append('glm: left out, the launcher refuses --proxy glm (its argparse has no such choice yet)')
    urls = ['http://127.0.0.1:%d' % port for port in replica_ports]
    started = [start_front(tmp, front, key_file, registry, urls) for front in fronts]
    for target in started:
        try:
            wait_for(lambda target=target: ready(target, len(replica_ports)), 240, 0.5)
            targets.append(target)
        except (AssertionError, RuntimeError) as error:
            notes.append('%s: left out, not ready (%s); its log ends: %s' % (
                target.name, error, ' | '.join(target.log.read_text(encoding='utf-8').splitlines()[-5:])))
            stop(target.proc)
    for note in notes:
        print('note: ' + note)
    return targets, notes


def stop(proc):
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_window(target, clients, seconds, opts, upstream):
    """CLIENTS streaming clients on TARGET for SECONDS, in opts.loadgen_procs processes; the figures."""
    procs = []
    for index in range(opts.loadgen_procs):
        share = clients // opts.loadgen_procs + (1 if index < clients % opts.loadgen_procs else 0)
        if not share:
            continue
        ports = target.ports[index % len(target.ports):] + target.ports[:index % len(target.ports)]
        spec = {'ports': ports, 'key': target.key, 'clients': share, 'tokens': opts.tokens, 'seconds': seconds}
        procs.append(subprocess.Popen(  # pylint: disable=consider-using-with
            [sys.executable, os.path.abspath(__file__), '--loadgen', json.dumps(spec)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE))
    for proc in procs:
        if proc.stdout.readline().strip() != b'ready':
            raise SystemExit('a load generator did not connect to %s' % target.name)
    before = (tree_cpu(target.proc.pid) if target.proc else None, tree_cpu(upstream.pid))
    for proc in procs:
        proc.stdin.write(b'go\n')
        proc.stdin.flush()
    try:
        outs = [json.loads(proc.stdout.readline()) for proc in procs]
    except ValueError as error:
        raise SystemExit('a load generator failed on %s' % target.name) from error
    after = (tree_cpu(target.proc.pid) if target.proc else None, tree_cpu(upstream.pid))
    for proc in procs:
        proc.wait()
    rows = [row for out in outs for row in out['rows']]
    took = max(out['seconds'] for out in outs)
    return figures(rows, took, opts.tokens, {
        'target': None if before[0] is None else after[0] - before[0], 'replicas': after[1] - before[1],
        'loadgen': [out['cpu'] for out in outs]})


def percentile(values, fraction):
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * fraction))], 1) if ordered else None


def figures(rows, took, tokens, cpu):
    """The figures of one window: ROWS (Record.row()), its length TOOK (s), TOKENS a stream, CPU (s)."""
    events = sum(r[2] for r in rows)
    whole, errors = [], {}
    for row in rows:
        if row[5]:
            continue                    # still running at the window's end
        if not row[4] and row[3] and row[2] == tokens:
            whole.append(row)
            continue
        kind = row[4] or ('no [DONE] after %d events' % row[2] if not row[3] else '%d of %d events' % (row[2], tokens))
        if row[6]:
            kind += ': ' + row[6][:160]
        errors[kind] = errors.get(kind, 0) + 1
    starts = [r[0] for r in rows if r[0] is not None]
    return {'tokens_per_s': round(events / took, 1), 'tokens': events, 'seconds': round(took, 3), 'streams': len(whole),
            'cut_at_end': len([r for r in rows if r[5]]), 'errors': sum(errors.values()), 'error_kinds': errors,
            'stream_p50_ms': percentile([r[1] for r in whole], 0.5),
            'first_token_p50_ms': percentile(starts, 0.5), 'first_token_p99_ms': percentile(starts, 0.99),
            'cpu_s': cpu, 'cpu_s_per_1k_tokens': per_1k(cpu['target'], events),
            'replicas_cpu_s_per_1k_tokens': per_1k(cpu['replicas'], events),
            'loadgen_cpu_pct': [round(c / took * 100, 1) for c in cpu['loadgen']]}


def per_1k(seconds, tokens):
    return None if seconds is None or not tokens else round(seconds / tokens * 1000, 4)


def merge(windows):
    """One target's figures over the rounds of one concurrency: the counts summed, the other figures the mean of the
    rounds'."""
    if len(windows) == 1:
        return windows[0]
    out = dict(windows[0])
    tokens, seconds = sum(w['tokens'] for w in windows), sum(w['seconds'] for w in windows)
    out.update(tokens=tokens, seconds=seconds, tokens_per_s=round(tokens / seconds, 1),
               streams=sum(w['streams'] for w in windows), errors=sum(w['errors'] for w in windows),
               cut_at_end=sum(w['cut_at_end'] for w in windows), error_kinds={},
               loadgen_cpu_pct=[max(c) for c in zip(*[w['loadgen_cpu_pct'] for w in windows])])
    for window in windows:
        for kind, count in window['error_kinds'].items():
            out['error_kinds'][kind] = out['error_kinds'].get(kind, 0) + count
    for name in ('stream_p50_ms', 'first_token_p50_ms', 'first_token_p99_ms', 'cpu_s_per_1k_tokens',
                 'replicas_cpu_s_per_1k_tokens'):
        values = [w[name] for w in windows if w[name] is not None]
        out[name] = round(statistics.mean(values), 4) if values else None
    return out


def table(clients, result, opts):
    smg = (result.get('smg') or {}).get('tokens_per_s')
    ideal = clients * 1000.0 / opts.interval_ms
    print('\n## %d streams at once, %d s, %d tokens a stream every %g ms (at most %.0f tokens/s)' % (
        clients, opts.seconds, opts.tokens, opts.interval_ms, ideal))
    print('| target | tokens/s | % of smg | stream p50 | first token p50 / p99 | errors | CPU s per 1k tokens '
          '| streams | load gen CPU | replicas CPU s per 1k |')
    print('|---|---|---|---|---|---|---|---|---|---|')
    for name, f in result.items():
        stream = ms(f['stream_p50_ms']) if f['streams'] or not f['cut_at_end'] else '> %g s' % opts.seconds
        print('| %s | %.0f | %s | %s | %s / %s | %d | %s | %d | %s | %s |' % (
            name, f['tokens_per_s'], '%.0f %%' % (f['tokens_per_s'] / smg * 100) if smg else '-',
            stream, ms(f['first_token_p50_ms']), ms(f['first_token_p99_ms']), f['errors'],
            '-' if f['cpu_s_per_1k_tokens'] is None else '%.3f' % f['cpu_s_per_1k_tokens'], f['streams'],
            ' + '.join('%.0f %%' % c for c in f['loadgen_cpu_pct']),
            '-' if f['replicas_cpu_s_per_1k_tokens'] is None else '%.3f' % f['replicas_cpu_s_per_1k_tokens']))
    for name, f in result.items():
        for kind, count in sorted(f['error_kinds'].items()):
            print('  %s: %d x %s' % (name, count, kind))
        if max(f['loadgen_cpu_pct']) > 85:
            print('  %s: the load generator used %.0f %% of a core: it may be the limit (--loadgen-procs 2)' % (
                name, max(f['loadgen_cpu_pct'])))


def ms(value):
    return '-' if value is None else '%.0f ms' % value if value >= 100 else '%.1f ms' % value


def measure(targets, opts):
    """The rounds: per concurrency (and --rounds times), each target in turn, the order rotated every round."""
    out, turn = {}, 0
    for clients in [int(c) for c in opts.streams.split(',')]:
        windows = {}
        for _round in range(opts.rounds):
            order = targets[turn % len(targets):] + targets[:turn % len(targets)]
            turn += 1
            for target in order:
                windows.setdefault(target.name, []).append(run_window(target, clients, opts.seconds, opts, opts.upstream))
        result = {t.name: merge(windows[t.name]) for t in targets}
        table(clients, result, opts)
        out[str(clients)] = {'figures': result, 'windows': windows}
    return out


def check_repeat(targets, opts):
    """One stream of 1,000 identical chunks through each target at once: did all 1,000 come, and [DONE]?"""
    async def each():
        return await asyncio.gather(*[load({'ports': t.ports, 'key': t.key, 'clients': 1, 'tokens': 1000,
                                            'seconds': 1000 * opts.interval_ms / 1000.0 + 60, 'limit': 1})
                                      for t in targets])
    out = {}
    print('\n## 1,000 identical chunks ("tok") in one stream, through each target')
    print('| target | content events | [DONE] | whole | error or last event |')
    print('|---|---|---|---|---|')
    for target, (records, _took, _cpu) in zip(targets, asyncio.run(each())):
        record = records[0]
        whole = record.done and record.events == 1000 and not record.error
        out[target.name] = {'events': record.events, 'done': record.done, 'whole': whole, 'error': record.error,
                            'last': record.last}
        print('| %s | %d | %s | %s | %s |' % (
            target.name, record.events, 'yes' if record.done else 'no', 'yes' if whole else 'NO',
            (record.error or record.last or '-')[:200]))
    return out


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--fronts', default=','.join(FRONTS),
                        help='the front doors besides direct (default smg,litellm,glm: glm left out when refused)')
    parser.add_argument('--streams', default='16,64,256', help='the concurrencies, comma-separated (default 16,64,256)')
    parser.add_argument('--seconds', type=float, default=20, help='each window (default 20)')
    parser.add_argument('--tokens', type=int, default=256, help='content chunks a stream (default 256)')
    parser.add_argument('--interval-ms', type=float, default=10, help='between two chunks of a stream (default 10)')
    parser.add_argument('--replicas', type=int, default=2, help='fake replicas (default 2)')
    parser.add_argument('--rounds', type=int, default=1, help='windows per target and concurrency (default 1)')
    parser.add_argument('--loadgen-procs', type=int, default=1, help='load generator processes (default 1)')
    parser.add_argument('--repeat-chunk', action='store_true', help='every content chunk the same ("tok")')
    parser.add_argument('--check-repeat', action='store_true',
                        help='instead of the load: 1,000 identical chunks in one stream through each target')
    parser.add_argument('--json', metavar='FILE', help='also write every figure as JSON')
    parser.add_argument('--keep', action='store_true', help='keep the work dir (logs) and say where it is')
    parser.add_argument('--serve-replicas', dest='ports', help=argparse.SUPPRESS)
    parser.add_argument('--key', default=KEY, help=argparse.SUPPRESS)
    parser.add_argument('--stats-file', help=argparse.SUPPRESS)
    parser.add_argument('--loadgen', metavar='SPEC', help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main():
    opts = parse_args()
    if opts.ports:
        opts.ports = [int(p) for p in opts.ports.split(',')]
        asyncio.run(serve_replicas(opts))
        return 0
    if opts.loadgen:
        return loadgen_main(json.loads(opts.loadgen))
    if not os.access(ROUTER_PYTHON, os.X_OK):
        raise SystemExit('no %s: make .venv-router/.installed' % ROUTER_PYTHON)
    tmp = Path(tempfile.mkdtemp(prefix='bench-front-'))
    opts.upstream, replica_ports = start_replicas(tmp, opts, repeat=opts.repeat_chunk or opts.check_repeat)
    targets = []
    try:
        targets, notes = start_targets(tmp, opts, replica_ports)
        print('\n# Front doors: %s, in front of %d fake SGLang replicas (one asyncio process), one run; '
              'load: %d asyncio process(es); this machine: %d cores' % (
                  ', '.join(t.name for t in targets), opts.replicas, opts.loadgen_procs, os.cpu_count()))
        result = {'options': {k: v for k, v in vars(opts).items()
                              if k not in ('upstream', 'ports', 'key', 'loadgen', 'stats_file')},
                  'notes': notes}
        if opts.check_repeat:
            result['check_repeat'] = check_repeat(targets, opts)
        else:
            for target in targets:      # warm-up: the first requests through each (connections, LiteLLM's caches)
                run_window(target, 8, 2, opts, opts.upstream)
            result['streams'] = measure(targets, opts)
    finally:
        for target in targets:
            stop(target.proc)
        stop(opts.upstream)
    result['replica_requests'] = json.loads((tmp / 'replicas.json').read_text(encoding='utf-8'))
    if opts.json:
        with open(opts.json, 'w', encoding='utf-8') as handle:
            json.dump(result, handle, indent=1)
    if opts.keep:
        print('\nwork dir (launcher logs): %s' % tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
