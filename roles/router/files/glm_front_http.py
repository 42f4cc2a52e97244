# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The front door's reading of a request (glm_front.py, beside this file): its head, framed one way only; the routes
the teams may use, as the gateway routes them; a body that names no credentials, upstream or code; the door's own
answers (Refused). Standard library only; no I/O."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

HEAD_LIMIT = 32768
CHUNK = 65536
#: (method, path) the teams may use: SGLang's OpenAI-compatible API, as the gateway routes it
ROUTES = {
    ('POST', '/v1/chat/completions'), ('POST', '/v1/completions'), ('POST', '/v1/responses'),
    ('POST', '/v1/embeddings'), ('GET', '/v1/models'),
}
#: (method, prefix): a route with one id after it (no ``/`` in it)
ROUTE_PREFIXES = (('GET', '/v1/models/'), ('GET', '/v1/responses/'), ('DELETE', '/v1/responses/'))
#: routes that answer without a key: the gateway's own liveness and readiness (no replica is asked)
OPEN_ROUTES = {('GET', '/liveness'), ('GET', '/readiness'), ('GET', '/health')}
#: top-level body fields that name credentials, another upstream or code to run (LiteLLM and other gateways honour
#: some of them; SGLang's custom_logit_processor is serialized code): refused whatever the gateway behind does
REFUSED_FIELDS = frozenset((
    'api_base', 'base_url', 'api_key', 'user_config', 'litellm_params', 'extra_headers', 'organization',
    'api_version', 'azure_ad_token', 'azure_ad_token_provider', 'aws_access_key_id', 'aws_secret_access_key',
    'aws_session_token', 'aws_region_name', 'aws_profile_name', 'aws_role_name', 'aws_web_identity_token',
    'vertex_credentials', 'vertex_project', 'vertex_location', 'vertex_ai_project', 'vertex_ai_location',
    'watsonx_api_key', 'custom_llm_provider', 'mock_response', 'custom_logit_processor', 'lora_path'))
REFUSED_PREFIXES = ('os.environ/', 'oidc/')
#: fields of a request's or an answer's head that are the connection's, not the message's (RFC 9110 section 7.6.1)
HOP_BY_HOP = frozenset((b'connection', b'keep-alive', b'proxy-connection', b'proxy-authorization', b'proxy-authenticate',
                        b'te', b'trailer', b'transfer-encoding', b'upgrade', b'content-length', b'expect'))
#: a control character (a bare CR or LF, NUL, ...) but a tab: one in a request line or a field's value could be read
#: as the end of a line by the gateway (httparse takes a bare LF), which would then see fields this door did not
_CONTROL = re.compile(rb'[\x00-\x08\x0a-\x1f\x7f]')
_TOKEN = re.compile(rb'^[!#$%&\'*+.^_`|~0-9A-Za-z-]+$')


class Refused(Exception):
    """A request the door answers itself: STATUS, REASON, the error's message, type and code, Retry-After."""

    def __init__(self, status, reason, message, kind='invalid_request_error', code=None, retry_after=None):
        Exception.__init__(self, message)
        self.status, self.reason, self.message, self.kind, self.code = status, reason, message, kind, code
        self.retry_after = retry_after

    def answer(self, keep_alive=False):
        body = {'error': {'message': self.message, 'type': self.kind, 'code': self.code or self.status}}
        return response(self.status, self.reason, body, self.retry_after, keep_alive)


def response(status, reason, body, retry_after=None, keep_alive=False):
    """The bytes of a whole HTTP/1.1 answer with a JSON BODY."""
    return text_response(json.dumps(body).encode('utf-8'), 'application/json', keep_alive, status, reason, retry_after)


def text_response(data, content_type, keep_alive=False, status=200, reason='OK', retry_after=None):
    """The bytes of a whole HTTP/1.1 answer with the body DATA (bytes) of CONTENT_TYPE."""
    head = ['HTTP/1.1 %d %s' % (status, reason), 'Content-Type: %s' % content_type, 'Content-Length: %d' % len(data)]
    if not keep_alive:
        head.append('Connection: close')
    if retry_after is not None:
        head.append('Retry-After: %d' % max(1, int(retry_after + 0.999)))
    return ('\r\n'.join(head) + '\r\n\r\n').encode('ascii') + data


class Head:
    """A request's head: method, target, version, fields [(lower-case name, value)], and what frames its body."""

    __slots__ = ('method', 'target', 'version', 'fields', 'length', 'chunked', 'keep_alive', 'expect')

    def field(self, name):
        for key, value in self.fields:
            if key == name:
                return value
        return None

    @property
    def path(self):
        return self.target.split('?', 1)[0]


