#!/usr/bin/env bash
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# ansible-test sanity and units for every ansible-core release the collection claims, each with the controller
# Pythons it supports (tests/tooling/ansible-matrix.txt), then a table: release x Python x stage, pass, fail or
# skipped (with the reason), and seconds.
#
# Usage: tests/tooling/ansible-matrix.sh [--ci] [--only RELEASE[/PYTHON]]... [--jobs N]
#   --ci    only the lines marked "ci" in ansible-matrix.txt, first Python of each (make test-ansible-ci)
#   --only  only this cell (repeatable), e.g. --only 2.21.5/3.12 or --only 2.20.10
#   --jobs  cells run side by side (default 1); their seconds then include waiting for the other cell
# Environment: ANSIBLE_MATRIX_CACHE (default .venv-ansible): the venvs, one a cell, and the logs;
# ANSIBLE_MATRIX_COPIES (default /tmp/glm-serve-ansible-matrix): the collection copies, outside this git tree
# (inside it, ansible-test would take the tree's git file list, where the copy is ignored, and test nothing).
#
# Pythons are looked up, in order, as pythonX.Y on PATH, in pyenv's versions folder, and through uv (if on
# PATH: `uv python find`, then `uv python install`, which needs a host this kind of machine cannot reach; pyenv
# here holds 3.11, 3.12 and 3.13). A cell whose Python cannot be found is listed as skipped,
# and so is a sanity test that ansible-test itself skips (its reason is in the table); neither counts as passed.
# The exit status is 1 when a stage failed, 0 otherwise (skips included: they are printed).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD

ci=0
jobs=1
only=()
while [ $# -gt 0 ]; do
  case "$1" in
    --ci) ci=1 ;;
    --only) only+=("${2:?--only needs RELEASE[/PYTHON]}"); shift ;;
    --jobs) jobs=${2:?--jobs needs a number}; shift ;;
    *) echo "ansible-matrix: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

cache=${ANSIBLE_MATRIX_CACHE:-$repo/.venv-ansible}
mkdir -p "$cache/bin" "$cache/logs"
cache=$(cd "$cache" && pwd)
copies=${ANSIBLE_MATRIX_COPIES:-/tmp/glm-serve-ansible-matrix}
results=$cache/results.tsv
: > "$results"

# ansible-test --venv --python X.Y looks for pythonX.Y on PATH: the ones found are linked here, first on PATH
# (pyenv's shims answer for versions that are not pyenv's global one only with an error).
export PATH=$cache/bin:$PATH
export PYTHONDONTWRITEBYTECODE=1
unset ANSIBLE_COLLECTIONS_PATH ANSIBLE_CONFIG

# Prints the interpreter's own path (through a pyenv shim or a link too) when it has venv and ensurepip.
works() { "$1" -c 'import os, sys, venv, ensurepip; print(os.path.realpath(sys.executable))' 2>/dev/null; }

find_python() {  # X.Y -> prints a working interpreter's path, or nothing
  local want=$1 cand
  cand=$(command -v "python$want" 2>/dev/null || true)
  if [ -n "$cand" ] && works "$cand"; then return; fi
  local root=${PYENV_ROOT:-$HOME/.pyenv}
  while IFS= read -r cand; do
    if works "$cand"; then return; fi
  done < <(find "$root/versions" -mindepth 3 -maxdepth 3 -path "$root/versions/$want.*/bin/python$want" 2>/dev/null | sort -V -r)
  if command -v uv >/dev/null; then
    cand=$(uv python find "$want" 2>/dev/null || true)
    if [ -z "$cand" ] && uv python install "$want" >/dev/null 2>&1; then
      cand=$(uv python find "$want" 2>/dev/null || true)
    fi
    if [ -n "$cand" ] && works "$cand"; then return; fi
  fi
}

record() {  # release python stage result seconds note
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >> "$results"
}

# ansible-test --venv bootstraps pip with a get-pip.py from a host this machine cannot reach; it looks for
# ~/.ansible/test/cache/get_pip_<pip version>.py first. Each ansible-test release names its own pip version.
install_get_pip() {  # venv
  local version
  for version in $("$1/bin/python" - <<'PY'
import re, pathlib, ansible_test
src = pathlib.Path(ansible_test.__file__).parent / '_internal' / 'python_requirements.py'
print(' '.join(sorted(set(re.findall(r"pip='([0-9.]+)'", src.read_text())))))
PY
  ); do
    mkdir -p "$HOME/.ansible/test/cache"
    install -m 0644 tests/tooling/get_pip_offline.py "$HOME/.ansible/test/cache/get_pip_${version//./_}.py"
  done
}

