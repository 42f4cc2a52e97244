#!/usr/bin/env bash
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# make demo: the embedded default. On the local Slurm cluster (tests/tooling/cluster), over real SSH as the login
# user: deploy GLM-5.3-Flash (stand-ins for the GPU parts), call the chat API with the key, tear down.
# Prints what happened at each step and a summary. Run `make demo` (it sets up the toolchain and the cluster);
# `make demo-replicas` (tests/tooling/demo.sh replicas): the same with two replicas behind SGLang's router.
set -euo pipefail
cd "$(dirname "$0")/../.."

export ANSIBLE_CONFIG=$PWD/ansible.cfg
export ANSIBLE_COLLECTIONS_PATH=$PWD/.collections
export ANSIBLE_FORCE_COLOR=${ANSIBLE_FORCE_COLOR:-0}
PATH=$PWD/.venv/bin:$PATH
cluster_dir=${GLM_CLUSTER_DIR:-/var/lib/glm-cluster}

login() {
  ssh -i "$cluster_dir/ssh/id_ed25519" -o UserKnownHostsFile="$cluster_dir/ssh/known_hosts" \
      -o StrictHostKeyChecking=yes -o BatchMode=yes -p 2222 glmuser@127.0.0.1 "$@"
}

declare -a summary=()
step() {
  local title=$1; shift
  local start=$SECONDS
  printf '\n=== %s\n' "$title"
  "$@"
  summary+=("$(printf '%-44s %4ss' "$title" "$((SECONDS - start))")")
}

# A chat request as a user on the login node would send it: the key is read from its file into a header
# that curl reads from a file descriptor, so it is on no command line.
call_api() {
  login bash -s <<'REMOTE'
set -euo pipefail
. ~/glm/endpoint
echo "endpoint: $GLM_BASE_URL  model: $GLM_MODEL"
printf 'without the key: HTTP '
curl -s -o /dev/null -w '%{http_code}\n' "$GLM_BASE_URL/models"
curl -sS --fail-with-body "$GLM_BASE_URL/chat/completions" \
  -H @<(printf 'Authorization: Bearer %s\n' "$(cat ~/glm/api-key)") \
  -H 'Content-Type: application/json' \
  -d "{\"model\": \"$GLM_MODEL\",
       \"messages\": [{\"role\": \"user\", \"content\": \"How many times does the letter r appear in strawberry?\"}],
       \"temperature\": 1.0, \"top_p\": 0.95, \"max_tokens\": 4096,
       \"chat_template_kwargs\": {\"reasoning_effort\": \"low\", \"clear_thinking\": true}}" |
  python3 -c 'import json, sys; m = json.load(sys.stdin)["choices"][0]["message"]; print("reasoning:", m["reasoning_content"]); print("answer:", m["content"])'
REMOTE
}

# From "the operator's laptop" (this machine): the key copied 0600 by fetch_key.yml, the tunnel line status prints
# (server.tunnel of its JSON: ssh -L to the login node's loopback, running the relay there to the server's node, or
# the router's; the login node's sshd refuses any other forwarding, as the platform's gateway does), and the official
# openai client through it. The line runs as printed but for the local port (30080, not 30000), with its input kept
# open (a fifo) as a terminal's would be; closing that input ends the ssh session and the relay with it.
call_through_tunnel() {
  local dir line tunnel keep left
  dir=$(mktemp -d)
  ansible-playbook playbooks/fetch_key.yml -e glm_key_dest="$dir/api-key" > /dev/null
  ansible-playbook playbooks/status.yml -e glm_status_json="$dir/status.json" > /dev/null
  line=$(python -c 'import json, sys; print(json.load(open(sys.argv[1]))["server"]["tunnel"] or "")' "$dir/status.json")
  [ -n "$line" ] || { echo "status printed no tunnel line"; return 1; }
  echo "tunnel (the line status printed, on local port 30080): $line"
  line=${line/-L 30000:/-L 30080:}
  mkfifo "$dir/in"
  eval "$line" < "$dir/in" 2> "$dir/ssh.err" &
  tunnel=$!
  exec {keep}> "$dir/in"
  for _ in $(seq 100); do grep -q 'until this ssh session ends' "$dir/ssh.err" && break; sleep 0.1; done
  cat "$dir/ssh.err"
  GLM_KEY_FILE="$dir/api-key" GLM_PORT=30080 python - <<'PY'
import json, os, openai
client = openai.OpenAI(base_url="http://127.0.0.1:%s/v1" % os.environ["GLM_PORT"],
                       api_key=open(os.environ["GLM_KEY_FILE"]).read().strip(), max_retries=0)
print("models:", [m.id for m in client.models.list()])
reply = client.chat.completions.create(model="glm-5.3-flash", messages=[{"role": "user", "content": "Hello"}])
print("chat:", reply.choices[0].message.content)
chunks = list(client.chat.completions.create(model="glm-5.3-flash", stream=True,
                                             messages=[{"role": "user", "content": "Hello"}]))
print("streamed: %d chunks" % len(chunks))
tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
call = client.chat.completions.create(model="glm-5.3-flash", tools=tools,
                                      messages=[{"role": "user", "content": "What is the weather in Paris?"}])
tool_call = call.choices[0].message.tool_calls[0]
print("tool call:", tool_call.function.name, json.loads(tool_call.function.arguments))
PY
  exec {keep}>&-   # the session's input ends: the relay, then the ssh
  wait "$tunnel" || true
  # shellcheck disable=SC2016  # expanded on the login node
  left=$(login 'pgrep -a -u "$(id -un)" -f "[g]lm_relay.py" || true')
  echo "relays left on the login node after the ssh ended: ${left:-none}"
  rm -rf "$dir"
  [ -z "$left" ]
}

show_jobs() {
  login 'squeue --me -o "%.8i %.14j %.10T %.20R"; ls -l ~/glm | sed -n "1,20p"'
}

# A progress line every 5 s (60 by default), so that the short local deploy shows a few.
# tests/tooling/demo.sh replicas (make demo-replicas): two replicas behind the router (inventory/local sets what the local
# cluster needs: the router listens on its node's address, as the replicas do on theirs, all on one machine).
if [ "${1-}" = replicas ]; then
  step "1/6 deploy 2 replicas + router (deploy.yml -e server_replicas=2)" \
    ansible-playbook playbooks/deploy.yml -e server_replicas=2 -e glm_progress_interval=5
  step "2/6 call the router with the key, on the login node" call_api
  step "3/6 from this machine: the relay to the router + openai" call_through_tunnel
  step "4/6 status (playbooks/status.yml)" ansible-playbook playbooks/status.yml
  step "5/6 teardown: the router and every replica" ansible-playbook playbooks/teardown.yml
  step "6/6 what is left: no jobs; key, image, weights" show_jobs
else
  step "1/6 deploy (playbooks/deploy.yml)" ansible-playbook playbooks/deploy.yml -e glm_progress_interval=5
  step "2/6 call the API with the key, on the login node" call_api
  step "3/6 from this machine: SSH tunnel + openai client" call_through_tunnel
  step "4/6 status (playbooks/status.yml)" ansible-playbook playbooks/status.yml
  step "5/6 teardown (playbooks/teardown.yml)" ansible-playbook playbooks/teardown.yml
  step "6/6 what is left: no jobs; key, image, weights" show_jobs
fi

printf '\n=== demo finished\n'
printf '%s\n' "${summary[@]}"
