# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Check the execution environment that meta/execution-environment.yml defines, without building an image:
`ansible-builder create` writes its build context into a temporary folder, and this checks that

- the Containerfile installs this collection, from the tarball of build/ (the same bytes), and no other;
- the collection's Python requirements in the image are requirements.txt's and nothing else: ansible-builder's own
  introspect.py (the script the Containerfile runs) reads them from the tarball installed into a temporary
  collections path;
- no development tool (requirements-dev.txt, -lint, -docs, -ee, and the usual test tools) appears in the
  Containerfile or in the files of _build/ (ansible-builder's own scripts aside: they name test tools to exclude);
- ansible-core and the Python are those that the tests run (constraints.txt).

Run with the venv that holds ansible-builder (.venv-ee), ansible-galaxy on PATH (.venv), after `make build`:
  .venv-ee/bin/python tests/tooling/check_ee.py
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFINITION = os.path.join(ROOT, 'meta', 'execution-environment.yml')
DEV_LISTS = ('requirements-dev.txt', 'requirements-lint.txt', 'requirements-docs.txt', 'requirements-ee.txt')
# Test and dev tools that must never reach the image, whether or not a dev list names them today.
DEV_TOOLS = {'ansible-lint', 'molecule', 'pytest', 'pytest-testinfra', 'testinfra', 'pytest-xdist', 'pytest-mock',
             'reuse', 'actionlint', 'antsibull-changelog', 'antsibull-docs', 'sphinx', 'ansible-builder', 'yamllint',
             'black', 'tox', 'openai', 'ansible-test'}
# Build-time packages that ansible-builder's own Containerfile installs in the builder stage, and the image's engine.
BUILDER_OWN = {'bindep', 'pyyaml', 'packaging', 'ansible-core', 'ansible-runner', 'dumb-init'}


def req_names(path):
    """Package names of a requirements file (comments, options and blank lines skipped)."""
    names = []
    with open(path, encoding='utf-8') as handle:
        for line in handle:
            line = line.split('#', 1)[0].strip()
            if line and not line.startswith('-'):
                names.append(canonical(re.split(r'[\s<>=!~;\[]', line, 1)[0]))
    return names


def req_lines(lines):
    """The requirement lines of a requirements text, comments stripped."""
    found = []
    for line in lines:
        line = line.split('#', 1)[0].strip()
        if line and not line.startswith('-'):
            found.append(line)
    return found


def canonical(name):
    return re.sub(r'[-_.]+', '-', name).lower()


def galaxy_version():
    with open(os.path.join(ROOT, 'galaxy.yml'), encoding='utf-8') as handle:
        return str(yaml.safe_load(handle)['version'])


def constraint(name):
    with open(os.path.join(ROOT, 'constraints.txt'), encoding='utf-8') as handle:
        for line in handle:
            if canonical(line.split('==', 1)[0]) == name and '==' in line:
                return line.strip()
    return None


def sha256(path):
    with open(path, 'rb') as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def check_definition(definition, version, problems):
    """What the definition itself says: the tarball of this version, tested ansible-core and Python."""
    tarball = 'glm-serve-%s.tar.gz' % version
    deps = definition.get('dependencies', {})
    if definition.get('version') != 3:
        problems.append('definition: version %r, not 3 (ansible-builder 3 schema)' % definition.get('version'))
    collections = (deps.get('galaxy') or {}).get('collections') or []
    if [(c.get('name'), c.get('type')) for c in collections] != [('collection/%s' % tarball, 'file')]:
        problems.append('definition: dependencies.galaxy.collections should be only collection/%s (type file), '
                        'found %r' % (tarball, collections))
    sources = [entry.get('src') for entry in definition.get('additional_build_files', [])]
    if sources != ['../build/%s' % tarball]:
        problems.append('definition: additional_build_files should copy ../build/%s, found %r' % (tarball, sources))
    for key in ('python', 'system'):
        if key in deps:
            problems.append('definition: dependencies.%s: the collection\'s requirements.txt is read by '
                            'introspection of the installed collection, list nothing here' % key)
    core = (deps.get('ansible_core') or {}).get('package_pip')
    if core != constraint('ansible-core'):
        problems.append('definition: ansible_core %r, constraints.txt (what the tests run) has %r'
                        % (core, constraint('ansible-core')))
    interpreter = (deps.get('python_interpreter') or {}).get('python_path', '')
    if not interpreter.endswith('python%d.%d' % sys.version_info[:2]) and not interpreter.endswith('python3.11'):
        problems.append('definition: python_path %r is not the tested Python 3.11' % interpreter)


def check_context(context, tarball, dev, problems):
    """The Containerfile and _build/ that ansible-builder wrote."""
    build = os.path.join(context, '_build')
    with open(os.path.join(context, 'Containerfile'), encoding='utf-8') as handle:
        containerfile = handle.read()
    if not re.search(r'^RUN .*ansible-galaxy collection install .*-r requirements\.yml', containerfile, re.M):
        problems.append('Containerfile: no `ansible-galaxy collection install -r requirements.yml`')
    if not re.search(r'^RUN \$PYCMD /output/scripts/introspect\.py introspect ', containerfile, re.M):
        problems.append('Containerfile: no introspection of the installed collections')
    with open(os.path.join(build, 'requirements.yml'), encoding='utf-8') as handle:
        galaxy = yaml.safe_load(handle)
    names = [c['name'] for c in galaxy.get('collections', [])]
    shipped = os.path.join(build, 'collection', os.path.basename(tarball))
    if names != ['collection/%s' % os.path.basename(tarball)]:
        problems.append('_build/requirements.yml: collections %r, expected only this tarball' % names)
    if galaxy.get('roles'):
        problems.append('_build/requirements.yml: roles %r' % galaxy['roles'])
    if not os.path.isfile(shipped):
        problems.append('_build/collection/%s: missing (make build first?)' % os.path.basename(tarball))
    elif sha256(shipped) != sha256(tarball):
        problems.append('_build/collection/%s: not the bytes of %s' % (os.path.basename(tarball), tarball))
    for name in ('requirements.txt', 'bindep.txt'):
        if os.path.exists(os.path.join(build, name)):
            problems.append('_build/%s: the definition adds Python or system packages of its own' % name)
    # Every word of the Containerfile and of _build's text files, less ansible-builder's own scripts.
    texts = {'Containerfile': containerfile}
    for folder, _dirs, files in os.walk(build):
        for name in files:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, context)
            if rel.startswith(os.path.join('_build', 'scripts') + os.sep) or path == shipped:
                continue
            with open(path, encoding='utf-8', errors='replace') as handle:
                texts[rel] = handle.read()
    installs = set()
    for rel, text in texts.items():
        for tool in sorted(dev):
            if re.search(r'(?<![\w.-])%s(?![\w-])' % re.escape(tool), text, re.I):
                problems.append('%s: names the dev tool %s' % (rel, tool))
        for match in re.finditer(r'pip install (?:--no-cache-dir )?([^\n]+)', text):
            installs.update(match.group(1).split())
    refs = re.search(r'^ARG ANSIBLE_INSTALL_REFS="([^"]*)"', containerfile, re.M)
    installs.update(refs.group(1).split() if refs else [])
    extra = sorted(i for i in installs if not i.startswith('$') and
                   canonical(re.split(r'[<>=!~\'"]', i.strip('\'"'), 1)[0]) not in BUILDER_OWN)
    if extra:
        problems.append('Containerfile: pip installs %s, beyond ansible-builder\'s own and ansible-core/-runner'
                        % ', '.join(extra))


