# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The modules' test harness: run a module's main() with arguments and a stand-in run_command, get its result."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest

from ansible.module_utils import basic
from ansible.module_utils.common.text.converters import to_bytes


class Done(Exception):
    """exit_json or fail_json was called: the result is the argument."""


@pytest.fixture
def run_module(monkeypatch):
    """``run_module(main, args, run_command=None)``: main()'s result (``failed`` set). Without ``run_command``, a
    module that runs a command fails the test."""

    def run(main, args, run_command=None):
        def exit_json(module, **kwargs):
            raise Done(dict(kwargs, failed=False))

        def fail_json(module, **kwargs):
            raise Done(dict(kwargs, failed=True))

        def no_command(module, argv, **kwargs):
            pytest.fail('the module ran a command: %r' % (argv,))
        monkeypatch.setattr(basic.AnsibleModule, 'exit_json', exit_json)
        monkeypatch.setattr(basic.AnsibleModule, 'fail_json', fail_json)
        monkeypatch.setattr(basic.AnsibleModule, 'run_command', run_command or no_command)
        monkeypatch.setattr(basic.AnsibleModule, 'get_bin_path', lambda module, name, *a, **k: '/usr/bin/' + name)
        try:
            from ansible.module_utils.testing import patch_module_args  # ansible-core >= 2.19
        except ImportError:
            patch_module_args = None
        with pytest.raises(Done) as done:
            if patch_module_args is not None:
                with patch_module_args(args):
                    main()
            else:
                basic._ANSIBLE_ARGS = to_bytes(json.dumps({'ANSIBLE_MODULE_ARGS': args}))
                main()
        return done.value.args[0]

    return run
