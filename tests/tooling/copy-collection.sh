#!/usr/bin/env bash
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# Copy the collection's files (tracked and untracked, minus .gitignore'd ones) to a real
# .../ansible_collections/glm/serve path: ansible-test refuses symlinked collection roots.
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=${1:?usage: copy-collection.sh DEST/ansible_collections/glm/serve}
case "$dest" in
  */ansible_collections/glm/serve) ;;
  *) echo "copy-collection: $dest must end in ansible_collections/glm/serve" >&2; exit 2 ;;
esac
rm -rf "$dest"
mkdir -p "$dest"
git ls-files -co --exclude-standard -z |
  while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
  tar --null -T - -cf - | tar -C "$dest" -xf -
echo "copy-collection: $(find "$dest" -type f | wc -l) files in $dest"
