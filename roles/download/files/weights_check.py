"""The Hub's checksums of a model repository, and a check of a download against them. Run by download.sbatch in
the container (its python3 and its huggingface_hub), on the compute node of the download job.

Usage: weights_check.py list REPO REVISION [SAVED_LISTING]   the listing, on stdout
       weights_check.py verify MODEL_DIR LISTING THREADS CHECKED [FILE ...]   the check

list: HfApi().model_info(REPO, revision=REVISION or None, files_metadata=True), an interface every huggingface_hub
1.x has (hf_api.py: model_info's files_metadata at v1.0.0 L2480-2487, the siblings' size, blobId and lfs.sha256
at v1.0.0 L856-870), unlike `hf models ls REPO -R` (cli/models.py: a REPO argument only from v1.13.0 L69-135) or
`hf cache verify` (cli/cache.py: from v1.1.0 L742). Prints a line "COMMIT TOTAL_BYTES HUB_VERSION", then the
listing as one line of JSON (the job writes it on the node: the container may not see the model dir): {"repo",
"revision", "commit", "hub_version", "total_bytes", "files": {PATH: {"size", "sha256"} for LFS files, {"size",
"git_sha1"} for the others}}: the Hub's own checksums, which `hf cache verify` compares against too
(utils/_verification.py at v1.1.0 verify_maps: the LFS sha256, else the git blob id over the content).

When the Hub cannot be reached (HF_HUB_OFFLINE=1: OfflineModeIsEnabled, a ConnectionError, errors.py at v1.28.0
L86; no route, a timeout: httpx.TransportError; the Hub down: a 5xx answer) and SAVED_LISTING is a listing of the
same repository and revision (saved by an earlier job that could read it), that one is printed instead, with a line
on stderr: the weights on disk were downloaded and checked against it, so a job that only saves the image again, or
checks the files again, still works offline; hf does the same with a local dir it cannot compare
(_snapshot_download.py at v1.28.0 L274-277, L333-350: "Returning existing local_dir"). An answer of the Hub (404, 401,
a gated repository) is never replaced by a saved listing. Without one: exit 3, with the cause and the fix.

verify: hashes every file of LISTING (or only FILE ...) under MODEL_DIR with THREADS threads (hashlib releases the
GIL on large buffers, so the threads read and hash in parallel: the speed is the filesystem's); prints the bad
files' paths on stdout, one a line, and on stderr a line for each (why) and one for the whole (files, GB, seconds).
CHECKED ("" for none) is what the checks of this commit found: {"commit", "listing", "files": {PATH: {"size",
"mtime_ns"}}}, each file's size and mtime as os.stat gives them right after its hash matched. A file whose size and
mtime_ns are still those is not hashed again (the same rule as the deploy's check on the login node: the same
filesystem gives the same stat values there, so no clocks are compared), so a job that resumes a download, fetches
a few files again or only saves the image reads only the new or changed files; download_force=true passes "" (every
file hashed). Written back (atomically) with what this check found. Exit 0 either way; exit 2 on a usage error or an
unreadable listing.
"""

import hashlib
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

BLOCK = 8 * 1024 * 1024


def listing(repo, revision=""):
    import huggingface_hub  # pylint: disable=import-outside-toplevel

    info = huggingface_hub.HfApi().model_info(repo, revision=revision or None, files_metadata=True)
    files = {}
    for sibling in info.siblings or []:
        lfs = sibling.lfs
        sha256 = (getattr(lfs, "sha256", None) or (lfs.get("sha256") if isinstance(lfs, dict) else None)) if lfs else None
        entry = {"size": sibling.size}
        if sha256:
            entry["sha256"] = str(sha256).lower()
        elif sibling.blob_id:
            entry["git_sha1"] = str(sibling.blob_id).lower()
        files[sibling.rfilename] = entry
    return {
        "repo": repo,
        "revision": revision,
        "commit": info.sha,
        "hub_version": getattr(huggingface_hub, "__version__", ""),
        "total_bytes": sum(entry["size"] or 0 for entry in files.values()),
        "files": files,
    }


