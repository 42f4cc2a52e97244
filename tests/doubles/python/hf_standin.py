"""Stand-in for the Hugging Face CLI (`hf`, huggingface_hub 1.x) inside the SGLang container.

STANDS FOR: `hf download REPO --local-dir DIR` as the seed guide's download job runs it.
WHAT IT DOES: writes a small, deterministic checkpoint for REPO into DIR, the way the real CLI lays out a
--local-dir download: every file is first written to DIR/.cache/huggingface/download/NAME.incomplete and
moved into place when complete, with a NAME.metadata file beside it; complete files are skipped on a rerun;
an interrupted file stays .incomplete and a rerun resumes it from where it stopped. The files are
config.json, generation_config.json, tokenizer.json, tokenizer_config.json, model.safetensors.index.json
(whose weight_map names every shard) and the shards model-0000K-of-0000N.safetensors.
OUTPUT: as huggingface_hub 1.33's CLI prints it when stdout and stderr are a file (a Slurm log): nothing on
stdout while it runs; on stderr the tqdm bar "Fetching N files" (the only bar tqdm shows on a non-terminal:
huggingface_hub/_snapshot_download.py L407-409, L522-528 at v1.28.0; the byte bars are created with
disable=None, which tqdm turns off without a terminal), one carriage-return segment per finished or skipped
file, a newline when it closes; at the end, on stdout, "\x1b[32m✓ Downloaded\x1b[0m" and "  path: DIR"
(cli/download.py; the colour codes stay in a file). With -q/--quiet (a global flag, accepted anywhere), stdout
is DIR alone. --dry-run (cli/download.py L80-85, L202-223) downloads nothing and prints
"[dry-run] Will download K files (out of N) totalling 120.0M." and a FILE/SIZE table (sizes rounded with
_format_size, "-" for files already there), or with --format json a list of {"file", "size"} with the same
rounded strings (checked against huggingface_hub 1.33 on a loopback hub). `hf models ls REPO -R --format json`
lists the repository's files with exact sizes: [{"path", "size", "blob_id", "lfs": {"size", "sha256",
"pointer_size"}}] (lfs for LFS files only).
WHAT IT DOES NOT DO: no network, no Hub cache (--local-dir is required), no authentication, no parallel
downloads (--max-workers is accepted and ignored: files are fetched one after the other, in name order as
the Hub lists them), no real safetensors content (the shard bytes are deterministic filler).

Usage: hf download REPO [FILENAMES ...] --local-dir DIR [--revision R] [--max-workers N]
           [--include P ...] [--exclude P ...] [--repo-type model] [--token T] [--cache-dir D]
           [--force-download] [--dry-run] [-q|--quiet] [--format auto|human|agent|json|quiet] [--json]
Unknown flags: usage error, exit 2 (like argparse).

SWITCHES: each is read from the environment variable, else from a file of that name in the control
directory ${GLM_STANDIN_CONTROL:-/var/lib/glm-cluster/control} (the file's content is the value):
  file hf-delay          env GLM_STANDIN_HF_DELAY          seconds spent on each fetched file (default 0);
                                                          makes a job slow enough to hit its --time limit.
  file hf-fail-after     env GLM_STANDIN_HF_FAIL_AFTER     after N files fetched in this run, fail in the middle
                                                          of the next one with an HTTP 503 error, exit 1.
  file hf-nospace-after  env GLM_STANDIN_HF_NOSPACE_AFTER  after N files fetched in this run, fail in the middle
                                                          of the next one with OSError: [Errno 28] No space
                                                          left on device, exit 1.
  file hf-shards         env GLM_STANDIN_HF_SHARDS         number of shards (default 8).
  file hf-shard-kib      env GLM_STANDIN_HF_SHARD_KIB      size of each shard in KiB (default 256).
  file hf-gate           env GLM_STANDIN_HF_GATE           a file name: before fetching anything, wait until
                                                          DIR/.cache/huggingface/NAME exists (a test opens the
                                                          gate when it wants the download to go on; a job that
                                                          stays behind it is a live download for as long as the
                                                          test needs, whatever the machine's speed).
COUNTING: each file actually fetched (not skipped) appends one line `fetched NAME` to
DIR/.cache/huggingface/standin-fetch.log, so a test can prove that a rerun did not fetch complete shards again.
"""

