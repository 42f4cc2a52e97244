# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Another user of the cluster against the front door's port, as a process of its own (so that its threads do not
share the measuring client's interpreter lock): keyless POSTs at RATE a second, SLOW connections that send a header
line every second, and BIG bodies (4 GB declared, without a key, streamed as fast as the door takes them).

    python door_attack.py PORT [RATE SLOW BIG]

Attacks until its standard input closes, then prints its counts as one JSON line."""

import json
import socket
import sys
import threading
import time


def exchange(port, data, context=None):
    """DATA sent to 127.0.0.1:PORT (over TLS with CONTEXT), and every byte back until the door closes."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    if context is not None:
        sock = context.wrap_socket(sock, server_hostname="localhost")
    try:
        sock.sendall(data)
        out = b""
        while True:
            more = sock.recv(65536)
            if not more:
                return out
            out += more
    finally:
        sock.close()


class Attack:
    def __init__(self, port, rate=200, slow=200, big=2):
        self.port, self.rate, self.slow, self.big = port, rate, slow, big
        self.stop = threading.Event()
        self.counts = {"401": 0, "other": 0, "big_refused": 0, "slow_reopened": 0}
        self.threads = []

    def start(self):
        self.threads = [threading.Thread(target=self._keyless, daemon=True), threading.Thread(target=self._slow, daemon=True)]
        self.threads += [threading.Thread(target=self._big, daemon=True) for _n in range(self.big)]
        for thread in self.threads:
            thread.start()
        return self

    def finish(self):
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=30)
        return self.counts

    def _keyless(self):
        request = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                out = exchange(self.port, request)
                self.counts["401" if out.startswith(b"HTTP/1.1 401 ") else "other"] += 1
            except OSError:
                self.counts["other"] += 1
            time.sleep(max(0.0, 1.0 / self.rate - (time.monotonic() - started)))

    def _open_slow(self):
        sock = socket.create_connection(("127.0.0.1", self.port))
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n")
        return sock

    def _slow(self):
        socks = [self._open_slow() for _n in range(self.slow)]
        while not self.stop.wait(1.0):
            for sock in list(socks):
                try:
                    sock.sendall(b"X-Slow: 1\r\n")
                except OSError:
                    socks.remove(sock)
                    sock.close()
                    socks.append(self._open_slow())                 # the attacker comes back
                    self.counts["slow_reopened"] += 1
        for sock in socks:
            sock.close()

    def _big(self):
        block = b"x" * 1048576
        while not self.stop.is_set():
            sock = socket.create_connection(("127.0.0.1", self.port))
            try:
                sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4294967296\r\n\r\n")
                while not self.stop.is_set():
                    sock.sendall(block)
            except OSError:
                self.counts["big_refused"] += 1
            finally:
                sock.close()
            time.sleep(0.2)


def main(argv):
    port, rest = int(argv[1]), [int(a) for a in argv[2:5]]
    attack = Attack(port, *rest).start()
    print("attacking", flush=True)
    sys.stdin.read()
    print(json.dumps(attack.finish()), flush=True)


if __name__ == "__main__":
    main(sys.argv)
