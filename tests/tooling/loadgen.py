# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A bounded load generator for the test bed: chat requests to one OpenAI-compatible endpoint at a steady rate, a
share of them streamed, every answer counted by what came back. Standard library only (it is copied to the login
node and run there, as a client on the cluster would be).

    python3 loadgen.py --url http://node3:30000/v1 --key-file ~/glm/api-key --rate 5 --duration 600 \\
        --streamed 0.25 [--timeout 60] [--concurrency 64] [--allow-host node3] [--log requests.jsonl]

What it is for: the continuity and autoscaling tests (a service that keeps answering while its jobs hand over,
scale, are preempted) need the same client load through each fault, and one count of what the clients saw.

- **Bounded**: at most ``--duration`` seconds (3,600 at most) and ``--max-requests`` requests (100,000 at most),
  ``--concurrency`` in flight (requests that would go past it are counted ``skipped``, not queued: an open-loop
  rate, as independent clients send); it stops on SIGINT/SIGTERM and still prints its counts.
- **Loopback and test hosts only**: the URL's host must resolve to a loopback address, or be named with
  ``--allow-host`` (the local cluster's node names); anything else is refused before a request is sent.
- **The key** is read from ``--key-file`` (first line) and sent only in the Authorization header; never on argv,
  never printed, never in the log.
- **Counts**: one outcome per request - the HTTP status (``200``, ``401``, ``429``, ``503``, ...), ``timeout``,
  ``refused``, ``reset`` or ``error`` when no status came, and for a streamed request that got 200 but broke before
  ``data: [DONE]``, ``stream_broken`` (a client saw a partial answer). Printed as one JSON document on stdout:
  ``{"sent", "skipped", "unfinished", "outcomes": {outcome: n}, "streamed": {...}, "plain": {...}, "failed",
  "latency_ms": {"p50", "p99"}, "ttft_ms": {...}, "seconds"}``, where ``failed`` counts every outcome but 200 (and
  429 with ``--ok-429``) and the requests still unanswered past their timeout when the run ended (``unfinished``).
- ``--log FILE``: one JSON line per request (start time, streamed, outcome, seconds): what a test lines up with the
  times of a handover.
"""

from __future__ import absolute_import, division, print_function

import argparse
import http.client
import ipaddress
import json
import os
import signal
import socket
import ssl
import sys
import threading
import time
import urllib.parse

MAX_DURATION = 3600
MAX_REQUESTS = 100000
PROMPT = 'How many times does the letter r appear in strawberry?'


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--url', required=True, help='the base URL, e.g. http://node3:30000/v1')
    parser.add_argument('--key-file', required=True)
    parser.add_argument('--model', default='glm-5.3-flash')
    parser.add_argument('--rate', type=float, default=5.0, help='requests started per second (default 5)')
    parser.add_argument('--duration', type=float, default=60.0, help='seconds (default 60, at most %d)' % MAX_DURATION)
    parser.add_argument('--max-requests', type=int, default=MAX_REQUESTS)
    parser.add_argument('--streamed', type=float, default=0.25, help='share of streamed requests, 0 to 1 (default 0.25)')
    parser.add_argument('--max-tokens', type=int, default=16)
    parser.add_argument('--timeout', type=float, default=60.0, help='seconds per request (default 60)')
    parser.add_argument('--concurrency', type=int, default=64, help='requests in flight at most (default 64)')
    parser.add_argument('--allow-host', action='append', default=[], help='a non-loopback host that may be loaded')
    parser.add_argument('--cacert', help='the certificate to trust for an https URL')
    parser.add_argument('--ok-429', action='store_true', help='do not count 429 (with Retry-After) as failed')
    parser.add_argument('--log', help='one JSON line per request into this file')
    opts = parser.parse_args(argv)
    problems = []
    if not 0 < opts.duration <= MAX_DURATION:
        problems.append('--duration %s: give seconds, more than 0 and at most %d' % (opts.duration, MAX_DURATION))
    if not 0 < opts.max_requests <= MAX_REQUESTS:
        problems.append('--max-requests %s: give 1 to %d' % (opts.max_requests, MAX_REQUESTS))
    if not 0 < opts.rate <= 1000:
        problems.append('--rate %s: give requests per second, more than 0 and at most 1000' % opts.rate)
    if not 0 <= opts.streamed <= 1:
        problems.append('--streamed %s: give a share from 0 to 1' % opts.streamed)
    if not 1 <= opts.concurrency <= 1024:
        problems.append('--concurrency %s: give 1 to 1024' % opts.concurrency)
    url = urllib.parse.urlsplit(opts.url)
    if url.scheme not in ('http', 'https') or not url.hostname:
        problems.append('--url %s: give http://HOST:PORT/v1 or https://HOST:PORT/v1' % opts.url)
    elif not allowed(url.hostname, opts.allow_host):
        problems.append('--url %s: %s is not a loopback address or a host given with --allow-host; this generator loads '
                        'only the test bed' % (opts.url, url.hostname))
    if problems:
        parser.error('; '.join(problems))
    return opts


def allowed(host, allow):
    """True for a host named in ALLOW, or one whose every address is a loopback address."""
    if host in allow:
        return True
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except socket.gaierror:
        return False
    return bool(addresses) and all(ipaddress.ip_address(a.split('%')[0]).is_loopback for a in addresses)


def read_key(path):
    with open(os.path.expanduser(path), encoding='utf-8') as handle:
        key = handle.readline().strip()
    if not key:
        raise SystemExit('loadgen: no key in %s' % path)
    return key


class Target(object):
    """Where the requests go: a connection per request (as many clients do), the key only in a header."""

    def __init__(self, url, key, model, max_tokens, timeout, cacert=None):
        self.url = urllib.parse.urlsplit(url)
        self.path = self.url.path.rstrip('/') + '/chat/completions'
        self.key, self.model, self.max_tokens, self.timeout = key, model, max_tokens, timeout
        self.context = ssl.create_default_context(cafile=cacert) if self.url.scheme == 'https' else None

    def connect(self):
        port = self.url.port or (443 if self.url.scheme == 'https' else 80)
        if self.context is not None:
            return http.client.HTTPSConnection(self.url.hostname, port, timeout=self.timeout, context=self.context)
        return http.client.HTTPConnection(self.url.hostname, port, timeout=self.timeout)

    def send(self, streamed):
        """(outcome, seconds, seconds to the first byte of the answer or None)."""
        body = json.dumps({'model': self.model, 'messages': [{'role': 'user', 'content': PROMPT}],
                           'max_tokens': self.max_tokens, 'stream': streamed}).encode()
        headers = {'Authorization': 'Bearer %s' % self.key, 'Content-Type': 'application/json'}
        started = time.monotonic()
        first = None
        conn = self.connect()
        try:
            conn.request('POST', self.path, body=body, headers=headers)
            response = conn.getresponse()
            first = time.monotonic() - started
            if response.status != 200 or not streamed:
                response.read()
                return str(response.status), time.monotonic() - started, first
            done = False
            for line in response:               # SSE: "data: {...}" lines, then "data: [DONE]"
                if line.strip() == b'data: [DONE]':
                    done = True
            return ('200' if done else 'stream_broken'), time.monotonic() - started, first
        except socket.timeout:
            return 'timeout', time.monotonic() - started, first
        except ConnectionRefusedError:
            return 'refused', time.monotonic() - started, first
        except (ConnectionResetError, http.client.RemoteDisconnected, http.client.IncompleteRead, BrokenPipeError):
            return ('stream_broken' if streamed and first is not None else 'reset'), time.monotonic() - started, first
        except (OSError, http.client.HTTPException):
            return 'error', time.monotonic() - started, first
        finally:
            conn.close()


def percentile(values, share):
    if not values:
        return None
    ordered = sorted(values)
    return round(1000.0 * ordered[min(len(ordered) - 1, max(0, int(round(share * len(ordered))) - 1))], 1)


class Run(object):
    """The open-loop schedule and the counts."""

    def __init__(self, target, opts):
        self.target, self.opts = target, opts
        self.lock = threading.Lock()
        self.in_flight = 0
        self.started = 0
        self.rows = []
        self.skipped = 0
        self.stop = threading.Event()
        self.log = open(opts.log, 'w', encoding='utf-8') if opts.log else None

    def one(self, index, streamed, started_at):
        outcome, seconds, first = self.target.send(streamed)
        row = {'i': index, 'at': round(started_at, 3), 'streamed': streamed, 'outcome': outcome,
               'seconds': round(seconds, 4), 'first_byte': round(first, 4) if first is not None else None}
        with self.lock:
            self.in_flight -= 1
            self.rows.append(row)
            if self.log:
                self.log.write(json.dumps(row) + '\n')

    def go(self):
        opts = self.opts
        begin = time.monotonic()
        threads = []
        index = 0
        streamed_so_far = 0.0
        while not self.stop.is_set() and index < opts.max_requests:
            due = begin + index / opts.rate
            now = time.monotonic()
            if due - begin >= opts.duration:
                break
            if due > now:
                self.stop.wait(due - now)
                continue
            # the streamed share spread evenly (every 4th with 0.25), not by chance: the counts are exact
            streamed_so_far += opts.streamed
            streamed = streamed_so_far >= 1.0
            if streamed:
                streamed_so_far -= 1.0
            with self.lock:
                busy = self.in_flight >= opts.concurrency
                if not busy:
                    self.in_flight += 1
            if busy:
                self.skipped += 1
            else:
                thread = threading.Thread(target=self.one, args=(index, streamed, time.time()))
                thread.daemon = True
                thread.start()
                self.started += 1
                threads.append(thread)
            index += 1
        deadline = time.monotonic() + opts.timeout + 5
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return self.summary(time.monotonic() - begin)

    def summary(self, seconds):
        with self.lock:
            rows = list(self.rows)
        if self.log:
            self.log.close()
        ok = {'200', '429'} if self.opts.ok_429 else {'200'}

        def counts(selected):
            found = {}
            for row in selected:
                found[row['outcome']] = found.get(row['outcome'], 0) + 1
            return dict(sorted(found.items()))
        fine = [r['seconds'] for r in rows if r['outcome'] == '200']
        firsts = [r['first_byte'] for r in rows if r['outcome'] == '200' and r['first_byte'] is not None]
        unfinished = self.started - len(rows)      # still waiting past their timeout when the run ended
        return {'sent': self.started, 'skipped': self.skipped, 'unfinished': unfinished, 'outcomes': counts(rows),
                'streamed': counts([r for r in rows if r['streamed']]), 'plain': counts([r for r in rows if not r['streamed']]),
                'failed': len([r for r in rows if r['outcome'] not in ok]) + unfinished,
                'latency_ms': {'p50': percentile(fine, 0.5), 'p99': percentile(fine, 0.99)},
                'ttft_ms': {'p50': percentile(firsts, 0.5), 'p99': percentile(firsts, 0.99)},
                'seconds': round(seconds, 1)}


def main(argv=None):
    opts = parse(sys.argv[1:] if argv is None else argv)
    target = Target(opts.url, read_key(opts.key_file), opts.model, opts.max_tokens, opts.timeout, opts.cacert)
    run = Run(target, opts)

    def stop(_signum, _frame):
        run.stop.set()
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    print(json.dumps(run.go(), sort_keys=True))
    return 0


if __name__ == '__main__':
    sys.exit(main())
