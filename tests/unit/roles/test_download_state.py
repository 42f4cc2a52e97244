# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""roles/download/files/download_state.py: complete means the download job's record of `hf download` exiting 0 and
of every file checked against the Hub's checksums (its "verified" part and the listing it names)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import struct
import subprocess
import sys
import time

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'roles', 'download', 'files', 'download_state.py')
REPO = 'zai-org/GLM-5.3-Flash'
SHARDS = ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors']


def squashfs(size, used=None, major=4):
    """The bytes of a squashfs 4 image of SIZE bytes whose superblock says it uses USED (default: all of them)."""
    head = bytearray(b'hsqs' + b'\0' * 92)
    struct.pack_into('<H', head, 28, major)
    struct.pack_into('<Q', head, 40, size if used is None else used)
    return bytes(head) + b'\0' * (size - len(head))


def state(model, image, *extra):
    out = subprocess.check_output([sys.executable, SCRIPT, str(model), str(image)] + list(extra))
    return json.loads(out.decode('utf-8'))


@pytest.fixture
def tree(tmp_path):
    """Every file a check of the weights looks at: config, index, shards (tokenizer.json is missing)."""
    model = tmp_path / 'GLM-5.3-Flash'
    model.mkdir()
    (model / 'config.json').write_text(u'{}')
    (model / 'model.safetensors.index.json').write_text(json.dumps({'weight_map': {'a': SHARDS[0], 'b': SHARDS[1]}}))
    for name in SHARDS:
        (model / name).write_bytes(b'x' * 10)
    image = tmp_path / 'sglang.sqsh'
    image.write_bytes(squashfs(4096))
    return model, image


def record(model, **fields):
    """The download job's record, with its verification and the listing it checked against: the files there now,
    with their sizes, and each file's size and mtime_ns as the job saw them after its hash (as download.sbatch writes
    them once every checksum matched: weights_check.py verify). "at" is the compute node's clock (AT_SHIFT seconds
    after the newest file's mtime unless given), which an older check compared the mtimes with."""
    there = [p for p in model.iterdir() if p.is_file() and not p.name.startswith('.glm-serve-')]
    at = max(p.stat().st_mtime for p in there) + fields.pop('at_shift', 1)
    data = dict(repo=REPO, revision='', commit='a' * 40, completed=1, job_id='7',
                verified={'at': int(at), 'listing': '.glm-serve-listing.json', 'commit': 'a' * 40,
                          'files': dict((p.name, {'size': p.stat().st_size, 'mtime_ns': p.stat().st_mtime_ns})
                                        for p in there)})
    data.update(fields)
    files = dict((p.name, {'size': p.stat().st_size, 'sha256': '0' * 64}) for p in there)
    (model / '.glm-serve-listing.json').write_text(json.dumps({'commit': 'a' * 40, 'files': files}))
    (model / '.glm-serve-complete.json').write_text(json.dumps(data))


def test_a_record_without_the_checksum_check_does_not_count(tree):
    """A record of the download job before checksums (no "verified"): the job runs again to check every file."""
    model, image = tree
    record(model, verified=None)
    got = state(model, image, REPO)
    assert not got['weights_complete'] and "not checked against the Hub's checksums" in got['why'], got


def test_a_shard_cut_short_after_the_check_is_named(tree):
    """Truncated with its mtime kept (hf would skip it): the size against the listing's, no hashing here."""
    model, image = tree
    record(model)
    shard = model / SHARDS[1]
    before = shard.stat()
    shard.write_bytes(b'x' * 4)
    os.utime(str(shard), (before.st_atime, before.st_mtime))
    got = state(model, image, REPO)
    assert not got['weights_complete'] and got['unverified_count'] == 1, got
    assert '%s: 4 bytes, the Hub\'s has 10' % SHARDS[1] in got['why'], got['why']


