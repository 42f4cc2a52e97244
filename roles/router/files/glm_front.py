# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The front door of the router job (router_proxy=glm, the default; docs/security.md, docs/dev/front-door.md): the
router's public address and port, in front of SGLang's Model Gateway (smg) on the node's loopback. Standard library
only; glm_router.py (beside this file) binds it in a thread of its own process before the gateway starts.

Per request (HTTP/1.1, each request of a kept-alive connection read and checked on its own):

- the head within HEAD_DEADLINE s of its first byte (one deadline for the whole head, not per line), at most
  HEAD_LIMIT bytes, one Content-Length or ``Transfer-Encoding: chunked`` (both, or another coding: 400), no folded
  or malformed field (400): what reaches the gateway is framed one way only;
- the key (``Authorization: Bearer``): its SHA-256 looked up in the teams' registry (glm_gateway.Registry, read again
  when the file changes; unreadable: every key refused): 401 else;
- the route as the gateway routes it (the raw path: smg's router matches it undecoded) against ROUTES, the methods
  included: 403 else; ``/v1/models/NAME`` for GET only and a NAME without ``:``; ``%`` in a path is refused (400);
- the body (at most --max-body-mb, Content-Length or chunked; 413 else): a JSON object without REFUSED_FIELDS at
  its top level and with no string value anywhere that starts with ``os.environ/`` or ``oidc/`` (400 naming the
  field): credentials and routing are the service's, not the client's;
- the team's limits (Limits): requests at once (max_parallel, else the team's share of --concurrency), requests a
  minute (rpm), tokens a minute (tpm, counted as answers end): 429 with Retry-After;
- then the request goes to the gateway (glm_front_relay.py) on a kept-alive connection of the door's pool, opened only
  while the gateway's port is held by the gateway the launcher forked (gateway_ours), the head without the hop-by-hop
  fields and the client's key, with the gateway's own key, and the body's bytes as the client sent them; the answer's
  bytes come back unchanged (a gateway answer without framing is sent chunked to the kept-alive client). Nothing reads
  or alters a stream's events; the request ends at --request-timeout s (the gateway's own, the same setting) or when
  the client goes away (the gateway's connection is closed, and it aborts the request). HTTP/1.1 only (505 else);
  a control character in a request line or a field's value (a bare LF the gateway would take as a line's end), and a
  body on anything but a POST, are refused (400).
- usage per team and UTC day (glm_gateway.UsageBook, the file status and usage read): requests, errors, limited,
  and the tokens the answer's ``usage`` names; a stream without a usage event (the client did not ask
  stream_options.include_usage) is counted as one completion token per content event and a prompt of a token per
  four bytes of the request body (an estimate, said in docs/security.md).

The gateway's Prometheus text (its port on the node's loopback: router.sbatch's --prometheus-host), for the operator's
key only (the team ``default``): ``GET /metrics`` (METRICS_ROUTE), read from that port while the gateway the launcher
forked holds it. The status playbook reads it so; no other team, no one without a key, nor anyone on another node
reads the replicas' addresses and the requests each served.

Bounded: at most --max-connections connections in all and --max-connections-per-peer from one address (503 at once
beyond); an idle kept-alive connection closed after KEEPALIVE_IDLE s; accept errors (EMFILE) logged once per
LOG_EVERY s with their count. Scale to zero (--hold): glm_hold.Hold's waiting, for requests this door has let in
only: a request without a usable key or on another route neither wakes the service nor keeps it up.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import asyncio
import collections
import re
import ssl
import time

import glm_hold
import glm_ports
from glm_front_http import (CHUNK, HEAD_LIMIT, Refused, check_body, check_route, parse_head, response,  # noqa: F401  pylint: disable=unused-import
                            route_allowed, text_response)
from glm_front_relay import Exchange

