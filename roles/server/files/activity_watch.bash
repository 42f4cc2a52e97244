# glm_watch_activity SERVER_PID URL FILE INTERVAL IDLE_SECONDS IDLE_TEXT STOP_FILE
# Included in serve.sbatch by the glm.serve.server role; runs in the background beside the server, on its node.
# Every INTERVAL seconds it reads the server's own metrics (URL, SGLang's /metrics: no key needed, no Slurm call)
# and records the last activity in FILE (JSON, 0600): the time the count of finished requests last changed, or a
# request was running or queued (a long request counts while it runs; SGLang counts a request when it ends).
# With IDLE_SECONDS > 0, once no request has arrived for that long it says so in the log, marks FILE with
# "stopped_idle" and asks the server to stop by creating STOP_FILE: the server's step sees it and sends SGLang a
# SIGTERM, so SGLang shuts down cleanly (a SIGTERM to srun would make srun kill the step with SIGKILL); the job
# then ends COMPLETED.
# Until the server first answers (minutes of loading) nothing counts as idle.
# The metrics are read by glm_sglang_load (serve_ready.bash, included before this in serve.sbatch).
glm_watch_activity() {
  local server_pid=$1 url=$2 file=$3 interval=$4 idle=$5 idle_text=$6 stop_file=$7
  local now last_active= total= last_total= running queued text sums
  if ! command -v curl > /dev/null 2>&1; then
    echo "[glm.serve] no curl on ${SLURMD_NODENAME:-this node}: the server's activity is not recorded (no idle stop)" >&2
    return 0
  fi
  while kill -0 "$server_pid" 2> /dev/null; do
    sleep "$interval"
    # -f: an HTTP error is no reading; --noproxy: the node itself, never through a proxy the job inherited
    text=$(curl -sf --noproxy '*' --max-time 10 "$url") || continue
    sums=$(printf '%s\n' "$text" | glm_sglang_load)    # serve_ready.bash
    read -r total running queued seen <<< "$sums" || continue
    [ "$seen" = 1 ] || continue     # not SGLang's metrics (yet): nothing to learn from it
    now=$(date +%s)
    if [ -z "$last_active" ] || [ "$total" != "$last_total" ] || [ "$running" -gt 0 ] || [ "$queued" -gt 0 ]; then
      last_active=$now
    fi
    last_total=$total
    (umask 077 && printf '{"job_id": "%s", "checked": %d, "last_request": %d, "requests_total": %d, "running": %d, "queued": %d, "idle_timeout": %d, "stopped_idle": %s}\n' \
      "${SLURM_JOB_ID:-}" "$now" "$last_active" "$total" "$running" "$queued" "$idle" \
      "$([ "$idle" -gt 0 ] && [ $((now - last_active)) -ge "$idle" ] && echo "$now" || echo null)" > "$file.tmp" && mv -f "$file.tmp" "$file") ||
      echo "[glm.serve] cannot write $file (the status shows no last request); the idle watch goes on" >&2
    if [ "$idle" -gt 0 ] && [ $((now - last_active)) -ge "$idle" ]; then
      echo "[glm.serve] idle: no request for $((now - last_active)) s (server_idle_timeout=$idle_text): stopping the server; deploy again to start it"
      : > "$stop_file"
      return 0
    fi
  done
}
