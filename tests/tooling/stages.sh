#!/usr/bin/env bash
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# make test's driver: runs the make targets named on the command line one after the other (MAKE, with the make
# variables in GLM_STAGE_VARS), stops at the first that fails as make would, and prints each stage's wall time at the
# end, passed or not, so that a CI run says where its minutes went.
#   bg:NAME    starts make NAME in the background (its output in tests/output/stage-NAME.log) and goes on;
#   wait:NAME  waits for it, shows the end of its log, and stops here if it failed (its time: from start to end).
#
#   MAKE=make GLM_STAGE_VARS="GLM_CLUSTER_RELEASE=trixie" tests/tooling/stages.sh setup cluster bg:roots lint ...
set -uo pipefail
read -r -a VARS <<<"${GLM_STAGE_VARS:-}"
declare -a NAMES=() TIMES=() RESULTS=()
declare -A BG_PID=() BG_START=()
start=$SECONDS
rc=0
mkdir -p tests/output
for stage in "$@"; do
  t0=$SECONDS
  case $stage in
    bg:*)
      name=${stage#bg:}
      printf '\n==> make test: stage %s, in the background (at %s s; log tests/output/stage-%s.log)\n' "$name" "$((t0 - start))" "$name"
      "${MAKE:-make}" --no-print-directory "${VARS[@]}" "$name" >"tests/output/stage-$name.log" 2>&1 </dev/null &
      BG_PID[$name]=$! BG_START[$name]=$t0
      continue
      ;;
    wait:*)
      name=${stage#wait:}
      printf '\n==> make test: waiting for stage %s (at %s s)\n' "$name" "$((t0 - start))"
      wait "${BG_PID[$name]}"
      rc=$?
      tail -n 15 "tests/output/stage-$name.log"
      NAMES+=("$name (background)") TIMES+=($((SECONDS - BG_START[$name])))
      ;;
    *)
      printf '\n==> make test: stage %s (at %s s)\n' "$stage" "$((t0 - start))"
      touch tests/output/.stage-start
      "${MAKE:-make}" --no-print-directory "${VARS[@]}" "$stage"
      rc=$?
      NAMES+=("$stage") TIMES+=($((SECONDS - t0)))
      ;;
  esac
  if [ "$rc" -ne 0 ]; then RESULTS+=(FAIL); break; fi
  RESULTS+=(ok)
done
# a background stage not waited for (a stage before its wait failed): stopped with the run
for name in "${!BG_PID[@]}"; do kill "${BG_PID[$name]}" 2>/dev/null || true; done
printf '\nmake test: stage times\n'
for i in "${!NAMES[@]}"; do
  printf '  %-24s %-4s %5d s\n' "${NAMES[$i]}" "${RESULTS[$i]}" "${TIMES[$i]}"
done
printf '  %-24s %-4s %5d s (%d min %d s)\n' total "$([ "$rc" -eq 0 ] && echo ok || echo FAIL)" \
  "$((SECONDS - start))" "$(((SECONDS - start) / 60))" "$(((SECONDS - start) % 60))"
# CI shows only the end of what a run printed: a failed stage that keeps a log of its own (tests/output/STAGE.log:
# molecule's) gets the lines saying what failed repeated here, last (a CI run of molecule once showed only its recap).
failed=
if [ "${#NAMES[@]}" -gt 0 ]; then failed=${NAMES[${#NAMES[@]}-1]}; fi
failed=${failed% (background)}
if [ "$rc" -ne 0 ] && [ -n "$failed" ] && [ "tests/output/$failed.log" -nt tests/output/.stage-start ]; then
  printf '\nmake test: what failed in stage %s (the matching lines of tests/output/%s.log)\n' "$failed" "$failed"
  sed 's/\x1b\[[0-9;]*m//g' "tests/output/$failed.log" |
    grep -a -E '(FAILED|[^_]ERROR|Error:|fatal:|failed: \[|Assertion|^[ │]*E  )' | grep -v RETRYING | tail -n 40
fi
exit "$rc"
