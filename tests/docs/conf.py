# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# Sphinx configuration of the docs site (make docs, tests/tooling/build-docs.sh), after the one that
# `antsibull-docs sphinx-init` writes. The build works offline: instead of downloading the Ansible docs' intersphinx
# inventory, it writes one with the few labels that antsibull-docs's pages point to (a label missing here fails
# the build with "undefined label": add it below).
import os
import tempfile
import zlib

ANSIBLE_DOCS = 'https://docs.ansible.com/projects/ansible/devel/'
ANSIBLE_LABELS = {
    # label: (page#anchor under ANSIBLE_DOCS, title)
    'common_return_values': ('reference_appendices/common_return_values.html#common-return-values',
                             'Return Values'),
    'ansible_configuration_settings': ('reference_appendices/config.html#ansible-configuration-settings',
                                       'Ansible Configuration Settings'),
    'ansible_collections.ansible.builtin.template_module': (
        'collections/ansible/builtin/template_module.html#ansible-collections-ansible-builtin-template-module',
        'ansible.builtin.template module'),
}


def _ansible_inventory():
    """An intersphinx inventory (format version 2) of ANSIBLE_LABELS, in a temporary file."""
    body = ''.join('%s std:label -1 %s %s\n' % (label, uri, title) for label, (uri, title) in ANSIBLE_LABELS.items())
    path = os.path.join(tempfile.mkdtemp(prefix='glm-serve-docs-'), 'ansible.inv')
    with open(path, 'wb') as handle:
        handle.write(b'# Sphinx inventory version 2\n# Project: Ansible\n# Version: devel\n'
                     b'# The remainder of this file is compressed using zlib.\n')
        handle.write(zlib.compress(body.encode('utf-8')))
    return path


project = 'glm.serve'
copyright = 'glm.serve contributors'
title = 'glm.serve'
html_short_title = 'glm.serve'
extensions = ['sphinx.ext.intersphinx', 'sphinx_antsibull_ext']
pygments_style = 'ansible'
highlight_language = 'YAML+Jinja'
html_theme = 'sphinx_ansible_theme'
html_show_sphinx = False
display_version = False
html_use_smartypants = True
html_use_modindex = False
html_use_index = False
html_copy_source = False
intersphinx_mapping = {'ansible_devel': (ANSIBLE_DOCS, _ansible_inventory())}
intersphinx_timeout = 1
default_role = 'any'
nitpicky = True
html_theme_options = {
    # The theme's logo links to '/', the root of docs.ansible.com; this site lives in a folder of its own.
    'documentation_home_url': 'https://github.com/glm-serve/glm.serve',
    'show_rtd_ethical_ads': False,
}
