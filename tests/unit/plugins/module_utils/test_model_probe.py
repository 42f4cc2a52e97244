# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The probe against a real HTTP server on localhost (the standard library's), answering as SGLang does."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import json
import os
import socket
import ssl
import subprocess
import threading

import pytest

from ansible_collections.glm.serve.plugins.module_utils import model_probe as mp

http_server = pytest.importorskip('http.server')

KEY = 'k' * 48
ANSWERS = {
    '/v1/models': (200, json.dumps({'object': 'list', 'data': [{'id': 'glm-5.3-flash', 'object': 'model',
                                                                'max_model_len': 202752}]})),
    '/empty/v1/models': (200, json.dumps({'object': 'list', 'data': []})),
    '/other/v1/models': (200, json.dumps({'object': 'list', 'data': [{'id': 'qwen'}]})),
    '/html/v1/models': (200, '<html>loading</html>'),
    '/busy/v1/models': (503, 'busy'),
}


class Handler(http_server.BaseHTTPRequestHandler):
    seen = []

    def do_GET(self):  # noqa: N802 (the standard library's name)
        Handler.seen.append((self.path, self.headers.get('Authorization')))
        if self.headers.get('Authorization') != 'Bearer %s' % KEY:
            code, body = 401, json.dumps({'error': 'Unauthorized'})
        else:
            code, body = ANSWERS.get(self.path, (404, 'not found'))
        data = body.encode()
        self.send_response(code)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serving(cert=None, key=None):
    """Handler on a free loopback port (HTTPS with the certificate CERT and its KEY); yields the port."""
    httpd = http_server.HTTPServer(('127.0.0.1', 0), Handler)
    if cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever)
    thread.daemon = True
    thread.start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope='module')
def server():
    with serving() as port:
        yield port


def probe(port, path='/v1/models', key=KEY):
    return mp.ModelProbe(port, path, key, 'glm-5.3-flash', timeout=3)


def test_ready_with_the_model_and_its_context_length(server):
    result = probe(server).check('127.0.0.1')
    assert result.status == mp.READY and result.answered
    assert result.models == ['glm-5.3-flash'] and result.max_model_len == 202752
    assert Handler.seen[-1] == ('/v1/models', 'Bearer ' + KEY)          # the key only in the header


@pytest.mark.parametrize('path, key, status, detail', [
    ('/v1/models', 'wrong', mp.UNAUTHORIZED, 'HTTP 401'),
    ('/empty/v1/models', KEY, mp.STARTING, 'HTTP 200 with no model yet'),
    ('/other/v1/models', KEY, mp.WRONG_MODEL, 'serves qwen, not glm-5.3-flash'),
    ('/html/v1/models', KEY, mp.STARTING, 'HTTP 200 without a model list'),
    ('/busy/v1/models', KEY, mp.STARTING, 'HTTP 503'),
])
def test_each_answer_of_a_server_that_is_not_ready(server, path, key, status, detail):
    result = probe(server, path, key).check('127.0.0.1')
    assert (result.status, result.detail, result.answered) == (status, detail, True)
    assert KEY not in result.detail and KEY not in repr(result)


def test_the_endpoint_file_says_which_job_serves_and_on_which_port(server, tmp_path):
    """probe.endpoint_file (the router's, router_successors_until): while it names the job, the port of its
    GLM_BASE_URL is asked (a successor moved its ports); while it names another job, the job has not taken the endpoint
    yet and nothing is asked; a file of an earlier router (no GLM_ROUTER_JOB), or none, leaves the probe's port."""
    closed = socket.socket()
    closed.bind(('127.0.0.1', 0))
    port = closed.getsockname()[1]
    closed.close()                                                        # the probe's own port: nothing listens
    endpoint = tmp_path / 'endpoint'
    asked = mp.ModelProbe(port, '/v1/models', KEY, 'glm-5.3-flash', timeout=3, endpoint_file=str(endpoint))
    assert not asked.check('127.0.0.1', '41').answered                    # no file: the probe's port
    endpoint.write_text('GLM_BASE_URL=http://node3:%d/v1\nGLM_MODEL=glm-5.3-flash\n' % server)
    assert not asked.check('127.0.0.1', '41').answered                    # a file that names no job: the same
    endpoint.write_text('GLM_BASE_URL=http://node3:%d/v1\nGLM_MODEL=glm-5.3-flash\nGLM_ROUTER_JOB=40\n' % server)
    seen = len(Handler.seen)
    result = asked.check('127.0.0.1', '41')
    assert (result.status, result.answered) == (mp.STARTING, False) and len(Handler.seen) == seen
    assert result.detail == 'the endpoint file names job 40 (job 41 has not taken the endpoint yet)'
    endpoint.write_text('GLM_BASE_URL=http://node3:%d/v1\nGLM_MODEL=glm-5.3-flash\nGLM_ROUTER_JOB=41\n' % server)
    assert asked.check('127.0.0.1', '41').status == mp.READY
    assert asked.endpoint('127.0.0.1', '41') == 'http://127.0.0.1:%d' % server
    assert not asked.check('127.0.0.1').answered                          # no job named: the probe's port


def test_a_closed_port_is_no_answer():
    sock = socket.socket()
    sock.bind(('127.0.0.1', 0))
    port = sock.getsockname()[1]
    sock.close()                                                          # nothing listens there now
    result = probe(port).check('127.0.0.1')
    assert result.status == mp.STARTING and not result.answered and 'refused' in result.detail.lower()


