# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""team_keys's module: the team key files (made, kept, rotated, revoked, 0600), the registry of their hashes, check
mode, the validation, and that no key or hash is ever returned."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import stat

import pytest

from ansible_collections.glm.serve.plugins.modules import team_keys

SERVICE_KEY = 'ab' * 24


@pytest.fixture
def paths(tmp_path):
    """The service key (made as the role api_key makes it), and where the team keys and the registry go."""
    work = tmp_path / 'glm'
    work.mkdir(mode=0o700)
    service = work / 'api-key'
    service.write_text(SERVICE_KEY + '\n')
    service.chmod(0o600)
    return dict(service_key_file=str(service), keys_dir=str(work / 'team-keys'),
                registry=str(work / 'gateway' / 'teams.json'))


def run(run_module, paths, teams=(), check_mode=False, **args):
    args = dict(paths, teams=list(teams), **args)
    if check_mode:
        args['_ansible_check_mode'] = True
    return run_module(team_keys.main, args)


def mode(path):
    return stat.S_IMODE(os.lstat(str(path)).st_mode)


def key_of(path):
    with open(str(path)) as f:
        return f.readline().strip()


def sha(key):
    return hashlib.sha256(key.encode()).hexdigest()


def registry(paths):
    with open(paths['registry']) as f:
        return json.load(f)


def snapshot(root):
    """Every file and folder under root: (relative path, mode, content)."""
    found = []
    for folder, dirs, files in os.walk(str(root)):
        for name in sorted(dirs + files):
            path = os.path.join(folder, name)
            content = None if os.path.isdir(path) or os.path.islink(path) else open(path, 'rb').read()
            found.append((os.path.relpath(path, str(root)), mode(path), content))
    return sorted(found)


TEAMS = [dict(name='search', rpm=600, tpm=2000000, max_parallel=16), dict(name='research')]


def test_creates_keys_and_registry(run_module, paths):
    result = run(run_module, paths, TEAMS)
    assert not result['failed'], result
    assert result['changed'] and result['registry_changed'] and result['revoked'] == []
    assert result['registry'] == paths['registry']
    keys_dir = paths['keys_dir']
    assert result['teams'] == [
        dict(name='default', path=paths['service_key_file'], created=False, rotated=False,
             rpm=None, tpm=None, max_parallel=None),
        dict(name='search', path=os.path.join(keys_dir, 'search'), created=True, rotated=False,
             rpm=600, tpm=2000000, max_parallel=16),
        dict(name='research', path=os.path.join(keys_dir, 'research'), created=True, rotated=False,
             rpm=None, tpm=None, max_parallel=None),
    ]
    assert mode(keys_dir) == 0o700
    assert sorted(os.listdir(keys_dir)) == ['research', 'search']  # no temporary file left
    for name in ('search', 'research'):
        path = os.path.join(keys_dir, name)
        assert mode(path) == 0o600
        text = open(path).read()
        assert len(text) == 49 and text.endswith('\n') and int(text[:48], 16) >= 0
    assert key_of(os.path.join(keys_dir, 'search')) != key_of(os.path.join(keys_dir, 'research'))
    assert mode(paths['registry']) == 0o600
    assert os.listdir(os.path.dirname(paths['registry'])) == ['teams.json']
    assert key_of(paths['service_key_file']) == SERVICE_KEY  # the service key is only read


def test_registry_content_hashes_and_no_key_anywhere(run_module, paths):
    result = run(run_module, paths, TEAMS, key_bytes=32)
    keys = dict((name, key_of(os.path.join(paths['keys_dir'], name))) for name in ('search', 'research'))
    keys['default'] = SERVICE_KEY
    assert len(keys['search']) == 64
    text = open(paths['registry']).read()
    expected = {'version': 1, 'teams': {
        'default': {'sha256': sha(SERVICE_KEY), 'rpm': None, 'tpm': None, 'max_parallel': None},
        'search': {'sha256': sha(keys['search']), 'rpm': 600, 'tpm': 2000000, 'max_parallel': 16},
        'research': {'sha256': sha(keys['research']), 'rpm': None, 'tpm': None, 'max_parallel': None},
    }}
    assert text == json.dumps(expected, indent=1, sort_keys=True) + '\n'
    returned = json.dumps(result)
    for key in keys.values():
        assert key not in returned and key not in text
        assert sha(key) not in returned


