# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Check an SGLang server command line with the REAL SGLang 0.5.21 parser (or with the stand-in's, to compare).

Usage:
    .venv-sglang/bin/python tests/tooling/sglang_cli/check_args.py [--parser real|standin] -- ARG ...
        ARG ...: the arguments that follow `sglang.launch_server`.
    .venv-sglang/bin/python tests/tooling/sglang_cli/check_args.py [--parser real|standin] --file SCRIPT
        SCRIPT: a file holding the rendered `python3 -m sglang.launch_server ...` command, e.g. a serve.sbatch
        (both the seed's `bash -c '... exec python3 -m sglang.launch_server --a b'` form and the
        `bash -c '... exec python3 -m sglang.launch_server "$@"' sglang --a b` form are understood).
    ... check_args.py [--parser real|standin] --cases CASES.json
        CASES.json: a JSON list of {"name": N, "argv": [...]} or {"name": N, "file": PATH}; prints a JSON list of
        {"name": N, "rc": RC, "message": M} (one process, so the real parser's 2 s import is paid once).

Prints `OK` and exits 0 when the parser accepts the command line; else prints the parser's error
(`sglang serve: error: ...`, exit 2 like argparse) or the config merger's ValueError (exit 1).

--parser real (default) imports sglang.srt.server_args.prepare_server_args from the venv made by
tests/tooling/sglang_cli/setup.sh and calls ONLY that: it never calls launch_server, so nothing is served.
--parser standin uses the stand-in's parser (tests/doubles/python/sglang/standin_args.py).

Shell variables are left as they are ("$MODEL" stays the string $MODEL: the parser does not open the model), but
for the variables Slurm sets in a job, which the parser types: $SLURM_NODEID (a multi-node server's --node-rank,
an int) becomes 0 and $SLURMD_NODENAME (in --dist-init-addr HOST:PORT) becomes node1, as on a job's first node.
A --config path that does not exist here (e.g. "$CONFIG", made only when the job runs) is replaced by a
dummy YAML file holding `api-key: dummy`, since the real merger reads the file while parsing.
"""

import contextlib
import io
import json
import os
import shlex
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
STANDIN_PYTHON = os.path.normpath(os.path.join(HERE, "..", "..", "doubles", "python"))
MARKER = "sglang.launch_server"
# what Slurm sets in a job on its first node, for the arguments the parser types (see the docstring)
SLURM_SAMPLE = (("$SLURM_NODEID", "0"), ("$SLURMD_NODENAME", "node1"))


def _tokens(text):
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    return list(lexer)


def _until_shell_operator(tokens):
    out = []
    for token in tokens:
        if token and set(token) <= set(";&|"):
            break
        out.append(token)
    return out


def extract_args(script_text):
    """The arguments of sglang.launch_server in a shell script (continuation lines joined), with Slurm's job
    variables as on the job's first node."""
    args = _extract_args(script_text)
    for name, value in SLURM_SAMPLE:
        args = [arg.replace(name, value) for arg in args]
    return args


def _command_tokens(lines, number):
    """The tokens of the command that starts on lines[number]: with the next lines joined while a quoted string is
    open (a `bash -c '...'` script of several lines, as serve.sbatch's with an idle stop)."""
    command = lines[number]
    for more in lines[number + 1:] + [None]:
        try:
            return _tokens(command)
        except ValueError:
            if more is None:
                raise
            command += "\n" + more
    return _tokens(command)


def _extract_args(script_text):
    text = script_text.replace("\\\r\n", " ").replace("\\\n", " ")
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if MARKER not in line or line.lstrip().startswith("#"):
            continue
        tokens = _command_tokens(lines, number)
        for index, token in enumerate(tokens):
            if token == MARKER:
                return _until_shell_operator(tokens[index + 1:])
            if MARKER in token:
                # The launch command sits inside a `bash -c 'SCRIPT' ARG0 ARGS...` string.
                inner = _tokens(token)
                inner = _until_shell_operator(inner[inner.index(MARKER) + 1:])
                outer = _until_shell_operator(tokens[index + 1:])
                expanded = []
                for item in inner:
                    if item == "$@":
                        expanded.extend(outer[1:])
                    else:
                        expanded.append(item)
                return expanded
    raise SystemExit("check_args: no `%s` command found" % MARKER)


def with_dummy_config(argv, tmpdir):
    argv = list(argv)
    for index, arg in enumerate(argv[:-1]):
        if arg == "--config" and not os.path.exists(argv[index + 1]):
            dummy = os.path.join(tmpdir, "dummy-config.yaml")
            with open(dummy, "w", encoding="utf-8") as handle:
                handle.write("api-key: dummy\n")
            argv[index + 1] = dummy
    return argv


def load_parser(kind):
    # pylint: disable=import-error,import-outside-toplevel,no-name-in-module
    if kind == "standin":
        sys.path.insert(0, STANDIN_PYTHON)
        from sglang.standin_args import prepare_server_args
    else:
        from sglang.srt.server_args import prepare_server_args
    return prepare_server_args


def check(prepare, argv):
    """(rc, message) of one parse; the parser's usage text is dropped, its error line kept."""
    with tempfile.TemporaryDirectory() as tmpdir:
        argv = with_dummy_config(argv, tmpdir)
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                prepare(argv)
        except SystemExit as exc:
            lines = [line for line in err.getvalue().splitlines() if line.strip()]
            errors = [line for line in lines if ": error:" in line]
            return (exc.code if isinstance(exc.code, int) else 1), (errors[-1] if errors else (lines[-1] if lines else ""))
        except (ValueError, AttributeError, TypeError) as exc:
            return 1, "%s: %s" % (type(exc).__name__, exc)
    return 0, "OK"


def read_file(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def main(argv):
    kind = "real"
    if argv[:1] == ["--parser"] and len(argv) > 1:
        kind, argv = argv[1], argv[2:]
    if kind not in ("real", "standin"):
        raise SystemExit("check_args: --parser is real or standin")
    prepare = load_parser(kind)
    if argv[:1] == ["--cases"] and len(argv) == 2:
        cases = json.loads(read_file(argv[1]))
        results = []
        for case in cases:
            args = case["argv"] if "argv" in case else extract_args(read_file(case["file"]))
            rc, message = check(prepare, args)
            results.append({"name": case["name"], "rc": rc, "message": message, "argv": args})
        print(json.dumps(results, indent=1))
        return 0
    if argv[:1] == ["--file"] and len(argv) == 2:
        args = extract_args(read_file(argv[1]))
    elif argv[:1] == ["--"]:
        args = argv[1:]
    else:
        args = argv
    rc, message = check(prepare, args)
    print(message)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
