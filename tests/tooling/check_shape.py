# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The shape guard of make lint (issue 22): in plugins/ and roles/*/files, no function longer than 40 lines or of
cyclomatic complexity over 15, and no file in plugins/ longer than 500 lines; the front door short: README.md at most
150 lines, playbooks/status.yml and playbooks/teardown.yml under 80 (FRONT_DOOR).

A file's size counts its lines less a module's DOCUMENTATION, EXAMPLES and RETURN strings: Ansible requires them
in the module's own file (a doc fragment can hold options, never RETURN), and they are the data ansible-doc shows,
not code to read; --report prints both figures.

A function's length counts from its def line to its last line (decorators excluded, docstring and comments
included); its complexity is mccabe's (the checker flake8 runs, pinned in requirements-lint.txt), where a function
defined inside another counts towards the outer one. Each finding is one line, file:line, the function, the figure
and the limit.

  python tests/tooling/check_shape.py                    # every file: what is left over the limits
  python tests/tooling/check_shape.py --skip FILE ...    # make lint: FILE (being split elsewhere) not checked
  python tests/tooling/check_shape.py --report           # every function and file, longest first, no verdict
"""
from __future__ import annotations

import argparse
import ast
import glob
import os
import sys

import mccabe

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAX_FUNCTION_LINES = 40
MAX_COMPLEXITY = 15
MAX_FILE_LINES = 500
#: The front door's files and their most lines (issue 22: a README that is a landing page, the reference in the docs
#: site; status and teardown playbooks that orchestrate, deployment_info and the filters compute).
FRONT_DOOR = {'README.md': 150, 'playbooks/status.yml': 79, 'playbooks/teardown.yml': 79}
# The trees the guard reads; a file's size is limited in the first only.
SIZED = 'plugins'
PATTERNS = ('plugins/**/*.py', 'roles/*/files/**/*.py')


def files(root=ROOT):
    """The Python files the guard reads, relative to the root, sorted."""
    found = set()
    for pattern in PATTERNS:
        found.update(glob.glob(os.path.join(root, pattern), recursive=True))
    return sorted(os.path.relpath(path, root) for path in found)


def function_lengths(tree):
    """(line, qualified name, length) of every function and method, nested ones included."""
    found = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                found.append((child.lineno, name, child.end_lineno - child.lineno + 1))
                visit(child, name + '.')
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + '.')
            else:
                visit(child, prefix)

    visit(tree, '')
    return found


def complexities(tree):
    """(line, name, complexity) of every function and method as mccabe counts them."""
    visitor = mccabe.PathGraphingAstVisitor()
    visitor.preorder(tree, visitor)
    return [(graph.lineno, graph.entity, graph.complexity()) for graph in visitor.graphs.values()]


def measure(path, root=ROOT):
    """(file lines, [(line, name, what, figure, limit)]) of one file, every function measured."""
    with open(os.path.join(root, path), encoding='utf-8') as handle:
        text = handle.read()
    tree = ast.parse(text, filename=path)
    rows = [(line, name, 'lines', length, MAX_FUNCTION_LINES) for line, name, length in function_lengths(tree)]
    rows += [(line, name, 'complexity', value, MAX_COMPLEXITY) for line, name, value in complexities(tree)]
    return len(text.splitlines()) - doc_lines(tree), rows


def doc_lines(tree):
    """The lines of a module's documentation strings (module-level DOCUMENTATION, EXAMPLES, RETURN)."""
    names = {'DOCUMENTATION', 'EXAMPLES', 'RETURN'}
    return sum(node.end_lineno - node.lineno + 1 for node in tree.body
               if isinstance(node, ast.Assign) and any(getattr(t, 'id', None) in names for t in node.targets))


def findings(path, root=ROOT):
    """The lines of one file that break a limit."""
    size, rows = measure(path, root)
    out = ['%s:%d: %s: %s %d, over the limit of %d' % (path, line, name, what, figure, limit)
           for line, name, what, figure, limit in sorted(rows) if figure > limit]
    if path.startswith(SIZED + os.sep) and size > MAX_FILE_LINES:
        out.insert(0, '%s:1: the file: lines %d, over the limit of %d' % (path, size, MAX_FILE_LINES))
    return out


def front_door(root=ROOT, limits=None):
    """The lines of the front door's files that are over their limits (a file the tree lacks is not checked)."""
    out = []
    for path, limit in sorted((limits or FRONT_DOOR).items()):
        if not os.path.isfile(os.path.join(root, path)):
            continue
        with open(os.path.join(root, path), encoding='utf-8') as handle:
            size = len(handle.read().splitlines())
        if size > limit:
            out.append('%s:1: the file: lines %d, over the limit of %d' % (path, size, limit))
    return out


def report(paths, root=ROOT):
    """Every file's size and every function's length and complexity, largest first."""
    sizes, rows = [], []
    for path in paths:
        size, measured = measure(path, root)
        sizes.append((size, path))
        rows += [(figure, what, '%s:%d' % (path, line), name) for line, name, what, figure, unused_limit in measured]
    for size, path in sorted(sizes, reverse=True):
        print('%5d lines  %s' % (size, path))
    for figure, what, where, name in sorted(rows, key=lambda row: (row[1], -row[0], row[2])):
        print('%5d %-10s %s %s' % (figure, what, where, name))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--skip', nargs='*', default=[], metavar='FILE',
                        help='files (relative to the root) not checked, e.g. while another change splits them')
    parser.add_argument('--report', action='store_true', help='list every figure instead of checking the limits')
    parser.add_argument('--root', default=ROOT, help='the tree to read (default: this repository)')
    args = parser.parse_args(argv)
    paths = [path for path in files(args.root) if path not in set(args.skip)]
    if args.report:
        report(paths, args.root)
        return 0
    out = [line for path in paths for line in findings(path, args.root)]
    out += front_door(args.root)
    for line in out:
        print(line)
    skipped = ' (skipped: %s)' % ', '.join(args.skip) if args.skip else ''
    print('check_shape: %d files, %d over the limits%s' % (len(paths), len(out), skipped),
          file=sys.stderr if out else sys.stdout)
    return 1 if out else 0


if __name__ == '__main__':
    sys.exit(main())
