#!/usr/bin/env bash
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# Headless Chromium for the docs site's test (make docs-test): Debian's chromium package, installed if missing.
# Run as root on Debian 12/13.
set -euo pipefail
if ! command -v chromium >/dev/null; then
  echo "setup-chromium: installing Debian package chromium"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
echo "setup-chromium: $(chromium --version 2>/dev/null | head -1)"
