#!/usr/bin/env bash
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# The docs site: antsibull-docs writes the collection's pages (modules, plugins, roles' argument specs, the extra
# docs of docs/docsite/: the playbooks page) as reStructuredText into OUT/rst, Sphinx renders them into OUT/html.
#   tests/tooling/build-docs.sh [OUT]     (default build/docs; make docs)
# Needs .venv-docs (requirements-docs.txt) and ansible-doc with glm.serve on its collections path (make setup).
set -euo pipefail
cd "$(dirname "$0")/../.."

out=${1:-build/docs}
venv=${DOCS_VENV:-.venv-docs}
python3 tests/tooling/playbook_docs.py --check
python3 tests/tooling/guide_docs.py --check
rm -rf "$out"
mkdir -p "$out/rst"
chmod og-w "$out/rst"   # antsibull-docs wants its output folder writable by itself only
"$venv/bin/antsibull-docs" --config-file tests/docs/antsibull-docs.cfg collection --use-current --squash-hierarchy \
  --fail-on-error --cleanup everything --dest-dir "$out/rst" glm.serve
"$venv/bin/sphinx-build" -b html -c tests/docs -W --keep-going -q "$out/rst" "$out/html"
echo "build-docs: $(find "$out/html" -name '*.html' | wc -l) pages in $out/html (open $out/html/index.html)"
