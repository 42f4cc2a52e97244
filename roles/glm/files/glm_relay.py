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
already open stay where they are.

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

import os
import re
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


def say(text):
    try:
        sys.stderr.write('glm-relay: %s\n' % text)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def listener_uid(port):
    """The uid of whoever listens on TCP port on 127.0.0.1 or every address (Linux /proc/net/tcp*), or None."""
    for table in ('/proc/net/tcp', '/proc/net/tcp6'):
        try:
            with open(table) as handle:
                rows = handle.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 8 or fields[3] != '0A':   # 0A: LISTEN
                continue
            address, _sep, hexport = fields[1].rpartition(':')
            if int(hexport, 16) == port and address.strip('0') in ('', '100007F', '1'):
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


def pump(source, sink):
    """Copy source to sink until source's end, then half-close sink (the other way stays open)."""
    try:
        while True:
            data = source.recv(BUFFER)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    try:
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def relay(client, target):
    try:
        upstream = socket.create_connection(target, timeout=CONNECT_TIMEOUT)
    except OSError as err:
        say('cannot reach %s:%d: %s (is the server running? glm.serve.status says where it is)' % (target + (err,)))
        client.close()
        return
    upstream.settimeout(None)
    for sock in (client, upstream):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    back = threading.Thread(target=pump, args=(upstream, client))
    back.daemon = True
    back.start()
    pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def endpoint_target(path, fallback):
    """(host, port) of GLM_BASE_URL in the deployment's endpoint file (the server's, or the router's: each job writes it
    atomically where it runs), read again for each connection; FALLBACK when the file is missing or names none."""
    try:
        with open(path) as handle:
            for line in handle:
                match = URL_RE.match(line.strip())
                if match:
                    return match.group(1).strip('[]'), int(match.group(2))
    except (OSError, ValueError):
        pass
    return fallback


def serve(server, target, endpoint_file=None):
    """Accept and relay each connection in a thread of its own. With ENDPOINT_FILE, each new connection goes where
    the file says now (a router or server that moved to another node or port: its next job wrote the file), the
    connections already open stay where they are; a move is said once."""
    while True:
        try:
            client, _peer = server.accept()
        except OSError:
            return
        now = endpoint_target(endpoint_file, target) if endpoint_file else target
        if now != target:
            say('the endpoint moved (%s): %s:%d -> %s:%d for the new connections' % ((endpoint_file,) + target + now))
            target = now
        worker = threading.Thread(target=relay, args=(client, target))
        worker.daemon = True
        worker.start()


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

    # SIGPIPE stays ignored, as Python sets it: a client that goes away mid-answer is a BrokenPipeError in its own
    # thread (pump), never the end of the relay, nor of the other connections through it
    for number in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
        signal.signal(number, stop)
    parent = os.getppid()
    say('127.0.0.1:%d on %s -> %s:%d%s, until this ssh session ends' % ((port, socket.gethostname()) + target + (
        ' (or where %s says, at each new connection)' % endpoint_file if endpoint_file else '',)))
    in_background(serve, server, target, endpoint_file)
    in_background(watch_parent, parent)
    # the session's input: its end is the end of the ssh session (or of the client's connection)
    read_until_closed()
    os._exit(0)


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
