"""Switches of the test cluster's stand-ins (hf_standin.py, sglang/launch_server.py).

A switch NAME is read from the environment variable GLM_STANDIN_<NAME> (upper case, "-" as "_") first, so a
single job can set it through its batch script's environment, else from the file NAME in the control folder
${GLM_STANDIN_CONTROL:-/var/lib/glm-cluster/control}, which affects every job on the cluster. Standard library
only: the stand-ins run under the login nodes' /usr/bin/python3.
"""
from __future__ import annotations

import os

CONTROL_DIR_DEFAULT = "/var/lib/glm-cluster/control"


def switch(name, default=None):
    """Value of a switch: env GLM_STANDIN_<NAME> first, then the control file NAME, else default."""
    value = os.environ.get("GLM_STANDIN_" + name.upper().replace("-", "_"))
    if value is None:
        path = os.path.join(os.environ.get("GLM_STANDIN_CONTROL") or CONTROL_DIR_DEFAULT, name)
        try:
            with open(path, encoding="utf-8") as handle:
                value = handle.read().strip()
        except OSError:
            value = None
    return default if value in (None, "") else value
