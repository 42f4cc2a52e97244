# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The front door's exchange with the gateway (glm_front.py, beside this file): a team's request passed on, on a
kept-alive connection of the door's pool or a new one, with the gateway's key and without the hop-by-hop fields and
the client's key; the answer's bytes written to the client as they come (no task wakes up per event of a stream),
its end found from its framing, its usage read as it passes (Usage). Standard library only."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import asyncio
import collections
import re
import ssl
import time

from glm_front_http import CHUNK, HEAD_LIMIT, HOP_BY_HOP, Refused

#: the answer's token counts: OpenAI's chat and completions names, the Responses API's (input, output), an embedding's
#: (prompt only)
_USAGE = {name: re.compile(rb'"' + name.encode() + rb'"\s*:\s*(\d+)')
          for name in ('prompt_tokens', 'completion_tokens', 'input_tokens', 'output_tokens')}


class Usage:
    """What an answer tells of its tokens, from its bytes as they pass: the ``usage`` numbers of a JSON answer or of
    a stream's usage event (the last ones seen in its tail), else, for a stream, its events counted."""

    TAIL = 8192

    def __init__(self, stream, overhead=3):
        self.stream, self.events, self.carry = stream, 0, b''
        self.overhead = overhead        # events without a token: a chat's role and finish events, and [DONE]
        self.last = collections.deque()     # the last pieces of the answer, TAIL bytes or more
        self.kept = 0

    def feed(self, data):
        if self.stream:
            self.events += data.count(b'data: ') + (self.carry + data[:5]).count(b'data: ')
            self.carry = data[-5:]
        self.last.append(data)
        self.kept += len(data)
        while self.kept - len(self.last[0]) >= self.TAIL:
            self.kept -= len(self.last.popleft())

    @property
    def tail(self):
        return b''.join(self.last)[-self.TAIL:]

    def ends_with(self, suffix):
        return self.tail.endswith(suffix)

    def tokens(self, body_length):
        """(prompt tokens, completion tokens): the answer's own, else the estimate (see the module's docstring)."""
        found = {}
        for name, pattern in _USAGE.items():
            values = pattern.findall(self.tail)
            if values:
                found[name] = int(values[-1])
        prompt = found.get('prompt_tokens', found.get('input_tokens'))
        completion = found.get('completion_tokens', found.get('output_tokens'))
        if prompt is not None and (completion is not None or not self.stream):
            return prompt, completion or 0
        if self.stream:
            return body_length // 4, max(0, self.events - self.overhead)
        return body_length // 4, 0


