# glm_gpu_check WANT MIN_FREE_FRACTION [MIN_DRIVER]: check the GPUs this job got before SGLang loads the weights.
# One nvidia-smi query of the GPUs (CSV, no units) and one of their compute processes; one line per GPU, then a
# verdict. Fails (status 1) when nvidia-smi is missing or fails, when fewer or more than WANT GPUs are visible, or
# when a GPU has less than MIN_FREE_FRACTION of its memory free, a compute process, an uncorrectable volatile ECC
# error, or a compute mode that refuses work (Prohibited): the node is at fault, another may do. The verdict reads
#   gpu-check: FAILED on NODE: CAUSE; CAUSE...
# (the deploy reads NODE and CAUSE from it, puts the node on its bad-node list and tries another).
# Fails with status 2 when the NVIDIA driver is older than MIN_DRIVER (default 580: SGLang 0.5.21's image is CUDA 13,
# torch 2.13 and flashinfer cu13, which need driver 580 or later; versions compared number by number, field
# driver_version as the real H200 prints it: 580.159.04), or is not a version number (nvidia-smi --help-query-gpu:
# "an alphanumeric string"; "[N/A]" where it cannot be read). A driver is nearly always the same on every node of a
# partition, so this is not the node's fault and another node would not do; the verdict has its own word
#   gpu-check: DRIVER on NODE: NVIDIA driver VERSION is older than MIN_DRIVER...; CAUSE...
# (any other fault of the node follows it), which the deploy neither retries nor records. MIN_DRIVER 0: no check
# of the driver. Bash and awk only: it runs on the compute node, outside the container.
glm_gpu_check() {
  local want=$1 min_free=$2 min_driver=${3:-580} node=${SLURMD_NODENAME:-$(hostname -s)} started=$SECONDS gpus apps fields ids
  fields=index,uuid,name,pci.bus_id,memory.total,memory.used,memory.free,ecc.errors.uncorrected.volatile.total,compute_mode,driver_version
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu-check: FAILED on $node: nvidia-smi not found (no NVIDIA driver on this node)"
    return 1
  fi
  # The GPUs the job got: CUDA_VISIBLE_DEVICES (Slurm sets it from the allocation). Where the job's cgroup hides
  # the other GPUs, nvidia-smi numbers the visible ones from 0 and may refuse those ids: then it lists what it sees.
  ids=${CUDA_VISIBLE_DEVICES:-}
  if [ -z "$ids" ] || ! gpus=$(nvidia-smi -i "$ids" --query-gpu="$fields" --format=csv,noheader,nounits 2>&1); then
    if ! gpus=$(nvidia-smi --query-gpu="$fields" --format=csv,noheader,nounits 2>&1); then
      echo "gpu-check: FAILED on $node: nvidia-smi failed: $(printf '%s' "$gpus" | head -n 3 | tr '\n' ' ')"
      return 1
    fi
  fi
  apps=$(nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,noheader,nounits 2>/dev/null) || apps=
  printf '%s\n' "$gpus" | awk -F', *' -v want="$want" -v min="$min_free" -v node="$node" -v apps="$apps" \
    -v min_driver="$min_driver" -v took=$((SECONDS - started)) '
    # 1 when version a is older than b, number by number (580.65.06 < 580.159.04 < 590)
    function older(a, b,    x, y, i, n) {
      n = split(a, x, "."); i = split(b, y, "."); if (i > n) n = i
      for (i = 1; i <= n; i++) { if (x[i] + 0 < y[i] + 0) return 1; if (x[i] + 0 > y[i] + 0) return 0 }
      return 0
    }
    BEGIN {
      napps = split(apps, rows, "\n")
      for (i = 1; i <= napps; i++) {
        if (split(rows[i], a, ", *") < 4) continue
        procs[a[1]] = procs[a[1]] (procs[a[1]] == "" ? "" : ", ") "pid " a[2] " " a[3] " " a[4] " MiB"
        count[a[1]]++
      }
    }
    NF >= 9 {
      n++
      idx = $1; uuid = $2; name = $3; bus = $4; total = $5 + 0; free = $7 + 0; ecc = $8; mode = $9; drv = $10
      # one driver per node: the same in every row
      drv_bad = ""
      if (min_driver != "0" && drv !~ /^[0-9]+(\.[0-9]+)*$/) drv_bad = "unreadable"
      else if (min_driver != "0" && older(drv, min_driver)) drv_bad = "older"
      if (drv_bad != "" && driver_cause == "") {
        driver_cause = drv_bad == "older" ? "NVIDIA driver " drv " is older than " min_driver : \
          "NVIDIA driver \"" drv "\" (nvidia-smi" "\047" "s driver_version) is not a version number: cannot tell whether " \
          "it is " min_driver " or later"
        driver_cause = driver_cause ", the minimum for SGLang 0.5.21" "\047" "s image (CUDA 13)"
      }
      bad = ""
      if (total <= 0 || free < min * total)
        bad = bad sprintf("; %d of %d MiB free (%.0f%%, under %.0f%%: memory held by another process)", free, total,
                          total > 0 ? 100 * free / total : 0, 100 * min)
      if (uuid in count)
        bad = bad "; " count[uuid] " compute process" (count[uuid] > 1 ? "es" : "") " (" procs[uuid] ")"
      if (ecc ~ /^[0-9]+$/ && ecc + 0 > 0)
        bad = bad "; " ecc " uncorrectable ECC error" (ecc + 0 > 1 ? "s" : "") " (volatile)"
      if (mode == "Prohibited")
        bad = bad "; compute mode Prohibited"
      printf "gpu-check: %s GPU %s %s %s: %d of %d MiB free, ECC %s, %s, %s, driver %s: %s\n", node, idx, name, bus, free,
             total, ecc, mode, (uuid in count) ? count[uuid] " process(es)" : "no process", drv,
             bad != "" ? "BAD" : drv_bad != "" ? "DRIVER" : "ok"
      if (bad != "") causes = causes "; GPU " idx " (" bus "): " substr(bad, 3)
    }
    END {
      if (n != want) causes = causes "; " n " GPU" (n == 1 ? "" : "s") " visible, the job asked for " want \
        " (a GPU missing: lost from the bus, or not given to the job)"
      if (driver_cause != "") { print "gpu-check: DRIVER on " node ": " driver_cause causes; exit 2 }
      if (causes != "") { print "gpu-check: FAILED on " node ": " substr(causes, 3); exit 1 }
      printf "gpu-check: %s: %d GPUs ok (%ds)\n", node, n, took
    }'
}
