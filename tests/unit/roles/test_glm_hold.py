# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""roles/router/files/glm_hold.py: the hold in front of the router while no replica serves, against a real HTTP server
standing for the router (http.server on the loopback), over plain HTTP and TLS (a certificate made with openssl)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import http.client
import http.server
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', '..', 'roles', 'router', 'files'))
import glm_hold  # noqa: E402  pylint: disable=wrong-import-position


class Router(http.server.BaseHTTPRequestHandler):
    """The router's stand-in: answers what it got (method, path, body), as the gateway would with a worker."""
    protocol_version = 'HTTP/1.1'

    def _answer(self):
        size = int(self.headers.get('Content-Length') or 0)
        body = json.dumps({'method': self.command, 'path': self.path, 'body': self.rfile.read(size).decode('utf-8'),
                           'connection': self.headers.get('Connection')}).encode('utf-8')
        self.send_response(200)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args):  # pylint: disable=arguments-differ
        pass


def free_port():
    probe = socket.socket()
    probe.bind(('127.0.0.1', 0))
    port = probe.getsockname()[1]
    probe.close()
    return port


@pytest.fixture(name='router')
def fixture_router():
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Router)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address
    server.shutdown()


def make_hold(router, bound=5.0, tls=None, most_held=256):
    said = []
    hold = glm_hold.Hold('127.0.0.1', free_port(), router, bound, said.append, tls=tls, retry_after=7,
                         most_held=most_held).start()
    return hold, said


def call(hold, method, path, body=None, context=None, timeout=30):
    conn = (http.client.HTTPSConnection('127.0.0.1', hold.port, timeout=timeout, context=context) if context
            else http.client.HTTPConnection('127.0.0.1', hold.port, timeout=timeout))
    conn.request(method, path, body=json.dumps(body) if body is not None else None,
                 headers={'Content-Type': 'application/json'})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, dict(resp.getheaders()), data


def test_while_a_replica_serves_every_request_goes_through_unchanged(router):
    hold, _said = make_hold(router)
    hold.set_serving(1)
    time.sleep(0.1)
    status, _headers, data = call(hold, 'POST', '/v1/chat/completions', {'messages': ['hi']})
    assert status == 200
    assert json.loads(data) == {'method': 'POST', 'path': '/v1/chat/completions', 'body': json.dumps({'messages': ['hi']}),
                                'connection': None}   # as the client sent it (http.client: none)
    assert hold.take_demand() == 0
    assert hold.counts['held'] == 0


def test_a_get_at_zero_goes_through_and_does_not_wake_the_service(router):
    hold, said = make_hold(router)
    status, _headers, data = call(hold, 'GET', '/v1/models')
    assert status == 200 and json.loads(data)['path'] == '/v1/models'
    assert hold.take_demand() == 0 and not hold.woken.is_set() and not said


def test_a_post_at_zero_wakes_the_launcher_and_waits_for_the_first_replica(router):
    hold, said = make_hold(router, bound=20)
    answers = []
    thread = threading.Thread(target=lambda: answers.append(call(hold, 'POST', '/generate', {'text': 'x'})))
    thread.start()
    since = time.monotonic()
    hold.wait(10)
    assert time.monotonic() - since < 2             # woken by the request, not after 10 s
    assert hold.take_demand() == 1
    assert said and 'no replica serves' in said[0]
    time.sleep(1.0)
    assert not answers                              # still held
    since = time.monotonic()
    hold.set_serving(1)
    thread.join(10)
    assert answers and answers[0][0] == 200 and json.loads(answers[0][2])['path'] == '/generate'
    assert time.monotonic() - since < 1.0
    assert hold.counts == {'held': 1, 'released': 1, 'refused': 0, 'relayed': 1, 'unauthorized': 0}


def test_a_post_held_past_the_bound_gets_503_with_retry_after(router):
    hold, _said = make_hold(router, bound=1.5)
    since = time.monotonic()
    status, headers, data = call(hold, 'POST', '/v1/completions', {'prompt': 'x'})
    waited = time.monotonic() - since
    assert status == 503 and headers['Retry-After'] == '7' and headers['Connection'] == 'close'
    assert json.loads(data)['error']['code'] == 'scaled_to_zero'
    assert 1.4 < waited < 3.0
    assert hold.counts['refused'] == 1


