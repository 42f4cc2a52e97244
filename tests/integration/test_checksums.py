# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Weights checked against the Hub's own checksums, on the LIVE local Slurm cluster, through playbooks/deploy.yml.

A corrupt shard is served silently when completeness means only that `hf download` exited 0 (vLLM #53537; SGLang
#32279, #14465). hf itself never reads a file again once its .metadata names the commit it was asked for
(huggingface_hub file_download.py at v1.28.0 L1291-1297, _local_folder.py L306-354): a shard corrupted in transfer,
or cut short on disk with its mtime kept, is skipped by every rerun. The hf stand-in follows that, and serves the
real sha256 / git blob id of its files (tests/doubles/python/hf_standin.py). Each case: caught, the bad file
fetched again ALONE (the stand-in's fetch log), the deploy then serves. Also: an image whose huggingface_hub is older
than 1.13 (no `hf models ls REPO -R`) still gives the download's total size. Run as root, under the cluster lock.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import sys

from deploy_helpers import REPO, fetch_log

sys.path.insert(0, os.path.join(REPO, 'tests', 'doubles', 'python'))
import hf_standin  # noqa: E402  pylint: disable=wrong-import-position

MODEL = 'zai-org/GLM-5.3-Flash'
SHARD3 = 'model-00003-of-00008.safetensors'
SHARD5 = 'model-00005-of-00008.safetensors'


def hub():
    """The Hub's listing of the stand-in checkpoint (8 shards of 256 KiB, the defaults): path -> entry."""
    return dict((e['path'], e) for e in hf_standin.hub_listing(MODEL))


def sha256(path):
    with open(path, 'rb') as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def record(c):
    try:
        with open(os.path.join(c.dir, 'GLM-5.3-Flash', '.glm-serve-complete.json')) as handle:
            return json.load(handle)
    except (IOError, OSError, ValueError):
        return {}


def download_log(c):
    text = ''
    for name in sorted(os.listdir(c.dir)):
        if name.startswith(c.download + '-') and name.endswith('.out'):
            with open(os.path.join(c.dir, name), errors='replace') as handle:
                text += handle.read()
    return text


def test_a_shard_corrupted_in_transfer_is_caught_and_fetched_again_alone(case):
    """hf writes shard 3 with one byte flipped (the stand-in's hf-corrupt: a bad transfer hf does not notice) and
    exits 0. The download job hashes every file against the Hub's listing, finds shard 3, fetches it alone again,
    checks it, records the verification; the server starts. The image's huggingface_hub is 1.12 (hf-version): `hf
    models ls REPO -R` does not exist there, and the total size for the progress line must come all the same."""
    c = case('corrupt')
    env = {'GLM_STANDIN_HF_CORRUPT': SHARD3, 'GLM_STANDIN_HF_VERSION': '1.12.0'}
    proc, _took, found = c.deploy(download_env=env)
    model = os.path.join(c.dir, 'GLM-5.3-Flash')
    listing = hub()
    problems = []
    if proc.returncode != 0:
        problems.append('the deploy failed: %s' % (found or proc.stdout[-3000:]))
    try:
        with open(os.path.join(model, '.glm-serve-download.json')) as handle:
            total = json.load(handle).get('total_bytes')
    except (IOError, OSError, ValueError) as exc:
        total = 'none (%s)' % exc
    if total != sum(e['size'] for e in listing.values()):
        problems.append('total size with huggingface_hub 1.12: %s' % total)
    fetched = fetch_log(c)
    if sorted(fetched) != sorted(list(listing) + [SHARD3]):
        problems.append('fetched: %s (want every file once, %s twice)' % (fetched, SHARD3))
    if os.path.isfile(os.path.join(model, SHARD3)) and sha256(os.path.join(model, SHARD3)) != listing[SHARD3]['lfs']['sha256']:
        problems.append('%s on disk is not the Hub\'s: it would be served corrupt' % SHARD3)
    if 'checksum' not in download_log(c) or SHARD3 not in download_log(c):
        problems.append('the job log does not name the checksum mismatch of %s' % SHARD3)
    verified = record(c).get('verified') or {}
    try:
        with open(os.path.join(model, verified.get('listing') or '.glm-serve-listing.json')) as handle:
            checked = json.load(handle)
    except (IOError, OSError, ValueError):
        checked = {}
    want = dict((p, e['lfs']['sha256'] if 'lfs' in e else e['blob_id']) for p, e in listing.items())
    got = dict((p, e.get('sha256') or e.get('git_sha1')) for p, e in (checked.get('files') or {}).items())
    if sorted(verified.get('files') or {}) != sorted(want) or got != want or checked.get('commit') != record(c).get('commit'):
        problems.append('the completion record holds no check of every file against the Hub\'s checksums: %s %s'
                        % (record(c), checked))
    assert not problems, '\n'.join(problems)


def test_a_truncated_shard_is_caught_by_the_next_deploy_and_fetched_again_alone(case):
    """A verified download; then shard 5 is cut to half, its mtime kept (a copy or a quota gone wrong; hf would skip
    it: its .metadata still names the commit). The next deploy sees on the login node, by size alone (no hashing
    there), that the weights are not what was verified, says so, and the download job fetches shard 5 alone; the
    weights on disk are whole again (the running server, started on whole weights, is adopted)."""
    c = case('truncate')
    proc, _took, found = c.deploy()
    assert proc.returncode == 0, found or proc.stdout[-3000:]
    first = fetch_log(c)
    shard = os.path.join(c.dir, 'GLM-5.3-Flash', SHARD5)
    stat = os.stat(shard)
    with open(shard, 'r+b') as handle:
        handle.truncate(stat.st_size // 2)
    os.utime(shard, (stat.st_atime, stat.st_mtime))

    proc, _took, found = c.deploy()
    # The first deploy's server still runs (it loaded whole weights before the cut): the second deploy adopts it and
    # returns once it answers, while the repair download it submitted runs in the background. Its end, not the
    # deploy's, is when the shard is whole again (a race this test lost once the re-run got a second faster).
    c.wait_for(lambda: not [r for r in c.live() if r[1] == c.download], 120, 'the repair download to end')
    problems = []
    if proc.returncode != 0:
        problems.append('the second deploy failed: %s' % (found or proc.stdout[-3000:]))
    if 'nothing to download' in proc.stdout:
        problems.append('the second deploy took the truncated weights for complete')
    elif SHARD5 not in proc.stdout:
        problems.append('the second deploy does not say why it downloads: %s' % proc.stdout[-3000:])
    again = fetch_log(c)[len(first):]
    if again != [SHARD5]:
        problems.append('fetched again: %s (want %s alone)' % (again, SHARD5))
    if 'checked 1 files against the Hub' not in download_log(c):
        problems.append('the second job hashed more than the shard fetched again (the others kept size and mtime)')
    if not os.path.isfile(shard):
        problems.append('%s is not on disk: %s' % (SHARD5, download_log(c)[-3000:]))
    elif sha256(shard) != hub()[SHARD5]['lfs']['sha256']:
        problems.append('%s on disk is not the Hub\'s (%d bytes)' % (SHARD5, os.path.getsize(shard)))
    assert not problems, '\n'.join(problems)