#: seconds from the first byte of a request's head to its last (the whole head, however slowly it trickles)
HEAD_DEADLINE = 15.0
#: seconds a kept-alive connection may wait for its next request
KEEPALIVE_IDLE = 120.0
#: seconds the body may take once the head is read, and without a byte
BODY_DEADLINE = 120.0
BODY_IDLE = 30.0
_HEX = re.compile(rb'^[0-9A-Fa-f]{1,8}$')
#: the most bytes of a refused request's unread body read (and dropped) before its connection is closed
DRAIN_MOST = 65536
#: connections opened to the gateway at once, at most (its listening backlog is 128: smg 1.13, measured with ss)
CONNECTING = 64
#: kept-alive connections to the gateway: at most POOL_MOST idle, each reused for POOL_IDLE s at most after its last
#: answer (well within any idle timeout of the gateway's: a connection it closed just as a request went is tried anew)
POOL_MOST = 1024
POOL_IDLE = 4.0
#: seconds between two log lines of the same kind of trouble (accept errors)
LOG_EVERY = 10.0
#: the gateway's metrics through the door, for the team of the operator's key only; at most METRICS_MOST bytes
METRICS_ROUTE = ('GET', '/metrics')
OPERATOR = 'default'
METRICS_MOST = 8 * 1048576