def test_past_most_held_the_next_request_is_answered_at_once(router):
    hold, _said = make_hold(router, bound=30, most_held=1)
    first = threading.Thread(target=lambda: call(hold, 'POST', '/generate', {}))
    first.start()
    hold.wait(10)
    since = time.monotonic()
    status = call(hold, 'POST', '/generate', {})[0]
    assert status == 503 and time.monotonic() - since < 1.0
    hold.set_serving(1)
    first.join(10)


def test_kept_alive_idle_connections_close_when_the_service_goes_back_to_zero(router, monkeypatch):
    monkeypatch.setattr(glm_hold, 'IDLE_CLOSE', 0.5)
    hold, _said = make_hold(router)
    hold.set_serving(1)
    time.sleep(0.1)
    conn = http.client.HTTPConnection('127.0.0.1', hold.port, timeout=10)
    conn.request('GET', '/v1/models')
    assert conn.getresponse().read()
    time.sleep(0.8)
    hold.set_serving(0)
    time.sleep(0.3)
    sock = conn.sock
    sock.settimeout(2)
    assert sock.recv(1) == b''                      # closed by the hold: the client's next request opens a new one
    conn.close()


def test_not_a_request_line_is_answered_400(router):
    hold, _said = make_hold(router)
    with socket.create_connection(('127.0.0.1', hold.port), timeout=5) as sock:
        sock.sendall(b'hello\r\n')
        assert sock.recv(100).startswith(b'HTTP/1.1 400 ')


def test_over_tls_the_hold_serves_the_certificate_and_the_router_plain_behind_it(router, tmp_path):
    cert, key = str(tmp_path / 'cert.pem'), str(tmp_path / 'key.pem')
    subprocess.run(['openssl', 'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert,
                    '-days', '1', '-subj', '/CN=127.0.0.1'], check=True, capture_output=True)
    hold, _said = make_hold(router, bound=1.0, tls=(cert, key))
    context = ssl.create_default_context(cafile=cert)
    context.check_hostname = False
    status, headers, _data = call(hold, 'POST', '/v1/completions', {}, context=context)
    assert status == 503 and headers['Retry-After'] == '7'
    hold.set_serving(1)
    time.sleep(0.1)
    status, _headers, data = call(hold, 'POST', '/v1/completions', {'prompt': 'tls'}, context=context)
    assert status == 200 and json.loads(json.loads(data)['body']) == {'prompt': 'tls'}


def test_a_port_taken_is_said_in_the_callers_thread(router):
    taken = socket.socket()
    taken.bind(('127.0.0.1', 0))
    taken.listen()
    try:
        with pytest.raises(OSError):
            glm_hold.Hold('127.0.0.1', taken.getsockname()[1], router, 5, print).start()
    finally:
        taken.close()


def test_at_zero_the_hold_lists_the_model_for_the_key_and_asks_for_it(router):
    hold = glm_hold.Hold('127.0.0.1', free_port(), router, 5, print, model='glm-5.3-flash', key='s3cret').start()
    conn = http.client.HTTPConnection('127.0.0.1', hold.port, timeout=10)
    conn.request('GET', '/v1/models', headers={'Authorization': 'Bearer s3cret'})
    resp = conn.getresponse()
    assert resp.status == 200 and json.loads(resp.read())['data'][0]['id'] == 'glm-5.3-flash'
    conn.close()
    for headers in ({}, {'Authorization': 'Bearer wrong'}):
        conn = http.client.HTTPConnection('127.0.0.1', hold.port, timeout=10)
        conn.request('GET', '/v1/models', headers=headers)
        resp = conn.getresponse()
        assert resp.status == 401 and 'API key' in resp.read().decode()
        conn.close()
    assert hold.take_demand() == 0                  # a listing does not wake the service
    hold.set_serving(1)
    time.sleep(0.1)
    assert json.loads(call(hold, 'GET', '/v1/models')[2])['path'] == '/v1/models'    # the router's, once one serves