def check_python_needs(context, tarball, dev, work, problems):
    """The Python packages the image installs for the collection: introspect.py on the installed tarball."""
    collections = os.path.join(work, 'collections')
    subprocess.run(['ansible-galaxy', 'collection', 'install', '--offline', '-p', collections, tarball],
                   check=True, stdout=subprocess.DEVNULL, cwd=work,
                   env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections))
    installed = os.path.join(collections, 'ansible_collections', 'glm', 'serve')
    if os.path.exists(os.path.join(installed, 'meta', 'execution-environment.yml')):
        problems.append('tarball: holds meta/execution-environment.yml, which introspection would read instead of '
                        'requirements.txt (galaxy.yml build_ignore)')
    # The script prints what it found as YAML (and writes the files only when not empty).
    result = subprocess.run([sys.executable, os.path.join(context, '_build', 'scripts', 'introspect.py'),
                             'introspect', collections], check=True, stdout=subprocess.PIPE, text=True)
    data = yaml.safe_load(result.stdout)
    found = req_lines(data.get('python') or [])
    system = req_lines(data.get('system') or [])
    with open(os.path.join(ROOT, 'requirements.txt'), encoding='utf-8') as handle:
        wanted = req_lines(handle)
    if sorted(found) != sorted(wanted):
        problems.append('image Python requirements %r, requirements.txt has %r' % (found, wanted))
    for name in (canonical(re.split(r'[\s<>=!~;\[]', line, 1)[0]) for line in found):
        if name in dev:
            problems.append('image Python requirements: dev tool %s' % name)
    if system:
        problems.append('image system packages %r: the collection declares none' % system)
    return found


def main():
    version = galaxy_version()
    tarball = os.path.join(ROOT, 'build', 'glm-serve-%s.tar.gz' % version)
    if not os.path.isfile(tarball):
        sys.exit('check_ee: %s missing: run make build' % tarball)
    dev = set(DEV_TOOLS)
    for name in DEV_LISTS:
        dev.update(req_names(os.path.join(ROOT, name)))
    dev -= {'ansible-core'}   # the EE needs it; requirements-dev.txt pins it for the tests
    with open(DEFINITION, encoding='utf-8') as handle:
        definition = yaml.safe_load(handle)
    problems = []
    check_definition(definition, version, problems)
    builder = os.path.join(os.path.dirname(sys.executable), 'ansible-builder')
    work = tempfile.mkdtemp(prefix='glm-serve-ee-')
    try:
        context = os.path.join(work, 'context')
        subprocess.run([builder, 'create', '-f', DEFINITION, '--context', context,
                        '--output-filename', 'Containerfile'], check=True, stdout=subprocess.DEVNULL)
        check_context(context, tarball, dev, problems)
        needs = check_python_needs(context, tarball, dev, work, problems)
    finally:
        shutil.rmtree(work)
    for line in problems:
        print('check_ee: %s' % line)
    print('check_ee: %s: collection glm.serve %s from %s, Python needs %s, %d dev tools looked for, %d problems'
          % (os.path.relpath(DEFINITION, ROOT), version, os.path.relpath(tarball, ROOT), ', '.join(needs) or 'none',
             len(dev), len(problems)))
    sys.exit(1 if problems else 0)


if __name__ == '__main__':
    main()
