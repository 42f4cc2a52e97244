# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every router_policy the router role offers, with the REAL router (smg 1.13 in .venv-router) started as
the role starts it (roles/router/files/glm_router.py: no --worker-urls, the replicas join through POST /workers), in
front of two SGLang stand-ins: each serves requests. And the policy it no longer offers, power_of_two, as the real
router treats it: smg 1.13 (as sglang-router 0.3.2) validates its config at start (sgl-model-gateway src/config/validation.rs,
validate_compatibility: ``Power-of-two policy requires at least 2 workers`` unless service discovery is on, counting
the workers given at start) and, running, reads each worker's load from ``/get_load`` (the wheel's
core/worker_builder.rs, the path in its strings), which SGLang 0.5.21 does not serve (entrypoints/http_server.py has
``/v1/loads`` only)."""

import os

import pytest
import yaml

from router_helpers import ROUTER_PYTHON, Router, chat
from standin_helpers import REPO, free_port, seed_args, wait_for

pytestmark = pytest.mark.skipif(not os.access(ROUTER_PYTHON, os.X_OK),
                                reason="no router venv: make .venv-router/.installed (make pytest makes it)")


def offered():
    with open(os.path.join(REPO, "roles", "router", "meta", "argument_specs.yml"), encoding="utf-8") as handle:
        spec = yaml.safe_load(handle)
    return spec["argument_specs"]["main"]["options"]["router_policy"]["choices"]


@pytest.mark.parametrize("policy", offered())
def test_every_offered_policy_serves(servers, model_dir, tmp_path, policy):
    one, two = [servers(seed_args(model_dir, free_port(), host="127.0.0.1"), GLM_STANDIN_SGLANG_WARMUP="0")
                for _server in range(2)]
    # the health-check timeout as router.sbatch.j2 passes it (router_health_check_timeout, default 25)
    r = Router(tmp_path, policy=policy, router_args=("--health-check-timeout-secs", "25"))
    try:
        wait_for(lambda: r.endpoint.exists() or r.proc.poll() is not None, 30)
        assert r.proc.poll() is None, r.log[-3000:]
        r.announce("glm-serve", one)
        r.announce("glm-serve-2", two)
        wait_for(lambda: sorted(w["url"] for w in r.workers().values() if w["is_healthy"]) == sorted([one.url, two.url]), 30)
        for _request in range(8):
            status, body = chat(r.url)
            assert status == 200, (policy, body, r.log[-2000:])
        served = r.served()
        assert sum(served.values()) == 8 and set(served) <= {one.url, two.url}, served
    finally:
        r.stop()


def test_power_of_two_is_not_offered_because_the_real_router_refuses_it(tmp_path):
    assert "power_of_two" not in offered()
    r = Router(tmp_path, policy="power_of_two")
    try:
        wait_for(lambda: r.proc.poll() is not None or r.endpoint.exists(), 30)
        assert r.proc.poll() not in (None, 0) and not r.endpoint.exists(), r.log[-3000:]
        assert "Power-of-two policy requires at least 2 workers" in r.log, r.log[-3000:]
    finally:
        r.stop()
