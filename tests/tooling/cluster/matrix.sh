#!/usr/bin/env bash
# The same stages on each Slurm release of the local cluster, and a release x stage table at the end.
#
#   tests/tooling/cluster/matrix.sh            (make test: GLM_MATRIX_RELEASES="bookworm trixie sid")
#   GLM_MATRIX_FIXTURES=1 ...          (make test-matrix: also capture sacct/scontrol/squeue fixtures)
#   GLM_MATRIX_ONLY="bench" ...        (only those stages; the others show "-")
#   GLM_MATRIX_FAULTS="test_01 or ..." (the fault cases to run: a pytest -k expression; default FAULTS below;
#                                       make test's releases target sets it)
#   GLM_MATRIX_MOLECULE=default        (one molecule scenario instead of all; make test's releases target sets it)
#   GLM_MATRIX_LANES="bookworm,trixie sid"  (releases side by side: each lane's in turn, the lanes at once; make
#                                       test's releases target sets it; unset: all of them in turn)
#
# For each release of GLM_MATRIX_RELEASES (default "bookworm trixie sid"): the cluster of that release
# (cluster.sh with GLM_CLUSTER_RELEASE; bookworm = the host's Slurm 22.05, trixie = 24.11 and sid = 26.05 in their
# Debian roots) is installed and started with MinJobAge GLM_CLUSTER_MIN_JOB_AGE (default here 10 s, so that the
# live test of the sacct fallback runs instead of skipping), then:
#   smoke      cluster.sh smoke (a job, 8 fake GPUs, Pyxis stand-in, sacct)
#   slurm_job  the live module tests (tests/integration/test_slurm_job_live.py)
#   molecule   deploy, idempotence, verify, teardown (molecule test)
#   faults     the fault cases that touch Slurm's behaviour (FAULTS below)
#   bench      tests/bench/bench_release.py: the waiter's RPCs/min (and which query path) and detection latency
# A release named in GLM_MATRIX_SUITE (make test: trixie, its default release) had the whole suite run on it just
# before (make's molecule and pytest stages): its molecule and faults cells say "suite" instead of running again, and
# its slurm_job cell runs only the live test the suite skipped there (accounting after MinJobAge, which needs this
# run's MinJobAge of 10 s).
# The host cluster (bookworm) is left running with MinJobAge back at its default; a root is stopped.
# Logs: tests/output/matrix/RELEASE-STAGE.log; figures: tests/output/matrix/RELEASE-bench.json. Exits 1 if a stage
# failed (the table says which).
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
REPO=$PWD
CLUSTER=$REPO/tests/tooling/cluster/cluster.sh
OUT=$REPO/tests/output/matrix
FIXTURES=$REPO/tests/unit/plugins/module_utils/fixtures
BIN=$REPO/.venv/bin
read -r -a RELEASES <<<"${GLM_MATRIX_RELEASES:-bookworm trixie sid}"
read -r -a SUITE <<<"${GLM_MATRIX_SUITE:-}"
STAGES=(install start smoke slurm_job molecule faults bench)
if [ -n "${GLM_MATRIX_FIXTURES:-}" ]; then STAGES+=(fixtures); fi
# The fault cases whose outcome depends on what Slurm does (states, reasons, requeue, dependencies, the controller
# going away); the rest of tests/integration (Pyxis, hf, SGLang stand-ins, input checks) does not change with Slurm
FAULTS=${GLM_MATRIX_FAULTS:-test_01 or test_05a or test_05b or test_08 or test_09 or test_10 or test_11a}
export GLM_CLUSTER_MIN_JOB_AGE=${GLM_CLUSTER_MIN_JOB_AGE:-10}
export PYTHONDONTWRITEBYTECODE=1
mkdir -p "$OUT"
declare -A RESULT TIME

# GLM_MATRIX_ONLY="smoke bench": only those stages (install and start always run); the others say "-"
read -r -a ONLY <<<"${GLM_MATRIX_ONLY:-}"

