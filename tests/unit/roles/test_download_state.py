# -*- coding: utf-8 -*-
# Copyright (c) glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""roles/download/files/download_state.py: complete means the download job's record of `hf download` exiting 0."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'roles', 'download', 'files', 'download_state.py')
REPO = 'zai-org/GLM-5.3-Flash'
SHARDS = ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors']


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
    image.write_bytes(b'hsqs')
    return model, image


def record(model, **fields):
    data = dict(repo=REPO, revision='', commit='a' * 40, completed=1, job_id='7')
    data.update(fields)
    (model / '.glm-serve-complete.json').write_text(json.dumps(data))


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
