# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The hold in front of the router (scale to zero: server_replicas=0 with server_replicas_max; docs/replicas.md).
Standard library only; glm_router.py (beside this file) starts it in a thread of its own process.

Why it exists: with no worker, SGLang's Model Gateway answers at once, 404 ``model_not_found`` when none is
registered, 503 ``no_available_workers`` when none is usable (smg-project/smg ``routers/http/router.rs:517-546``,
measured with smg 1.13.0: docs/dev/autoscaling.md); nothing in it holds a request until a worker comes. So while no
replica serves, this process keeps the router's public address and port itself:

- A POST (a request for work: a completion, a chat, a generate) that comes while no replica serves, with a key that
  may use the service (the gateway's one key; behind LiteLLM's proxy, one of the teams' keys of its registry: 401
  else, and nothing is woken), is held: the router launcher is woken (``wait``) and its autoscaler submits the first
  replica at once; the request goes on to the router as soon as a replica serves, or, after ``bound`` seconds, is
  answered ``503`` with ``Retry-After`` and a JSON error that says why (the service was scaled to zero and is
  loading). Past ``most_held`` held requests, the next ones get that answer at once.
- ``GET /v1/models`` while none serves is answered by the hold itself, with the key checked as the router checks it
  (``Authorization: Bearer KEY``, compared in constant time; 401 else): the router would answer 503
  ``no_models_available`` (smg 1.13.0, measured), and a client that lists the models before it asks anything (a chat
  UI) would never send the request that wakes the service. (With the teams' keys, behind LiteLLM's proxy, the hold
  knows no team key: it passes the listing on.)
- Anything else (/health, /liveness, /metrics...) goes to the router, and does not wake the service: a status probe
  or a health check must not start a GPU node. While none serves, such a request is passed on with ``Connection:
  close`` (the router answers it and closes), so that a client's next request on a kept-alive connection comes to the
  hold again instead of straight to a router with no worker.
