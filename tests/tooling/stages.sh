#!/usr/bin/env bash
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# make test's driver: runs the make targets named on the command line one after the other (MAKE, with the make
# variables in GLM_STAGE_VARS), stops at the first that fails as make would, and prints each stage's wall time at the
# end, passed or not, so that a CI run says where its minutes went.
#
#   MAKE=make GLM_STAGE_VARS="GLM_CLUSTER_RELEASE=trixie" tests/tooling/stages.sh setup cluster lint ...
set -uo pipefail
read -r -a VARS <<<"${GLM_STAGE_VARS:-}"
declare -a NAMES=() TIMES=() RESULTS=()
start=$SECONDS
rc=0
for stage in "$@"; do
  t0=$SECONDS
  printf '\n==> make test: stage %s (at %s s)\n' "$stage" "$((t0 - start))"
  "${MAKE:-make}" --no-print-directory "${VARS[@]}" "$stage"
  rc=$?
  NAMES+=("$stage") TIMES+=($((SECONDS - t0)))
  if [ "$rc" -ne 0 ]; then RESULTS+=(FAIL); break; fi
  RESULTS+=(ok)
done
printf '\nmake test: stage times\n'
for i in "${!NAMES[@]}"; do
  printf '  %-16s %-4s %5d s\n' "${NAMES[$i]}" "${RESULTS[$i]}" "${TIMES[$i]}"
done
printf '  %-16s %-4s %5d s (%d min %d s)\n' total "$([ "$rc" -eq 0 ] && echo ok || echo FAIL)" \
  "$((SECONDS - start))" "$(((SECONDS - start) / 60))" "$(((SECONDS - start) % 60))"
exit "$rc"
