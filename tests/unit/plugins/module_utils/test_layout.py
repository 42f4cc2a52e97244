# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""layout: the names and paths of a deployment, and which jobs belong to it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.glm.serve.plugins.module_utils import layout as lay

WORK = '/home/u/glm'


def test_names_and_paths():
    lt = lay.Layout(WORK, 'glm-serve', 'glm-download')
    assert lt.router_name == 'glm-serve-router'
    assert lt.replica_names(3) == ['glm-serve', 'glm-serve-2', 'glm-serve-3']
    assert lt.bad_nodes_file == '/home/u/glm/bad-nodes.json'
    assert lt.router_workers_file == '/home/u/glm/router-workers.json'
    assert lt.replicas_dir == '/home/u/glm/replicas'
    assert lt.replica_url_file('glm-serve-2') == '/home/u/glm/replicas/glm-serve-2.url'
    assert lt.relay_file == '/home/u/glm/glm_relay.py'
    # sbatch --output=%x-%j.out, run in the work dir
    assert lt.log_file('glm-serve', 4124) == '/home/u/glm/glm-serve-4124.out'
    assert lt.activity_file('glm-serve-2', '7') == '/home/u/glm/glm-serve-2-7.activity'
    assert lay.log_name_re('glm-serve').match('glm-serve-4124.out').group(1) == '4124'
    assert not lay.log_name_re('glm-serve').match('glm-serve-2-4124.out')


def test_replica_zero_is_refused():
    with pytest.raises(ValueError):
        lay.Layout(WORK).replica_name(0)


@pytest.mark.parametrize('role, k, text', [
    ('download', None, 'glm.serve:glm-serve:download'),
    ('router', None, 'glm.serve:glm-serve:router'),
    ('replica', 1, 'glm.serve:glm-serve:replica:1'),
    ('replica', 3, 'glm.serve:glm-serve:replica:3'),
])
def test_comment_round_trip(role, k, text):
    lt = lay.Layout(WORK)
    assert lt.comment(role, k) == text
    assert lay.parse_comment(text, 'glm-serve') == (role, k)
    assert lt.membership({'name': 'anything', 'comment': text}) == (role, k)


@pytest.mark.parametrize('comment', ['glm.serve:glm-serve:replica', 'glm.serve:glm-serve:replica:0', 'glm.serve:glm-serve:replica:x',
                                     'glm.serve:glm-serve:server', 'glm.serve:glm-serve:router:2', 'other:glm-serve:router', ''])
def test_bad_comments(comment):
    assert lay.parse_comment(comment) is None


def test_collision_decided_by_comment():
    """Replica 2 of glm-serve and the server of the deployment glm-serve-2 share a name; their comments tell them apart."""
    ours, theirs = lay.Layout(WORK, 'glm-serve'), lay.Layout(WORK, 'glm-serve-2')
    replica2 = {'name': 'glm-serve-2', 'comment': ours.comment('replica', 2)}
    other_server = {'name': 'glm-serve-2', 'comment': theirs.comment('replica', 1)}
    assert ours.membership(replica2) == ('replica', 2)
    assert ours.membership(other_server) is None
    assert theirs.membership(other_server) == ('replica', 1)
    assert theirs.membership(replica2) is None
    # another tool's comment: not ours, whatever the name
    assert ours.membership({'name': 'glm-serve', 'comment': 'my own note'}) is None


@pytest.mark.parametrize('name, member', [
    ('glm-serve', ('replica', 1)), ('glm-serve-2', ('replica', 2)), ('glm-serve-12', ('replica', 12)),
    ('glm-serve-router', ('router', None)), ('glm-download', ('download', None)),
    ('glm-serve-1', None), ('glm-serve-x', None), ('glm-serve-2-router', None), ('xglm-serve', None), (None, None),
])
def test_without_comment_the_name_decides(name, member):
    """Jobs of an earlier release carry no comment: judged by name, as before."""
    assert lay.Layout(WORK).membership({'name': name, 'comment': None}) == member


def test_by_role():
    lt = lay.Layout(WORK)
    jobs = [{'name': 'glm-download', 'job_id': '1'}, {'name': 'glm-serve', 'job_id': '2'},
            {'name': 'glm-serve-2', 'job_id': '3', 'comment': lt.comment('replica', 2)},
            {'name': 'glm-serve-router', 'job_id': '4'}, {'name': 'glm-serve-2', 'job_id': '5', 'comment': 'glm.serve:glm-serve-2:replica:1'}]
    roles = lay.by_role(lt, jobs)
    assert [j['job_id'] for j in roles['download']] == ['1']
    assert [j['job_id'] for j in roles['router']] == ['4']
    assert dict((k, [j['job_id'] for j in v]) for k, v in roles['replicas'].items()) == {1: ['2'], 2: ['3']}
    assert [j['job_id'] for j in roles['others']] == ['5']