def test_a_shard_rewritten_after_the_check_is_named(tree):
    """Same size, modified after the check: its mtime is not the one recorded."""
    model, image = tree
    record(model)
    shard = model / SHARDS[0]
    shard.write_bytes(b'y' * 10)
    later = time.time() + 60
    os.utime(str(shard), (later, later))
    got = state(model, image, REPO)
    assert not got['weights_complete'] and '%s: modified after the checksum check' % SHARDS[0] in got['why'], got


def test_the_compute_nodes_clock_behind_the_file_servers_flags_nothing(tree):
    """The job's clock (verified.at, `date` on the compute node) 5 s behind the file server's, which sets the mtime
    on NFS or Ceph: the files written last have an mtime after "at", yet they are the ones checked (same size and
    mtime_ns as at the check). Nothing is flagged, so no 328 GB re-hash."""
    model, image = tree
    record(model, at_shift=-5)
    got = state(model, image, REPO)
    assert got['weights_complete'] and got['unverified_count'] == 0, got


def test_a_shard_rewritten_with_an_older_mtime_is_named(tree):
    """Same size, rewritten after the check with an mtime BEFORE it (a copy with cp -p, rsync -t, a restore): only
    the exact mtime_ns tells; a comparison with the time of the check does not."""
    model, image = tree
    record(model)
    shard = model / SHARDS[0]
    before = shard.stat()
    shard.write_bytes(b'y' * 10)
    os.utime(str(shard), ns=(before.st_atime_ns, before.st_mtime_ns - 3600 * 10 ** 9))
    got = state(model, image, REPO)
    assert not got['weights_complete'] and '%s: modified after the checksum check' % SHARDS[0] in got['why'], got


def test_a_file_missing_from_the_check_is_named(tree):
    """A listed file that is there but not in the check's files (it came after the check): not verified."""
    model, image = tree
    record(model)
    data = json.loads((model / '.glm-serve-complete.json').read_text())
    del data['verified']['files'][SHARDS[1]]
    (model / '.glm-serve-complete.json').write_text(json.dumps(data))
    got = state(model, image, REPO)
    assert not got['weights_complete'] and "%s: not checked against the Hub's checksums" % SHARDS[1] in got['why'], got


def test_files_that_look_whole_without_the_record_are_not_complete(tree):
    model, image = tree
    got = state(model, image, REPO)
    assert got['missing_count'] == 0 and got['incomplete_count'] == 0 and got['config_present']
    assert not got['weights_complete'] and not got['complete']
    assert 'no completion record' in got['why'] and 'skips the files already there' in got['why']


def test_the_record_of_the_same_repo_and_revision_makes_it_complete(tree):
    model, image = tree
    record(model)
    got = state(model, image, REPO)
    assert got['weights_complete'] and got['complete'] and got['why'] == ''
    assert got['record']['commit'] == 'a' * 40


@pytest.mark.parametrize('fields, args, words', [
    ({'repo': 'other/model'}, [REPO], 'is for other/model'),
    ({'revision': 'v1'}, [REPO, 'v2'], "revision 'v1', not 'v2'"),
    ({}, [REPO, 'v2'], "revision 'default', not 'v2'"),
])
def test_a_record_of_another_repo_or_revision_does_not_count(tree, fields, args, words):
    model, image = tree
    record(model, **fields)
    got = state(model, image, *args)
    assert not got['weights_complete'] and words in got['why'], got['why']


def test_a_recorded_download_whose_files_went_is_not_complete(tree):
    model, image = tree
    record(model)
    os.unlink(str(model / SHARDS[1]))
    partial = model / '.cache' / 'huggingface' / 'download'
    partial.mkdir(parents=True)
    (partial / 'tokenizer.json.incomplete').write_bytes(b'')
    got = state(model, image, REPO)
    assert not got['weights_complete'] and got['missing'] == [SHARDS[1]] and got['incomplete_count'] == 1
    assert '1 weight files missing, 1 partial' in got['why']


def test_an_unreadable_record_is_named(tree):
    model, image = tree
    (model / '.glm-serve-complete.json').write_text(u'{not json')
    got = state(model, image, REPO)
    assert not got['weights_complete'] and 'unreadable' in got['why']