import argparse
import fnmatch
import hashlib
import json
import os
import sys
import time

from standin_switch import switch

CHUNKS_PER_FILE = 16


def number(name, default, kind=float):
    value = switch(name)
    if value is None:
        return default
    try:
        return kind(value)
    except ValueError:
        sys.stderr.write("hf stand-in: ignoring switch %s=%r (not a number)\n" % (name, value))
        return default


def commit_hash(repo, revision):
    """The commit a revision resolves to: a commit hash is itself, a branch or tag a deterministic hash."""
    if revision and len(revision) == 40 and all(c in "0123456789abcdef" for c in revision):
        return revision
    return hashlib.sha1(("%s@%s" % (repo, revision or "main")).encode()).hexdigest()


VERSION_DEFAULT = "1.28.0"


def hub_version():
    text = switch("hf-version") or VERSION_DEFAULT
    try:
        return tuple(int(part) for part in text.split(".")[:3])
    except ValueError:
        return tuple(int(part) for part in VERSION_DEFAULT.split("."))


def content(repo, name, size, data):
    """The whole content of a file of the checkpoint."""
    return data if data is not None else shard_bytes_at(repo, name, 0, size)


def git_blob_id(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def hub_entry(repo, name, size, data):
    """The Hub's listing entry of a file (list_repo_tree(expand=True) / model_info(files_metadata=True)): path, size,
    blob id; LFS files (the shards) also lfs {size, sha256, pointer_size}, their blob id that of the pointer."""
    body = content(repo, name, size, data)
    if data is not None:
        return {"path": name, "size": size, "blob_id": git_blob_id(body)}
    sha256 = hashlib.sha256(body).hexdigest()
    pointer = ("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (sha256, size)).encode()
    return {"path": name, "size": size, "blob_id": git_blob_id(pointer),
            "lfs": {"size": size, "sha256": sha256, "pointer_size": len(pointer)}}


def etag_of(entry):
    """What the Hub sends as the file's etag (X-Linked-Etag for LFS: the sha256), hf's .metadata second line."""
    return entry["lfs"]["sha256"] if "lfs" in entry else entry["blob_id"]


def hub_listing(repo):
    shards = number("hf-shards", 8, int)
    shard_bytes = number("hf-shard-kib", 256, int) * 1024
    return [hub_entry(repo, name, size, data) for name, (size, data) in checkpoint_files(repo, shards, shard_bytes).items()]


def shard_names(shards):
    return ["model-%05d-of-%05d.safetensors" % (i, shards) for i in range(1, shards + 1)]


def checkpoint_files(repo, shards, shard_bytes):
    """Name -> (size, bytes generator) of the stand-in checkpoint, in the Hub's (sorted) listing order."""
    names = shard_names(shards)
    weight_map = {}
    layers = 4 * shards
    for layer in range(layers):
        shard = names[layer * shards // layers]
        for part in ("self_attn.q_proj", "self_attn.kv_proj", "self_attn.o_proj", "mlp.experts"):
            weight_map["model.layers.%d.%s.weight" % (layer, part)] = shard
    weight_map["model.embed_tokens.weight"] = names[0]
    weight_map["lm_head.weight"] = names[-1]
    small = {
        "config.json": {
            "architectures": ["GlmMoeDsaForCausalLM"],
            "model_type": "glm_moe_dsa",
            "_name_or_path": repo,
            "hidden_size": 6144,
            "num_hidden_layers": layers,
            "num_attention_heads": 64,
            "n_routed_experts": 288,
            "num_experts_per_tok": 8,
            "max_position_embeddings": 202752,
            "vocab_size": 154880,
            "torch_dtype": "bfloat16",
            "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]},
            "standin": "glm.serve tests: not real weights",
        },
        "generation_config.json": {"_from_model_config": True, "eos_token_id": [154820, 154827, 154829],
                                   "pad_token_id": 154820, "temperature": 1.0, "top_p": 0.95},
        "tokenizer_config.json": {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 202752,
                                  "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"},
        "tokenizer.json": {"version": "1.0", "model": {"type": "BPE", "vocab": {"<|endoftext|>": 154820}, "merges": []},
                           "added_tokens": [{"id": 154820, "content": "<|endoftext|>", "special": True}]},
        "model.safetensors.index.json": {"metadata": {"total_size": shards * shard_bytes}, "weight_map": weight_map},
    }
    files = {}
    for name, content in small.items():
        data = (json.dumps(content, indent=2, sort_keys=True) + "\n").encode()
        files[name] = (len(data), data)
    for name in names:
        files[name] = (shard_bytes, None)
    return dict(sorted(files.items()))


def shard_bytes_at(repo, name, offset, length):
    """Deterministic filler: the SHA-256 stream of (repo, name, block number), sliced at [offset, offset+length)."""
    out = bytearray()
    block = offset // 32
    skip = offset % 32
    while len(out) < length + skip:
        out += hashlib.sha256(("%s/%s/%d" % (repo, name, block)).encode()).digest()
        block += 1
    return bytes(out[skip:skip + length])


class StandinFailure(Exception):
    """A simulated failure: message printed, exit 1."""


def fetch(args, name, size, data, state):
    """Fetch one file to DIR/.cache/huggingface/download/NAME.incomplete, then move it into place."""
    local_dir = args.local_dir
    dl_dir = os.path.join(local_dir, ".cache", "huggingface", "download")
    target = os.path.join(local_dir, name)
    incomplete = os.path.join(dl_dir, name + ".incomplete")
    os.makedirs(os.path.dirname(incomplete), exist_ok=True)
    done = os.path.getsize(incomplete) if os.path.exists(incomplete) else 0
    if done > size:
        done = 0
    fail_after = state["fail_after"]
    nospace_after = state["nospace_after"]
    failing = None
    if fail_after is not None and state["fetched"] >= fail_after:
        failing = "http"
    elif nospace_after is not None and state["fetched"] >= nospace_after:
        failing = "nospace"
    chunk = max(1, -(-size // CHUNKS_PER_FILE))
    pause = state["delay"] / CHUNKS_PER_FILE
    with open(incomplete, "r+b" if done else "wb") as handle:
        handle.seek(done)
        while done < size:
            if failing and done >= size // 2:
                handle.flush()
                if failing == "http":
                    raise StandinFailure(
                        "huggingface_hub.errors.HfHubHTTPError: 503 Server Error: Service Unavailable for url: "
                        "https://huggingface.co/%s/resolve/%s/%s (Request ID: Root=1-standin)"
                        % (args.repo_id, state["commit"], name))
                raise StandinFailure("OSError: [Errno 28] No space left on device")
            step = min(chunk, size - done)
            handle.write(data[done:done + step] if data is not None else shard_bytes_at(args.repo_id, name, done, step))
            done += step
            if pause:
                handle.flush()
                time.sleep(pause)
    if name in state["corrupt"] and name not in fetched_before(local_dir):
        with open(incomplete, "r+b") as handle:
            handle.seek(size // 2)
            byte = handle.read(1)
            handle.seek(size // 2)
            handle.write(bytes([byte[0] ^ 0x01]))
    os.replace(incomplete, target)
    meta_path = os.path.join(dl_dir, name + ".metadata")
    with open(meta_path, "w", encoding="utf-8") as meta:
        meta.write("%s\n%s\n%f\n" % (state["commit"], state["etags"][name], time.time()))
    with open(os.path.join(local_dir, ".cache", "huggingface", "standin-fetch.log"), "a", encoding="utf-8") as log:
        log.write("fetched %s\n" % name)
    state["fetched"] += 1


def fetched_before(local_dir):
    try:
        with open(os.path.join(local_dir, ".cache", "huggingface", "standin-fetch.log"), encoding="utf-8") as log:
            return {line.split(None, 1)[1].strip() for line in log if line.startswith("fetched ")}
    except OSError:
        return set()


def read_metadata(local_dir, name):
    """(commit, etag) of NAME's .metadata, or None when missing, unreadable or outdated (the file modified more than
    1 s after the metadata's timestamp): _local_folder.py read_download_metadata at v1.28.0 L306-354."""
    target = os.path.join(local_dir, name)
    meta = os.path.join(local_dir, ".cache", "huggingface", "download", name + ".metadata")
    try:
        with open(meta, encoding="utf-8") as handle:
            commit, etag, stamp = handle.readline().strip(), handle.readline().strip(), float(handle.readline().strip())
        mtime = os.stat(target).st_mtime
    except (OSError, ValueError):
        return None
    return (commit, etag) if mtime - 1 <= stamp else None


def is_complete(local_dir, name, size, data, revision, commit, etag):
    """Whether hf skips NAME: file_download.py _hf_hub_download_to_local_dir at v1.28.0 L1291-1297, L1373-1413."""
    target = os.path.join(local_dir, name)
    if not os.path.isfile(target):
        return False
    metadata = read_metadata(local_dir, name)
    if revision and revision == commit and metadata is not None and metadata[0] == revision:
        return True
    if metadata is not None:
        return metadata[1] == etag
    if len(etag) == 64:
        with open(target, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest() == etag
    return False


def selected(name, args):
    if args.filenames and name not in args.filenames:
        return False
    if args.include and not any(fnmatch.fnmatch(name, pattern) for pattern in args.include):
        return False
    if args.exclude and any(fnmatch.fnmatch(name, pattern) for pattern in args.exclude):
        return False
    return True


BAR_PARTS = " \u258f\u258e\u258d\u258c\u258b\u258a\u2589"


def tqdm_clock(seconds):
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return "%d:%02d:%02d" % (hours, minutes, seconds) if hours else "%02d:%02d" % (minutes, seconds)


def tqdm_segment(desc, n, total, elapsed):
    """One segment of tqdm's default meter on a non-terminal (10 cells): tqdm.std.tqdm.format_meter."""
    frac = n / total if total else 0
    cells = frac * 10
    full = int(cells)
    meter = "\u2588" * full
    if full < 10:
        meter += BAR_PARTS[int((cells - full) * 8)] if cells > full else " "
        meter += " " * (10 - len(meter))
    if n and elapsed > 0:
        rate = n / elapsed
        rate_text = ("%5.2fit/s" % rate) if rate >= 1 else ("%5.2fs/it" % (1 / rate))
        remaining = tqdm_clock((total - n) / rate)
    else:
        rate_text, remaining = "?it/s", "?"
    return "\r%s: %3d%%|%s| %d/%d [%s<%s, %s]" % (desc, frac * 100, meter, n, total, tqdm_clock(elapsed), remaining, rate_text)


def size_text(size):
    """huggingface_hub.utils._cache_manager._format_size: 1000-based, one decimal."""
    for unit in ("", "K", "M", "G", "T"):
        if abs(size) < 1000.0 or unit == "T":
            return "%3.1f%s" % (size, unit)
        size /= 1000.0
    return "%3.1fT" % size


def dry_run(args, files, state):
    todo = dict((name, size) for name, (size, data) in files.items()
                if args.force_download or not is_complete(args.local_dir, name, size, data, args.revision,
                                                          state["commit"], state["etags"][name]))
    sizes = dict((name, size_text(todo[name]) if name in todo else "-") for name in files)
    if args.format == "json":
        print(json.dumps([{"file": name, "size": sizes[name]} for name in files]), flush=True)
        return 0
    print("[dry-run] Will download %d files (out of %d) totalling %s." % (len(todo), len(files), size_text(sum(todo.values()))))
    width = max([len("FILE")] + [len(name) for name in files])
    swidth = max([len("SIZE")] + [len(v) for v in sizes.values()])
    print("%s %s" % ("FILE".ljust(width), "SIZE".ljust(swidth)))
    print("%s %s" % ("-" * width, "-" * swidth))
    for name in files:
        print("%s %s" % (name.ljust(width), sizes[name].ljust(swidth)))
    sys.stdout.flush()
    return 0


def list_refusal(version):
    """What `hf models ls REPO -R --format json` prints on stderr (exit 2) with a huggingface_hub older than 1.13, or
    "". Rich is off in the hf app (cli/_cli_utils.py typer_factory at v1.12.0 L505-508), so typer leaves the error to
    click's UsageError.show: the usage, "Try '... -h' for help.", a blank line, "Error: MESSAGE". Before 1.3 there is
    no `models` group (cli/hf.py registers none): "No such command 'models'."; from 1.3 to 1.12 `models ls` lists
    models and takes no REPO and no -R (cli/models.py at v1.12.0 L68-94), and click meets -R first: "No such option:
    -R", to which HFCliTyperGroup.invoke adds the command's options (_cli_utils.py at v1.12.0 L122-151, L393-406)."""
    if version >= (1, 13, 0):
        return ""
    if version < (1, 3, 0):
        return ("Usage: hf [OPTIONS] COMMAND [ARGS]...\nTry 'hf -h' for help.\n\nError: No such command 'models'.\n")
    return ("Usage: hf models ls [OPTIONS]\nTry 'hf models ls -h' for help.\n\nError: No such option: -R\n\n"
            "Available options for 'hf models ls':\n"
            "  --search TEXT                  Search query.\n"
            "  --author TEXT                  Filter by author or organization.\n"
            "  --limit INTEGER                Limit the number of results.\n"
            "  --format [auto|human|agent|json|quiet]\n"
            "\nRun 'hf models ls --help' for full details.\n")


def list_files(args):
    """`hf models ls REPO -R --format json`: the repository's files with their exact sizes (cli/_file_listing.py,
    list_repo_tree(expand=True)); LFS files (the shards) carry an "lfs" object too. Refused below 1.13."""
    refusal = list_refusal(hub_version())
    if refusal:
        sys.stderr.write(refusal)
        return 2
    entries = hub_listing(args.repo_id)
    if args.format == "json":
        print(json.dumps(entries, indent=2), flush=True)
    else:
        for entry in entries:
            print("%d %s %s" % (entry["size"], "2026-11-01", entry["path"]))
    return 0


def download(args):
    if not args.local_dir:
        sys.stderr.write("hf stand-in: only --local-dir downloads are simulated; give --local-dir DIR\n")
        return 2
    args.local_dir = os.path.abspath(args.local_dir)
    shards = number("hf-shards", 8, int)
    shard_bytes = number("hf-shard-kib", 256, int) * 1024
    state = {
        "delay": number("hf-delay", 0.0),
        "fail_after": number("hf-fail-after", None, int),
        "nospace_after": number("hf-nospace-after", None, int),
        "commit": commit_hash(args.repo_id, args.revision),
        "corrupt": set(name for name in (switch("hf-corrupt") or "").split(",") if name),
        "fetched": 0,
    }
    files = {name: spec for name, spec in checkpoint_files(args.repo_id, shards, shard_bytes).items() if selected(name, args)}
    state["etags"] = dict((name, etag_of(hub_entry(args.repo_id, name, size, data))) for name, (size, data) in files.items())
    cache = os.path.join(args.local_dir, ".cache", "huggingface")
    os.makedirs(cache, exist_ok=True)
    with open(os.path.join(cache, ".gitignore"), "w", encoding="utf-8") as handle:
        handle.write("*\n")
    if args.dry_run:
        return dry_run(args, files, state)
    gate = switch("hf-gate")
    while gate and not os.path.exists(os.path.join(cache, os.path.basename(gate))):
        time.sleep(0.5)
    total = len(files)
    desc = "Fetching %d files" % total
    started = time.time()
    sys.stderr.write(tqdm_segment(desc, 0, total, 0))
    sys.stderr.flush()
    try:
        for index, (name, (size, data)) in enumerate(files.items(), 1):
            if args.force_download or not is_complete(args.local_dir, name, size, data, args.revision, state["commit"],
                                                      state["etags"][name]):
                fetch(args, name, size, data, state)
            sys.stderr.write(tqdm_segment(desc, index, total, time.time() - started))
            sys.stderr.flush()
    except StandinFailure as failure:
        sys.stderr.write("\n%s\n" % failure)
        return 1
    # tqdm's close: the last segment again, then a newline
    sys.stderr.write(tqdm_segment(desc, total, total, time.time() - started) + "\n")
    sys.stderr.flush()
    if args.quiet:
        print(args.local_dir, flush=True)
    else:
        print("\x1b[32m\u2713 Downloaded\x1b[0m\n  path: %s" % args.local_dir, flush=True)
    return 0


class Parser(argparse.ArgumentParser):
    """argparse with the real CLI's program name."""


def main(argv=None):
    parser = Parser(prog="hf", description="Hugging Face Hub CLI (glm.serve test stand-in)")
    commands = parser.add_subparsers(dest="command", metavar="{download}")
    dl = commands.add_parser("download", help="Download files from the Hub")
    dl.add_argument("repo_id")
    dl.add_argument("filenames", nargs="*")
    dl.add_argument("--local-dir")
    dl.add_argument("--revision")
    dl.add_argument("--max-workers", type=int, default=8)
    dl.add_argument("--include", nargs="+", action="extend")
    dl.add_argument("--exclude", nargs="+", action="extend")
    dl.add_argument("--repo-type", choices=["model", "dataset", "space"], default="model")
    dl.add_argument("--token")
    dl.add_argument("--cache-dir")
    dl.add_argument("--force-download", action="store_true")
    dl.add_argument("--dry-run", action="store_true")
    # the global output flags, which the real CLI accepts anywhere (cli/_cli_utils.py L485-490)
    dl.add_argument("-q", "--quiet", action="store_true")
    dl.add_argument("--format", choices=["auto", "human", "agent", "json", "quiet"], default="auto")
    dl.add_argument("--json", dest="format", action="store_const", const="json")
    models = commands.add_parser("models", help="List files of a model repository")
    models_commands = models.add_subparsers(dest="models_command", metavar="{ls}")
    listing = models_commands.add_parser("ls")
    listing.add_argument("repo_id")
    listing.add_argument("-R", "--recursive", action="store_true")
    listing.add_argument("--revision")
    listing.add_argument("--format", choices=["auto", "human", "agent", "json", "quiet"], default="auto")
    listing.add_argument("--json", dest="format", action="store_const", const="json")
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["models"] and list_refusal(hub_version()):
        sys.stderr.write(list_refusal(hub_version()))
        return 2
    if argv[:1] == ["download"]:
        # the real CLI is click (through typer), whose commands take their arguments interspersed with the options
        # (click/core.py: Context.allow_interspersed_args defaults to True): `hf download REPO --local-dir DIR FILE...`
        # names FILE as it would before --local-dir; argparse needs parse_intermixed_args for that
        args = dl.parse_intermixed_args(argv[1:])
        args.command = "download"
    else:
        args = parser.parse_args(argv)
    if args.command == "models" and getattr(args, "models_command", None) == "ls":
        return list_files(args)
    if args.format == "quiet":
        args.quiet = True
    if args.command != "download":
        parser.print_usage(sys.stderr)
        sys.stderr.write("hf: error: the stand-in only implements `hf download` and `hf models ls REPO`\n")
        return 2
    return download(args)


if __name__ == "__main__":
    sys.exit(main())