- While replicas serve, every connection is relayed as bytes (one read and one write per chunk: measured against the
  router's own port in docs/benchmarks.md). When the last replica leaves (the service goes back to zero), the
  connections whose last bytes were an answer ``IDLE_CLOSE`` s ago or more are closed (a request still running has
  sent nothing back yet: it is left alone), so that a client's kept-alive connection does not send its next request
  straight to a router with no worker (clients open a new one, which is held). ``take_traffic`` tells the launcher
  whether work came through (the autoscaler goes to zero only after none for its whole window: the replicas'
  gauges, sampled each round, miss short requests between two samples).
- HTTPS: with a certificate, the hold serves TLS with it (ALPN http/1.1) and the router behind it plain HTTP on the
  node's loopback, as behind LiteLLM's proxy (glm_router.py ``start_router``): the hold must read the request line
  and may have to answer itself.

What it reads of HTTP: the request line (``METHOD TARGET VERSION``, RFC 9112 section 3), for the method, and, while
no replica serves, the header fields (section 5), for the key and the Connection field; the bytes are passed on
unchanged, what was read first (but the Connection field at zero). It answers itself only with the held requests'
503, 401 to a POST at zero without a usable key, the model list at zero (each with its own ``Connection: close``,
the request's unread body read and dropped for up to a second first, so that the close does not reset the
connection before the client read the answer), and with 400 to a connection whose first line is not a request line
within ``HEAD_TIMEOUT`` s. Not done: a client that goes away while its request is held is noticed only when the
request is passed on (the router then answers nobody); one client may hold up to ``most_held`` connections.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import asyncio
import hmac
import json
import resource
import ssl
import threading
import time

#: Seconds a connection may take to send its request line.
HEAD_TIMEOUT = 30.0
#: Seconds without a byte after which a relayed connection is closed when the service goes back to zero.
IDLE_CLOSE = 5.0
#: The longest request line read (RFC 9112 section 3: servers should take at least 8000 octets).
HEAD_LIMIT = 16384
CHUNK = 65536
#: The listening socket's backlog (the kernel caps it at net.core.somaxconn, 4096 by default since Linux 5.4).
BACKLOG = 4096


def answer(status, reason, body, retry_after=None):
    """The bytes of a whole HTTP/1.1 response with a JSON BODY (a dict), after which the connection closes."""
    data = json.dumps(body).encode('utf-8')
    head = ['HTTP/1.1 %d %s' % (status, reason), 'Content-Type: application/json',
            'Content-Length: %d' % len(data), 'Connection: close']
    if retry_after is not None:
        head.append('Retry-After: %d' % retry_after)
    return ('\r\n'.join(head) + '\r\n\r\n').encode('ascii') + data


def held_too_long(bound, retry_after):
    """The answer to a request held BOUND seconds without a replica (or refused at once: too many held)."""
    return answer(503, 'Service Unavailable', {'error': {
        'message': 'the service was scaled to zero and its first replica is loading; no replica served within %d s: '
                   'try again in %d s' % (bound, retry_after),
        'type': 'service_unavailable', 'code': 'scaled_to_zero'}}, retry_after=retry_after)


class Hold(object):
    """The public address in front of the router. ``start`` binds it (errors raised in the caller's thread), then the
    launcher calls ``set_serving`` after each round and ``wait`` between rounds; ``take_demand`` says how many
    requests came (and wait) while none served, ``take_traffic`` whether any work came through since the last call.
    KEY (the gateway's one key) or CHECK (a callable: the key as sent -> whether it is one of the teams', behind
    LiteLLM's proxy) decides who may wake the service."""

    def __init__(self, host, port, upstream, bound, log, tls=None, retry_after=30, most_held=256, model=None, key=None,
                 check=None):
        self.host, self.port, self.upstream = host, int(port), upstream    # upstream: (host, port) of the router
        self.bound, self.log, self.retry_after, self.most_held = float(bound), log, int(retry_after), int(most_held)
        self.tls = tls                  # (certificate, key) or None
        self.model, self.key = model, key  # the model it lists at zero, for this key (None: the router answers)
        self.check = check
        self.loop = None
        self.serving = 0
        self.held = 0                   # requests held now
        self.came = 0                   # requests held since the last take_demand
        self.first_held = None          # when the first of the requests held now came
        self.traffic = False            # work came through since the last take_traffic
        self.stopping = False
        self.counts = {'held': 0, 'released': 0, 'refused': 0, 'relayed': 0, 'unauthorized': 0}
        self.woken = threading.Event()
        self._event = None              # set while a replica serves, or once the hold stops (the loop's)
        self._relays = set()            # the relayed connections (_Relay)
        self._lock = threading.Lock()
        self._server = None

    # the launcher's side (its own thread)

    def start(self):
        """Binds the public port and serves in a thread of its own; raises what binding raised. The soft limit of
        open files goes up to the hard one (two descriptors per relayed connection)."""
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        ready = threading.Event()
        failed = []

        def run():
            self.loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self.loop)
            try:
                self.loop.run_until_complete(self._bind())
            except BaseException as error:  # pylint: disable=broad-except
                failed.append(error)
                ready.set()
                return
            ready.set()
            self.loop.run_forever()
        thread = threading.Thread(target=run, name='glm-hold', daemon=True)
        thread.start()
        ready.wait()
        if failed:
            raise failed[0]
        return self

    def set_serving(self, serving):
        """The replicas that serve now (the router has them healthy, and they are not leaving)."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self._set_serving, int(serving))

    def stop(self, timeout=0.0):
        """No new connection (a handover, the end of the service), the requests held answered 503 at once; then at
        most TIMEOUT seconds for the relayed connections to end (the router behind finishes them as it stops)."""
        if self.loop is None or self._server is None:
            return
        self.loop.call_soon_threadsafe(self._stop)
        deadline = time.monotonic() + timeout
        while self._relays and time.monotonic() < deadline:
            time.sleep(0.1)

    def wait(self, timeout):
        """Sleeps TIMEOUT seconds, or less when a request came while none served (the launcher acts at once)."""
        self.woken.wait(timeout)
        self.woken.clear()

    def take_demand(self):
        """The requests that wait now, or came since the last call, while no replica served."""
        with self._lock:
            came, self.came = self.came, 0
            return max(came, self.held)

    def take_traffic(self):
        """Whether work came through since the last call: a POST, or bytes a client sent after its first request
        line (a body, or a further request on a kept-alive connection); a GET alone (a probe) is not work."""
        traffic, self.traffic = self.traffic, False
        return traffic

    # the hold's own thread

    async def _bind(self):
        self._event = asyncio.Event()
        context = None
        if self.tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self.tls[0], self.tls[1])
            context.set_alpn_protocols(['http/1.1'])
        # a backlog of BACKLOG (asyncio's default is 100: a burst of more connections than that waits for the
        # client's SYN to be sent again, a second later)
        # a TLS handshake that does not end within HEAD_TIMEOUT is dropped (asyncio's default waits 60 s)
        self._server = await asyncio.start_server(self._handle, self.host, self.port, ssl=context, limit=HEAD_LIMIT,
                                                  reuse_address=True, backlog=BACKLOG,
                                                  ssl_handshake_timeout=HEAD_TIMEOUT if context else None)
        asyncio.ensure_future(self._close_idle())

    def _stop(self):
        self.stopping = True
        self._server.close()
        self._event.set()               # the held requests see self.stopping

    def _set_serving(self, serving):
        before, self.serving = self.serving, serving
        if self.stopping:
            return
        if serving:
            if not before and self.held:
                self.log('a replica serves: the %d request(s) held go on, the first after %d s' % (
                    self.held, time.monotonic() - self.first_held))
            self._event.set()
        else:
            self._event.clear()
            if before:
                self._close_idle_now()

    def _close_idle_now(self):
        """The relayed connections whose last bytes were an answer, IDLE_CLOSE s ago or more (kept alive, not waiting
        for one: a request still running has sent nothing back, or is streaming)."""
        now = time.monotonic()
        for relay in list(self._relays):
            if relay.answered and now - relay.last >= IDLE_CLOSE:
                relay.close()

    async def _close_idle(self):
        while True:
            await asyncio.sleep(IDLE_CLOSE)
            if not self.serving:
                self._close_idle_now()

    async def _handle(self, reader, writer):
        try:
            head = await asyncio.wait_for(reader.readuntil(b'\n'), HEAD_TIMEOUT)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ssl.SSLError):
            head = None
        parts = head.split(b' ') if head else []
        if len(parts) != 3 or not parts[2].startswith(b'HTTP/'):
            await self._finish(writer, answer(400, 'Bad Request', {'error': {'message': 'not an HTTP/1.1 request',
                                                                             'type': 'invalid_request_error'}})
                               if head else None)
            return
        if parts[0] == b'POST':
            self.traffic = True
        # the header fields too (what comes after them on the connection, a body or a further request, is work)
        fields = await self._fields(reader)
        if fields is None:
            await self._finish(writer, None)
            return
        if self._event.is_set() and not self.stopping:
            await self._relay(reader, writer, head + fields)
            return
        await self._at_zero(reader, writer, head, parts, fields)

    async def _at_zero(self, reader, writer, head, parts, fields):
        """A request while no replica serves: a POST with a key held, else answered 401; the model listing answered
        here (with the gateway's one key); anything else passed on, one request on that connection (``Connection:
        close``), so that the next one on it is read here again."""
        if parts[0] == b'POST':
            if not self._authorized(fields):
                self.counts['unauthorized'] += 1
                await self._finish(writer, unauthorized(), reader)
                return
            if not await self._hold():
                await self._finish(writer, held_too_long(self.bound, self.retry_after), reader)
                return
            await self._relay(reader, writer, head + fields)
            return
        if self.key and parts[0] == b'GET' and parts[1].split(b'?')[0] in (b'/v1/models', b'/v1/models/'):
            await self._finish(writer, self._models(fields), reader)
            return
        await self._relay(reader, writer, head + closing(fields))

    @staticmethod
    async def _fields(reader):
        """The header fields, up to and with the empty line that ends them; None when they do not come whole."""
        fields = b''
        try:
            while len(fields) < HEAD_LIMIT:
                line = await asyncio.wait_for(reader.readuntil(b'\n'), HEAD_TIMEOUT)
                fields += line
                if line in (b'\r\n', b'\n'):
                    return fields
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ssl.SSLError):
            pass
        return None

    def _authorized(self, fields):
        """Whether FIELDS carry a key that may use the service: the gateway's one key, or one of the teams' (CHECK)."""
        token = bearer(fields)
        if self.key:
            return hmac.compare_digest(token, self.key.encode('utf-8'))
        if self.check is not None:
            try:
                return bool(token) and bool(self.check(token.decode('utf-8', 'replace')))
            except Exception:  # pylint: disable=broad-except
                return False        # a registry that cannot be read fails closed, as the proxy does
        return True

    def _models(self, fields):
        """The answer to ``GET /v1/models`` while no replica serves: the model, for the key, as SGLang lists it
        (``{"object": "list", "data": [{"id", "object": "model", ...}]}``)."""
        if not self._authorized(fields):
            return unauthorized()
        return answer(200, 'OK', {'object': 'list', 'data': [{
            'id': self.model, 'object': 'model', 'owned_by': 'glm.serve', 'root': self.model}]})

    async def _hold(self):
        """Waits for a replica (at most the bound); whether one serves."""
        with self._lock:
            if self.held >= self.most_held:
                self.counts['refused'] += 1
                return False
            self.held += 1
            self.came += 1
            self.counts['held'] += 1
            first = self.held == 1
            if first:
                self.first_held = time.monotonic()
        if first:                       # the launcher acts at once; later ones find it awake
            self.log('a request came while no replica serves: it waits (at most %d s) while the first one starts'
                     % self.bound)
            self.woken.set()
        try:
            await asyncio.wait_for(self._event.wait(), self.bound)
        except asyncio.TimeoutError:
            with self._lock:
                self.counts['refused'] += 1
            return False
        finally:
            with self._lock:
                self.held -= 1
        if self.stopping:
            return False
        with self._lock:
            self.counts['released'] += 1
        return True

    async def _relay(self, reader, writer, head):
        """The connection passed on to the router, HEAD (what was read of it already) first. It ends when the
        router's side ends (a client that half-closes after its request still gets the answer)."""
        try:
            up_reader, up_writer = await asyncio.open_connection(self.upstream[0], self.upstream[1], limit=CHUNK)
        except OSError as error:
            await self._finish(writer, answer(502, 'Bad Gateway', {'error': {
                'message': 'the router behind this address does not answer: %s' % error, 'type': 'bad_gateway'}}), reader)
            return
        self.counts['relayed'] += 1
        entry = _Relay(writer, up_writer)
        self._relays.add(entry)
        up_writer.write(head)
        asked = asyncio.ensure_future(self._pipe(reader, up_writer, entry, asking=True))
        try:
            await self._pipe(up_reader, writer, entry)
        finally:
            asked.cancel()
            self._relays.discard(entry)
            entry.close()

    async def _pipe(self, source, sink, entry, asking=False):
        """Bytes from SOURCE to SINK until SOURCE ends; ASKING (the client's side): then the router's side is
        half-closed (it still answers), and the bytes count as work (take_traffic)."""
        try:
            while True:
                data = await source.read(CHUNK)
                if not data:
                    break
                entry.last, entry.answered = time.monotonic(), not asking
                if asking:
                    self.traffic = True
                sink.write(data)
                await sink.drain()
            if asking and sink.can_write_eof():
                sink.write_eof()
        except (ConnectionError, OSError, ssl.SSLError, RuntimeError):
            entry.close()

    @staticmethod
    async def _finish(writer, data, reader=None):
        """DATA (a whole answer) written, then the connection closed; what the client still sends (READER: the body
        of a request answered before it was read) read and dropped for a moment first, so that closing with unread
        bytes does not reset the connection before the client has read the answer."""
        try:
            if data:
                writer.write(data)
                await writer.drain()
                if writer.can_write_eof():
                    writer.write_eof()
            if reader is not None:
                deadline = time.monotonic() + 1.0
                while time.monotonic() < deadline:
                    if not await asyncio.wait_for(reader.read(CHUNK), max(0.01, deadline - time.monotonic())):
                        break
        except (ConnectionError, OSError, ssl.SSLError, asyncio.TimeoutError):
            pass
        finally:
            writer.close()


