# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The tunnel's relay (roles/glm/files/glm_relay.py) as the ssh line runs it: its input held open, on loopback.

A client that goes away in the middle of an answer (an aborted streamed answer: the relay's next send to it fails
with EPIPE) must cost that connection only: the relay goes on relaying, even after the operator types into the ssh
terminal (bytes on the relay's input), and ends only when its input closes. A SIGPIPE handler that ended the relay
made the first keystroke after such a client end the whole tunnel.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import socket
import subprocess
import sys
import threading
import time

import pytest

RELAY = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'roles', 'glm', 'files', 'glm_relay.py')


def free_port():
    sock = socket.socket()
    sock.bind(('127.0.0.1', 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def upstream_server():
    """A server on loopback that answers 'pong' to 'ping', and floods a client that sends 'flood'."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(('127.0.0.1', 0))
    server.listen(8)

    def handle(conn):
        try:
            data = conn.recv(16)
            if data == b'flood':
                chunk = b'x' * 65536
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    conn.sendall(chunk)
            else:
                conn.sendall(b'pong')
        except OSError:
            pass
        finally:
            conn.close()

    def accept():
        while True:
            try:
                conn = server.accept()[0]
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return server


def connect(port, deadline=10.0):
    end = time.monotonic() + deadline
    while True:
        try:
            return socket.create_connection(('127.0.0.1', port), timeout=5)
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.1)


def ping(port):
    conn = connect(port)
    try:
        conn.sendall(b'ping')
        return conn.recv(16)
    finally:
        conn.close()


def test_a_client_gone_mid_answer_costs_that_connection_only():
    upstream = upstream_server()
    port = free_port()
    relay = subprocess.Popen([sys.executable, RELAY, str(port), '127.0.0.1:%d' % upstream.getsockname()[1]],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert ping(port) == b'pong'
        # a client that reads a little of a long answer and goes away with unread data: a reset, then EPIPE
        # on the relay's next send to it
        flooded = connect(port)
        flooded.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b'\x01\x00\x00\x00\x00\x00\x00\x00')
        flooded.sendall(b'flood')
        assert flooded.recv(65536)
        flooded.close()
        time.sleep(1.0)
        assert relay.poll() is None, relay.communicate()
        # the operator types into the ssh terminal: bytes on the relay's input
        relay.stdin.write(b'\n')
        relay.stdin.flush()
        time.sleep(1.0)
        assert relay.poll() is None, 'the relay ended after a client went away and a byte came on its input'
        assert ping(port) == b'pong'
        # its input closes (the ssh session ended): the relay ends
        relay.stdin.close()
        assert relay.wait(10) == 0
    finally:
        if relay.poll() is None:
            relay.kill()
            relay.wait()
        upstream.close()


# -- its parts, called directly (issue 22 split main into them) ----------------------------------------------------

def _relay_module():
    sys.path.insert(0, os.path.dirname(RELAY))
    try:
        import glm_relay  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.pop(0)
    return glm_relay


def test_parse_args_takes_port_and_target_and_says_what_is_wrong(capsys):
    relay = _relay_module()
    assert relay.parse_args(['20001', 'node1:30000']) == (20001, ('node1', 30000), None)
    assert relay.parse_args(['20001', '::1:30000']) == (20001, ('::1', 30000), None)
    assert relay.parse_args(['20001', 'node1:30000', '/home/u/glm/endpoint']) == (20001, ('node1', 30000), '/home/u/glm/endpoint')
    for argv in ([], ['x', 'node1:30000'], ['20001', 'node1'], ['20001', 'node1:70000'], ['0', 'node1:1'],
                 ['20001', ':30000'], ['20001', 'node1:30000', 'f', 'g']):
        assert relay.parse_args(argv) is None, argv
    err = capsys.readouterr().err
    assert 'glm-relay: usage: glm_relay.py PORT HOST:PORT [ENDPOINT_FILE]' in err and '(ports from 1 to 65535)' in err


def test_the_endpoint_file_is_read_at_each_connection(tmp_path):
    """With the endpoint file, a new connection goes where its GLM_BASE_URL says then (the router's successor, a
    resubmitted server), an open one stays; a file that is missing or names nothing names no target."""
    relay = _relay_module()
    path = str(tmp_path / 'endpoint')
    assert relay.endpoint_target(path) is None
    (tmp_path / 'endpoint').write_text('GLM_BASE_URL=https://node3:30001/v1\nGLM_MODEL=glm\nGLM_TLS_CERT=/c\n')
    assert relay.endpoint_target(path) == ('node3', 30001)
    (tmp_path / 'endpoint').write_text('GLM_BASE_URL=http://[::1]:30000/v1\n')
    assert relay.endpoint_target(path) == ('::1', 30000)
    (tmp_path / 'endpoint').write_text('GLM_MODEL=glm\n')
    assert relay.endpoint_target(path) is None
    # end to end: two upstreams, the file moved from one to the other between two connections
    first, second = upstream_server(), upstream_server()
    first_port, open_one = first.getsockname()[1], None
    (tmp_path / 'endpoint').write_text('GLM_BASE_URL=http://127.0.0.1:%d/v1\n' % first_port)
    port = free_port()
    proc = subprocess.Popen([sys.executable, RELAY, str(port), '127.0.0.1:1', path],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert ping(port) == b'pong'
        open_one = connect(port)
        first.close()                                   # the old one gone: only the move can answer now
        (tmp_path / 'endpoint').write_text('GLM_BASE_URL=http://127.0.0.1:%d/v1\n' % second.getsockname()[1])
        assert ping(port) == b'pong'
        proc.stdin.close()
        assert proc.wait(10) == 0
        err = proc.stderr.read().decode()
        assert 'the endpoint moved (%s): 127.0.0.1:%d -> 127.0.0.1:%d for the new connections' % (
            path, first_port, second.getsockname()[1]) in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if open_one is not None:
            open_one.close()
        second.close()


def test_listen_on_a_taken_port_says_so_and_names_a_free_one(capsys):
    relay = _relay_module()
    taken = socket.socket()
    taken.bind(('127.0.0.1', 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        assert relay.listen(port) is None
        err = capsys.readouterr().err
        assert '127.0.0.1:%d on this login node is taken' % port in err
        assert 'another program of yours (a tunnel to this deployment already open? one is enough)' in err
        assert 'glm_relay_port=' in err
    finally:
        taken.close()
    server = relay.listen(port)
    try:
        assert server is not None and server.getsockname() == ('127.0.0.1', port)
    finally:
        server.close()


def start_relay(port, target, *more, **popen):
    proc = subprocess.Popen([sys.executable, RELAY, str(port), target] + list(more), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)
    end = time.monotonic() + 10
    while relay_listening(port) is False and time.monotonic() < end and proc.poll() is None:
        time.sleep(0.05)
    return proc


def relay_listening(port):
    return _relay_module().listener_uid(port) is not None


def stop_relay(proc):
    proc.stdin.close()
    try:
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.stderr.read().decode()


def closed_at_once(port):
    """Whether a connection to the relay is closed without a byte relayed (b'' read, or a reset)."""
    conn = connect(port)
    try:
        conn.sendall(b'ping')
        return conn.recv(16) == b''
    except ConnectionResetError:
        return True
    finally:
        conn.close()


def test_no_endpoint_no_relay(tmp_path):
    """The endpoint file gone (its router ended, the teardown removed it): the relay sends nothing anywhere (not to
    the NODE:PORT of its command line, which another user may bind next), says why once, and follows the file again
    when a router writes it."""
    path, upstream = tmp_path / 'endpoint', upstream_server()
    squatter = upstream_server()                        # what listens at the old NODE:PORT of the ssh line now
    port = free_port()
    proc = start_relay(port, '127.0.0.1:%d' % squatter.getsockname()[1], str(path))
    try:
        assert closed_at_once(port) and closed_at_once(port)
        path.write_text('GLM_BASE_URL=http://127.0.0.1:%d/v1\n' % upstream.getsockname()[1])
        assert ping(port) == b'pong'
        err = stop_relay(proc)
        assert err.count('no endpoint in %s: no server or router serves this deployment now' % path) == 1, err
    finally:
        upstream.close()
        squatter.close()


def test_another_users_connection_is_closed_before_a_byte_goes_anywhere():
    """Another user of the login node connects to the relay's loopback port (it can: loopback ports are everyone's):
    closed at once, nothing reaches the endpoint; the relay's own user's connection is relayed."""
    if os.getuid() != 0 or not os.access('/usr/bin/python3', os.X_OK):
        pytest.skip('needs root and /usr/bin/python3 to connect as another user (uid 65534)')
    upstream = upstream_server()
    port = free_port()
    proc = start_relay(port, '127.0.0.1:%d' % upstream.getsockname()[1])
    try:
        script = ('import socket,sys\ns=socket.create_connection(("127.0.0.1",%d),timeout=5)\ns.sendall(b"ping")\n'
                  'try:\n    sys.stdout.write(repr(s.recv(16)))\nexcept ConnectionResetError:\n    sys.stdout.write("reset")\n' % port)
        other = subprocess.run(['/usr/bin/python3', '-c', script], preexec_fn=lambda: os.setuid(65534), cwd='/',
                               capture_output=True, text=True, timeout=30, check=False)
        assert other.stdout in ("b''", 'reset'), (other.stdout, other.stderr)
        assert ping(port) == b'pong'
        err = stop_relay(proc)
        assert 'a connection from another user of this login node closed' in err, err
    finally:
        upstream.close()


def test_out_of_descriptors_the_relay_accepts_again_once_some_are_free():
    """EMFILE (another user's connections, or the user's own, used every descriptor): the relay says so once in a
    while, not a traceback per try, and relays again once descriptors are free (the threaded relay stopped accepting
    for good)."""
    import resource
    upstream = upstream_server()
    port = free_port()
    proc = start_relay(port, '127.0.0.1:%d' % upstream.getsockname()[1],
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32)))
    held = []
    try:
        assert ping(port) == b'pong'
        for _n in range(40):                            # more than its descriptors: some accepts fail
            held.append(connect(port))
        time.sleep(1.5)
        for conn in held:
            conn.close()
        held = []
        time.sleep(2.5)                                 # asyncio tries the accept again a second later
        assert ping(port) == b'pong'
        err = stop_relay(proc)
        assert 'out of system resource' in err or 'Too many open files' in err, err
        assert len(err) < 4000, err
    finally:
        for conn in held:
            conn.close()
        upstream.close()


def test_connections_beyond_the_cap_are_closed_and_the_idle_are_swept():
    """At most MOST at once; a connection with no byte either way for IDLE s is closed (Relay, in this process)."""
    import asyncio
    relay_mod = _relay_module()
    upstream = upstream_server()

    async def run():
        relay = relay_mod.Relay(('127.0.0.1', upstream.getsockname()[1]), most=2, idle=0.5)
        server = await asyncio.start_server(relay.handle, '127.0.0.1', 0)
        port = server.sockets[0].getsockname()[1]
        sweeper = asyncio.ensure_future(relay.sweep())
        kept = [await asyncio.open_connection('127.0.0.1', port) for _n in range(2)]
        await asyncio.sleep(0.2)
        third_reader, third_writer = await asyncio.open_connection('127.0.0.1', port)
        refused = await asyncio.wait_for(third_reader.read(16), 5)
        await asyncio.sleep(1.5)                        # the two kept ones pass no byte: swept
        swept = [await asyncio.wait_for(reader.read(16), 5) for reader, _writer in kept]
        sweeper.cancel()
        server.close()
        third_writer.close()
        return refused, swept, relay.counts
    try:
        refused, swept, counts = asyncio.run(run())
    finally:
        upstream.close()
    assert refused == b'' and swept == [b'', b''] and counts['full'] == 1 and counts['idle'] == 2, counts