def test_second_run_changes_nothing(run_module, paths, tmp_path):
    run(run_module, paths, TEAMS)
    before = snapshot(tmp_path)
    result = run(run_module, paths, TEAMS)
    assert not result['failed'], result
    assert not result['changed'] and not result['registry_changed'] and result['revoked'] == []
    assert [(t['created'], t['rotated']) for t in result['teams']] == [(False, False)] * 3
    assert snapshot(tmp_path) == before


def test_check_mode_writes_nothing(run_module, paths, tmp_path):
    before = snapshot(tmp_path)
    result = run(run_module, paths, TEAMS, check_mode=True)
    assert not result['failed'], result
    assert result['changed'] and result['registry_changed']
    assert [t['created'] for t in result['teams']] == [False, True, True]
    assert snapshot(tmp_path) == before
    # and on a deployment made before: rotate, revoke, a mode to fix - all said, nothing done
    run(run_module, paths, TEAMS + [dict(name='old')])
    os.chmod(os.path.join(paths['keys_dir'], 'search'), 0o644)
    before = snapshot(tmp_path)
    result = run(run_module, paths, TEAMS, rotate=['research'], check_mode=True)
    assert result['changed'] and result['registry_changed'] and result['revoked'] == ['old']
    assert [(t['name'], t['created'], t['rotated']) for t in result['teams']] == [
        ('default', False, False), ('search', False, False), ('research', False, True)]
    assert snapshot(tmp_path) == before
    # a mode alone: changed, the registry is not
    run(run_module, paths, TEAMS)
    os.chmod(os.path.join(paths['keys_dir'], 'search'), 0o644)
    result = run(run_module, paths, TEAMS, check_mode=True)
    assert result['changed'] and not result['registry_changed']
    assert mode(os.path.join(paths['keys_dir'], 'search')) == 0o644


def test_modes_are_fixed(run_module, paths):
    run(run_module, paths, TEAMS)
    search = os.path.join(paths['keys_dir'], 'search')
    key = key_of(search)
    os.chmod(search, 0o644)
    os.chmod(paths['keys_dir'], 0o755)
    os.chmod(paths['registry'], 0o644)
    result = run(run_module, paths, TEAMS)
    assert result['changed'] and not result['registry_changed']
    assert not any(t['created'] or t['rotated'] for t in result['teams'])
    assert (mode(search), mode(paths['keys_dir']), mode(paths['registry'])) == (0o600, 0o700, 0o600)
    assert key_of(search) == key
    assert not run(run_module, paths, TEAMS)['changed']


def test_limits_change_only_the_registry(run_module, paths):
    run(run_module, paths, TEAMS)
    keys = sorted(open(os.path.join(paths['keys_dir'], n)).read() for n in ('search', 'research'))
    result = run(run_module, paths, [dict(name='search', rpm=60), dict(name='research', max_parallel=2)])
    assert result['changed'] and result['registry_changed']
    teams = registry(paths)['teams']
    assert (teams['search']['rpm'], teams['search']['tpm'], teams['research']['max_parallel']) == (60, None, 2)
    assert sorted(open(os.path.join(paths['keys_dir'], n)).read() for n in ('search', 'research')) == keys


def test_rotate_replaces_one_key(run_module, paths):
    run(run_module, paths, TEAMS)
    search, research = (os.path.join(paths['keys_dir'], n) for n in ('search', 'research'))
    old_search, old_research = key_of(search), key_of(research)
    result = run(run_module, paths, TEAMS, rotate=['research'])
    assert not result['failed'], result
    assert result['changed'] and result['registry_changed']
    assert [(t['name'], t['created'], t['rotated']) for t in result['teams']] == [
        ('default', False, False), ('search', False, False), ('research', False, True)]
    assert key_of(search) == old_search and key_of(research) != old_research
    assert mode(research) == 0o600 and sorted(os.listdir(paths['keys_dir'])) == ['research', 'search']
    teams = registry(paths)['teams']
    assert teams['research']['sha256'] == sha(key_of(research)) != sha(old_research)
    assert teams['search']['sha256'] == sha(old_search)


