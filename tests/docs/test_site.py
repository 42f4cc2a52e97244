# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The built docs site (make docs) as a browser shows it: headless Chromium (Debian's chromium) loads each page
from the files and dumps the DOM after its scripts ran; the page must have its title and its options, and every
internal link of it (a, link, script, img) must resolve to a built file and, for #fragment, to an element of it.

  make docs-test     (after tests/tooling/build-docs.sh; GLM_DOCS_HTML names the html folder)
"""
from __future__ import annotations

import functools
import html.parser
import os
import posixpath
import shutil
import subprocess
import urllib.parse

import pytest

HTML = os.environ.get('GLM_DOCS_HTML') or os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), 'build', 'docs', 'html')

# page: (title that starts its <h1>, option names that the page documents)
PAGES = {
    'slurm_job_module.html': ('glm.serve.slurm_job module', ['name', 'state', 'script', 'lookup', 'wait']),
    'server_role.html': ('glm.serve.server role', ['server_partition', 'server_gpus', 'server_bad_node_retries']),
    'index.html': ('Glm.Serve', []),
    'docsite/playbooks.html': ('Playbooks', []),
    # the guides (docs/*.md, written into the site by tests/tooling/guide_docs.py)
    'docsite/guide_getting_started.html': ('Getting started', []),
    'docsite/guide_configuration.html': ('Configuration', []),
    'docsite/guide_operations.html': ('Operations', []),
    'docsite/guide_security.html': ('Security', []),
    'docsite/guide_replicas.html': ('Several replicas', []),
    'docsite/guide_architecture.html': ('Architecture', []),
    'docsite/guide_development.html': ('Development and testing', []),
}
EXTERNAL = ('http:', 'https:', 'mailto:', 'javascript:', 'data:')


class Page(html.parser.HTMLParser):
    """What the tests read of a DOM: the h1 and title text, element ids, links, and the text."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.ids, self.links, self.text, self.h1, self.title = set(), [], [], '', ''
        self._in = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get('id'):
            self.ids.add(attrs['id'])
        if tag == 'a' and attrs.get('name'):
            self.ids.add(attrs['name'])
        for key in ('href', 'src'):
            if attrs.get(key) and tag in ('a', 'link', 'script', 'img'):
                self.links.append(attrs[key])
        self._in.append(tag)

    def handle_endtag(self, tag):
        if tag in self._in:
            while self._in.pop() != tag:
                pass

    def handle_data(self, data):
        self.text.append(data)
        if 'h1' in self._in and not self.h1.endswith('\n'):
            self.h1 += data
        if self._in and self._in[-1] == 'title':
            self.title += data


def chromium():
    for name in ('chromium', 'chromium-browser'):
        if shutil.which(name):
            return name
    pytest.fail('no chromium on PATH: tests/docs/setup-chromium.sh installs it')


@functools.lru_cache(maxsize=None)
def rendered(page):
    """The DOM of a page after Chromium loaded it and ran its scripts."""
    path = os.path.join(HTML, page)
    assert os.path.isfile(path), '%s: not built (make docs)' % path
    result = subprocess.run([chromium(), '--headless', '--no-sandbox', '--disable-gpu', '--virtual-time-budget=3000',
                             '--dump-dom', 'file://' + path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0 and '<body' in result.stdout, \
        'chromium could not render %s: %s' % (page, result.stderr[-2000:])
    return Page(result.stdout)


@functools.lru_cache(maxsize=None)
def built_ids(page):
    """The element ids of a built file (the target of a link's #fragment)."""
    with open(os.path.join(HTML, page), encoding='utf-8') as handle:
        return Page(handle.read()).ids


def internal_target(page, link):
    """(file relative to HTML, fragment) that an internal link points to, or None for an external one."""
    if link.startswith(EXTERNAL) or link.startswith('//'):
        return None
    parts = urllib.parse.urlsplit(link)
    if parts.scheme or parts.netloc:
        return None
    path = urllib.parse.unquote(parts.path)
    if not path:
        target = page
    elif path.startswith('/'):
        target = path.lstrip('/')
    else:
        target = posixpath.normpath(posixpath.join(posixpath.dirname(page), path))
    if target == '.' or target.endswith('/'):
        target = posixpath.join(target, 'index.html').lstrip('./')
    return target, urllib.parse.unquote(parts.fragment)


@pytest.mark.parametrize('page', sorted(PAGES))
def test_page_renders(page):
    title, options = PAGES[page]
    dom = rendered(page)
    assert dom.h1.strip().startswith(title), '%s: h1 %r, expected %r' % (page, dom.h1, title)
    assert title.lower() in dom.title.lower(), '%s: <title> %r' % (page, dom.title)
    text = ' '.join(dom.text)
    for option in options:
        assert option in text, '%s: option %s not in the rendered page' % (page, option)
        anchors = [i for i in dom.ids if i.endswith('-' + option) or i.endswith('-' + option.replace('_', '-'))]
        assert anchors, '%s: no anchor for the option %s' % (page, option)
    if page == 'docsite/playbooks.html':
        for name in ('deploy', 'status', 'teardown'):
            assert 'glm.serve.%s' % name in text
    if page == 'docsite/guide_architecture.html':
        # the picture, inline: its labels are text of the page
        assert 'tasks run the module' in text and 'login node: glm_relay.py' in text, '%s: no picture' % page


@pytest.mark.parametrize('page', sorted(PAGES))
def test_internal_links_resolve(page):
    dom = rendered(page)
    broken, files, fragments, external = [], set(), 0, 0
    for link in dom.links:
        target = internal_target(page, link)
        if target is None:
            external += 1
            continue
        path, fragment = target
        full = os.path.realpath(os.path.join(HTML, path))
        if not full.startswith(os.path.realpath(HTML) + os.sep) or not os.path.isfile(full):
            broken.append('%s (no file %s)' % (link, path))
            continue
        files.add(path)
        if fragment and path.endswith('.html'):
            ids = dom.ids if path == page else built_ids(path)
            if fragment not in ids:
                broken.append('%s (no #%s in %s)' % (link, fragment, path))
            fragments += 1
    print('docs-test: %s: %d links, %d internal to %d files (%d #fragments), %d external (not fetched), %d broken'
          % (page, len(dom.links), len(dom.links) - external, len(files), fragments, external, len(broken)))
    assert not broken, '%s: broken internal links:\n  %s' % (page, '\n  '.join(sorted(set(broken))))
    assert len(dom.links) - external > 10, '%s: too few internal links, the page did not render' % page
