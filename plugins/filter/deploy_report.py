# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""deploy_report: the lines the deploy playbook ends with (how to call the server), from what it served."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
import shlex

from ansible.errors import AnsibleFilterError

SETTINGS = ('endpoint_file', 'tunnel_command', 'tunnel_to', 'port', 'relay_port', 'api_key_file', 'api_key_path')
# a key path the curl line may show as the user wrote it (~ expanded by the shell); anything else is quoted resolved
PLAIN_PATH = re.compile(r'^~?[A-Za-z0-9._/-]+$')


def text(value):
    """A value as the playbook's templates print it (None as nothing)."""
    return '' if value is None else str(value)


def router_lines(result):
    """The router's line, its teams' line and each replica's line; none for a single server."""
    if not result.get('router'):
        return []
    lines = ['router: job %s on %s, policy %s, endpoint %s' % (
        text(result.get('job_id')), text(result.get('node') or '?'), text(result.get('policy')), text(result.get('base_url')))]
    if result.get('teams_line'):
        lines.append(result['teams_line'])
    if result.get('scale_line'):
        lines.append(result['scale_line'])
    return lines + [text(replica.get('line')) for replica in result.get('replicas') or []]


def avoided_line(result):
    """The nodes the server avoided: those that failed its GPU check in this run, else those on the bad-node list."""
    bad = result.get('bad_nodes') or []
    if bad:
        return 'nodes avoided (failed the GPU check): %s; see glm.serve.status' % '; '.join(
            '%s: %s' % (text(entry.get('node')), text(entry.get('cause'))) for entry in bad)
    excluded = result.get('excluded_nodes') or []
    if excluded:
        return 'nodes avoided: %s (on the bad-node list; see glm.serve.status)' % ', '.join(text(n) for n in excluded)
    return 'nodes avoided: none'


def answering_lines(result, settings):
    """A server (or router) that answers: its endpoint, the tunnel from the operator's machine, a curl to try."""
    base_url = result['base_url']
    tls_cert = result.get('tls_cert') or ''
    key_path = settings['api_key_file'] if PLAIN_PATH.match(settings['api_key_file'] or '') else shlex.quote(settings['api_key_path'])
    cacert = (' --cacert ' + shlex.quote(tls_cert)) if tls_cert else ''
    return [
        'endpoint: %s' % base_url,
        'model: %s' % text(result.get('model')),
        'max_model_len: %s' % text(result.get('max_model_len')),
        'job: %s on %s, log %s' % (text(result.get('job_id')), text(result.get('node')), text(result.get('log'))),
        'endpoint file: %s (GLM_BASE_URL, GLM_MODEL)' % settings['endpoint_file'],
        'from your machine (the login node is the only way in): %s' % settings['tunnel_command'],
        'then %s://localhost:%s/v1 with the key (copy it to this machine with glm.serve.fetch_key, see the README%s),'
        ' while that ssh runs: it starts a relay on the login node (127.0.0.1:%s to %s) that ends with it' % (
            base_url.split('://')[0], settings['port'], (', and trust the router certificate ' + tls_cert) if tls_cert else '',
            settings['relay_port'], settings['tunnel_to']),
        avoided_line(result),
        'try, on the login node (bash; the key is read from its file, never on a command line):',
        "curl -s%s -H @<(printf 'Authorization: Bearer %%s\\n' \"$(cat %s)\") %s/models" % (cacert, key_path, base_url),
    ]


def submitted_lines(result, download_job_id, check_mode):
    """A server submitted and not waited for: its job and state, the download's job, where to look next."""
    return [
        'server job %s: %s (not waited for: %s)' % (text(result.get('job_id')), text(result.get('state')),
                                                    'check mode' if check_mode else 'server_wait is false'),
        'download job: %s' % (download_job_id or 'none needed'),
        'log: %s; rerun the playbook, or glm.serve.status, to see when it answers' % text(result.get('log')),
    ]


def deploy_report(result, download_job_id='', check_mode=False, **settings):
    """The deploy's closing lines for its result (glm.serve.server's server_result, or the router's in front of the
    replicas): the router's lines, then how to call the server when it answers, else what was submitted."""
    if not isinstance(result, dict) or 'base_url' not in result:
        raise AnsibleFilterError('glm.serve.deploy_report expects the deploy\'s result (server_result or the router\'s)')
    missing = [k for k in SETTINGS if k not in settings]
    if missing:
        raise AnsibleFilterError('glm.serve.deploy_report: missing %s' % ', '.join(missing))
    if result['base_url']:
        return router_lines(result) + answering_lines(result, settings)
    return router_lines(result) + submitted_lines(result, download_job_id, check_mode)


class FilterModule(object):
    def filters(self):
        return {'deploy_report': deploy_report}