def test_rotate_a_team_without_a_key_makes_one(run_module, paths):
    result = run(run_module, paths, [dict(name='new')], rotate=['new'])
    assert [(t['created'], t['rotated']) for t in result['teams'][1:]] == [(True, False)]
    assert len(key_of(os.path.join(paths['keys_dir'], 'new'))) == 48


def test_revoke_removes_only_key_files_of_unlisted_teams(run_module, paths, tmp_path):
    run(run_module, paths, TEAMS + [dict(name='old'), dict(name='gone')])
    keys_dir = paths['keys_dir']
    outside = tmp_path / 'outside'
    outside.write_text('cd' * 24 + '\n')  # a key-like file outside keys_dir, reached by a link named as a team
    os.symlink(str(outside), os.path.join(keys_dir, 'linked'))
    for name, text in (('notes.txt', 'ab\n'), ('.hidden', 'ab\n'), ('Upper', 'ab\n'), ('readme', 'not a key\n'),
                       ('twolines', 'ab\n\n'), ('empty', '')):
        with open(os.path.join(keys_dir, name), 'w') as f:
            f.write(text)
    os.mkdir(os.path.join(keys_dir, 'folder'))
    result = run(run_module, paths, TEAMS)
    assert not result['failed'], result
    assert result['changed'] and result['registry_changed'] and result['revoked'] == ['gone', 'old']
    assert sorted(os.listdir(keys_dir)) == ['.hidden', 'Upper', 'empty', 'folder', 'linked', 'notes.txt', 'readme',
                                            'research', 'search', 'twolines']
    assert outside.read_text() == 'cd' * 24 + '\n'
    assert sorted(registry(paths)['teams']) == ['default', 'research', 'search']
    second = run(run_module, paths, TEAMS)
    assert not second['changed'] and second['revoked'] == []


def test_no_teams_revokes_all(run_module, paths):
    run(run_module, paths, TEAMS)
    result = run(run_module, paths)
    assert result['revoked'] == ['research', 'search'] and os.listdir(paths['keys_dir']) == []
    assert [t['name'] for t in result['teams']] == ['default']
    assert registry(paths) == {'version': 1, 'teams': {'default': {
        'sha256': sha(SERVICE_KEY), 'rpm': None, 'tpm': None, 'max_parallel': None}}}


def test_existing_key_is_kept_and_read_by_its_first_line(run_module, paths):
    os.makedirs(paths['keys_dir'], 0o700)
    path = os.path.join(paths['keys_dir'], 'search')
    with open(path, 'w') as f:
        f.write('  handmade-key-0123456789abcdef  \nsecond line\n')
    os.chmod(path, 0o600)
    result = run(run_module, paths, [dict(name='search')])
    assert [(t['created'], t['rotated']) for t in result['teams'][1:]] == [(False, False)]
    assert registry(paths)['teams']['search']['sha256'] == sha('handmade-key-0123456789abcdef')
    assert 'handmade-key' not in json.dumps(result)


def test_concurrent_creation_keeps_the_other_runs_key(run_module, paths, monkeypatch):
    other = 'ef' * 24
    real_link = os.link
    target = os.path.join(paths['keys_dir'], 'search')

    def link(src, dst, *args, **kwargs):
        if dst == target:  # another run made the key after this one found none
            with open(dst, 'w') as f:
                f.write(other + '\n')
            os.chmod(dst, 0o600)
        return real_link(src, dst, *args, **kwargs)
    monkeypatch.setattr(team_keys.os, 'link', link)
    result = run(run_module, paths, [dict(name='search')])
    assert not result['failed'], result
    assert [(t['created'], t['rotated']) for t in result['teams'][1:]] == [(False, False)]
    assert key_of(target) == other and mode(target) == 0o600
    assert os.listdir(paths['keys_dir']) == ['search']  # the temporary file is gone
    assert registry(paths)['teams']['search']['sha256'] == sha(other)