def unreachable(exc):
    """Whether EXC says the Hub could not be reached (not that it answered): offline mode, no connection, a timeout,
    the Hub down."""
    if isinstance(exc, (ConnectionError, TimeoutError)):    # OfflineModeIsEnabled is a ConnectionError
        return True
    try:
        import httpx  # pylint: disable=import-outside-toplevel
        if isinstance(exc, httpx.TransportError):
            return True
    except ImportError:
        pass
    status = getattr(getattr(exc, "response", None), "status_code", None)
    return isinstance(status, int) and status >= 500


def listing_or_saved(repo, revision, saved_path):
    """The Hub's listing, or, when the Hub cannot be reached, the listing saved at SAVED_PATH when it is of REPO at
    REVISION (its revision, or its commit when REVISION is one). Raises SystemExit(3) with the cause and the fix."""
    try:
        return listing(repo, revision)
    except Exception as exc:  # pylint: disable=broad-except
        if not unreachable(exc):
            raise
        cause = "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
    saved, why = None, "there is none (%s)" % saved_path
    try:
        with open(saved_path, encoding="utf-8") as handle:
            saved = json.load(handle)
        if saved.get("repo") != repo or ((saved.get("revision") or "") != (revision or "") and saved.get("commit") != revision):
            why, saved = "the one saved is of %s at %s" % (saved.get("repo"), saved.get("revision") or "its default branch"), None
        elif not isinstance(saved.get("files"), dict) or not saved.get("commit"):
            why, saved = "the one saved (%s) has no files or commit" % saved_path, None
    except (OSError, ValueError, AttributeError) as exc:
        if not isinstance(exc, FileNotFoundError):
            why = "the one saved (%s) is unreadable: %s" % (saved_path, exc)
    if saved is None:
        sys.stderr.write(
            "error: the Hub's listing of %s at %s (its files and their checksums) could not be read (%s), and no listing "
            "of that revision is saved with the weights: %s. The download checks every file against it. Give the job "
            "access to the Hub once (remove HF_HUB_OFFLINE from download_env; HF_ENDPOINT for a mirror; a proxy through "
            "download_env), or, offline, copy the weights with their .glm-serve-listing.json from a download of the "
            "same revision\n" % (repo, revision or "its default branch", cause, why))
        raise SystemExit(3)
    sys.stderr.write("[glm.serve] the Hub's listing of %s could not be read (%s): using the one saved with the weights "
                     "(commit %s, as the weights were downloaded and checked; nothing can be fetched offline)\n"
                     % (repo, cause, saved["commit"]))
    saved["total_bytes"] = sum(entry.get("size") or 0 for entry in saved["files"].values())
    return saved


def same_stat(entry, stat):
    return isinstance(entry, dict) and entry.get("size") == stat.st_size and entry.get("mtime_ns") == stat.st_mtime_ns


def check_one(model_dir, path, want):
    """"" when the file at MODEL_DIR/path has the Hub's size and checksum, None when it is not there (not asked for:
    download_hf_extra_args's --include/--exclude; the deploy's own check wants config.json and every weight file),
    else why not."""
    full = os.path.join(model_dir, path)
    try:
        size = os.path.getsize(full)
    except OSError:
        return None
    if want.get("size") is not None and size != want["size"]:
        return "%d bytes, the Hub's has %d" % (size, want["size"])
    if "sha256" in want:
        digest, expected = hashlib.sha256(), want["sha256"]
    elif "git_sha1" in want:
        digest, expected = hashlib.sha1(b"blob %d\0" % size), want["git_sha1"]   # git hash-object
    else:
        return ""
    with open(full, "rb") as handle:
        while True:
            block = handle.read(BLOCK)
            if not block:
                break
            digest.update(block)
    actual = digest.hexdigest()
    return "" if actual == expected else "checksum %s, the Hub's is %s" % (actual, expected)


def read_checked(checked_path, commit):
    """The files an earlier check of COMMIT found good ({PATH: {"size", "mtime_ns"}}), {} when there is none."""
    if not checked_path:
        return {}
    try:
        with open(checked_path, encoding="utf-8") as handle:
            before = json.load(handle)
        if before.get("commit") == commit and isinstance(before.get("files"), dict):
            return before["files"]
    except (OSError, ValueError, AttributeError):
        pass                                                # none yet, or unreadable: every file is hashed
    return {}


def stat_all(model_dir, names):
    """{NAME: os.stat} of the files of NAMES that are under MODEL_DIR."""
    stats = {}
    for name in names:
        try:
            stats[name] = os.stat(os.path.join(model_dir, name))
        except OSError:
            pass
    return stats