class Limits:
    """The teams' limits, counted in this process (one door a router job): requests running (max_parallel, else an
    equal share of what CONCURRENCY leaves to the teams without one), requests in the last minute (rpm), tokens of
    the answers that ended in the last minute (tpm). A refusal is a Refused 429 with the seconds to wait."""

    WINDOW = 60.0

    def __init__(self, concurrency, clock=time.monotonic):
        self.concurrency, self.clock = int(concurrency), clock
        self.running = collections.Counter()
        self.in_flight = 0      # the teams' requests let in and not ended: an int, read from the launcher's thread
        self.requests = collections.defaultdict(collections.deque)     # team -> times
        self.tokens = collections.defaultdict(collections.deque)       # team -> (time, tokens)

    def share(self, team, teams):
        """TEAM's requests at once: its max_parallel, else CONCURRENCY less the others' max_parallel, shared equally
        by the teams without one (at least 1). TEAMS: the registry's entries."""
        found = [t for t in teams if t['team'] == team]
        if found and found[0].get('max_parallel'):
            return found[0]['max_parallel']
        fixed = sum(t.get('max_parallel') or 0 for t in teams)
        free = [t for t in teams if not t.get('max_parallel')]
        return max(1, (self.concurrency - fixed) // max(1, len(free)))

    def _trim(self, queue, now, pair=False):
        while queue and (queue[0][0] if pair else queue[0]) <= now - self.WINDOW:
            queue.popleft()

    def admit(self, entry, teams):
        """Counts a request of ENTRY's team (the registry's {'team', 'rpm', 'tpm', 'max_parallel'}) or raises Refused."""
        team, now = entry['team'], self.clock()
        share = self.share(team, teams)
        if self.running[team] >= share:
            raise Refused(429, 'Too Many Requests', 'team %s has %d requests running, its share: wait for one to end' % (
                team, share), kind='rate_limit_error', code='max_parallel', retry_after=1)
        requests, tokens = self.requests[team], self.tokens[team]
        self._trim(requests, now)
        self._trim(tokens, now, pair=True)
        if entry.get('rpm') and len(requests) >= entry['rpm']:
            raise Refused(429, 'Too Many Requests', 'team %s has made %d requests in the last minute (rpm)' % (
                team, len(requests)), kind='rate_limit_error', code='rpm', retry_after=requests[0] + self.WINDOW - now)
        used = sum(n for _t, n in tokens)
        if entry.get('tpm') and used >= entry['tpm']:
            raise Refused(429, 'Too Many Requests', 'team %s has used %d tokens in the last minute (tpm)' % (team, used),
                          kind='rate_limit_error', code='tpm', retry_after=tokens[0][0] + self.WINDOW - now)
        requests.append(now)
        self.running[team] += 1
        self.in_flight += 1

    def done(self, team, tokens):
        self.running[team] -= 1
        self.in_flight -= 1
        if tokens:
            self.tokens[team].append((self.clock(), tokens))


class Settings:
    """The door's bounds (the launcher's options)."""

    def __init__(self, request_timeout=1800.0, max_body_mb=32, max_connections=4096, max_per_peer=1024,
                 concurrency=256, head_timeout=HEAD_DEADLINE):
        self.request_timeout, self.max_body = float(request_timeout), int(max_body_mb) * 1024 * 1024
        self.max_connections, self.max_per_peer = int(max_connections), int(max_per_peer)
        self.concurrency, self.head_timeout = int(concurrency), float(head_timeout)


class FrontDoor(glm_hold.Hold):  # pylint: disable=too-many-instance-attributes
    """The router's public address: REGISTRY (glm_gateway.Registry), USAGE (glm_gateway.UsageBook), the gateway at
    UPSTREAM (host, port) with UPSTREAM_KEY. BOUND > 0: scale to zero (the hold's waiting); 0: requests always go on."""

    def __init__(self, host, port, upstream, log, registry, usage, upstream_key, model, tls=None, bound=0,
                 settings=None, retry_after=30):
        glm_hold.Hold.__init__(self, host, port, upstream, bound, log, tls=tls, retry_after=retry_after, model=model)
        self.registry, self.usage, self.settings = registry, usage, settings or Settings()
        self.upstream_key = upstream_key.encode('utf-8')
        self.limits = Limits(self.settings.concurrency)
        self.holding = bound > 0
        self.peers = collections.Counter()
        self.pool = []                  # idle kept-alive connections to the gateway (_Upstream), the newest last
        self.gateway_pid = None         # the gateway the launcher forked: nothing is passed on before it is known
        self.metrics_port = None        # the gateway's Prometheus port on the loopback (GET /metrics, the operator's)
        self.said_foreign = False
        self._ours = (-1.0, False)      # (when, whether the gateway's port was its own then)
        self.counts.update({'refused_connections': 0, 'accept_errors': 0, 'loop_errors': 0})
        self._said = {}

    def load(self):
        """The service's load for the autoscaler (glm_scale.Scaler.round): the teams' requests the door let in and
        that have not ended (running or queued in the gateway). Only a request with a team's key counts: another
        user's keyless requests at the door, or /health_generate calls on a replica (which SGLang's own gauges may
        count), move nothing."""
        return self.limits.in_flight

    async def _bind(self):
        # connections being opened to the gateway at once, at most: smg listens with a backlog of 128, and a burst
        # beyond it (a stream's clients all starting again together) waits a second for the SYN to be sent again
        self.connecting = asyncio.Semaphore(CONNECTING)
        await glm_hold.Hold._bind(self)
        if not self.holding:
            self._event.set()
        self.loop.set_exception_handler(self._loop_error)

    def _loop_error(self, loop, context):
        """asyncio's errors (an accept that failed: EMFILE) in the log once per LOG_EVERY s, with their count."""
        kind = type(context.get('exception')).__name__
        self.counts['accept_errors' if 'accept' in context.get('message', '') else 'loop_errors'] += 1
        now = time.monotonic()
        last, count = self._said.get(kind, (0.0, 0))
        if now - last >= LOG_EVERY:
            self.log('front door: %s (%s), %d time(s) since the last line' % (
                context.get('message', 'error'), context.get('exception'), count + 1))
            self._said[kind] = (now, 0)
        else:
            self._said[kind] = (last, count + 1)

    def _stop(self):
        """No new connection; the kept-alive ones that wait for a next request closed now (their clients connect
        again: through the relay, to the successor), the ones with a request running after its answer."""
        glm_hold.Hold._stop(self)
        for conn in list(self._relays):
            if conn.answered:
                conn.close()
        for upstream in self.pool:
            upstream.transport.close()
        self.pool = []

    def _close_idle_now(self):
        if self.holding:
            glm_hold.Hold._close_idle_now(self)

    def _set_serving(self, serving):
        if self.holding:
            glm_hold.Hold._set_serving(self, serving)
        else:
            self.serving = serving

    async def _handle(self, reader, writer):
        peer = (writer.get_extra_info('peername') or ('?',))[0]
        if len(self._relays) >= self.settings.max_connections or self.peers[peer] >= self.settings.max_per_peer:
            self.counts['refused_connections'] += 1
            await self._finish(writer, Refused(503, 'Service Unavailable', 'too many connections%s; try again' % (
                '' if len(self._relays) >= self.settings.max_connections else ' from %s' % peer),
                kind='service_unavailable', retry_after=1).answer())
            return
        conn = _Conn(reader, writer, self.settings.head_timeout)
        self._relays.add(conn)
        self.peers[peer] += 1
        try:
            while not self.stopping and await self._one(conn):
                pass
        except (ConnectionError, OSError, ssl.SSLError, asyncio.IncompleteReadError):
            pass
        finally:
            self._relays.discard(conn)
            self.peers[peer] -= 1
            if not self.peers[peer]:
                del self.peers[peer]
            conn.close()

    async def _one(self, conn):
        """One request of CONN; whether the connection goes on to its next one. The key and the route are checked
        before the body is read, the team's limits too (a body is read only for a request that may run); only a POST
        may have a body."""
        conn.answered = True
        head = await conn.read_head(first=conn.requests == 0)
        if head is None:
            return False
        conn.answered, conn.requests = False, conn.requests + 1
        parsed, body, work, entry = None, None, False, None
        try:
            parsed = head = parse_head(head)
            entry = self._admit(head)
            if (head.length or head.chunked) and head.method != 'POST':
                raise Refused(400, 'Bad Request', 'only a POST has a body here')
            work = entry is not None and head.method == 'POST'
            if work:                        # work: limited and counted (a listing of the models is neither)
                self._limit(entry)
            body = await conn.read_body(head, self.settings.max_body)
            if work:
                await self._check_body(body)
        except Refused as refused:
            if work and refused.status != 429:
                self.limits.done(entry['team'], 0)
            await conn.refuse(refused, parsed if body is None else None)
            return False
        if entry is None:                   # an open route: the gateway's liveness
            return await self._pass(conn, head, body, None)
        if (head.method, head.path) == METRICS_ROUTE:
            await conn.send(await self._metrics(head.keep_alive))
            return head.keep_alive
        return await self._admitted(conn, head, body, entry, work)

    def _limit(self, entry):
        """The team's limits (Limits.admit); a refusal counted in its usage."""
        try:
            self.limits.admit(entry, self.registry.teams())
        except Refused:
            self.usage.add(entry['team'], requests=1, limited=1)
            raise

    async def _check_body(self, body):
        """check_body, in a thread of the loop's executor for a body over a MiB (its JSON would stop every stream)."""
        if len(body) > 1048576:
            await asyncio.get_event_loop().run_in_executor(None, check_body, body)
        else:
            check_body(body)

    def _admit(self, head):
        """The registry's entry of the request's team; None for an open route; Refused 401/403 else."""
        if not check_route(head):
            return None
        token = glm_hold.bearer(b''.join(b'%s: %s\r\n' % (k, v) for k, v in head.fields if k == b'authorization'))
        entry = self.registry.lookup(token.decode('utf-8', 'replace')) if token else None
        if entry is None:
            self.counts['unauthorized'] += 1
            raise Refused(401, 'Unauthorized', 'a valid API key is needed (Authorization: Bearer KEY)',
                          kind='authentication_error', code='invalid_api_key')
        if (head.method, head.path) == METRICS_ROUTE and self.metrics_port:
            if entry.get('team') != OPERATOR:
                raise Refused(403, 'Forbidden', "the gateway's metrics are the operator's: GET /metrics with the key "
                              'of glm_api_key_file', kind='permission_error', code='route_not_allowed')
            return entry
        if not route_allowed(head.method, head.path):
            raise Refused(403, 'Forbidden', 'this service serves the OpenAI-compatible API only: POST /v1/chat/'
                          'completions, /v1/completions, /v1/responses, /v1/embeddings; GET /v1/models[/NAME]',
                          kind='permission_error', code='route_not_allowed')
        return entry

    async def _admitted(self, conn, head, body, entry, work):
        """A team's request that passed every check: held while no replica serves (scale to zero), then passed on; a
        POST (work) counted in the team's usage."""
        tokens = 0
        try:
            if work:
                self.traffic = True
            if self.holding and not self._event.is_set():
                if not work:
                    if head.path == '/v1/models':
                        await conn.send(self._models_list(head.keep_alive))
                        return head.keep_alive
                elif not await self._hold():
                    await conn.send(glm_hold.held_too_long(self.bound, self.retry_after))
                    return False
            keep, tokens, status = await self._pass(conn, head, body, entry)
            if work:
                self.usage.add(entry['team'], requests=1, errors=int(status is None or status >= 400),
                               prompt_tokens=tokens[0], completion_tokens=tokens[1])
            return keep
        finally:
            if work:
                self.limits.done(entry['team'], sum(tokens) if tokens else 0)

    def _models_list(self, keep_alive):
        return response(200, 'OK', {'object': 'list', 'data': [{
            'id': self.model, 'object': 'model', 'owned_by': 'glm.serve', 'root': self.model}]}, keep_alive=keep_alive)

    async def _pass(self, conn, head, body, entry):
        """HEAD and BODY to the gateway, its answer back; (whether CONN goes on, (prompt, completion) tokens, the
        answer's status or None). An open route: only whether CONN goes on."""
        if not self.gateway_ours():
            await conn.send(Refused(503, 'Service Unavailable', 'the gateway is starting', kind='service_unavailable',
                                    retry_after=5).answer())
            return False if entry is None else (False, (0, 0), 503)
        self.counts['relayed'] += 1
        exchange = Exchange(self, conn, head, body)
        try:
            await asyncio.wait_for(exchange.run(), self.settings.request_timeout)
        except asyncio.TimeoutError:
            exchange.timed_out()
        except (ConnectionError, OSError, ssl.SSLError):
            conn.gone = True                # the client went while its answer was written: counted all the same
        finally:
            exchange.close()
            if exchange.watch is not None:  # ended before the next read (Python 3.12+ checks the reader's waiter)
                await asyncio.gather(exchange.watch, return_exceptions=True)
        keep = exchange.keep and head.keep_alive and not conn.gone
        if entry is None:
            return keep
        return keep, exchange.usage.tokens(len(body)), exchange.status

    async def _metrics(self, keep_alive):
        """The bytes of the answer to the operator's GET /metrics: the gateway's Prometheus text, read from its loopback
        port while the gateway the launcher forked holds it (503 else: another user's listener gets no request)."""
        port = self.metrics_port
        unavailable = Refused(503, 'Service Unavailable', "the gateway's metrics do not answer", kind='service_unavailable',
                              retry_after=5)
        if self.gateway_pid is None or not glm_ports.held_by(self.gateway_pid, glm_ports.listening_sockets(port)):
            return unavailable.answer()
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection('127.0.0.1', port), 5.0)
        except (OSError, asyncio.TimeoutError):
            return unavailable.answer()
        try:
            # HTTP/1.0: the whole answer, then the end of the connection (no chunked framing to read)
            writer.write(b'GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n')
            data = b''
            while len(data) <= METRICS_MOST:
                more = await asyncio.wait_for(reader.read(65536), 10.0)
                if not more:
                    break
                data += more
        except (OSError, asyncio.TimeoutError):
            return unavailable.answer()
        finally:
            writer.close()
        head, _sep, text = data.partition(b'\r\n\r\n')
        if not head.startswith(b'HTTP/1.') or head.split(b' ', 2)[1:2] != [b'200'] or len(data) > METRICS_MOST:
            return unavailable.answer()
        return text_response(text, 'text/plain; version=0.0.4; charset=utf-8', keep_alive)

    listening_sockets = staticmethod(glm_ports.listening_sockets)

    def gateway_ours(self):
        """Whether the gateway's loopback port is listened on by the gateway the launcher forked and nothing else
        (read again at most once a second): before a new connection to it, which carries the gateway's key. Another
        user of the node who binds the port first, or once the gateway has exited, gets nothing."""
        now = time.monotonic()
        if now - self._ours[0] >= 1.0:
            pid = self.gateway_pid
            self._ours = (now, pid is not None and glm_ports.held_by(pid, glm_ports.listening_sockets(self.upstream[1])))
        return self._ours[1] and self.gateway_pid is not None

    def pool_take(self):
        """A kept-alive connection to the gateway, idle less than POOL_IDLE s, or None."""
        now = time.monotonic()
        while self.pool:
            upstream = self.pool.pop()
            if not upstream.transport.is_closing() and now - upstream.idle_since < POOL_IDLE:
                return upstream
            upstream.transport.close()
        return None

    def pool_put(self, upstream):
        now = time.monotonic()
        while self.pool and (now - self.pool[0].idle_since >= POOL_IDLE or self.pool[0].transport.is_closing()):
            self.pool.pop(0).transport.close()      # the oldest first: expired or closed by the gateway
        if len(self.pool) < POOL_MOST and not self.stopping:
            upstream.exchange = upstream.client = None
            self.pool.append(upstream)
        else:
            upstream.transport.close()


