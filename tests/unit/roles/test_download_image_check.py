# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""download.sbatch's image_problem() with the `unsquashfs -s` of squashfs-tools 4.3 and of 4.4 and later.

What each prints (squashfs-tools, squashfs-tools/unsquashfs.c): 4.3 (the release commit 46afc0d8, 2014-08-08)
L1643-1645 `printf("Filesystem size %.2f Kbytes (%.2f Mbytes)\\n", bytes_used / 1024.0, ...)`, the size rounded;
4.4 (tag 4.4) L1707-1709 `printf("Filesystem size %llu bytes (%.2f Kbytes / %.2f Mbytes)\\n", bytes_used, ...)`
(added by f48d989e, 2016). RHEL/Rocky 8 and Ubuntu 18.04 ship 4.3. The check must take a whole image for whole and
a truncated one for truncated with either; it reads bytes_used from the superblock itself (offset 40, 8 bytes LE).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import struct
import subprocess

import pytest

TEMPLATE = os.environ.get('GLM_TEST_DOWNLOAD_TEMPLATE') or os.path.join(
    os.path.dirname(__file__), '..', '..', '..', 'roles', 'download', 'templates', 'download.sbatch.j2')

# The lines each version prints before and after the size (4.3 / 4.4 as in their unsquashfs.c squashfs_stat()).
FORMATS = {
    '4.3': 'Found a valid SQUASHFS 4:0 superblock on {path}.\nCreation or last append time Mon Dec  1 10:00:00 2026\n'
           'Filesystem size {kb:.2f} Kbytes ({mb:.2f} Mbytes)\nCompression gzip\nBlock size 131072\n',
    '4.4': 'Found a valid SQUASHFS 4:0 superblock on {path}.\nCreation or last append time Mon Dec  1 10:00:00 2026\n'
           'Filesystem size {used} bytes ({kb:.2f} Kbytes / {mb:.2f} Mbytes)\nCompression gzip\nBlock size 131072\n',
}


def image_problem_function():
    with open(TEMPLATE) as handle:
        text = handle.read()
    match = re.search(r'^image_problem\(\) \{\n.*?^\}\n', text, re.M | re.S)
    assert match, 'no image_problem() in %s' % TEMPLATE
    return match.group(0)


def squashfs(size, used):
    head = bytearray(b'hsqs' + b'\0' * 92)
    struct.pack_into('<H', head, 28, 4)
    struct.pack_into('<Q', head, 40, used)
    return bytes(head) + b'\0' * (size - len(head))


@pytest.mark.parametrize('version', sorted(FORMATS))
@pytest.mark.parametrize('cut', [0, 4096, 5])
def test_whole_and_truncated_images_with_either_unsquashfs(tmp_path, version, cut):
    used = 1048576 + 4096 + 3
    image = tmp_path / 'sglang.sqsh'
    image.write_bytes(squashfs(used - cut, used))
    fake = tmp_path / 'bin' / 'unsquashfs'
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\ncat <<"EOF"\n%sEOF\n' % FORMATS[version].format(
        path=image, used=used, kb=used / 1024.0, mb=used / 1048576.0))
    fake.chmod(0o755)
    script = image_problem_function() + 'image_problem "$1"\n'
    out = subprocess.run(['bash', '-c', script, 'sh', str(image)], capture_output=True, text=True, check=True,
                         env=dict(os.environ, PATH='%s:%s' % (fake.parent, os.environ['PATH']))).stdout
    if cut:
        assert out == 'it is truncated: %d bytes of the %d its superblock says\n' % (used - cut, used), out
    else:
        assert out == '', out
