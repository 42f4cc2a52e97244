# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Write the docs site's guides, docs/docsite/rst/guide_NAME.rst, from the Markdown guides docs/NAME.md (GUIDES).
antsibull-docs takes extra docs in reStructuredText only (docs/docsite/rst/*.rst); the guides stay Markdown in docs/,
read as they are on GitHub, and this writes their site pages. It knows the Markdown the guides use, no more:
headings, paragraphs, lists, fenced code, pipe tables, `code`, **bold**, [links](...), and an image alone on its
line (an SVG of docs/, put into the page inline: antsibull-docs copies no other file into the site). A link to
another guide becomes a reference to its page, to a repository file a link to it on GitHub.

  python tests/tooling/guide_docs.py           # rewrite the pages
  python tests/tooling/guide_docs.py --check   # fail if a page is not what its guide says (make lint, make docs)
"""
from __future__ import annotations

import os
import posixpath
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GUIDES = ['getting-started', 'configuration', 'operations', 'security', 'replicas', 'architecture', 'development']
BLOB = 'https://github.com/glm-serve/glm.serve/blob/main/'
PREFIX = 'ansible_collections.glm.serve.docsite.'
UNDERLINE = {1: '=', 2: '-', 3: '~'}
# `code`, [text](url), or a markup character of RST that Markdown text uses as itself
INLINE = re.compile(r'`([^`]+)`|\[([^\]]+)\]\(([^)\s]+)\)|([|\\])')
LEXERS = {'sh': 'sh', 'yaml': 'yaml', 'python': 'python', 'json': 'json', 'ini': 'ini'}


def rst_path(name):
    return os.path.join(ROOT, 'docs', 'docsite', 'rst', 'guide_%s.rst' % name.replace('-', '_'))


def label(page, anchor=''):
    """The RST label of a guide (page: its name) or of one of its sections (anchor: GitHub's id of the heading)."""
    return PREFIX + 'guide_' + page.replace('-', '_') + ('.' + anchor if anchor else '')


def anchor_of(title):
    """The id GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r'[^a-z0-9 _-]', '', title.lower().replace('`', '')).replace(' ', '-')


def link(page, text, url):
    """An RST link for a Markdown [text](url) in docs/PAGE.md."""
    text = text.replace('`', '')
    if re.match(r'[a-z]+:', url):
        return '`%s <%s>`__' % (text, url)
    path, anchor = (url.split('#', 1) + [''])[:2]
    target = posixpath.splitext(path)[0] if path.endswith('.md') and '/' not in path else ''
    if not path or target in GUIDES:
        return ':ref:`%s <%s>`' % (text, label(target or page, anchor))
    return '`%s <%s%s>`__' % (text, BLOB, posixpath.normpath(posixpath.join('docs', url)))


def inline(page, text):
    """Markdown inline text as RST; '\\ ' where RST would not end or start a literal or a link by itself."""
    out, last = [], 0
    for match in INLINE.finditer(text):
        out.append(text[last:match.start()])
        code, link_text, url, char = match.groups()
        if char:
            out.append('\\' + char)
        else:
            if out and out[-1] and (out[-1][-1].isalnum() or out[-1][-1] in '_-/'):
                out.append('\\ ')
            out.append('``%s``' % code if code else link(page, link_text, url))
            follow = text[match.end():match.end() + 1]
            if follow and (follow.isalnum() or follow in '_/'):
                out.append('\\ ')
        last = match.end()
    out.append(text[last:])
    return ''.join(out)


def table(page, rows):
    cells = [[c.strip() for c in row.strip().strip('|').split(' | ')] for row in rows]
    out = ['.. list-table::', '   :header-rows: 1', '']
    for row in [cells[0]] + cells[2:]:
        for index, cell in enumerate(row):
            text = inline(page, cell) if cell not in ('-', '') else '\\-'
            out.append(('   * - ' if index == 0 else '     - ') + text)
    return out + ['']


def svg(name):
    """An SVG file of docs/ as raw HTML (its XML declaration left out)."""
    with open(os.path.join(ROOT, 'docs', name), encoding='utf-8') as handle:
        text = re.sub(r'^<\?xml[^>]*\?>\s*', '', handle.read())
    return ['.. raw:: html', ''] + ['   ' + line if line.strip() else '' for line in text.splitlines()] + ['']


def blocks(lines):
    """The Markdown lines cut into blocks: ('code', lang, lines), ('table', rows), ('text', lines)."""
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith('```'):
            end = lines.index('```', index + 1)
            yield 'code', line[3:].strip(), lines[index + 1:end]
            index = end + 1
        elif line.startswith('|'):
            end = index
            while end < len(lines) and lines[end].startswith('|'):
                end += 1
            yield 'table', lines[index:end]
            index = end
        elif line.startswith('<!--'):
            while '-->' not in lines[index]:
                index += 1
            index += 1
        elif not line.strip():
            index += 1
        else:
            end = index
            while end < len(lines) and lines[end].strip() and not lines[end].startswith(('```', '|')):
                end += 1
            yield 'text', lines[index:end]
            index = end


def convert(page, lines):
    out = ['..', '  SPDX-FileCopyrightText: glm.serve contributors', '  SPDX-License-Identifier: GPL-3.0-or-later',
           '..', '  Generated by tests/tooling/guide_docs.py from docs/%s.md: edit that, then run it.' % page, '']
    for kind, *rest in blocks(lines):
        if kind == 'code':
            lang, body = rest
            out += ['.. code-block:: %s' % LEXERS.get(lang, 'text'), '']
            out += ['  ' + b if b.strip() else '' for b in body] + ['']
        elif kind == 'table':
            out += table(page, rest[0])
        elif rest[0][0].startswith('#'):
            level = len(rest[0][0]) - len(rest[0][0].lstrip('#'))
            title = rest[0][0][level:].strip()
            text = inline(page, title)
            out += ['.. _%s:' % label(page, anchor_of(title) if level > 1 else ''), '',
                    text, UNDERLINE[level] * len(text), '']
        elif re.match(r'!\[[^\]]*\]\([^)]+\.svg\)$', rest[0][0]):
            out += svg(rest[0][0].rsplit('(', 1)[1].rstrip(')'))
        else:
            out += [inline(page, '\n'.join(rest[0]))] + ['']
    return '\n'.join(out).rstrip('\n') + '\n'


def main():
    stale = []
    for page in GUIDES:
        with open(os.path.join(ROOT, 'docs', page + '.md'), encoding='utf-8') as handle:
            text = convert(page, handle.read().splitlines())
        path = rst_path(page)
        current = open(path, encoding='utf-8').read() if os.path.exists(path) else None
        if current != text:
            stale.append(os.path.relpath(path, ROOT))
            if sys.argv[1:] != ['--check']:
                with open(path, 'w', encoding='utf-8') as handle:
                    handle.write(text)
    if sys.argv[1:] == ['--check'] and stale:
        sys.exit('guide_docs: %s not what docs/*.md say: run python tests/tooling/guide_docs.py' % ', '.join(stale))
    print('guide_docs: %s' % ('rewrote ' + ', '.join(stale) if stale else '%d pages up to date' % len(GUIDES)))


if __name__ == '__main__':
    main()