class _Conn:
    """A client's connection: its reader with what was read ahead, its writer; ``answered``/``last`` for the hold's
    closing of idle connections at zero."""

    __slots__ = ('reader', 'writer', 'buf', 'gone', 'answered', 'last', 'head_timeout', 'requests')

    def __init__(self, reader, writer, head_timeout=HEAD_DEADLINE):
        self.reader, self.writer, self.buf, self.gone = reader, writer, bytearray(), False
        self.head_timeout, self.requests = head_timeout, 0
        self.answered, self.last = True, time.monotonic()

    async def _more(self, timeout):
        data = await asyncio.wait_for(self.reader.read(CHUNK), max(0.001, timeout))
        if not data:
            raise asyncio.IncompleteReadError(bytes(self.buf), None)
        self.buf += data
        self.last = time.monotonic()

    async def read_head(self, first=False):
        """The next request's head (bytes, with its empty line), or None when the client closed or went quiet; a
        Refused answer is written here for a head too large or too slow. FIRST (a new connection): its head within
        the head's deadline from the accept; a kept-alive one may wait KEEPALIVE_IDLE s for its next request, and
        then has the head's deadline from its first byte. A few empty lines before a request are skipped (RFC 9112
        section 2.2), no more."""
        try:
            deadline = time.monotonic() + self.head_timeout
            if not self.buf:
                await self._more(self.head_timeout if first else KEEPALIVE_IDLE)
                deadline = time.monotonic() + self.head_timeout
            self.answered = False
            for _line in range(4):
                if self.buf[:2] != b'\r\n':
                    break
                del self.buf[:2]
                if not self.buf:
                    await self._more(deadline - time.monotonic())
            while True:
                end = self.buf.find(b'\r\n\r\n')
                if end >= 0:
                    head = bytes(self.buf[:end + 4])
                    del self.buf[:end + 4]
                    return head
                if len(self.buf) > HEAD_LIMIT:
                    await self.send(Refused(431, 'Request Header Fields Too Large', 'the head is over %d bytes'
                                            % HEAD_LIMIT).answer())
                    return None
                left = deadline - time.monotonic()
                if left <= 0:
                    raise asyncio.TimeoutError()
                await self._more(left)
        except asyncio.TimeoutError:
            if self.buf:
                await self.send(Refused(408, 'Request Timeout', 'the request head did not come whole within %g s'
                                        % self.head_timeout).answer())
            return None
        except (asyncio.IncompleteReadError, ConnectionError, OSError, ssl.SSLError):
            return None

    async def read_body(self, head, most):
        """HEAD's body (bytes), at most MOST bytes; Refused 413 beyond, 408 when it comes too slowly, 400 when its
        chunks are malformed."""
        if head.length > most:
            raise Refused(413, 'Content Too Large', 'the body is over %d MiB' % (most // 1048576))
        if head.expect and (head.length or head.chunked):
            await self.send(b'HTTP/1.1 100 Continue\r\n\r\n')
        deadline = time.monotonic() + BODY_DEADLINE
        try:
            if not head.chunked:
                await self._fill(head.length, deadline)
                body = bytes(self.buf[:head.length])
                del self.buf[:head.length]
                return body
            return await self._chunks(most, deadline)
        except asyncio.TimeoutError:
            raise Refused(408, 'Request Timeout', 'the body did not come within %d s' % BODY_DEADLINE)
        except asyncio.IncompleteReadError:
            raise Refused(400, 'Bad Request', 'the connection ended inside the body')

    async def _fill(self, count, deadline):
        while len(self.buf) < count:
            await self._more(min(BODY_IDLE, deadline - time.monotonic()))

    async def _line(self, deadline):
        while True:
            end = self.buf.find(b'\r\n')
            if end >= 0:
                line = bytes(self.buf[:end])
                del self.buf[:end + 2]
                return line
            if len(self.buf) > 4096:
                raise Refused(400, 'Bad Request', 'a chunk size line is too long')
            await self._more(min(BODY_IDLE, deadline - time.monotonic()))

    async def _chunks(self, most, deadline):
        body = bytearray()
        while True:
            size = (await self._line(deadline)).split(b';', 1)[0].strip()
            if not _HEX.match(size):
                raise Refused(400, 'Bad Request', 'a malformed chunk size')
            size = int(size, 16)
            if size == 0:
                while await self._line(deadline):      # trailer fields, dropped
                    pass
                return bytes(body)
            if len(body) + size > most:
                raise Refused(413, 'Content Too Large', 'the body is over %d MiB' % (most // 1048576))
            await self._fill(size + 2, deadline)
            if self.buf[size:size + 2] != b'\r\n':
                raise Refused(400, 'Bad Request', 'a chunk does not end with CRLF')
            body += self.buf[:size]
            del self.buf[:size + 2]

    async def send(self, data):
        self.writer.write(data)
        await self.writer.drain()

    async def refuse(self, refused, head=None):
        """REFUSED's answer, then the connection closed. HEAD: a request whose body was not read: what the client still
        sends of it is read and dropped first, DRAIN_MOST bytes and a second at most (a close with unread bytes resets
        the connection, and a client may lose the answer; a larger body, a flood's, is not read)."""
        try:
            await self.send(refused.answer())
            if head is not None and (head.chunked or head.length):
                left = DRAIN_MOST if head.chunked else min(DRAIN_MOST, head.length - len(self.buf))
                deadline = time.monotonic() + 1.0
                while left > 0 and time.monotonic() < deadline:
                    data = await asyncio.wait_for(self.reader.read(CHUNK), max(0.01, deadline - time.monotonic()))
                    if not data:
                        break
                    left -= len(data)
        except (ConnectionError, OSError, ssl.SSLError, asyncio.TimeoutError):
            pass
        self.writer.close()

    def close(self):
        self.writer.close()
