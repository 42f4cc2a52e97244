# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Readiness probe of an OpenAI-compatible server: ``GET http://NODE:PORT/v1/models`` with a bearer key.

The standard library's ``http.client`` (login nodes need no extra Python package): no proxy, no redirect, which
is what a probe of a compute node's port wants, and it imports in a few milliseconds where
``ansible.module_utils.urls`` takes about 60 (a re-run pays it on every deploy). The key is read from a file on
the host, goes only into the Authorization header, and never into a URL, a result, an exception message or a log.

With ``tls_cert`` (the router's certificate, a PEM file on the host), the probe speaks HTTPS and accepts that
certificate and nothing else (:func:`https_get`: the exact certificate, pinned): the key goes only to the server
that presents it, whatever names it carries (the probe connects to a node name, which a certificate made for the
tunnel's ``localhost`` or for a service name need not list) and whoever signed it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import http.client as http_client
import json
import re
import socket
import ssl

READY = 'ready'
STARTING = 'starting'
UNAUTHORIZED = 'unauthorized'
WRONG_MODEL = 'wrong_model'


class ProbeResult:
    """The outcome of one probe request. ``answered`` is True when the server sent any HTTP response."""

    def __init__(self, status, detail, answered=False, models=None, max_model_len=None):
        self.status = status
        self.detail = detail
        self.answered = answered
        self.models = models or []
        self.max_model_len = max_model_len

    def __repr__(self):
        return 'ProbeResult(%s, %r)' % (self.status, self.detail)


class KeyFileError(Exception):
    pass


def read_key(path):
    """The API key in ``path`` (first line, stripped). Raises KeyFileError naming the file, never the key."""
    try:
        with open(path, 'r') as handle:
            key = handle.readline().strip()
    except (IOError, OSError) as exc:
        raise KeyFileError('cannot read the API key file %s: %s' % (path, getattr(exc, 'strerror', None) or type(exc).__name__))
    if not key:
        raise KeyFileError('the API key file %s is empty' % path)
    return key


def parse_models(body, model):
    """(ids, max_model_len of ``model`` or None) from a /v1/models JSON body. Raises ValueError."""
    data = json.loads(body)
    entries = data.get('data') if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ValueError('no data list')
    ids = []
    max_len = None
    for entry in entries:
        if isinstance(entry, dict) and entry.get('id') is not None:
            ids.append(str(entry['id']))
            if entry['id'] == model:
                max_len = entry.get('max_model_len')
    return ids, max_len


class ModelProbe:
    """Probe ``http://NODE:PORT/PATH`` until it lists ``model``.

    ``opener(host, port, path, headers, timeout)`` returns ``(status, body)``; it defaults to :func:`http_get`
    (HTTPS pinned to ``tls_cert`` when given), tests pass a fake one.
    """

    def __init__(self, port, path, key, model, timeout=5, key_file=None, opener=None, tls_cert=None, endpoint_file=None):
        self.port = int(port)
        self.path = path if path.startswith('/') else '/' + path
        self._key = key
        self.model = model
        self.timeout = timeout
        self.key_file = key_file
        self.endpoint_file = endpoint_file
        self.scheme = 'https' if tls_cert else 'http'
        self._open = opener or (https_get(tls_cert) if tls_cert else http_get)

    def over_tls(self, tls_cert):
        """This probe over HTTPS, trusting ``tls_cert`` alone (a router that serves HTTPS beside plain-HTTP replicas).
        Raises ValueError when the file holds no certificate."""
        return ModelProbe(self.port, self.path, self._key, self.model, timeout=self.timeout, key_file=self.key_file,
                          tls_cert=tls_cert, endpoint_file=self.endpoint_file)

    def following(self, endpoint_file):
        """This probe, asking the port of the endpoint file's GLM_BASE_URL while the file names the job (port_of)."""
        probe = ModelProbe(self.port, self.path, self._key, self.model, timeout=self.timeout, key_file=self.key_file,
                           opener=self._open, endpoint_file=endpoint_file)
        probe.scheme = self.scheme
        return probe

    def port_of(self, job_id=None):
        """(the port to ask, or None while the job does not serve the endpoint yet, the reason). Without an
        endpoint file, or one that names no job (GLM_ROUTER_JOB: a router of an earlier release), ``port``; with one
        that names JOB_ID, the port of its GLM_BASE_URL (a router successor on its predecessor's node moved its
        ports); with one that names another job, None: that one serves the endpoint, this one has not taken it."""
        if not self.endpoint_file or not job_id:
            return self.port, None
        owner, url = endpoint_owner(self.endpoint_file)
        if not owner:
            return self.port, None
        if owner != str(job_id):
            return None, 'the endpoint file names job %s (job %s has not taken the endpoint yet)' % (owner, job_id)
        return url_port(url) or self.port, None

    def endpoint(self, node, job_id=None):
        return '%s://%s:%d' % (self.scheme, node, self.port_of(job_id)[0] or self.port)

    def text(self, node, path, job_id=None):
        """(status, text) of ``GET path`` on the port this probe asks (port_of), with the key (and over HTTPS pinned,
        as the probe); (None, None) when nothing answers or the job does not serve the endpoint."""
        port = self.port_of(job_id)[0]
        if port is None:
            return None, None
        try:
            code, body = self._open(node, port, path, {'Authorization': 'Bearer %s' % self._key}, self.timeout)
        except Exception:  # pylint: disable=broad-except  # socket, ssl and http.client errors: no answer
            return None, None
        return code, body.decode('utf-8', 'replace') if isinstance(body, bytes) else body

    def check(self, node, job_id=None):
        headers = {'Authorization': 'Bearer %s' % self._key, 'Accept': 'application/json'}
        port, waiting = self.port_of(job_id)
        if port is None:
            return ProbeResult(STARTING, waiting)
        try:
            code, body = self._open(node, port, self.path, headers, self.timeout)
        except (socket.timeout, socket.error, IOError, ValueError) as exc:
            return ProbeResult(STARTING, 'no answer (%s)' % _reason(exc))
        except Exception as exc:  # pylint: disable=broad-except  # http.client errors: RemoteDisconnected, BadStatusLine
            return ProbeResult(STARTING, 'no answer (%s)' % type(exc).__name__)
        if code in (401, 403):
            return ProbeResult(UNAUTHORIZED, 'HTTP %d' % code, answered=True)
        if code != 200:
            return ProbeResult(STARTING, 'HTTP %s' % code, answered=True)
        if isinstance(body, bytes):
            body = body.decode('utf-8', 'replace')
        try:
            ids, max_len = parse_models(body, self.model)
        except (ValueError, AttributeError):
            return ProbeResult(STARTING, 'HTTP 200 without a model list', answered=True)
        if self.model in ids:
            return ProbeResult(READY, 'serves %s' % ', '.join(ids), answered=True, models=ids, max_model_len=max_len)
        if not ids:
            return ProbeResult(STARTING, 'HTTP 200 with no model yet', answered=True)
        return ProbeResult(WRONG_MODEL, 'serves %s, not %s' % (', '.join(ids), self.model), answered=True, models=ids)


def url_port(url):
    """The port of an http(s)://HOST:PORT[/...] URL (an endpoint file's GLM_BASE_URL), None without one."""
    found = re.match(r'^https?://(?:[^/:]+|\[[^\]]+\]):(\d+)', url or '')
    return int(found.group(1)) if found else None


def read_endpoint_file(path):
    """({VAR: value} of the endpoint file's VAR=value lines, its text); (None, None) when it is missing or unreadable.
    The one reader of the file (the server's and the router's jobs write it): the probe, deployment_info."""
    try:
        with open(path, encoding='utf-8') as handle:
            text = handle.read()
    except (IOError, OSError, TypeError, ValueError):
        return None, None
    lines = [line.strip() for line in text.splitlines() if re.match(r'^[A-Z_]+=', line)]
    return dict(line.split('=', 1) for line in lines), text


def endpoint_owner(path):
    """(GLM_ROUTER_JOB, GLM_BASE_URL) of the endpoint file PATH (the router job that serves the endpoint and its URL);
    ('', '') when the file is missing, unreadable or names no job."""
    found = read_endpoint_file(path)[0] or {}
    return found.get('GLM_ROUTER_JOB', ''), found.get('GLM_BASE_URL', '')


def http_get(host, port, path, headers, timeout):
    """``GET path`` on ``host:port`` over plain HTTP: ``(status, body bytes)``. Raises socket and http.client errors."""
    conn = http_client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request('GET', path, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


PEM_CERT_RE = re.compile(r'-----BEGIN CERTIFICATE-----[A-Za-z0-9+/=\s]+-----END CERTIFICATE-----')


class PinMismatch(ssl.SSLError):
    """The server presented another certificate than the pinned one (nothing was sent)."""


def read_pin(cert_file):
    """The DER bytes of the first certificate in the PEM file ``cert_file`` (the server's own: a chain file starts with
    it). Raises ValueError naming the file when it holds none or cannot be read."""
    try:
        with open(cert_file, 'r') as handle:
            found = PEM_CERT_RE.search(handle.read())
    except (IOError, OSError, UnicodeDecodeError) as exc:
        raise ValueError('cannot use the TLS certificate %s: %s' % (cert_file, getattr(exc, 'strerror', None) or exc))
    if not found:
        raise ValueError('cannot use the TLS certificate %s: no PEM certificate in it' % cert_file)
    try:
        return ssl.PEM_cert_to_DER_cert(found.group(0))
    except ValueError as exc:
        raise ValueError('cannot use the TLS certificate %s: %s' % (cert_file, exc))


def https_get(cert_file):
    """An opener like :func:`http_get` over HTTPS, pinned to the certificate in ``cert_file``: after the handshake and
    before the request (and its key) is sent, the server's certificate must be exactly that one (the DER bytes), so
    no other certificate passes, whoever signed it, and no name or CA chain is needed (SSH's host-key model; the same
    on every Python). Raises ValueError (naming the file) when it holds no certificate, before anything is sent."""
    pin = read_pin(cert_file)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE     # the pin below is the check: exactly this certificate

    def opener(host, port, path, headers, timeout):
        conn = http_client.HTTPSConnection(host, port, timeout=timeout, context=context)
        try:
            conn.connect()
            if conn.sock.getpeercert(True) != pin:
                raise PinMismatch('the server presents another certificate than %s' % cert_file)
            conn.request('GET', path, headers=headers)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()
    return opener


def _reason(exc):
    if isinstance(exc, socket.timeout):
        return 'timed out'
    if isinstance(exc, PinMismatch):
        return 'TLS: %s' % exc.args[0]
    if isinstance(exc, ssl.SSLError):
        return 'TLS: %s' % (getattr(exc, 'verify_message', None) or getattr(exc, 'reason', None) or exc)
    text = getattr(exc, 'strerror', None) or str(exc) or type(exc).__name__
    return text