def test_without_hard_links_the_key_is_renamed_into_place(run_module, paths, monkeypatch):
    def link(src, dst, *args, **kwargs):
        raise OSError(1, 'Operation not permitted')
    monkeypatch.setattr(team_keys.os, 'link', link)
    result = run(run_module, paths, [dict(name='search')])
    assert result['teams'][1]['created']
    target = os.path.join(paths['keys_dir'], 'search')
    assert len(key_of(target)) == 48 and mode(target) == 0o600 and os.listdir(paths['keys_dir']) == ['search']


@pytest.mark.parametrize('args, words', [
    (dict(teams=[dict(name='Bad')]), ["'Bad'", 'not a team name', '^[a-z0-9][a-z0-9_-]{0,62}$']),
    (dict(teams=[dict(name='-x')]), ["'-x'", 'not a team name']),
    (dict(teams=[dict(name='a' * 64)]), ['not a team name', 'at most 63']),
    (dict(teams=[dict(name='a/b')]), ["'a/b'", 'not a team name']),
    (dict(teams=[dict(name='x'), dict(name='x')]), ["'x'", 'listed twice']),
    (dict(teams=[dict(name='default'), dict(name='default', rpm=5)]), ["'default'", 'listed twice']),
    (dict(teams=[dict(name='default', max_parallel=0)]), ['max_parallel', "'default'", 'positive']),
    (dict(teams=[dict(name='x', rpm=0)]), ['rpm', "'x'", 'positive']),
    (dict(teams=[dict(name='x', tpm=-5)]), ['tpm', "'x'", 'positive']),
    (dict(teams=[dict(name='x', max_parallel=0)]), ['max_parallel', 'positive']),
    (dict(teams=[dict(name='x')], rotate=['y']), ['rotate', "'y'", 'not in teams']),
    (dict(rotate=['default']), ['rotate', 'service key', 'glm.serve.api_key', 'api_key_rotate']),
    (dict(key_bytes=8), ['key_bytes', '16 to 256']),
    (dict(key_bytes=257), ['key_bytes', '16 to 256']),
])
def test_validation(run_module, paths, tmp_path, args, words):
    before = snapshot(tmp_path)
    result = run_module(team_keys.main, dict(paths, **args))
    assert result['failed']
    for word in words:
        assert word in result['msg'], (word, result['msg'])
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize('make, words', [
    (os.unlink, ['does not exist', 'role glm.serve.api_key']),
    (lambda p: open(p, 'w').close(), ['is empty', 'role glm.serve.api_key']),
    (lambda p: (os.unlink(p), os.mkdir(p)), ['is not a file', 'role glm.serve.api_key']),
])
def test_service_key_must_be_a_non_empty_file(run_module, paths, tmp_path, make, words):
    make(paths['service_key_file'])
    before = snapshot(tmp_path)
    result = run(run_module, paths, TEAMS)
    assert result['failed']
    assert paths['service_key_file'] in result['msg']
    for word in words:
        assert word in result['msg'], (word, result['msg'])
    assert snapshot(tmp_path) == before


def test_keys_dir_must_be_a_folder_of_its_own(run_module, paths, tmp_path):
    for keys_dir, words in ((os.path.dirname(paths['service_key_file']), ['service_key_file', 'folder of their own']),
                            (os.path.dirname(paths['registry']), ['registry', 'folder of their own'])):
        result = run(run_module, dict(paths, keys_dir=keys_dir), TEAMS)
        assert result['failed']
        for word in words:
            assert word in result['msg'], (word, result['msg'])
    open(paths['keys_dir'], 'w').close()
    result = run(run_module, paths, TEAMS)
    assert result['failed'] and 'not a folder' in result['msg']
    assert not os.path.exists(paths['registry'])


def test_a_team_key_that_cannot_be_kept_stops_before_any_change(run_module, paths, tmp_path):
    os.makedirs(paths['keys_dir'], 0o700)
    os.symlink(paths['service_key_file'], os.path.join(paths['keys_dir'], 'research'))
    before = snapshot(tmp_path)
    result = run(run_module, paths, TEAMS)
    assert result['failed'] and 'symbolic link' in result['msg'] and 'research' in result['msg']
    assert snapshot(tmp_path) == before
    os.unlink(os.path.join(paths['keys_dir'], 'research'))
    open(os.path.join(paths['keys_dir'], 'research'), 'w').close()
    result = run(run_module, paths, TEAMS)
    assert result['failed'] and 'has no key' in result['msg'] and 'rotate' in result['msg']
    assert os.listdir(paths['keys_dir']) == ['research']
    result = run(run_module, paths, TEAMS, rotate=['research'])
    assert not result['failed'] and result['teams'][2]['rotated'] and len(key_of(os.path.join(paths['keys_dir'],
                                                                                              'research'))) == 48