# Requirements ansible-test pins to a URL (a host this machine cannot reach): replaced by the release named in
# ansible-matrix-pins.txt for this ansible-core release, else their sanity test is skipped. Sets $repins (what was
# replaced, for the table) and $skip_args/$skip_notes (tests to skip, and why).
repin_sanity() {  # release venv
  local release=$1 dir file name line test pin
  dir=$("$2/bin/python" -c 'import ansible_test, os; print(os.path.join(os.path.dirname(ansible_test.__file__), "_data", "requirements"))')
  repins='' skip_args=() skip_notes=''
  for file in "$dir"/sanity.*.txt; do
    test=${file##*/sanity.}; test=${test%.txt}
    while IFS= read -r line; do
      line=${line#*# ansible-matrix replaced: }   # a line replaced by an earlier run keeps the original after this
      name=${line%% @ *}
      pin=$(awk -v r="$release" -v n="$name" '$1 == r && $2 == n { print $3 }' tests/tooling/ansible-matrix-pins.txt)
      if [ -n "$pin" ]; then
        "$2/bin/python" - "$file" "$name" "$pin" <<'PY'
import sys
path, name, pin = sys.argv[1:]
with open(path) as f:
    lines = f.readlines()
with open(path, 'w') as f:
    f.writelines('%s  # ansible-matrix replaced: %s\n' % (pin, l.strip()) if l.startswith(name + ' @ ') else l for l in lines)
PY
        repins+="${repins:+; }$test: $pin from PyPI for ansible-test's URL pin (ansible-matrix-pins.txt)"
      else
        skip_args+=(--skip-test "$test")
        skip_notes+="${skip_notes:+; }$test skipped: ansible-test pins ${line%%#*}, a host this machine cannot reach"
      fi
    done < <(grep -E '^[A-Za-z0-9_.-]+ @ [a-z+]+://|# ansible-matrix replaced: ' "$file" || true)
  done
}

# A sanity test ansible-test skips is named on a "WARNING: Skipping sanity test 'NAME' ..." line.
sanity_skips() {  # log
  { grep -oE "WARNING: Skipping sanity test '[^']+'[^.]*" "$1" || true; } |
    sed -E "s/WARNING: Skipping sanity test '([^']+)'/\1:/" | paste -sd ';' -
}

run_stage() {  # release python stage copy log
  local release=$1 py=$2 stage=$3 copy=$4 log=$5 start rc=0 note=''
  start=$SECONDS
  echo "=== ansible-core $release, Python $py: $stage (log: $log)"
  local extra=()
  if [ "$stage" = sanity ]; then extra=("${skip_args[@]}"); fi
  (cd "$copy" && "$venv/bin/ansible-test" "$stage" --venv --python "$py" --color no "${extra[@]}") > "$log" 2>&1 || rc=$?
  tail -n 5 "$log"
  if [ "$stage" = sanity ]; then
    note=$(sanity_skips "$log")
    note=${note:+skipped by ansible-test: $note}
    note+="${skip_notes:+${note:+; }$skip_notes}"
    note+="${repins:+${note:+; }$repins}"
  fi
  if [ "$rc" -eq 0 ]; then
    if [ -n "$note" ] && [ "$note" != "$repins" ]; then record "$release" "$py" "$stage" 'pass*' $((SECONDS - start)) "$note"
    else record "$release" "$py" "$stage" pass $((SECONDS - start)) "${note:-}"; fi
  else
    note=$({ grep -E '^ERROR: ' "$log" || true; } | head -n 3 | paste -sd ';' -)
    record "$release" "$py" "$stage" FAIL $((SECONDS - start)) "${note:-exit $rc, see $log}"
  fi
}

selected() {  # release python first(0/1) subset
  local cell
  if [ "$ci" -eq 1 ] && { [ "$4" != ci ] || [ "$3" -ne 1 ]; }; then return 1; fi
  [ "${#only[@]}" -eq 0 ] && return 0
  for cell in "${only[@]}"; do
    case "$cell" in "$1"|"$1/$2") return 0 ;; esac
  done
  return 1
}

run_cell() {  # release python: setup, sanity, units of one cell
  local release=$1 py=$2 cell interp start made copy stage
  cell=$release-py$py
  interp=''
  if [ -e "$cache/bin/python$py" ]; then interp=$(works "$cache/bin/python$py" || true); fi
  if [ -z "$interp" ]; then
    for stage in sanity units; do
      record "$release" "$py" "$stage" skipped 0 "no Python $py here (looked on PATH, in pyenv, through uv)"
    done
    return 0
  fi
  # Each cell its own HOME: ansible-test keeps its sanity venvs in ~/.ansible/test, and cells may run side by side.
  export HOME=$cache/home/$cell
  mkdir -p "$HOME"
  venv=$cache/$cell
  start=$SECONDS
  made='venv kept from an earlier run'
  if [ ! -x "$venv/bin/ansible-test" ] || ! "$venv/bin/python" -c "import ansible.release as r; assert r.__version__ == '$release'" 2>/dev/null; then
    echo "=== ansible-core $release, Python $py: venv $venv"
    rm -rf "$venv"
    "$interp" -m venv "$venv"
    if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check "ansible-core==$release" \
        > "$cache/logs/$cell-venv.log" 2>&1; then
      for stage in sanity units; do
        record "$release" "$py" "$stage" FAIL $((SECONDS - start)) "pip install ansible-core==$release failed, see $cache/logs/$cell-venv.log"
      done
      return 0
    fi
    made="new venv: ansible-core $release on $interp"
  fi
  install_get_pip "$venv"
  repin_sanity "$release" "$venv"
  record "$release" "$py" setup pass $((SECONDS - start)) "$made"
  copy=$copies/$cell/ansible_collections/glm/serve
  tests/tooling/copy-collection.sh "$copy" >/dev/null
  run_stage "$release" "$py" sanity "$copy" "$cache/logs/$cell-sanity.log"
  run_stage "$release" "$py" units "$copy" "$cache/logs/$cell-units.log"
}

main() {
  local total_start=$SECONDS release rest subset pythons word first py
  # Find every Python first (the links in $cache/bin), so that cells running side by side see them all.
  while read -r release rest; do
    case "$release" in ''|'#'*) continue ;; esac
    for word in $rest; do
      case "$word" in
        ci) ;;
        *) if [ ! -e "$cache/bin/python$word.checked" ]; then
             rm -f "$cache/bin/python$word"   # the link an earlier run made, not a place to look
             if py=$(find_python "$word") && [ -n "$py" ]; then ln -sfn "$py" "$cache/bin/python$word"; fi
             touch "$cache/bin/python$word.checked"
           fi ;;
      esac
    done
  done < tests/tooling/ansible-matrix.txt
  rm -f "$cache"/bin/*.checked

  while read -r release rest; do
    case "$release" in ''|'#'*) continue ;; esac
    subset=''
    pythons=()
    for word in $rest; do
      case "$word" in ci) subset=ci ;; *) pythons+=("$word") ;; esac
    done
    first=1
    for py in "${pythons[@]}"; do
      if ! selected "$release" "$py" "$first" "$subset"; then first=0; continue; fi
      first=0
      if [ "$jobs" -gt 1 ]; then
        while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
        run_cell "$release" "$py" &
      else
        run_cell "$release" "$py"
      fi
    done
  done < tests/tooling/ansible-matrix.txt
  wait || true
  if [ ! -s "$results" ]; then echo "ansible-matrix: no cell selected" >&2; exit 2; fi

  echo
  echo "ansible-core matrix ($(if [ "$ci" -eq 1 ]; then echo 'CI subset'; else echo 'full'; fi), $jobs at a time;" \
       "$((SECONDS - total_start)) s in all; venvs and logs in $cache)"
  sort -t $'\t' -k1,1V -k2,2V -s "$results" | awk -F '\t' '
    BEGIN { printf "%-12s %-7s %-7s %-8s %6s  %s\n", "ansible-core", "Python", "stage", "result", "sec", "note" }
    { printf "%-12s %-7s %-7s %-8s %6s  %s\n", $1, $2, $3, $4, $5, $6
      if ($3 == "setup") next
      if ($4 == "FAIL") bad++; else if ($4 == "skipped") skip++; else ok++ }
    END { printf "%d passed, %d failed, %d skipped\n", ok + 0, bad + 0, skip + 0 }
  '
  if grep -q $'\tFAIL\t' "$results"; then exit 1; fi
}

# All in functions, which bash reads whole before running them: the script may be edited while it runs.
main
exit
