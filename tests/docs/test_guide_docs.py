# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""tests/tooling/guide_docs.py: the Markdown of the guides (docs/*.md) as the RST pages of the docs site."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, 'tests', 'tooling', 'guide_docs.py')
_spec = importlib.util.spec_from_file_location('guide_docs', SCRIPT)
guide_docs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(guide_docs)
PREFIX = 'ansible_collections.glm.serve.docsite.'


@pytest.mark.parametrize('markdown, rst', [
    ('run `make docs` now', 'run ``make docs`` now'),
    ('`glm-serve`s and a/`b`', '``glm-serve``\\ s and a/\\ ``b``'),
    ('a | b and c\\d', 'a \\| b and c\\\\d'),
    ('[the site](https://example.org/x)', '`the site <https://example.org/x>`__'),
    ('[`docs/roles.md`](roles.md)', '`docs/roles.md <https://github.com/glm-serve/glm.serve/blob/main/docs/roles.md>`__'),
    ('[tests](../tests/tooling/cluster/README.md)',
     '`tests <https://github.com/glm-serve/glm.serve/blob/main/tests/tooling/cluster/README.md>`__'),
    ('[Install](getting-started.md#install)', ':ref:`Install <%sguide_getting_started.install>`' % PREFIX),
    ('[Operations](operations.md)', ':ref:`Operations <%sguide_operations>`' % PREFIX),
    ('[below](#the-tests)', ':ref:`below <%sguide_development.the-tests>`' % PREFIX),
])
def test_inline(markdown, rst):
    assert guide_docs.inline('development', markdown) == rst


def test_anchor_is_githubs():
    assert guide_docs.anchor_of('The install path and AWX, tested') == 'the-install-path-and-awx-tested'
    assert guide_docs.anchor_of('Status, logs, teardown') == 'status-logs-teardown'


def test_convert_blocks():
    lines = ['<!--', 'the header', '-->', '', '# Title', '', '## A `b` part', '',
             'Some text', 'on two lines.', '', '```sh', 'make demo', '', 'make test', '```', '',
             '| Name | What |', '| - | - |', '| `x` | - |', '', '- one', '  more', '- two']
    rst = guide_docs.convert('operations', lines)
    assert 'SPDX-License-Identifier' in rst.split('\n', 3)[2]
    assert '.. _%sguide_operations:\n\nTitle\n=====\n' % PREFIX in rst
    assert '.. _%sguide_operations.a-b-part:\n\nA ``b`` part\n------------\n' % PREFIX in rst
    assert 'Some text\non two lines.\n' in rst
    assert '.. code-block:: sh\n\n  make demo\n\n  make test\n' in rst
    assert '.. list-table::\n   :header-rows: 1\n\n   * - Name\n     - What\n   * - ``x``\n     - \\-\n' in rst
    assert '- one\n  more\n- two\n' in rst


def test_pages_are_up_to_date():
    """make lint and make docs run this check; a guide edited without its page fails it."""
    result = subprocess.run([sys.executable, SCRIPT, '--check'], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, check=False)
    assert result.returncode == 0, result.stdout