def test_registry_must_be_a_regular_file(run_module, paths):
    os.makedirs(paths['registry'])
    result = run(run_module, paths, TEAMS)
    assert result['failed'] and 'registry=' in result['msg'] and 'not a regular file' in result['msg']
    assert not os.path.exists(paths['keys_dir'])


def test_argument_spec_matches_the_docs():
    import yaml
    doc = yaml.safe_load(team_keys.DOCUMENTATION)['options']
    spec = team_keys.argument_spec()
    assert sorted(doc) == sorted(spec)
    for name, option in spec.items():
        assert doc[name]['type'] == option['type'] and doc[name].get('default') == option.get('default'), name
    assert sorted(doc['teams']['suboptions']) == sorted(spec['teams']['options'])


def test_check_mode_of_a_first_deploy_without_the_service_key_yet(run_module, paths, tmp_path):
    """deploy --check from nothing: the api_key role would make the service key first; here it is missing."""
    os.unlink(paths['service_key_file'])
    before = snapshot(tmp_path)
    result = run(run_module, paths, TEAMS, check_mode=True)
    assert not result['failed'], result
    assert result['changed'] and result['registry_changed']
    assert snapshot(tmp_path) == before
    refused = run(run_module, paths, TEAMS)                       # not in check mode: the key must be there
    assert refused['failed'] and 'does not exist' in refused['msg']


@pytest.mark.parametrize('copied_from', ['service', 'team'])
def test_two_teams_with_one_key_are_refused_before_anything_changes(run_module, paths, tmp_path, copied_from):
    """The gateway refuses a registry where two teams share a hash (every key with it): the module refuses first."""
    assert not run(run_module, paths, TEAMS)['failed']
    source = paths['service_key_file'] if copied_from == 'service' else os.path.join(paths['keys_dir'], 'search')
    with open(source) as handle, open(os.path.join(paths['keys_dir'], 'research'), 'w') as out:
        out.write(handle.read())
    before = snapshot(tmp_path)
    result = run(run_module, paths, TEAMS + [dict(name='newcomer')])
    assert result['failed'] and 'hold the same key' in result['msg'] and 'rotate' in result['msg'], result
    assert ('default and research' if copied_from == 'service' else 'research and search') in result['msg']
    assert snapshot(tmp_path) == before                           # no key made for newcomer, nothing written
    assert SERVICE_KEY not in json.dumps(result)
    fixed = run(run_module, paths, TEAMS, rotate=['research'])    # rotating one of them is the way out
    assert not fixed['failed'] and len(set(t['sha256'] for t in registry(paths)['teams'].values())) == 3


def test_the_registry_is_written_before_a_revoked_key_file_goes(run_module, paths, monkeypatch):
    """Revocation: the registry without the team first; a registry that cannot be written leaves the key file (the
    next run revokes it), never a file gone while the gateway still accepts its key."""
    assert not run(run_module, paths, TEAMS)['failed']
    gone = os.path.join(paths['keys_dir'], 'research')

    def broken(*_args):
        raise OSError(28, 'No space left on device')
    monkeypatch.setattr(team_keys.os, 'replace', broken)
    result = run(run_module, paths, TEAMS[:1])
    assert result['failed'] and os.path.exists(gone)
    assert 'research' in registry(paths)['teams']
    monkeypatch.undo()
    result = run(run_module, paths, TEAMS[:1])
    assert not result['failed'] and result['revoked'] == ['research'] and not os.path.exists(gone)
    assert 'research' not in registry(paths)['teams']


# -- the replicas' key (issue 37 item 2): no client holds it, a rotation keeps the key it replaced ------------------

def replica_paths(paths):
    return dict(paths, replica_key_file=os.path.join(os.path.dirname(paths['service_key_file']), 'replica-key'))


