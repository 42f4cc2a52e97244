#!/usr/bin/env bash
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# make demo: the embedded default. On the local Slurm cluster (tests/cluster), over real SSH as the login
# user: deploy GLM-5.3-Flash (stand-ins for the GPU parts), call the chat API with the key, tear down.
# Prints what happened at each step and a summary. Run `make demo` (it sets up the toolchain and the cluster).
set -euo pipefail
cd "$(dirname "$0")/.."

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

# From "the operator's laptop" (this machine): the key copied 0600 by fetch_key.yml, the tunnel line the deploy
# printed, and the official openai client through it.
call_through_tunnel() {
  local dir node port=30080
  dir=$(mktemp -d)
  ansible-playbook playbooks/fetch_key.yml -e glm_key_dest="$dir/api-key" > /dev/null
  # shellcheck disable=SC2016  # expanded by the login node's shell, not here
  node=$(login '. ~/glm/endpoint; echo "$GLM_BASE_URL"' | sed -E 's#^http://([^:]+):.*#\1#')
  echo "tunnel: ssh -N -L $port:$node:30000 glmuser@127.0.0.1 -p 2222 (the line deploy printed, on a free local port)"
  ssh -i "$cluster_dir/ssh/id_ed25519" -o UserKnownHostsFile="$cluster_dir/ssh/known_hosts" -o StrictHostKeyChecking=yes \
      -o BatchMode=yes -o ExitOnForwardFailure=yes -p 2222 -N -L "$port:$node:30000" glmuser@127.0.0.1 &
  local tunnel=$!
  sleep 2
  GLM_KEY_FILE="$dir/api-key" GLM_PORT=$port python - <<'PY'
import json, os, openai
client = openai.OpenAI(base_url="http://127.0.0.1:%s/v1" % os.environ["GLM_PORT"],
                       api_key=open(os.environ["GLM_KEY_FILE"]).read().strip(), max_retries=0)
print("models:", [m.id for m in client.models.list()])
reply = client.chat.completions.create(model="glm-5.3-flash", messages=[{"role": "user", "content": "Hello"}])
print("chat:", reply.choices[0].message.content)
tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
call = client.chat.completions.create(model="glm-5.3-flash", tools=tools,
                                      messages=[{"role": "user", "content": "What is the weather in Paris?"}])
tool_call = call.choices[0].message.tool_calls[0]
print("tool call:", tool_call.function.name, json.loads(tool_call.function.arguments))
PY
  kill "$tunnel"; rm -rf "$dir"
}

show_jobs() {
  login 'squeue --me -o "%.8i %.14j %.10T %.20R"; ls -l ~/glm | sed -n "1,20p"'
}

# A progress line every 5 s (60 by default), so that the short local deploy shows a few.
step "1/6 deploy (playbooks/deploy.yml)" ansible-playbook playbooks/deploy.yml -e glm_progress_interval=5
step "2/6 call the API with the key, on the login node" call_api
step "3/6 from this machine: SSH tunnel + openai client" call_through_tunnel
step "4/6 status (playbooks/status.yml)" ansible-playbook playbooks/status.yml
step "5/6 teardown (playbooks/teardown.yml)" ansible-playbook playbooks/teardown.yml
step "6/6 what is left: no jobs; key, image, weights" show_jobs

printf '\n=== demo finished\n'
printf '%s\n' "${summary[@]}"
