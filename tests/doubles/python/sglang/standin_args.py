"""Command-line parsing of the SGLang 0.5.21 server, for the glm.serve test stand-in.

STANDS FOR: sglang.srt.server_args.prepare_server_args (argparse prog "sglang serve") and
sglang.srt.utils.server_args_config_parser.ConfigArgumentMerger (--config FILE.yaml).
WHAT IT DOES: rebuilds the real argparse parser from real_flags.json, a table dumped from the real
parser by tests/tooling/sglang_cli/dump_flags.py (same flag names and aliases, nargs, types, choices, defaults,
prefix abbreviations), so unknown flags and bad choices exit 2 with `sglang serve: error: ...` exactly
as the real one does. --config is merged as the real merger does it: only the exact token `--config`
is recognised, YAML keys become `--key value` placed BEFORE the command line (the command line wins),
`key: true` of a store_true flag becomes `--key`, lists become `--key a b`, a bad file raises ValueError.
WHAT IT DOES NOT DO: no PyYAML (Python stdlib only): a small parser reads the flat `key: value`
mappings (plain, quoted, flow or block lists) that server configs use, with YAML 1.1 scalar rules for
booleans, null, ints and floats; nested mappings are not supported. No resolution pipeline.
"""

import argparse
import json
import logging
import os
import re

FLAGS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "real_flags.json")