def test_a_server_that_never_answers_times_out():
    sock = socket.socket()
    sock.bind(('127.0.0.1', 0))
    sock.listen(1)                                                        # accepts, never answers
    try:
        result = mp.ModelProbe(sock.getsockname()[1], 'v1/models', KEY, 'glm-5.3-flash', timeout=0.5).check('127.0.0.1')
    finally:
        sock.close()
    assert result.status == mp.STARTING and not result.answered and 'timed out' in result.detail


@pytest.fixture(scope='module')
def tls_server(tmp_path_factory, make_certificate):
    """The same answers over HTTPS, with a certificate for glm.example (not 127.0.0.1, where the probe connects)."""
    folder = tmp_path_factory.mktemp('tls')
    cert, key = make_certificate(folder, 'glm.example')
    with serving(cert, key) as port:
        yield port, cert, folder


def test_https_pinned_to_the_certificate_whatever_names_it_lists(tls_server):
    port, cert, _folder = tls_server
    tls = mp.ModelProbe(port, '/v1/models', KEY, 'glm-5.3-flash', timeout=3, tls_cert=cert)
    assert tls.endpoint('node3') == 'https://node3:%d' % port
    result = tls.check('127.0.0.1')
    assert result.status == mp.READY, result
    assert Handler.seen[-1] == ('/v1/models', 'Bearer ' + KEY)


def test_over_tls_is_the_same_probe_over_https(tls_server):
    port, cert, _folder = tls_server
    plain = probe(port)
    assert plain.endpoint('node3') == 'http://node3:%d' % port and plain.check('127.0.0.1').status == mp.STARTING
    tls = plain.over_tls(cert)
    assert tls.endpoint('node3') == 'https://node3:%d' % port and tls.check('127.0.0.1').status == mp.READY
    assert (tls.port, tls.path, tls.model, tls.timeout) == (plain.port, plain.path, plain.model, plain.timeout)


def test_https_refuses_another_certificate_and_plain_http_gets_no_answer(tls_server, make_certificate):
    port, _cert, folder = tls_server
    other, _key = make_certificate(folder, 'someone-else')
    seen = len(Handler.seen)
    result = mp.ModelProbe(port, '/v1/models', KEY, 'glm-5.3-flash', timeout=3, tls_cert=other).check('127.0.0.1')
    assert result.status == mp.STARTING and not result.answered and 'TLS' in result.detail, result
    assert len(Handler.seen) == seen                                   # the key was not sent
    plain = probe(port).check('127.0.0.1')                             # no tls_cert: HTTP to a TLS port gets no answer
    assert plain.status == mp.STARTING and not plain.answered, plain


def issued(folder, name, ca):
    """A certificate for NAME issued by the CA (cert, key) made with make_certificate; its chain file (the
    certificate, then the CA's) and its key."""
    key, csr = os.path.join(str(folder), name + '.key'), os.path.join(str(folder), name + '.csr')
    cert, chain = os.path.join(str(folder), name + '.pem'), os.path.join(str(folder), name + '-chain.pem')
    subprocess.run(['openssl', 'req', '-new', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
                    '-subj', '/CN=' + name, '-keyout', key, '-out', csr], check=True, capture_output=True)
    subprocess.run(['openssl', 'x509', '-req', '-in', csr, '-CA', ca[0], '-CAkey', ca[1], '-CAcreateserial', '-days', '1',
                    '-out', cert], check=True, capture_output=True)
    with open(chain, 'w') as out, open(cert) as leaf, open(ca[0]) as root:
        out.write(leaf.read() + root.read())
    return chain, key


def test_the_pin_is_the_servers_own_certificate_not_its_issuer(tmp_path, make_certificate):
    """A chain file (the certificate, then its CA) pins the certificate: a server with another certificate from the
    same CA gets nothing, not even the request; the right one answers without the CA being trusted anywhere."""
    ca = make_certificate(tmp_path, 'site-ca')
    mine, _key = issued(tmp_path, 'router-a', ca)
    theirs, their_key = issued(tmp_path, 'router-b', ca)
    with serving(theirs, their_key) as port:
        seen = len(Handler.seen)
        result = mp.ModelProbe(port, '/v1/models', KEY, 'glm-5.3-flash', timeout=3, tls_cert=mine).check('127.0.0.1')
        assert result.status == mp.STARTING and not result.answered, result
        assert result.detail == 'no answer (TLS: the server presents another certificate than %s)' % mine
        assert len(Handler.seen) == seen                                   # nothing reached the server
        ready = mp.ModelProbe(port, '/v1/models', KEY, 'glm-5.3-flash', timeout=3, tls_cert=theirs).check('127.0.0.1')
        assert ready.status == mp.READY, ready


def test_a_tls_cert_that_is_no_certificate_is_refused_before_anything_is_sent(tmp_path):
    bad = tmp_path / 'cert.pem'
    bad.write_text('not a certificate\n')
    for path in (str(bad), str(tmp_path / 'missing.pem')):
        with pytest.raises(ValueError) as raised:
            mp.ModelProbe(1, '/v1/models', KEY, 'glm-5.3-flash', tls_cert=path)
        assert 'cannot use the TLS certificate %s' % path in str(raised.value)
