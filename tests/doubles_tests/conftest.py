# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fixtures of the stand-in tests; the helpers live in standin_helpers.py."""

import pytest

from router_helpers import Router
from standin_helpers import SEED_MODEL, Server, run_hf


def pytest_configure(config):
    config.addinivalue_line("markers", "continuity: minutes-long cases (make continuity runs them, make test leaves "
                                       "them out)")


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """A complete stand-in checkpoint, made once by the hf stand-in."""
    base = tmp_path_factory.mktemp("model")
    target = base / "GLM-5.3-Flash"
    result = run_hf(["download", SEED_MODEL, "--local-dir", str(target), "--quiet"], base / "control")
    assert result.returncode == 0, result.stderr
    return target


@pytest.fixture
def servers(tmp_path):
    """Start servers with servers(args, **env); all are stopped at the end of the test."""
    started = []

    def start(args, **env):
        server = Server(args, tmp_path, **env)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def router(tmp_path):
    """Start the router launcher with router(**kw) (router_helpers.Router); all are stopped at the end of the test."""
    made = []

    def make(**kw):
        made.append(Router(tmp_path, **kw))
        return made[-1]
    yield make
    for item in made:
        item.stop()
