# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""tests/tooling/check_shape.py, make lint's shape guard, on a small tree: a function over 40 lines, one over
complexity 15, a file in plugins/ over 500 lines (and one in roles/*/files, which has no file limit), --skip.
Run with .venv-lint's python, which has mccabe (skipped where there is none)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess

import pytest

ROOT = os.path.join(os.path.dirname(__file__), '..', '..', '..')
SCRIPT = os.path.join(ROOT, 'tests', 'tooling', 'check_shape.py')
PYTHON = os.path.join(ROOT, '.venv-lint', 'bin', 'python')

pytestmark = pytest.mark.skipif(not os.access(PYTHON, os.X_OK), reason='no .venv-lint (make lint makes it)')


def shape(root, *args):
    run = subprocess.run([PYTHON, SCRIPT, '--root', str(root)] + list(args), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, universal_newlines=True, check=False)
    return run.returncode, run.stdout, run.stderr


@pytest.fixture
def tree(tmp_path):
    (tmp_path / 'plugins' / 'modules').mkdir(parents=True)
    (tmp_path / 'roles' / 'r' / 'files').mkdir(parents=True)
    long_body = ''.join('    x%d = %d\n' % (i, i) for i in range(40))                  # def + 40 lines: 41
    branches = ''.join('    if a == %d:\n        return %d\n' % (i, i) for i in range(15))  # complexity 16
    (tmp_path / 'plugins' / 'modules' / 'm.py').write_text(
        u'def short():\n    return 1\n\n\nclass C:\n    def long(self):\n' + long_body.replace('    ', '        ')
        + u'\n\ndef branchy(a):\n' + branches + u'    return None\n')
    (tmp_path / 'plugins' / 'modules' / 'big.py').write_text(u'X = 1\n' * 501)
    (tmp_path / 'roles' / 'r' / 'files' / 'big.py').write_text(u'X = 1\n' * 501)
    return tmp_path


def test_each_breach_is_one_line_with_the_figure_and_the_limit(tree):
    rc, out, err = shape(tree)
    assert rc == 1
    assert out.splitlines() == [
        'plugins/modules/big.py:1: the file: lines 501, over the limit of 500',
        'plugins/modules/m.py:6: C.long: lines 41, over the limit of 40',
        'plugins/modules/m.py:49: branchy: complexity 16, over the limit of 15',
    ]
    assert 'check_shape: 3 files, 3 over the limits' in err


def test_skip_leaves_files_out_and_says_which(tree):
    rc, out, _err = shape(tree, '--skip', 'plugins/modules/m.py', 'plugins/modules/big.py')
    assert rc == 0
    assert out.strip() == 'check_shape: 1 files, 0 over the limits (skipped: plugins/modules/m.py, plugins/modules/big.py)'


def test_at_the_limits_is_within_them(tmp_path):
    (tmp_path / 'plugins').mkdir()
    body = ''.join('    x%d = %d\n' % (i, i) for i in range(39))
    branches = ''.join('    if a == %d:\n        return %d\n' % (i, i) for i in range(14))
    (tmp_path / 'plugins' / 'p.py').write_text(u'def f():\n' + body + u'\n\ndef g(a):\n' + branches + u'    return 0\n')
    assert shape(tmp_path)[0] == 0


def test_a_modules_documentation_strings_do_not_count_its_code_does(tmp_path):
    """DOCUMENTATION, EXAMPLES and RETURN (which must sit in the module's file) are left out of its size; code is not:
    400 lines of RETURN and 100 of code pass, 501 of code do not."""
    (tmp_path / 'plugins' / 'modules').mkdir(parents=True)
    docs = u"DOCUMENTATION = r'''\nx\n'''\nRETURN = r'''\n" + u'a: 1\n' * 400 + u"'''\n"
    (tmp_path / 'plugins' / 'modules' / 'ok.py').write_text(docs + u'X = 1\n' * 100)
    assert shape(tmp_path)[0] == 0
    (tmp_path / 'plugins' / 'modules' / 'code.py').write_text(docs + u'X = 1\n' * 501)
    code, out, _err = shape(tmp_path)
    assert code == 1 and 'code.py:1: the file: lines 501, over the limit of 500' in out, out


def test_the_front_door_files_over_their_limits(tree):
    """README.md at most 150 lines, the status and teardown playbooks under 80 (issue 22)."""
    (tree / 'playbooks').mkdir()
    (tree / 'README.md').write_text(u'line\n' * 151)
    (tree / 'playbooks' / 'status.yml').write_text(u'---\n' * 79)
    (tree / 'playbooks' / 'teardown.yml').write_text(u'---\n' * 80)
    rc, out, _err = shape(tree, '--skip', 'plugins/modules/m.py', 'plugins/modules/big.py')
    assert rc == 1
    assert out.splitlines() == ['README.md:1: the file: lines 151, over the limit of 150',
                                'playbooks/teardown.yml:1: the file: lines 80, over the limit of 79']