def hash_files(model_dir, files, stats, todo, threads):
    """{NAME: (why, os.stat after the hash or None)} of the files of TODO, hashed with THREADS threads: why is "" when
    the file has the Hub's size and checksum and did not change while it was hashed, None when it is not there."""
    def one(name):
        why = check_one(model_dir, name, files.get(name, {}))
        try:
            after = os.stat(os.path.join(model_dir, name))
        except OSError:
            return why, None
        if why == "" and name in stats and (after.st_size, after.st_mtime_ns) != (stats[name].st_size, stats[name].st_mtime_ns):
            why = "changed while it was being checked"
        return why, after

    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        return dict(zip(todo, pool.map(one, todo)))


def still_good(files, results, stats, checked):
    """What holds now: the files hashed good just now, with their stat after the hash; the others of an earlier check
    of this commit whose size and mtime are still those."""
    now = {}
    for name in files:
        if name in results:
            why, after = results[name]
            if why == "" and after is not None:
                now[name] = {"size": after.st_size, "mtime_ns": after.st_mtime_ns}
        elif name in stats and same_stat(checked.get(name), stats[name]):
            now[name] = {"size": stats[name].st_size, "mtime_ns": stats[name].st_mtime_ns}
    return now


def write_checked(checked_path, commit, listing_path, now):
    """CHECKED_PATH written atomically: what this check of COMMIT found good."""
    partial = "%s.%d" % (checked_path, os.getpid())
    with open(partial, "w", encoding="utf-8") as handle:
        json.dump({"commit": commit, "listing": os.path.basename(listing_path), "files": now}, handle, sort_keys=True)
    os.replace(partial, checked_path)


def verify(model_dir, listing_path, threads, only=(), checked_path=""):
    with open(listing_path, encoding="utf-8") as handle:
        known = json.load(handle)
    files, commit = known["files"], known.get("commit")
    checked = read_checked(checked_path, commit)
    names = sorted(only) if only else sorted(files)
    stats = stat_all(model_dir, files)
    skip = set(name for name in names if name in stats and same_stat(checked.get(name), stats[name])
               and files[name].get("size") in (None, stats[name].st_size))
    todo = [name for name in names if name not in skip]
    started = time.time()
    results = hash_files(model_dir, files, stats, todo, threads)
    whys = [("" if name in skip else results[name][0]) for name in names]
    bad = [{"path": name, "why": why} for name, why in zip(names, whys) if why]
    if only:
        bad += [{"path": name, "why": "missing"} for name, why in zip(names, whys) if why is None]
    for item in bad:
        sys.stderr.write("[glm.serve] checksum check: %s: %s\n" % (item["path"], item["why"]))
    now = still_good(files, results, stats, checked)
    if checked_path:
        write_checked(checked_path, commit, listing_path, now)
    total = sum(stats[name].st_size for name in todo if name in stats)
    seconds = time.time() - started
    hashed = len([name for name in todo if results[name][0] is not None])
    rate = total / 1e9 / max(seconds, 1e-3)
    sys.stderr.write("[glm.serve] checked %d files against the Hub's checksums, %.1f GB in %.0f s (%.2f GB/s), %d bad; "
                     "%d not hashed again (the size and mtime of their last check), %d of the listing not here\n"
                     % (hashed, total / 1e9, seconds, rate, len(bad), len(skip), len(names) - hashed - len(skip)))
    return {"checked": hashed, "skipped": len(skip), "bytes": total, "seconds": round(seconds, 3), "bad": bad,
            "files": now}


def main(argv):
    if len(argv) in (3, 4) and argv[0] == "list":
        result = listing_or_saved(argv[1], argv[2], argv[3]) if len(argv) == 4 else listing(argv[1], argv[2])
        print("%s %d %s" % (result["commit"], result["total_bytes"], result.get("hub_version") or "unknown"))
        print(json.dumps(result))
    elif len(argv) >= 5 and argv[0] == "verify":
        try:
            result = verify(argv[1], argv[2], int(argv[3]), argv[5:], argv[4])
        except (OSError, ValueError, KeyError) as exc:
            sys.stderr.write("weights_check.py: the listing %s is unreadable: %s\n" % (argv[2], exc))
            return 2
        for item in result["bad"]:
            print(item["path"])
    else:
        sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
