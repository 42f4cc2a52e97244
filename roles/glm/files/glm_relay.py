# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The way in from the operator's machine through the cluster's SSH gateway: a TCP relay on the login node.

    ssh -L 30000:127.0.0.1:PORT training 'python3 /home/USER/glm/glm_relay.py PORT NODE:30000 /home/USER/glm/endpoint'

(the line deploy.yml and status.yml print, with PORT and NODE filled in). The gateway forwards only to loopback ports
of the login node: "forwarding to loopback ports on the login node [...] Remote forwarding and non-loopback
destinations are refused" (the guide's platform notes), so ``ssh -L 30000:NODE:30000`` is refused ("open failed:
administratively prohibited"). This listens on 127.0.0.1:PORT of the login node, which the gateway lets the ``-L``
reach, and relays every connection to NODE:30000 (the server, or the router in front of several replicas), bytes as
they come: a streamed (SSE) answer is passed on chunk by chunk, and a half-closed connection stays open the other way.
With the deployment's endpoint file as a third argument, each new connection goes where that file's GLM_BASE_URL
says at that moment (NODE:30000 until it names something else): a server or router whose next job runs elsewhere (a
requeue, a deploy that resubmitted it, a router's successor) is followed without a new ssh line; the connections
already open stay where they are. A file that names no endpoint (missing: the router or server that served it ended,
or the teardown removed it) relays nothing: the client's connection is closed, and the relay says why once, instead of
sending a key to a NODE:PORT another user of the cluster may bind next.

Other users of the login node reach its loopback ports too, so: only connections from sockets of this relay's own
user are relayed (the client's socket's owner in /proc/net/tcp: the ssh session's sshd runs as that user), others are
closed before a byte goes anywhere; at most MOST connections at once (each costs two descriptors; the soft limit of
open files is raised to the hard one), each closed after IDLE s without a byte either way; one event loop (asyncio),
not a thread per connection; an accept that fails (EMFILE: too many open files) is tried again a second later
(asyncio's server does), and trouble is said at most once per SAY_EVERY s per kind.

It lives as long as the ssh session that started it: it is that session's command, and it ends when its standard
input closes (the ssh client exited, was interrupted or lost its connection: sshd then closes the command's input),
on SIGHUP, SIGTERM or SIGINT, or when the process that started it goes away; nothing of it stays on the login node.
So the ssh line must keep its input: no ``-n``, ``-f`` or ``< /dev/null`` (it says so and stops when its input is
closed at once).

PORT: the login node is shared, so two users (or two deployments of one user) must not pick the same port. The
playbooks derive it from the deployment's work dir (a path under the user's home: 20000 + a hash of it, modulo 9000,
below the kernel's ephemeral ports and SGLang's 30000) or take glm_relay_port. It is checked here by binding it: a
port some other program listens on is never shared (no SO_REUSEPORT; SO_REUSEADDR only lets a port in TIME_WAIT be
bound again), and then this exits at once (status 75) naming a port that is free now, so the ssh line ends too and
its local port closes. The relay carries bytes only: the API key stays in the client's Authorization header, never
on a command line and never here. Python 3 standard library only (the login node's python3).
"""

import asyncio
import os
import re
import resource
import signal
import socket
import sys
import threading
import time

BUFFER = 65536
# the endpoint file's line: GLM_BASE_URL=http(s)://HOST:PORT/v1
URL_RE = re.compile(r'^GLM_BASE_URL=https?://([^/:]+|\[[^\]]+\]):(\d+)(/|$)')
CONNECT_TIMEOUT = 15
# ports the playbooks derive from (glm_relay_port's range): a free one is suggested from here when PORT is taken
RANGE = (20000, 29000)
EX_USAGE = 64
EX_TEMPFAIL = 75
#: connections relayed at once, at most
MOST = 400
#: seconds a relayed connection may pass no byte either way before it is closed: longer than any request's timeout
#: (router_request_timeout, 1800 s by default), for a non-streamed answer that passes no byte until it is whole
IDLE = 7200.0
#: seconds between two lines of the same kind of trouble
SAY_EVERY = 10.0


def say(text):
    try:
        sys.stderr.write('glm-relay: %s\n' % text)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def tcp_rows(tables=('/proc/net/tcp', '/proc/net/tcp6')):
    """The rows of /proc/net/tcp and tcp6 (every user's sockets on this node), split."""
    rows = []
    for table in tables:
        try:
            with open(table) as handle:
                rows += [row.split() for row in handle.read().splitlines()[1:]]
        except OSError:
            continue
    return rows


def listener_uid(port):
    """The uid of whoever listens on TCP port on 127.0.0.1 or every address (Linux /proc/net/tcp*), or None."""
    for fields in tcp_rows():
        if len(fields) < 8 or fields[3] != '0A':   # 0A: LISTEN
            continue
        address, _sep, hexport = fields[1].rpartition(':')
        if int(hexport, 16) == port and address.strip('0') in ('', '100007F', '1'):
            return int(fields[7])
    return None


def hex_address(host, port):
    """127.0.0.1:8080 as /proc/net/tcp writes it (0100007F:1F90)."""
    return '%s:%04X' % (''.join('%02X' % int(part) for part in reversed(host.split('.'))), port)


def peer_uid(peer, local):
    """The uid owning the other end (PEER) of a loopback connection accepted on LOCAL (both (host, port), IPv4), or
    None when it is gone already."""
    mine, theirs = hex_address(*local[:2]), hex_address(*peer[:2])
    for fields in tcp_rows(('/proc/net/tcp',)):
        if len(fields) >= 8 and fields[1] == theirs and fields[2] == mine and fields[3] == '01':    # 01: ESTABLISHED
            return int(fields[7])
    return None


def free_port(near):
    """A port of RANGE that binds on 127.0.0.1 now (from near on), or None."""
    low, high = RANGE
    start = near if low <= near < high else low
    for offset in range(high - low):
        port = low + (start - low + offset) % (high - low)
        probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            probe.bind(('127.0.0.1', port))
            return port
        except OSError:
            continue
        finally:
            probe.close()
    return None


def endpoint_target(path):
    """(host, port) of GLM_BASE_URL in the deployment's endpoint file (the server's, or the router's: each job writes it
    atomically where it runs, and the router removes it as it ends), read again for each connection; None when the
    file is missing or names none."""
    try:
        with open(path) as handle:
            for line in handle:
                match = URL_RE.match(line.strip())
                if match:
                    return match.group(1).strip('[]'), int(match.group(2))
    except (OSError, ValueError):
        pass
    return None


class Relay:
    """The connections relayed: to TARGET, or where ENDPOINT_FILE says at each new one; from sockets of UID only
    (None: anyone's)."""

    def __init__(self, target, endpoint_file=None, uid=None, most=MOST, idle=IDLE):
        self.target, self.endpoint_file, self.uid, self.most, self.idle = target, endpoint_file, uid, most, idle
        self.open = {}          # a relayed connection's two writers -> [the time of its last byte]
        self.counts = {'relayed': 0, 'foreign': 0, 'full': 0, 'no_endpoint': 0, 'unreachable': 0, 'idle': 0}
        self._said = {}

    def say_once(self, kind, text):
        """TEXT said unless a line of KIND was said less than SAY_EVERY s ago."""
        now = time.monotonic()
        if now - self._said.get(kind, -SAY_EVERY) >= SAY_EVERY:
            self._said[kind] = now
            say(text)

    def where(self):
        """Where a new connection goes now, or None (the endpoint file names none)."""
        if not self.endpoint_file:
            return self.target
        now = endpoint_target(self.endpoint_file)
        if now is None:
            self.counts['no_endpoint'] += 1
            self.say_once('none', 'no endpoint in %s: no server or router serves this deployment now (it ended, or '
                                  'was torn down; glm.serve.status says which): connections closed until one does'
                          % self.endpoint_file)
        elif now != self.target:
            say('the endpoint moved (%s): %s:%d -> %s:%d for the new connections' % ((self.endpoint_file,) + self.target + now))
            self.target = now
        return now

    def admit(self, writer):
        """Whether a connection just accepted is relayed: there is room, and its other end is this user's."""
        if len(self.open) >= self.most:
            self.counts['full'] += 1
            self.say_once('full', '%d connections open: new ones are closed until one ends' % self.most)
            return False
        if self.uid is not None and peer_uid(writer.get_extra_info('peername'), writer.get_extra_info('sockname')) != self.uid:
            self.counts['foreign'] += 1
            self.say_once('foreign', 'a connection from another user of this login node closed (only this user\'s '
                                     'are relayed)')
            return False
        return True

    async def handle(self, reader, writer):
        target = self.where() if self.admit(writer) else None
        if target is None:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(*target), CONNECT_TIMEOUT)
        except (OSError, asyncio.TimeoutError) as err:
            self.counts['unreachable'] += 1
            self.say_once('unreachable', 'cannot reach %s:%d: %s (is the server running? glm.serve.status says where '
                                         'it is)' % (target + (str(err) or 'timed out',)))
            writer.close()
            return
        self.counts['relayed'] += 1
        for one in (writer, up_writer):
            sock = one.get_extra_info('socket')
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pair, last = (writer, up_writer), [time.monotonic()]
        self.open[pair] = last
        try:
            await asyncio.gather(self.pump(reader, up_writer, pair, last), self.pump(up_reader, writer, pair, last))
        finally:
            del self.open[pair]
            for one in pair:
                one.close()

    @staticmethod
    async def pump(reader, writer, pair, last):
        """READER's bytes to WRITER until READER's end, then WRITER half-closed (the other way stays open); on an
        error (a client gone mid-answer) both ends are closed, which ends the other way too."""
        try:
            while True:
                data = await reader.read(BUFFER)
                if not data:
                    break
                last[0] = time.monotonic()
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof() and not writer.is_closing():
                writer.write_eof()
        except (OSError, RuntimeError):
            for one in pair:
                one.transport.abort()

    async def sweep(self):
        """Every minute: connections IDLE s without a byte either way closed."""
        while True:
            await asyncio.sleep(min(60.0, self.idle))
            now = time.monotonic()
            for pair, last in list(self.open.items()):
                if now - last[0] >= self.idle:
                    self.counts['idle'] += 1
                    for one in pair:
                        one.transport.abort()

    def on_loop_error(self, _loop, context):
        """The loop's trouble (an accept that failed: EMFILE, retried by asyncio a second later) said once per
        SAY_EVERY s, not a traceback per try."""
        self.say_once('loop', '%s%s' % (context.get('message', 'error'),
                                        ': %s' % context['exception'] if context.get('exception') else ''))

    async def serve(self, server):
        asyncio.get_running_loop().set_exception_handler(self.on_loop_error)
        listener = await asyncio.start_server(self.handle, sock=server, limit=BUFFER)
        async with listener:
            await asyncio.gather(listener.serve_forever(), self.sweep())


def serve(server, target, endpoint_file=None, uid=None):
    """Relays each connection SERVER accepts (one event loop, in this thread) until the process ends."""
    asyncio.run(Relay(target, endpoint_file, os.getuid() if uid is None else uid).serve(server))


USAGE = ('usage: glm_relay.py PORT HOST:PORT [ENDPOINT_FILE]  (listen on 127.0.0.1:PORT of the login node, relay to '
         'HOST:PORT, or to where ENDPOINT_FILE says at each new connection)')


def parse_args(argv):
    """(port, (host, port), endpoint file or None) of the command line, or None when it is wrong (said on stderr)."""
    if len(argv) not in (2, 3) or not argv[0].isdigit() or ':' not in argv[1]:
        say(USAGE)
        return None
    port = int(argv[0])
    host, _sep, target_port = argv[1].rpartition(':')
    if not host or not target_port.isdigit() or not 0 < port < 65536 or not 0 < int(target_port) < 65536:
        say(USAGE + ' (ports from 1 to 65535)')
        return None
    return port, (host, int(target_port)), (os.path.expanduser(argv[2]) if len(argv) == 3 else None)


def listen(port):
    """A socket listening on 127.0.0.1:PORT, or None when the port is taken (said on stderr, with a free one)."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        server.bind(('127.0.0.1', port))
        server.listen(64)
    except OSError as err:
        server.close()
        owner = listener_uid(port)
        who = ('another program of yours (a tunnel to this deployment already open? one is enough)'
               if owner is not None and owner == os.getuid() else 'another program (another user\'s?)')
        other = free_port(port + 1)
        say('127.0.0.1:%d on this login node is taken (%s; %s): nothing relayed, this ssh ends. Pick another '
            'port: glm_relay_port=%s in the inventory (or -e to glm.serve.status, which prints the line for it)%s.'
            % (port, err.strerror or err, who, other or 'N', ' (%d is free now)' % other if other else ''))
        return None
    return server


def raise_open_files():
    """The soft limit of open files up to the hard one (each relayed connection holds two)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def in_background(target, *args):
    thread = threading.Thread(target=target, args=args)
    thread.daemon = True
    thread.start()


def watch_parent(parent):
    """Ends the process when its parent (the ssh session's shell or sshd) is no longer PARENT."""
    while os.getppid() == parent:
        time.sleep(1)
    os._exit(0)


def read_until_closed():
    """Reads standard input to its end (the end of the ssh session, or of the client's connection)."""
    started = time.monotonic()
    stdin = sys.stdin.fileno()
    try:
        while os.read(stdin, BUFFER):
            pass
    except OSError:
        pass
    if time.monotonic() - started < 0.5:
        say('standard input closed at once: the relay lives as long as its ssh session\'s input; run the ssh line '
            'without -n, -f or < /dev/null')


def main(argv):
    args = parse_args(argv)
    if args is None:
        return EX_USAGE
    port, target, endpoint_file = args
    server = listen(port)
    if server is None:
        return EX_TEMPFAIL

    def stop(*_args):
        os._exit(0)

    # SIGPIPE stays ignored, as Python sets it: a client that goes away mid-answer is a BrokenPipeError of its own
    # connection (Relay.pump), never the end of the relay, nor of the other connections through it
    for number in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
        signal.signal(number, stop)
    parent = os.getppid()
    say('127.0.0.1:%d on %s -> %s:%d%s, until this ssh session ends' % ((port, socket.gethostname()) + target + (
        ' (or where %s says, at each new connection)' % endpoint_file if endpoint_file else '',)))
    in_background(watch_parent, parent)
    # the session's input: its end is the end of the ssh session (or of the client's connection)
    in_background(until_closed)
    raise_open_files()
    serve(server, target, endpoint_file)
    os._exit(0)


def until_closed():
    read_until_closed()
    os._exit(0)


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