class Exchange:
    """One request passed to the gateway and its answer relayed (see FrontDoor._pass). The gateway's side is a
    protocol (_Upstream) that writes each piece of the answer to the client's transport as it comes: no task wakes up
    per event of a stream."""

    def __init__(self, door, conn, head, body):
        self.door, self.conn, self.head, self.body = door, conn, head, body
        self.keep, self.status, self.sent_head, self.wrap, self.framing = False, None, False, False, None
        self.length, self.up_keeps = 0, False
        self.usage = Usage(False)
        self.up = None
        self.watch = None

    def request(self):
        lines = [b'%s %s HTTP/1.1' % (self.head.method.encode('ascii'), self.head.target.encode('latin-1'))]
        dropped = HOP_BY_HOP | {b'authorization'} | set(
            n.strip().lower() for n in (self.head.field(b'connection') or b'').split(b','))
        lines += [b'%s: %s' % (k, v) for k, v in self.head.fields if k not in dropped]
        lines.append(b'Authorization: Bearer ' + self.door.upstream_key)
        if self.body or self.head.method in ('POST', 'PUT', 'PATCH'):
            lines.append(b'Content-Length: %d' % len(self.body))
        return b'\r\n'.join(lines) + b'\r\n\r\n' + self.body

    async def run(self):
        upstream = await self._send()      # (the connection is self.up from when it is known: _Upstream.start)
        if upstream is None:
            return
        self.watch = asyncio.ensure_future(self._watch_client())
        ended = await upstream.done
        if ended is not True and not self.sent_head and upstream.closed_at_once() and not self.conn.gone:
            # a kept-alive connection the gateway had closed as the request went (no byte back, within a second): it
            # read nothing of it; once again on a new one
            upstream = await self._send(fresh=True)
            if upstream is None:
                return
            ended = await upstream.done
        if not self.sent_head:
            if not self.conn.gone:
                await self.conn.send(Refused(502, 'Bad Gateway', 'the gateway closed the connection without an '
                                             'answer', kind='bad_gateway').answer())
            self.status, self.keep = 502, False
            return
        if self.wrap and ended is None:
            self.conn.writer.write(b'0\r\n\r\n')       # the gateway's answer ended with its connection, cleanly
        elif ended is not True and not (self.framing == 'close' and ended is None):
            self.keep = False           # cut inside the answer: the client must not read a next one from here
        await self.conn.writer.drain()
        self.conn.answered, self.conn.last = True, time.monotonic()

    async def _send(self, fresh=False):
        """The request sent on a kept-alive connection to the gateway (the door's pool), else on a new one; the
        connection's _Upstream, or None when the gateway cannot be reached (answered 502 here)."""
        loop = asyncio.get_event_loop()
        upstream = None if fresh else self.door.pool_take()
        if upstream is not None:
            upstream.start(self, loop.create_future())
            return upstream
        if not self.door.gateway_ours():
            await self.conn.send(Refused(503, 'Service Unavailable', 'the gateway behind this door is not there',
                                         kind='service_unavailable', retry_after=5).answer())
            self.keep, self.status = False, 503
            return None
        upstream = _Upstream()
        upstream.start(self, loop.create_future())
        try:
            async with self.door.connecting:
                await asyncio.wait_for(loop.create_connection(lambda: upstream, self.door.upstream[0],
                                                              self.door.upstream[1]), 10.0)
        except (OSError, asyncio.TimeoutError) as error:
            await self.conn.send(Refused(502, 'Bad Gateway', 'the gateway behind this door does not answer: %s' % (
                type(error).__name__), kind='bad_gateway').answer(keep_alive=self.head.keep_alive))
            self.keep, self.status = True, 502
            return None
        return upstream

    async def _watch_client(self):
        """While the answer runs: what the client sends (a next request) kept for later; its end closes the gateway's
        connection (the gateway aborts the request), as SGLang's own server takes a client's end."""
        conn = self.conn
        try:
            while len(conn.buf) < HEAD_LIMIT:
                data = await conn.reader.read(CHUNK)
                if not data:
                    break
                conn.buf += data
            else:
                return
        except (ConnectionError, OSError, ssl.SSLError):
            pass
        conn.gone = True
        if self.up is not None:
            self.up.close()

    def answer_head(self, data):
        """The client's head for the gateway's answer head DATA (bytes, with its empty line)."""
        lines = data.split(b'\r\n')
        status = lines[0].split(b' ', 2)
        self.status = int(status[1]) if len(status) > 1 and status[1].isdigit() else 502
        fields = [line.partition(b':') for line in lines[1:-2]]
        fields = [(k.strip().lower(), k, v.strip()) for k, _sep, v in fields]
        coding = [v.lower() for k, _n, v in fields if k == b'transfer-encoding']
        length = [v for k, _n, v in fields if k == b'content-length']
        bodiless = self.status in (204, 304)
        self.framing = framing = 'chunked' if coding == [b'chunked'] else 'length' if length or bodiless else 'close'
        self.length = int(length[0]) if length and length[0].isdigit() and not bodiless else 0
        self.up_keeps = framing != 'close' and not [v for k, _n, v in fields if k == b'connection' and b'close' in v.lower()]
        kind = [v for k, _n, v in fields if k == b'content-type']
        self.usage = Usage(bool(kind) and kind[0].startswith(b'text/event-stream'),
                           3 if self.head.path.endswith('/chat/completions') else 1)
        self.keep = self.head.keep_alive and (framing != 'close' or self.head.version == b'HTTP/1.1')
        out = [lines[0]] + [n + b': ' + v for k, n, v in fields
                            if k not in (b'connection', b'keep-alive', b'transfer-encoding') or
                            (k == b'transfer-encoding' and framing == 'chunked')]
        if framing == 'close' and self.keep:
            out.append(b'Transfer-Encoding: chunked')
        if not self.keep:
            out.append(b'Connection: close')
        self.wrap = framing == 'close' and self.keep
        self.sent_head = True
        return b'\r\n'.join(out) + b'\r\n\r\n'

    def timed_out(self):
        """The request ran past --request-timeout: a 504 when nothing was answered yet, else the connection cut."""
        self.keep = False
        if not self.sent_head and not self.conn.gone:
            self.conn.writer.write(Refused(504, 'Gateway Timeout', 'no answer within the request timeout (%d s)' % (
                self.door.settings.request_timeout), kind='timeout').answer())
        self.status = self.status or 504

    def close(self):
        if self.watch is not None:
            self.watch.cancel()
        if self.up is not None:
            self.up.close()