def human_readable_int(value):
    """Like sglang.srt.utils.common.human_readable_int: 1k, 25.6k, 1Mi, 202752."""
    value = value.strip()
    si_multiplier = {"k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12}
    iec_multiplier = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if match:
        num, suffix = match.groups()
        if suffix in iec_multiplier:
            if "." in num:
                raise argparse.ArgumentTypeError("Decimals are not allowed with IEC suffixes like '%s'." % suffix)
            return int(num) * iec_multiplier[suffix]
        return int(float(num) * si_multiplier[suffix])
    return int(value)


def loads(value):
    """json.loads, under the name argparse shows in its error messages."""
    return json.loads(value)


def json_list_type(value):
    try:
        return json.loads(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError("Invalid JSON list: %s. Please provide a valid JSON list." % value) from exc


def nullable_str(value):
    if not value or value == "None":
        return None
    return value


def parse_cuda_graph_config_arg(raw):
    try:
        parsed = json.loads(raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError("--cuda-graph-config must be JSON: %s" % exc) from exc
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError("--cuda-graph-config must be a JSON object, got %s" % type(parsed).__name__)
    return parsed


TYPES = {
    None: None,
    "str": str,
    "int": int,
    "float": float,
    "loads": loads,
    "human_readable_int": human_readable_int,
    "json_list_type": json_list_type,
    "nullable_str": nullable_str,
    "parse_cuda_graph_config_arg": parse_cuda_graph_config_arg,
}


def load_flags():
    with open(FLAGS_FILE, encoding="utf-8") as handle:
        return json.load(handle)


def build_parser():
    """The real parser, rebuilt from the dumped table."""
    table = load_flags()
    parser = argparse.ArgumentParser(prog=table["prog"])
    for flag in table["flags"]:
        kwargs = {"dest": flag["dest"], "default": flag["default"]}
        if flag["kind"] == "store_true":
            kwargs["action"] = "store_true"
        elif flag["kind"] == "boolean_optional":
            kwargs["action"] = argparse.BooleanOptionalAction
            flag = dict(flag, options=[o for o in flag["options"] if not o.startswith("--no-")])
        else:
            kwargs["type"] = TYPES[flag["type"]]
            if flag["nargs"] is not None:
                kwargs["nargs"] = flag["nargs"]
            if flag["choices"] is not None:
                kwargs["choices"] = flag["choices"]
            if flag["metavar"] is not None:
                kwargs["metavar"] = flag["metavar"]
            if flag["required"]:
                kwargs["required"] = True
        parser.add_argument(*flag["options"], **kwargs)
    return parser


# --- YAML (the subset server configs use) ---------------------------------------------------------

# PyYAML's safe_load resolver words (YAML 1.1; single letters y/n stay strings there).
_YAML_BOOL = {
    "yes": True, "Yes": True, "YES": True, "true": True, "True": True, "TRUE": True,
    "on": True, "On": True, "ON": True,
    "no": False, "No": False, "NO": False, "false": False, "False": False, "FALSE": False,
    "off": False, "Off": False, "OFF": False,
}
_YAML_NULL = ("", "~", "null", "Null", "NULL")
_YAML_INT = re.compile(r"^[-+]?(0|[1-9][0-9_]*)$")
_YAML_HEX = re.compile(r"^[-+]?0x[0-9a-fA-F_]+$")
_YAML_OCT = re.compile(r"^[-+]?0[0-7_]+$")
_YAML_FLOAT = re.compile(r"^[-+]?([0-9][0-9_]*)?\.[0-9.]*([eE][-+][0-9]+)?$")


def _strip_comment(text):
    """Remove a ` # comment` from an unquoted scalar."""
    match = re.search(r"\s+#", text)
    return text[:match.start()] if match else text


def _scalar(text):
    """A YAML 1.1 scalar the way PyYAML's safe_load resolves it."""
    text = text.strip()
    if text[:1] == "'":
        end = text.rfind("'")
        if end <= 0:
            raise ValueError("unterminated single-quoted scalar: %s" % text)
        return text[1:end].replace("''", "'")
    if text[:1] == '"':
        end = text.rfind('"')
        if end <= 0:
            raise ValueError("unterminated double-quoted scalar: %s" % text)
        return json.loads(text[:end + 1])
    text = _strip_comment(text).strip()
    if text in _YAML_NULL:
        return None
    if text in _YAML_BOOL:
        return _YAML_BOOL[text]
    if _YAML_INT.match(text):
        return int(text.replace("_", ""))
    if _YAML_HEX.match(text):
        return int(text.replace("_", ""), 16)
    if _YAML_OCT.match(text):
        return int(text.replace("_", ""), 8)
    if _YAML_FLOAT.match(text) and text not in (".", "-.", "+."):
        return float(text.replace("_", ""))
    if text.lower() in (".inf", "+.inf"):
        return float("inf")
    if text.lower() == "-.inf":
        return float("-inf")
    if text.lower() == ".nan":
        return float("nan")
    if text[:1] == "[" and text.endswith("]"):
        inner = text[1:-1].strip()
        return [_scalar(item) for item in inner.split(",")] if inner else []
    if text[:1] == "{" and text.endswith("}"):
        return json.loads(text)
    return text


def parse_flat_yaml(text):
    """A flat YAML mapping (`key: value` lines, optional block lists) -> dict, or None when empty."""
    data = {}
    last_key = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not line.strip() or line.lstrip().startswith("#") or line.strip() in ("---", "..."):
            continue
        if line[:1] in (" ", "\t") or line.lstrip().startswith("- "):
            item = line.strip()
            if last_key is not None and item.startswith("-") and (data[last_key] is None or isinstance(data[last_key], list)):
                if data[last_key] is None:
                    data[last_key] = []
                data[last_key].append(_scalar(item[1:]))
                continue
            raise ValueError("config line %d: nested mappings are not supported by the stand-in: %s" % (number, raw))
        match = re.match(r"""^("[^"]*"|'[^']*'|[^:#'"][^:]*?)\s*:(\s+(.*))?$""", line)
        if not match:
            raise ValueError("config line %d is not `key: value`: %s" % (number, raw))
        key = _scalar(match.group(1))
        data[str(key)] = _scalar(match.group(3) or "")
        last_key = str(key)
    return data or None


# --- config merging, as sglang.srt.utils.server_args_config_parser.ConfigArgumentMerger ------------

def merge_config_with_args(parser, argv):
    indices = [i for i, arg in enumerate(argv) if arg == "--config"]
    if len(indices) > 1:
        raise ValueError("Multiple config files specified! Only one allowed.")
    if not indices:
        return argv
    index = indices[0]
    if index == len(argv) - 1:
        raise ValueError("No config file specified after --config flag!")
    path = argv[index + 1]
    suffix = os.path.splitext(path)[1]
    if suffix.lower() not in (".yaml", ".yml"):
        raise ValueError("Config file must be YAML format, got: %s" % suffix)
    if not os.path.exists(path):
        raise ValueError("Config file not found: %s" % path)
    with open(path, encoding="utf-8") as handle:
        config = parse_flat_yaml(handle.read())
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise ValueError("Config file must contain a dictionary at root level")
    store_true = set()
    unsupported = {}
    for action in parser._actions:  # pylint: disable=protected-access
        if isinstance(action, argparse._StoreTrueAction):  # pylint: disable=protected-access
            store_true.add(action.dest)
        elif (action.option_strings and not isinstance(action, argparse._StoreAction)  # pylint: disable=protected-access
              and "--config" not in action.option_strings and "-h" not in action.option_strings):
            unsupported[action.dest] = action
    args = []
    for key, value in config.items():
        key_norm = key.replace("-", "_")
        if key_norm in unsupported:
            raise ValueError("Unsupported config option '%s' with action '%s'" % (key_norm, unsupported[key_norm].__class__.__name__))
        if isinstance(value, bool):
            if key_norm in store_true:
                if value:
                    args.append("--%s" % key)
            else:
                args.extend(["--%s" % key, str(value).lower()])
        elif isinstance(value, list):
            if value:
                args.append("--%s" % key)
                args.extend(str(item) for item in value)
        elif isinstance(value, dict):
            args.extend(["--%s" % key, json.dumps(value)])
        else:
            args.extend(["--%s" % key, str(value)])
    return args + argv[:index] + argv[index + 2:]


def prepare_server_args(argv):
    """Parse like the real prepare_server_args: argparse errors exit 2, config errors raise ValueError."""
    parser = build_parser()
    if "--config" in argv:
        argv = merge_config_with_args(parser, list(argv))
    args = parser.parse_args(argv)
    args._launch_argv = list(argv)   # the argv after the config merge, for /server_info's launch_command (not a flag)
    if not hasattr(logging, str(args.log_level).upper()):
        raise AttributeError("module 'logging' has no attribute '%s'" % str(args.log_level).upper())
    return args
