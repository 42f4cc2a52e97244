# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The argument sub-specs shared by the modules: valid specs with the documented defaults."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.glm.serve.plugins.module_utils.job_specs import bad_nodes_options, probe_options


def validate(options, value):
    result = ArgumentSpecValidator({'x': dict(type='dict', options=options)}).validate({'x': value})
    return result.validated_parameters['x'], [str(e) for e in result.errors]


def test_probe_defaults_and_required():
    value, errors = validate(probe_options(), {'port': '8000', 'key_file': '/k', 'model': 'glm'})
    assert not errors and value == {'port': 8000, 'path': '/v1/models', 'key_file': '/k', 'model': 'glm', 'timeout': 5,
                                    'tls_cert': None, 'endpoint_file': None}
    assert validate(probe_options(), {'port': 1})[1]
    assert probe_options()['key_file']['no_log'] is False      # a path, not the secret


def test_bad_nodes_defaults():
    value, errors = validate(bad_nodes_options(), {'file': '/w/bad.json', 'pattern': 'x'})
    assert not errors
    assert value == {'file': '/w/bad.json', 'pattern': 'x', 'ttl': 86400, 'retries': 2, 'nodes': [], 'job_nodes': 1}


@pytest.mark.parametrize('options', [probe_options, bad_nodes_options])
def test_each_call_is_a_fresh_spec(options):
    first = options()
    first['x'] = 1
    assert 'x' not in options()