class _Upstream(asyncio.Protocol):
    """A connection to the gateway, kept alive between exchanges (FrontDoor.pool_put). For its exchange: the answer's
    head read whole (interim 1xx answers dropped: the door answered Expect itself), then every piece written to the
    client's transport as it comes (framed as a chunk when the exchange wraps it), its end found from its framing
    (Content-Length, or the chunks' sizes: the bytes pass unchanged; none for 204 and 304); a byte past the end makes
    the connection one not to keep, and is not passed on. Reading is paused while the client's side has more than
    HIGH_WATER bytes unsent. DONE gets True when the answer ended whole, else what ended the connection."""

    HIGH_WATER = 262144

    def __init__(self):
        self.exchange = self.done = self.transport = self.client = None
        self.head, self.line = bytearray(), bytearray()
        self.left = self.need = 0
        self.trailers = self.reused = self.clean = self.paused = False
        self.idle_since = self.sent_at = 0.0

    def start(self, exchange, done):
        self.reused = self.transport is not None
        self.exchange, self.done, self.client = exchange, done, exchange.conn.writer.transport
        self.head, self.line = bytearray(), bytearray()
        self.left = self.need = 0
        self.trailers = self.clean = False
        self.sent_at = time.monotonic()
        if self.transport is not None:
            # the exchange's connection from now, before any byte of the answer: an answer that ends before the
            # exchange's task runs again puts it back in the pool and clears this (data_received), and the client's
            # end must then not close it under the next exchange that took it
            exchange.up = self.transport
            self.transport.write(exchange.request())

    def reusable(self):
        return self.clean and self.exchange.up_keeps and not self.transport.is_closing()

    def closed_at_once(self):
        """A kept-alive connection that ended within a second of the request, before a byte came back."""
        return self.reused and not self.head and time.monotonic() - self.sent_at < 1.0

    def connection_made(self, transport):
        self.transport = transport
        self.exchange.up = transport
        transport.write(self.exchange.request())

    def data_received(self, data):
        exchange, client, done = self.exchange, self.client, self.done
        if exchange is None or done.done():
            self.transport.close()          # bytes while idle, or after the answer: not a connection to keep
            return
        if not exchange.sent_head:
            data = self._answer_head(data)
            if data is None:
                return
        end = self._end(data)
        if end is not None:                 # the end first: back in the pool before the client reads the last bytes
            data, rest = data[:end], data[end:]
            self.clean = not rest
            if rest:
                self.transport.close()
            self.idle_since = time.monotonic()
            if self.reusable():
                exchange.up = None
                exchange.door.pool_put(self)
        if data:
            exchange.usage.feed(data)
            client.write(b'%x\r\n%s\r\n' % (len(data), data) if exchange.wrap else data)
        if end is not None:
            done.set_result(True)
        elif not self.paused and client.get_write_buffer_size() > self.HIGH_WATER:
            self.paused = True
            self.transport.pause_reading()
            asyncio.ensure_future(self._resume())

    def _answer_head(self, data):
        """The answer's head, written to the client once whole (interim 1xx heads dropped); the bytes after it, or
        None while it is not whole."""
        self.head += data
        while True:
            end = self.head.find(b'\r\n\r\n')
            if end < 0:
                if len(self.head) > HEAD_LIMIT:
                    self.transport.close()
                return None
            if not self.head.startswith(b'HTTP/1.1 1') or self.head.startswith(b'HTTP/1.1 101'):
                break
            del self.head[:end + 4]         # 100 Continue, 103 Early Hints: not the answer
        rest = bytes(self.head[end + 4:])
        self.client.write(self.exchange.answer_head(bytes(self.head[:end + 4])))
        self.left = self.exchange.length
        return rest

    def _end(self, data):
        """Where the answer ends in DATA (an index), or None when it goes on (a close-delimited one ends with the
        connection)."""
        framing = self.exchange.framing
        if framing == 'length':
            if len(data) >= self.left:
                end, self.left = self.left, 0
                return end
            self.left -= len(data)
            return None
        if framing == 'chunked':
            return self._chunks(data)
        return None

    def _chunks(self, data):
        """Follows the chunks' sizes through DATA; the index just past the last chunk's trailer section, or None."""
        i, n = 0, len(data)
        while i < n:
            if self.need:
                take = min(self.need, n - i)
                i += take
                self.need -= take
                continue
            j = data.find(b'\n', i)
            if j < 0:
                self.line += data[i:]
                return None
            line = bytes(self.line) + data[i:j]
            self.line = bytearray()
            i = j + 1
            if self.trailers:
                if not line.strip():
                    return i
                continue
            try:
                size = int(line.split(b';', 1)[0].strip(), 16)
            except ValueError:
                self.transport.close()
                return None
            if size == 0:
                self.trailers = True
            else:
                self.need = size + 2
        return None

    async def _resume(self):
        """Reading again once the client's side has taken what was written (polled: one task drains the client's
        writer at a time, the exchange's)."""
        while self.client.get_write_buffer_size() > self.HIGH_WATER // 4 and not self.client.is_closing():
            await asyncio.sleep(0.005)
        self.paused = False
        if self.client.is_closing():
            self.transport.close()
        elif not self.transport.is_closing():
            self.transport.resume_reading()

    def eof_received(self):
        return False

    def connection_lost(self, exc):
        self.clean = False
        if self.done is not None and not self.done.done():
            self.done.set_result(exc)