def test_at_zero_a_post_without_the_key_is_refused_and_wakes_nothing(router):
    hold = glm_hold.Hold('127.0.0.1', free_port(), router, 5, print, model='m', key='s3cret').start()
    for headers in ({}, {'Authorization': 'Bearer wrong'}, {'Authorization': 'Basic s3cret'}):
        conn = http.client.HTTPConnection('127.0.0.1', hold.port, timeout=10)
        conn.request('POST', '/v1/chat/completions', body=b'{"x": 1}', headers=headers)
        assert conn.getresponse().status == 401
        conn.close()
    assert hold.take_demand() == 0 and not hold.woken.is_set() and hold.counts['unauthorized'] == 3
    # behind LiteLLM's proxy: a team's key of its registry (CHECK) may wake the service
    teams = glm_hold.Hold('127.0.0.1', free_port(), router, 5, print, check={'team-key'}.__contains__).start()
    answers = []
    thread = threading.Thread(target=lambda: answers.append(call_key(teams, 'team-key')))
    thread.start()
    teams.wait(5)
    assert teams.take_demand() == 1 and call_key(teams, 'other') == 401
    teams.set_serving(1)
    thread.join(10)
    assert answers == [200]


def call_key(hold, key):
    conn = http.client.HTTPConnection('127.0.0.1', hold.port, timeout=20)
    conn.request('POST', '/generate', body=b'{}', headers={'Authorization': 'Bearer ' + key})
    status = conn.getresponse().status
    conn.close()
    return status


def test_at_zero_a_kept_alive_connection_brings_each_request_back_to_the_hold(router):
    hold, _said = make_hold(router, bound=1.0)
    with socket.create_connection(('127.0.0.1', hold.port), timeout=10) as sock:
        sock.sendall(b'GET /health HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\n\r\n')
        data = b''
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break                               # closed after the one answer: not kept alive at zero
            data += chunk
    assert data.startswith(b'HTTP/1.0 200') or data.startswith(b'HTTP/1.1 200'), data
    assert json.loads(data.split(b'\r\n\r\n', 1)[1])['connection'] == 'close'   # the router was told to close it
    # the client's next request, on a new connection, is the hold's again: held
    assert call(hold, 'POST', '/generate', {})[0] == 503
    assert hold.counts['held'] == 1


def test_a_request_running_when_the_service_goes_back_to_zero_is_not_cut(router, monkeypatch):
    monkeypatch.setattr(glm_hold, 'IDLE_CLOSE', 0.3)
    slow = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Slow)
    threading.Thread(target=slow.serve_forever, daemon=True).start()
    hold, _said = make_hold(slow.server_address)
    hold.set_serving(1)
    time.sleep(0.1)
    answers = []
    thread = threading.Thread(target=lambda: answers.append(call(hold, 'POST', '/generate', {})))
    thread.start()
    time.sleep(0.8)                                  # running, nothing answered yet, idle longer than IDLE_CLOSE
    hold.set_serving(0)
    thread.join(10)
    slow.shutdown()
    assert answers and answers[0][0] == 200


class Slow(Router):
    def do_POST(self):  # pylint: disable=invalid-name
        time.sleep(1.5)
        self._answer()


def test_a_503_after_the_bound_reaches_a_client_that_sent_a_large_body(router):
    hold, _said = make_hold(router, bound=0.5)
    body = b'x' * (4 << 20)
    with socket.create_connection(('127.0.0.1', hold.port), timeout=10) as sock:
        sock.sendall(b'POST /generate HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n' % len(body))
        try:
            sock.sendall(body)
        except OSError:
            pass
        data = b''
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    assert data.startswith(b'HTTP/1.1 503 ') and b'Retry-After: 7' in data


def test_stop_answers_the_held_requests_at_once(router):
    hold, _said = make_hold(router, bound=30)
    answers = []
    thread = threading.Thread(target=lambda: answers.append(call(hold, 'POST', '/generate', {})))
    thread.start()
    hold.wait(5)
    since = time.monotonic()
    hold.stop(timeout=1.0)
    thread.join(5)
    assert answers and answers[0][0] == 503 and time.monotonic() - since < 3


def test_work_through_the_hold_is_traffic_and_a_probe_is_not(router):
    hold, _said = make_hold(router)
    hold.set_serving(1)
    time.sleep(0.1)
    call(hold, 'GET', '/health')
    assert hold.take_traffic() is False
    call(hold, 'POST', '/generate', {'text': 'x'})
    assert hold.take_traffic() is True and hold.take_traffic() is False
