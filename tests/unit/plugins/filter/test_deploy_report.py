# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The deploy_report filter: the deploy's closing lines (they were Jinja in playbooks/deploy.yml until 2026-12-05, and
were compared with it on 768 combinations before it went: the same text, None printed as nothing)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.glm.serve.plugins.filter.deploy_report import deploy_report

SETTINGS = {'endpoint_file': '~/glm/endpoint', 'tunnel_command': 'ssh -L 30000:127.0.0.1:21845 t', 'tunnel_to': 'node1:30000',
            'port': 30000, 'relay_port': 21845, 'api_key_file': '~/glm/api-key', 'api_key_path': '/home/u/glm/api-key'}


def settings(**over):
    """SETTINGS with some changed."""
    out = dict(SETTINGS)
    out.update(over)
    return out


SERVER = {'base_url': 'http://node1:30000/v1', 'model': 'glm-5.3-flash', 'max_model_len': 202752, 'job_id': '12',
          'node': 'node1', 'log': '/home/u/glm/glm-serve-12.out', 'state': 'RUNNING', 'bad_nodes': [], 'excluded_nodes': []}


def test_a_server_that_answers():
    assert deploy_report(SERVER, **SETTINGS) == [
        'endpoint: http://node1:30000/v1',
        'model: glm-5.3-flash',
        'max_model_len: 202752',
        'job: 12 on node1, log /home/u/glm/glm-serve-12.out',
        'endpoint file: ~/glm/endpoint (GLM_BASE_URL, GLM_MODEL)',
        'from your machine (the login node is the only way in): ssh -L 30000:127.0.0.1:21845 t',
        'then http://localhost:30000/v1 with the key (copy it to this machine with glm.serve.fetch_key, see the README),'
        ' while that ssh runs: it starts a relay on the login node (127.0.0.1:21845 to node1:30000) that ends with it',
        'nodes avoided: none',
        'try, on the login node (bash; the key is read from its file, never on a command line):',
        'curl -s -H @<(printf \'Authorization: Bearer %s\\n\' "$(cat ~/glm/api-key)") http://node1:30000/v1/models',
    ]


def test_a_key_path_with_a_space_is_shown_resolved_and_quoted():
    lines = deploy_report(SERVER, **settings(api_key_file='~/my key', api_key_path='/home/u/my key'))
    assert lines[-1] == 'curl -s -H @<(printf \'Authorization: Bearer %s\\n\' "$(cat \'/home/u/my key\')") http://node1:30000/v1/models'


def test_the_router_with_tls_teams_and_replicas_comes_first():
    router = dict(SERVER, base_url='https://node3:8443/v1', router=True, policy='cache_aware', node=None,
                  teams_line='teams: a, b', replicas=[{'line': 'replica 1: a'}, {'line': 'replica 2: b'}],
                  tls_cert='/home/u/my cert.pem', max_model_len=None)
    lines = deploy_report(router, **settings(tunnel_to='node3:8443'))
    assert lines[:3] == ['router: job 12 on ?, policy cache_aware, endpoint https://node3:8443/v1', 'teams: a, b', 'replica 1: a']
    assert lines[3:6] == ['replica 2: b', 'endpoint: https://node3:8443/v1', 'model: glm-5.3-flash']
    assert 'max_model_len: ' in lines and 'job: 12 on , log /home/u/glm/glm-serve-12.out' in lines
    assert ("then https://localhost:30000/v1 with the key (copy it to this machine with glm.serve.fetch_key, see the"
            " README, and trust the router certificate /home/u/my cert.pem), while that ssh runs: it starts a relay on"
            " the login node (127.0.0.1:21845 to node3:8443) that ends with it") in lines
    assert lines[-1].startswith("curl -s --cacert '/home/u/my cert.pem' -H ")


@pytest.mark.parametrize('bad, excluded, line', [
    ([{'node': 'node2', 'cause': 'Xid 79'}, {'node': 'node4', 'cause': 'ECC'}], ['node2'],
     'nodes avoided (failed the GPU check): node2: Xid 79; node4: ECC; see glm.serve.status'),
    ([], ['node2', 'node4'], 'nodes avoided: node2, node4 (on the bad-node list; see glm.serve.status)'),
])
def test_the_nodes_avoided(bad, excluded, line):
    assert line in deploy_report(dict(SERVER, bad_nodes=bad, excluded_nodes=excluded), **SETTINGS)


@pytest.mark.parametrize('check_mode, download, why, dl', [
    (True, '', 'check mode', 'none needed'), (False, '7', 'server_wait is false', '7')])
def test_a_server_not_waited_for(check_mode, download, why, dl):
    lines = deploy_report(dict(SERVER, base_url='', state='PENDING'), download_job_id=download, check_mode=check_mode, **SETTINGS)
    assert lines == ['server job 12: PENDING (not waited for: %s)' % why, 'download job: %s' % dl,
                     'log: /home/u/glm/glm-serve-12.out; rerun the playbook, or glm.serve.status, to see when it answers']


def test_it_checks_its_input():
    with pytest.raises(AnsibleFilterError, match='server_result'):
        deploy_report({'job_id': '1'}, **SETTINGS)
    with pytest.raises(AnsibleFilterError, match='missing tunnel_to'):
        deploy_report(SERVER, **dict((k, v) for k, v in settings().items() if k != 'tunnel_to'))