def parse_head(data):
    """A Head from DATA (the head's bytes, with the empty line that ends it); Refused (400) when it is not a request
    the gateway would read one way only."""
    lines = data.split(b'\r\n')
    if lines[-2:] != [b'', b'']:
        raise Refused(400, 'Bad Request', 'a request head ends with an empty line (CRLF CRLF)')
    parts = lines[0].split(b' ')
    if len(parts) != 3 or not parts[1].startswith(b'/') or _CONTROL.search(lines[0]):
        raise Refused(400, 'Bad Request', 'not an HTTP/1.1 request line (METHOD /path HTTP/1.1)')
    if parts[2] != b'HTTP/1.1':
        raise Refused(505, 'HTTP Version Not Supported', 'this service speaks HTTP/1.1 only')
    head = Head()
    head.method, head.target, head.version = parts[0].decode('ascii', 'replace'), parts[1].decode('latin-1'), parts[2]
    head.fields = []
    for line in lines[1:-2]:
        name, sep, value = line.partition(b':')
        if not sep or not _TOKEN.match(name) or _CONTROL.search(value):
            raise Refused(400, 'Bad Request', 'a malformed header field (folded, a space before its colon, or a '
                          'control character such as a bare CR or LF in its value)')
        head.fields.append((name.lower(), value.strip(b' \t')))
    _framing(head)
    return head


def _framing(head):
    lengths = [v for k, v in head.fields if k == b'content-length']
    codings = [v for k, v in head.fields if k == b'transfer-encoding']
    if len(lengths) > 1 or (lengths and codings):
        raise Refused(400, 'Bad Request', 'one Content-Length, or Transfer-Encoding: chunked, not both nor twice')
    if codings and (len(codings) > 1 or codings[0].lower() != b'chunked'):
        raise Refused(400, 'Bad Request', 'the only transfer coding taken is chunked')
    if lengths and not lengths[0].isdigit():
        raise Refused(400, 'Bad Request', 'Content-Length is not a number')
    head.length = int(lengths[0]) if lengths else 0
    head.chunked = bool(codings)
    connection = (head.field(b'connection') or b'').lower()
    head.keep_alive = b'close' not in connection if head.version == b'HTTP/1.1' else b'keep-alive' in connection
    head.expect = (head.field(b'expect') or b'').lower() == b'100-continue'


def route_allowed(method, path):
    """Whether a team's key may use METHOD on PATH (the raw path of the request target, as the gateway routes it)."""
    if (method, path) in ROUTES:
        return True
    for allowed, prefix in ROUTE_PREFIXES:
        name = path[len(prefix):]
        if method == allowed and path.startswith(prefix) and name and '/' not in name and ':' not in name:
            return True
    return False


def check_route(head):
    """Refused (400/403) unless HEAD's route is one of the API's; the open routes pass (False: no key needed)."""
    if '%' in head.path or '\\' in head.path:
        raise Refused(400, 'Bad Request', 'percent-encoded or backslashed paths are not served here')
    if (head.method, head.path) in OPEN_ROUTES:
        return False
    return True


def check_body(body):
    """Refused (400) unless BODY (bytes) is empty or a JSON object with nothing in it that picks credentials, another
    upstream or code: REFUSED_FIELDS at its top level, a string value anywhere that starts with REFUSED_PREFIXES."""
    if not body:
        return
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        raise Refused(400, 'Bad Request', 'the body is not JSON (or nested too deep)')
    if not isinstance(data, dict):
        raise Refused(400, 'Bad Request', 'the body is not a JSON object')
    for name in data:
        if name in REFUSED_FIELDS:
            raise Refused(400, 'Bad Request', 'the field "%s" is not accepted: credentials, upstreams and code are the '
                          "service's, not a request's" % name, code='field_not_allowed')
    where = _refused_value(data, '')
    if where is not None:
        raise Refused(400, 'Bad Request', 'the value of "%s" starts with %s: references to the server\'s environment '
                      'or identity are not accepted' % (where[0] or '(body)', where[1]), code='value_not_allowed')


def _refused_value(data, where):
    """(the first path whose string value starts with one of REFUSED_PREFIXES, that prefix), or None."""
    stack = [(data, where)]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            for prefix in REFUSED_PREFIXES:
                if value.startswith(prefix):
                    return path, prefix
        elif isinstance(value, dict):
            stack.extend((v, '%s.%s' % (path, k) if path else str(k)) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, '%s[%d]' % (path, i)) for i, v in enumerate(value))
    return None
