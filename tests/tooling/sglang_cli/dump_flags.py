# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Write the REAL SGLang server parser's flag table for the stand-in server.

Run with the venv made by tests/tooling/sglang_cli/setup.sh (it needs the real sglang package):

    .venv-sglang/bin/python tests/tooling/sglang_cli/dump_flags.py [OUT.json]

OUT defaults to tests/doubles/python/sglang/real_flags.json. The stand-in
(tests/doubles/python/sglang/standin_args.py) rebuilds an argparse parser from that table, so
its flag names, aliases, nargs, types, choices and defaults are those of SGLang 0.5.21, with no guessing.
Rerun after changing the SGLang version in setup.sh.
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "..", "doubles", "python", "sglang", "real_flags.json")

ACTION_KINDS = {
    "_StoreAction": "store",
    "_StoreTrueAction": "store_true",
    "BooleanOptionalAction": "boolean_optional",
    "LoRAPathAction": "store",
    "DeprecatedStoreTrueAction": "store_true",
}


def _plain_default(value):
    try:
        json.dumps(value)
    except TypeError:
        return str(value)
    return value


def _choices(choices):
    if choices is None:
        return None
    if isinstance(choices, (set, frozenset)):  # e.g. --sampling-backend: sort so the table is stable
        return sorted(str(c) for c in choices)
    return [str(c) for c in choices]


def dump(out_path):
    # pylint: disable=import-error,import-outside-toplevel,no-name-in-module
    from sglang.srt.server_args import ServerArgs
    import importlib.metadata

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    flags = []
    for action in parser._actions:  # pylint: disable=protected-access
        kind = type(action).__name__
        if kind == "_HelpAction":
            continue
        if kind not in ACTION_KINDS:
            raise SystemExit("unknown action kind %s for %s" % (kind, action.option_strings))
        flags.append({
            "options": list(action.option_strings),
            "dest": action.dest,
            "kind": ACTION_KINDS[kind],
            "type": getattr(action.type, "__name__", None) if action.type is not None else None,
            "nargs": action.nargs if kind in ("_StoreAction", "LoRAPathAction") else None,
            "choices": _choices(action.choices),
            "default": _plain_default(action.default),
            "required": bool(action.required),
            "metavar": action.metavar,
        })
    doc = {
        "sglang_version": importlib.metadata.version("sglang"),
        "prog": parser.prog,
        "flags": flags,
    }
    with open(out_path, "w", encoding="utf-8") as handle:
        handle.write("{\n")
        handle.write('"sglang_version": %s,\n"prog": %s,\n"flags": [\n' % (json.dumps(doc["sglang_version"]), json.dumps(doc["prog"])))
        handle.write(",\n".join(json.dumps(flag, sort_keys=True) for flag in flags))
        handle.write("\n]\n}\n")
    print("%d flags of sglang %s written to %s" % (len(flags), doc["sglang_version"], out_path))


if __name__ == "__main__":
    dump(os.path.normpath(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT))
