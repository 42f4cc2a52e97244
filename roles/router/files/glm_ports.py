# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The router job's ports on its node (glm_router.py, glm_front.py beside this file): whether one can be bound, which
process listens on one, a loopback port for the gateway behind the front door, waiting for one to be free. Standard
library only; /proc/net/tcp is read here and nowhere else.

Other users of the node can bind any port they like and see every command line, so: a loopback port is chosen below
the kernel's ephemeral range (ip_local_port_range), which the node's outgoing connections never take; it is never
printed in an argv; and a port counts as the gateway's only once its listening socket is among the gateway's own
descriptors (held_by)."""

import errno
import os
import random
import socket
import time

#: how long a launcher waits for the router's ports to be free when it starts (a gateway of this job's launcher that
#: was killed finishes its requests first: it got SIGTERM when its parent died, glm_router.die_with_parent)
PORT_WAIT = 60.0
#: the loopback ports chosen from: this many below the kernel's ephemeral range, never below LOWEST
BELOW_EPHEMERAL = 12000
LOWEST = 10000


def bind_error(host, port):
    """The errno of binding HOST:PORT now (None when it can be bound), as the gateway binds: SO_REUSEADDR, so that a
    port in TIME_WAIT does not count; EADDRINUSE when something listens there."""
    probe = socket.socket(socket.AF_INET6 if ':' in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
        return None
    except OSError as error:
        return error.errno
    finally:
        probe.close()


def port_taken(host, port):
    """True when HOST:PORT cannot be bound now because something listens there (the router job this one succeeds,
    on the same node); a port in TIME_WAIT does not count."""
    return bind_error(host, port) is not None


def ephemeral_range(path='/proc/sys/net/ipv4/ip_local_port_range'):
    """The kernel's range of ports for outgoing connections (low, high); Linux's default where it cannot be read."""
    try:
        with open(path, encoding='ascii') as handle:
            low, high = (int(part) for part in handle.read().split()[:2])
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def loopback_port(rand=random, ranges=None):
    """A TCP port of 127.0.0.1 that can be bound now, below the ephemeral range: a port the kernel hands out for
    outgoing connections (the door's, the gateway's, any user's) can be taken by one between this choice and the
    gateway's bind (the failure of a router handover on the test bed: "Address already in use"). Where the range
    leaves no room below it, the kernel's choice."""
    low = (ranges or ephemeral_range())[0]
    first = max(LOWEST, low - BELOW_EPHEMERAL)
    if low - first >= 100:
        for _try in range(50):
            port = rand.randrange(first, low)
            if bind_error('127.0.0.1', port) is None:
                return port
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]
    finally:
        probe.close()


def wait_for_ports(host, ports, log, timeout=PORT_WAIT, sleep=time.sleep):
    """Waits until this node can listen on HOST's PORTS (the router's and its metrics'); SystemExit naming the port
    after TIMEOUT s. A gateway that holds one would answer the deploy's probe in place of this job's (same key) and
    never get the replicas: the case of a launcher killed with its gateway left running. LOG: the launcher's."""
    deadline, said = time.monotonic() + timeout, False
    for port in [p for p in ports if p]:
        # another error than EADDRINUSE: the gateway says what is wrong with the address itself
        while bind_error(host, port) == errno.EADDRINUSE:
            if time.monotonic() >= deadline:
                raise SystemExit('[glm.serve] router: port %d of %s is in use after %d s: another process listens on '
                                 'it (a gateway left by an earlier router job, or another service); free it (ss -ltnp '
                                 'on the node) or choose another router_port' % (port, host, timeout))
            if not said:
                said = True
                log('port %d of %s is in use; waiting up to %d s for it (a gateway of a launcher killed before '
                    'finishing its requests)' % (port, host, timeout))
            sleep(0.5)


def listening_sockets(port, host='127.0.0.1'):
    """The inodes (``socket:[N]``) of the TCP sockets that listen on HOST:PORT or on every address at PORT, whoever's
    (/proc/net/tcp lists the node's sockets for every user)."""
    hexhost = ''.join('%02X' % int(part) for part in reversed(host.split('.')))
    found = set()
    with open('/proc/net/tcp', encoding='ascii') as handle:
        for line in handle.readlines()[1:]:
            fields = line.split()
            if fields[3] == '0A' and fields[1] in ('%s:%04X' % (hexhost, port), '00000000:%04X' % port):
                found.add('socket:[%s]' % fields[9])
    return found


def held_by(pid, sockets):
    """Whether every one of SOCKETS (and at least one) is among PID's open descriptors."""
    held = set()
    try:
        for fd in os.listdir('/proc/%d/fd' % pid):
            try:
                held.add(os.readlink('/proc/%d/fd/%s' % (pid, fd)))
            except OSError:
                continue
    except OSError:
        return False
    return bool(sockets) and sockets <= held


def listens(pid, port, timeout, sleep=time.sleep):
    """Waits until process PID (a child of this one) listens on 127.0.0.1:PORT itself: 'listening'; 'exited' when it
    exited first (not reaped: its status is still its parent's to read); 'slow' after TIMEOUT s of neither."""
    deadline = time.monotonic() + timeout
    while True:
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return 'exited'
        if held_by(pid, listening_sockets(port)):
            return 'listening'
        if time.monotonic() >= deadline:
            return 'slow'
        sleep(0.1)