def test_usage_error_without_the_repository(tree):
    model, image = tree
    proc = subprocess.run([sys.executable, SCRIPT, str(model), str(image)], stderr=subprocess.PIPE, check=False)
    assert proc.returncode == 2 and b'REPO' in proc.stderr


def test_an_image_cut_short_by_a_failed_save_is_not_taken(tree):
    """Pyxis exports after the step and srun exits 0 when that fails, leaving part of a file: the superblock is
    there, the bytes it counts are not. The next download job saves the image again."""
    model, image = tree
    record(model)
    image.write_bytes(squashfs(4096)[:2048])
    got = state(model, image, REPO)
    assert got['weights_complete'] and not got['image_present'] and not got['complete']
    assert got['image_problem'].startswith('truncated: 2048 bytes of the 4096'), got
    assert 'is broken: truncated' in got['why'] and 'saved again' in got['why']


@pytest.mark.parametrize('content, problem', [
    (b'pyxis stand-in: a text file', 'not a squashfs image'),
    (squashfs(4096, major=3), 'version 3'),
])
def test_a_file_that_is_no_squashfs_is_not_an_image(tree, content, problem):
    model, image = tree
    record(model)
    image.write_bytes(content)
    got = state(model, image, REPO)
    assert not got['image_present'] and problem in got['image_problem'] and not got['complete']


# -- its parts, called directly (issue 22 split main into them) ----------------------------------------------------

def _script():
    sys.path.insert(0, os.path.dirname(SCRIPT))
    try:
        import download_state  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.pop(0)
    return download_state


def test_wanted_weights_from_the_index_a_single_file_or_nothing(tmp_path):
    ds = _script()
    assert ds.wanted_weights(str(tmp_path)) == (False, '', set())
    (tmp_path / 'model.safetensors').write_bytes(b'x')
    assert ds.wanted_weights(str(tmp_path)) == (False, '', {'model.safetensors'})
    (tmp_path / 'model.safetensors.index.json').write_text(json.dumps({'weight_map': {'a': SHARDS[0], 'b': SHARDS[0]}}))
    assert ds.wanted_weights(str(tmp_path)) == (True, '', {SHARDS[0]})
    (tmp_path / 'model.safetensors.index.json').write_text(u'{"weight_map": [')
    present, error, wanted = ds.wanted_weights(str(tmp_path))
    assert present and error.startswith('JSONDecodeError: ') and wanted == set()


def test_walk_tree_counts_the_bytes_and_names_the_partial_files_sorted(tmp_path):
    ds = _script()
    (tmp_path / 'sub').mkdir()
    (tmp_path / 'b.incomplete').write_bytes(b'x' * 3)
    (tmp_path / 'sub' / 'a.incomplete').write_bytes(b'x' * 4)
    (tmp_path / 'config.json').write_bytes(b'x' * 5)
    assert ds.walk_tree(str(tmp_path)) == (12, ['b.incomplete', os.path.join('sub', 'a.incomplete')])


def test_weights_why_in_the_order_of_its_causes():
    ds = _script()
    base = dict(record={'repo': REPO}, weights_complete=False, unverified_count=2, unverified=['a: x', 'b: y'],
                missing_count=1, incomplete_count=0)
    assert ds.weights_why(dict(base, weights_complete=True), '', '', True) == ''
    assert ds.weights_why(base, '', 'not checked', True) == 'not checked'
    assert ds.weights_why(base, '', '', True).startswith("2 files are not what was checked against the Hub's "
                                                         "checksums (a: x; b: y)")
    assert ds.weights_why(dict(base, record=None), 'no record', '', True) == \
        'no record: the download runs again and hf skips the files already there'
    assert ds.weights_why(dict(base, record=None), 'no record', '', False) == 'no record'
    assert ds.weights_why(base, '', '', False) == \
        'files of the recorded download are gone: 1 weight files missing, 0 partial'