def bearer(fields):
    """The token of the ``Authorization: Bearer`` header field in FIELDS (bytes), or b''."""
    for line in fields.split(b'\n'):
        name, _sep, value = line.partition(b':')
        if name.strip().lower() == b'authorization':
            scheme, _sep, token = value.strip().partition(b' ')
            return token.strip() if scheme.lower() == b'bearer' else b''
    return b''


def closing(fields):
    """FIELDS with ``Connection: close`` in place of any Connection field: the router answers that one request and
    closes, so that the client's next request comes to the hold again."""
    kept = [line for line in fields.split(b'\r\n') if line.split(b':', 1)[0].strip().lower() != b'connection']
    return b'\r\n'.join(kept[:-2] + [b'Connection: close', b'', b''])


def unauthorized():
    return answer(401, 'Unauthorized', {'error': {'message': 'a valid API key is needed (Authorization: Bearer)',
                                                  'type': 'authentication_error'}})


class _Relay(object):
    """A relayed connection: its two writers, when a byte last went through, and whether it went to the client."""

    __slots__ = ('client', 'upstream', 'last', 'answered')

    def __init__(self, client, upstream):
        self.client, self.upstream, self.last, self.answered = client, upstream, time.monotonic(), False

    def close(self):
        self.client.close()
        self.upstream.close()