# stage RELEASE NAME CMD...: run, log, record ok/FAIL and seconds
stage() {
  local rel=$1 name=$2 t0=$SECONDS rc
  shift 2
  if [ "${#ONLY[@]}" -gt 0 ] && [[ " ${ONLY[*]} install start " != *" $name "* ]]; then
    RESULT[$rel.$name]=-
    return 0
  fi
  printf 'matrix: %s %s ...\n' "$rel" "$name" >&2
  "$@" >"$OUT/$rel-$name.log" 2>&1 </dev/null
  rc=$?
  TIME[$rel.$name]=$((SECONDS - t0))
  if [ "$rc" -eq 0 ]; then RESULT[$rel.$name]=ok; else RESULT[$rel.$name]=FAIL; fi
  printf 'matrix: %s %s %s (%s s)\n' "$rel" "$name" "${RESULT[$rel.$name]}" "${TIME[$rel.$name]}" >&2
  if [ "$rc" -ne 0 ]; then tail -n 30 "$OUT/$rel-$name.log" | sed "s/^/  $rel $name | /" >&2; fi
  return "$rc"
}

in_suite() {
  local s
  for s in "${SUITE[@]}"; do [ "$s" = "$1" ] && return 0; done
  return 1
}

# shellcheck disable=SC2317  # called through stage
capture() {
  local rel=$1 home dir
  home=$("$CLUSTER" env | sed -n 's/^export GLM_CLUSTER_LOGIN_HOME=//p')
  [ -n "$home" ] || return 1
  dir=$home/capture-$rel
  rm -rf "$dir"
  "$CLUSTER" exec runuser -u glmuser -- mkdir -p "$dir" || return 1
  install -m 0644 "$FIXTURES/capture-release.sh" "$home/capture-release.sh"
  "$CLUSTER" exec runuser -u glmuser -- bash "$home/capture-release.sh" "$dir" "$rel" || return 1
  rm -rf "$OUT/fixtures/$rel"
  mkdir -p "$OUT/fixtures/$rel"
  cp "$dir"/*.txt "$OUT/fixtures/$rel/"
  mv "$OUT/fixtures/$rel/sacct-commands.txt" "$OUT/fixtures/$rel/sacct-$rel-commands.txt"
  for s in completed failed cancelled timeout; do
    grep -q "|$(tr '[:lower:]' '[:upper:]' <<<"$s")" "$OUT/fixtures/$rel/sacct-$rel-$s.txt" || {
      echo "sacct-$rel-$s.txt has no ${s^^} row"
      return 1
    }
  done
  if [ "${GLM_MATRIX_FIXTURES:-}" = tree ]; then
    cp "$OUT/fixtures/$rel"/*.txt "$FIXTURES/"
  fi
}

# shellcheck disable=SC2317  # called through stage
molecule_on() {
  local inv=$1
  [ "$inv" = bookworm ] && inv=local
  # GLM_MATRIX_MOLECULE="default": one scenario (make test's releases target); unset: every scenario (--all)
  if [ -n "${GLM_MATRIX_MOLECULE:-}" ]; then
    GLM_MOLECULE_INVENTORY=$inv "$BIN/molecule" test -s "$GLM_MATRIX_MOLECULE"
  else
    GLM_MOLECULE_INVENTORY=$inv "$BIN/molecule" test --all
  fi
}

# One release, start to end: its cluster, its stages; the results go to $OUT/$rel.results ("stage result seconds"
# lines) for the table, so that releases can run side by side in lanes (below).
run_release() {
  local rel=$1
  export GLM_CLUSTER_RELEASE=$rel
  # each release's own molecule folder and pytest temp root: two lanes never share one
  export MOLECULE_EPHEMERAL_DIRECTORY=/tmp/glm-matrix-$rel/molecule
  export GLM_MATRIX_BASETEMP=/tmp/glm-matrix-$rel/pytest
  rm -rf "/tmp/glm-matrix-$rel"
  mkdir -p "$MOLECULE_EPHEMERAL_DIRECTORY"
  rm -f "$OUT/$rel-bench.json" "$OUT/$rel.results"
  if [ "$rel" != bookworm ]; then
    # a fresh start, with this run's configuration (MinJobAge), and a start time measured from down
    "$CLUSTER" stop >/dev/null 2>&1
  fi
  # on the host cluster, start reconfigures a running slurmctld with this MinJobAge
  if stage "$rel" install "$CLUSTER" install && stage "$rel" start "$CLUSTER" start; then
    stage "$rel" smoke "$CLUSTER" smoke
    # on the suite's release, only the live test the suite skips there (it needs this run's short MinJobAge)
    local only=()
    if in_suite "$rel"; then only=(-k test_a_job_slurmctld_forgot_is_read_from_accounting); fi
    stage "$rel" slurm_job "$BIN/pytest" -p no:cacheprovider --basetemp="$GLM_MATRIX_BASETEMP" -v \
      tests/integration/test_slurm_job_live.py "${only[@]}"
    if in_suite "$rel"; then
      RESULT[$rel.molecule]=suite RESULT[$rel.faults]=suite
    else
      stage "$rel" molecule molecule_on "$rel"
      stage "$rel" faults "$BIN/pytest" -p no:cacheprovider --basetemp="$GLM_MATRIX_BASETEMP" -v tests/integration/test_faults.py -k "$FAULTS"
    fi
    stage "$rel" bench "$BIN/python" tests/bench/bench_release.py --json "$OUT/$rel-bench.json"
    if [ -n "${GLM_MATRIX_FIXTURES:-}" ]; then stage "$rel" fixtures capture "$rel"; fi
  fi
  if [ "$rel" = bookworm ]; then
    GLM_CLUSTER_MIN_JOB_AGE='' "$CLUSTER" start >/dev/null 2>&1 || true
  else
    "$CLUSTER" stop >/dev/null 2>&1
  fi
  grep -h '^cluster: root .* installed in' "$OUT/$rel-install.log" >&2 || true
  local s
  for s in "${STAGES[@]}"; do
    printf '%s %s %s\n' "$s" "${RESULT[$rel.$s]:-skip}" "${TIME[$rel.$s]:-}"
  done >"$OUT/$rel.results"
}

# GLM_MATRIX_LANES="bookworm,trixie sid": the releases of a lane one after the other, the lanes side by side (each
# release is its own cluster: the host's, or a Debian root in its own namespaces). Unset: one lane, every release of
# GLM_MATRIX_RELEASES in turn.
read -r -a LANES <<<"${GLM_MATRIX_LANES:-$(IFS=,; echo "${RELEASES[*]}")}"
pids=()
for lane in "${LANES[@]}"; do
  (
    IFS=, read -r -a lane_releases <<<"$lane"
    for rel in "${lane_releases[@]}"; do run_release "$rel"; done
  ) &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
unset GLM_CLUSTER_RELEASE MOLECULE_EPHEMERAL_DIRECTORY
# the lanes' results, back in this shell
for rel in "${RELEASES[@]}"; do
  while read -r s v t; do
    RESULT[$rel.$s]=$v
    if [ -n "$t" ]; then TIME[$rel.$s]=$t; fi
  done <"$OUT/$rel.results" 2>/dev/null || true
done

# the table: each stage ok / FAIL / suite (the whole suite ran on it) with its seconds, then the benchmark's figures
rc=0
printf '\nmake test: Slurm release x stage (tests/output/matrix/RELEASE-STAGE.log)\n'
printf '%-9s %-8s' release slurm
for s in "${STAGES[@]}"; do printf ' %-11s' "$s"; done
printf ' %s\n' 'waiter RPCs/min (query path), detection latency'
for rel in "${RELEASES[@]}"; do
  # the release's Slurm version and the benchmark's figures, from its JSON in one read ("?" and "-" without one)
  IFS=$'\t' read -r slurm figures < <("$BIN/python" - "$OUT/$rel-bench.json" <<'PY' 2>/dev/null || printf '?\t-\n'
import json, sys
f = json.load(open(sys.argv[1]))
rows = ['%s/min (%s)' % (r['rpcs_per_min'], r['path'] + (', held' if r['held'] else '')) for r in f['load']]
print('%s\t%s; latency %.2f s' % (f['slurm'], '; '.join(rows), f['latency_median']))
PY
  )
  printf '%-9s %-8s' "$rel" "$slurm"
  for s in "${STAGES[@]}"; do
    v=${RESULT[$rel.$s]:-skip}
    case $v in ok | suite | -) ;; *) rc=1 ;; esac
    printf ' %-11s' "$v${TIME[$rel.$s]:+ ${TIME[$rel.$s]}s}"
  done
  printf ' %s\n' "$figures"
done
exit "$rc"