def test_the_replicas_key_is_made_once_0600_and_is_no_team_s(run_module, paths):
    args = replica_paths(paths)
    first = run(run_module, args, TEAMS)
    assert not first['failed'], first
    assert first['replica_key'] == dict(path=args['replica_key_file'], created=True, rotated=False)
    key = key_of(args['replica_key_file'])
    assert len(key) == 48 and key != SERVICE_KEY and mode(args['replica_key_file']) == 0o600
    # not in the registry: no client's key opens a replica
    assert sha(key) not in [team['sha256'] for team in registry(paths)['teams'].values()]
    assert key not in json.dumps(first)
    again = run(run_module, args, TEAMS)
    assert not again['changed'] and again['replica_key'] == dict(path=args['replica_key_file'], created=False, rotated=False)
    assert key_of(args['replica_key_file']) == key


def test_a_rotation_of_the_replicas_key_replaces_it_alone(run_module, paths):
    args = replica_paths(paths)
    run(run_module, args, TEAMS)
    old = key_of(args['replica_key_file'])
    before = snapshot(os.path.dirname(paths['service_key_file']))
    checked = run(run_module, args, TEAMS, check_mode=True, replica_key_rotate=True)
    assert checked['changed'] and checked['replica_key']['rotated'] and not checked['failed']
    assert snapshot(os.path.dirname(paths['service_key_file'])) == before       # check mode writes nothing
    rotated = run(run_module, args, TEAMS, replica_key_rotate=True)
    assert rotated['changed'] and rotated['replica_key'] == dict(path=args['replica_key_file'], created=False, rotated=True)
    new = key_of(args['replica_key_file'])
    assert new != old and mode(args['replica_key_file']) == 0o600
    assert sorted(os.listdir(os.path.dirname(paths['service_key_file']))) == ['api-key', 'gateway', 'replica-key', 'team-keys']
    assert not rotated['registry_changed']                  # the teams' keys are not touched
    assert new not in json.dumps(rotated) and old not in json.dumps(rotated)


def test_the_replicas_key_refused_where_a_client_would_hold_it(run_module, paths):
    args = replica_paths(paths)
    same = run(run_module, dict(args, replica_key_file=paths['service_key_file']), TEAMS)
    assert same['failed'] and 'is service_key_file' in same['msg'], same
    with open(args['replica_key_file'], 'w') as handle:
        handle.write(SERVICE_KEY + '\n')                     # a copy of the operator's key
    copied = run(run_module, args, TEAMS)
    assert copied['failed'] and "the replicas' key (replica_key_file)" in copied['msg'] and 'default' in copied['msg'], copied
    assert SERVICE_KEY not in copied['msg']
    # a rotation mends it: a new key is made
    mended = run(run_module, args, TEAMS, replica_key_rotate=True)
    assert not mended['failed'] and key_of(args['replica_key_file']) != SERVICE_KEY, mended
    alone = run(run_module, paths, TEAMS, replica_key_rotate=True)
    assert alone['failed'] and 'replica_key_rotate is true but no replica_key_file' in alone['msg'], alone


def test_a_default_entry_sets_the_limits_of_the_service_key(run_module, paths):
    """The operator's key is an ordinary team (issue 37 item 2): a default entry of teams gives it limits; its key
    stays the service key's, no key file is made for it, and it cannot be rotated here."""
    result = run(run_module, paths, [dict(name='default', rpm=60, max_parallel=8), dict(name='search')])
    assert not result['failed'], result
    assert result['teams'][0] == dict(name='default', path=paths['service_key_file'], created=False, rotated=False,
                                      rpm=60, tpm=None, max_parallel=8)
    assert [t['name'] for t in result['teams']] == ['default', 'search']
    assert registry(paths)['teams']['default'] == {'sha256': sha(SERVICE_KEY), 'rpm': 60, 'tpm': None, 'max_parallel': 8}
    assert sorted(os.listdir(paths['keys_dir'])) == ['search']
    again = run(run_module, paths, [dict(name='search')])                  # the entry gone: no limits again
    assert again['registry_changed'] and registry(paths)['teams']['default']['rpm'] is None and again['revoked'] == []
