# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""roles/download/files/weights_check.py, the download job's check against the Hub's checksums (plain Python, run
in the container by download.sbatch):

- verify hashes only the files whose size or mtime_ns is not what the last check of the same commit recorded
  (CHECKED), so that a job that resumes, fetches a few files again or only saves the image again does not read the
  whole 328 GB checkpoint; an empty CHECKED (download_force=true) hashes every file;
- list falls back to the listing saved with the weights only when the Hub cannot be reached (HF_HUB_OFFLINE=1 makes
  huggingface_hub raise OfflineModeIsEnabled, a ConnectionError: errors.py at v1.28.0 L86; snapshot_download treats
  it and httpx's ConnectError/TimeoutException as "no connection": _snapshot_download.py at v1.28.0 L274-277), never
  when the Hub answered (404, 401, gated), and fails with the cause and the fix when none of that revision is saved.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import sys
import types

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', '..', 'roles', 'download', 'files'))
import weights_check  # noqa: E402  pylint: disable=wrong-import-position

REPO = 'zai-org/GLM-5.3-Flash'
COMMIT = 'c' * 40
NAMES = ['config.json', 'model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors']


@pytest.fixture
def model(tmp_path):
    """Three files and the Hub's listing of them (their real sha256), as the job saves it."""
    root = tmp_path / 'GLM-5.3-Flash'
    root.mkdir()
    files = {}
    for i, name in enumerate(NAMES):
        data = (b'%d' % i) * (1000 + i)
        (root / name).write_bytes(data)
        files[name] = {'size': len(data), 'sha256': hashlib.sha256(data).hexdigest()}
    (root / '.glm-serve-listing.json').write_text(json.dumps(
        {'repo': REPO, 'revision': '', 'commit': COMMIT, 'total_bytes': 0, 'files': files}))
    return root


def verify(root, only=(), checked=True):
    return weights_check.verify(str(root), str(root / '.glm-serve-listing.json'), 2, list(only),
                                str(root / '.glm-serve-checked.json') if checked else '')


def test_a_second_check_hashes_nothing_that_did_not_change(model):
    first = verify(model)
    assert (first['checked'], first['skipped'], first['bad']) == (3, 0, []), first
    saved = json.loads((model / '.glm-serve-checked.json').read_text())
    stat = os.stat(str(model / NAMES[1]))
    assert saved['commit'] == COMMIT and saved['files'][NAMES[1]] == {'size': stat.st_size, 'mtime_ns': stat.st_mtime_ns}
    second = verify(model)
    assert (second['checked'], second['skipped'], second['bad']) == (0, 3, []), second
    assert sorted(second['files']) == NAMES


def test_only_a_file_whose_mtime_ns_changed_is_hashed_and_a_bad_one_is_caught(model):
    verify(model)
    shard = model / NAMES[2]
    before = shard.stat()
    data = bytearray(shard.read_bytes())
    data[10] ^= 1
    shard.write_bytes(bytes(data))                                           # same size, another mtime
    os.utime(str(shard), ns=(before.st_atime_ns, before.st_mtime_ns + 1))     # 1 ns later: still another
    got = verify(model)
    assert (got['checked'], got['skipped']) == (1, 2), got
    assert [b['path'] for b in got['bad']] == [NAMES[2]] and 'checksum' in got['bad'][0]['why'], got
    assert NAMES[2] not in json.loads((model / '.glm-serve-checked.json').read_text())['files']


def test_a_check_of_another_commit_or_none_hashes_every_file(model):
    verify(model)
    checked = model / '.glm-serve-checked.json'
    other = json.loads(checked.read_text())
    other['commit'] = 'd' * 40
    checked.write_text(json.dumps(other))
    assert verify(model)['checked'] == 3
    assert verify(model, checked=False)['checked'] == 3                     # download_force=true: ""


def test_a_recheck_of_the_files_fetched_again_keeps_the_others(model):
    """The job's second pass (verify FILE ...) after a bad file was fetched again: the others stay recorded."""
    verify(model)
    shard = model / NAMES[1]
    shard.write_bytes(shard.read_bytes())                                    # fetched again: new mtime
    got = verify(model, only=[NAMES[1]])
    assert (got['checked'], got['bad']) == (1, []), got
    assert sorted(json.loads((model / '.glm-serve-checked.json').read_text())['files']) == NAMES


class OfflineModeIsEnabled(ConnectionError):
    """huggingface_hub.errors.OfflineModeIsEnabled (errors.py at v1.28.0 L86: a ConnectionError)."""


class NotFound(OSError):
    """A Hub answer: HfHubHTTPError carries the response (errors.py at v1.28.0 L90)."""
    response = types.SimpleNamespace(status_code=404)


def hub_raising(monkeypatch, exc):
    def model_info(self, repo_id, **kwargs):
        raise exc
    fake = types.ModuleType('huggingface_hub')
    fake.HfApi = type('HfApi', (), {'model_info': model_info})
    monkeypatch.setitem(sys.modules, 'huggingface_hub', fake)


def test_offline_the_listing_saved_with_the_weights_is_used(model, monkeypatch, capsys):
    hub_raising(monkeypatch, OfflineModeIsEnabled('Cannot reach https://huggingface.co: offline mode is enabled'))
    got = weights_check.listing_or_saved(REPO, '', str(model / '.glm-serve-listing.json'))
    assert got['commit'] == COMMIT and sorted(got['files']) == NAMES
    assert 'using the one saved with the weights' in capsys.readouterr().err


@pytest.mark.parametrize('saved, words', [
    (None, 'there is none'),
    ({'repo': REPO, 'revision': 'v2', 'commit': COMMIT, 'files': {}}, 'the one saved is of %s at v2' % REPO),
])
def test_offline_without_a_listing_of_that_revision_it_fails_with_the_cause_and_the_fix(
        model, monkeypatch, capsys, saved, words):
    hub_raising(monkeypatch, OfflineModeIsEnabled('offline mode is enabled'))
    path = model / '.glm-serve-listing.json'
    if saved is None:
        path.unlink()
    else:
        path.write_text(json.dumps(saved))
    with pytest.raises(SystemExit) as exc:
        weights_check.listing_or_saved(REPO, '', str(path))
    err = capsys.readouterr().err
    assert exc.value.code == 3 and 'OfflineModeIsEnabled' in err and words in err and 'HF_HUB_OFFLINE' in err, err


def test_an_answer_of_the_hub_is_never_replaced_by_the_saved_listing(model, monkeypatch):
    hub_raising(monkeypatch, NotFound('404 Repository Not Found'))
    with pytest.raises(NotFound):
        weights_check.listing_or_saved(REPO, '', str(model / '.glm-serve-listing.json'))


# -- verify's parts, called directly (issue 22 split verify into them) ---------------------------------------------

def test_read_checked_only_of_the_same_commit(tmp_path):
    path = tmp_path / 'checked.json'
    assert weights_check.read_checked('', COMMIT) == {}
    assert weights_check.read_checked(str(path), COMMIT) == {}                      # none yet
    path.write_text(u'{"commit": ')
    assert weights_check.read_checked(str(path), COMMIT) == {}                      # unreadable
    path.write_text(json.dumps({'commit': 'd' * 40, 'files': {'a': {'size': 1, 'mtime_ns': 2}}}))
    assert weights_check.read_checked(str(path), COMMIT) == {}                      # another commit's
    path.write_text(json.dumps({'commit': COMMIT, 'files': {'a': {'size': 1, 'mtime_ns': 2}}}))
    assert weights_check.read_checked(str(path), COMMIT) == {'a': {'size': 1, 'mtime_ns': 2}}


def test_still_good_keeps_the_hashed_good_and_the_unchanged_checked(tmp_path):
    for name in ('a', 'b', 'c', 'd'):
        (tmp_path / name).write_bytes(name.encode() * 3)
    stats = weights_check.stat_all(str(tmp_path), ['a', 'b', 'c', 'd', 'gone'])
    assert sorted(stats) == ['a', 'b', 'c', 'd']
    same = {'size': stats['c'].st_size, 'mtime_ns': stats['c'].st_mtime_ns}
    results = {'a': ('', stats['a']), 'b': ('checksum x, the Hub\'s is y', stats['b'])}
    now = weights_check.still_good(['a', 'b', 'c', 'd'], results, stats, {'c': same, 'd': {'size': 1, 'mtime_ns': 1}})
    assert now == {'a': {'size': 3, 'mtime_ns': stats['a'].st_mtime_ns}, 'c': same}
    weights_check.write_checked(str(tmp_path / 'checked.json'), COMMIT, '/x/listing.json', now)
    assert json.loads((tmp_path / 'checked.json').read_text()) == {'commit': COMMIT, 'listing': 'listing.json',
                                                                   'files': now}
