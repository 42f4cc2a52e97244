"""The Hub's checksums of a model repository, and a check of a download against them. Run by download.sbatch in
the container (its python3 and its huggingface_hub), on the compute node of the download job.

Usage: weights_check.py list REPO REVISION                  the listing, on stdout
       weights_check.py verify MODEL_DIR LISTING THREADS [FILE ...]   the check

list: HfApi().model_info(REPO, revision=REVISION or None, files_metadata=True), an interface every huggingface_hub
1.x has (hf_api.py: model_info's files_metadata at v1.0.0 L2480-2487, the siblings' size, blobId and lfs.sha256
at v1.0.0 L856-870), unlike `hf models ls REPO -R` (cli/models.py: a REPO argument only from v1.13.0 L69-135) or
`hf cache verify` (cli/cache.py: from v1.1.0 L742). Prints a line "COMMIT TOTAL_BYTES HUB_VERSION", then the
listing as one line of JSON (the job writes it on the node: the container may not see the model dir): {"repo",
"revision", "commit", "hub_version", "total_bytes", "files": {PATH: {"size", "sha256"} for LFS files, {"size",
"git_sha1"} for the others}}: the Hub's own checksums, which `hf cache verify` compares against too
(utils/_verification.py at v1.1.0 verify_maps: the LFS sha256, else the git blob id over the content).

verify: hashes every file of LISTING (or only FILE ...) under MODEL_DIR with THREADS threads (hashlib releases the
GIL on large buffers, so the threads read and hash in parallel: the speed is the filesystem's); prints the bad
files' paths on stdout, one a line, and on stderr a line for each (why) and one for the whole (files, GB, seconds).
Exit 0 either way; exit 2 on a usage error or an unreadable listing.
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


def verify(model_dir, listing_path, threads, only=()):
    with open(listing_path, encoding="utf-8") as handle:
        files = json.load(handle)["files"]
    names = sorted(only) if only else sorted(files)
    started = time.time()
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        whys = list(pool.map(lambda name: check_one(model_dir, name, files.get(name, {})), names))
    bad = [{"path": name, "why": why} for name, why in zip(names, whys) if why]
    if only:
        bad += [{"path": name, "why": "missing"} for name, why in zip(names, whys) if why is None]
    for item in bad:
        sys.stderr.write("[glm.serve] checksum check: %s: %s\n" % (item["path"], item["why"]))
    total = 0
    for name in names:
        try:
            total += os.path.getsize(os.path.join(model_dir, name))
        except OSError:
            pass
    seconds = time.time() - started
    checked = len([why for why in whys if why is not None])
    rate = total / 1e9 / max(seconds, 1e-3)
    sys.stderr.write("[glm.serve] checked %d files against the Hub's checksums (%d of the listing not here), %.1f GB in "
                     "%.0f s (%.2f GB/s), %d bad\n" % (checked, len(names) - checked, total / 1e9, seconds, rate, len(bad)))
    return {"checked": checked, "bytes": total, "seconds": round(seconds, 3), "bad": bad}


def main(argv):
    if len(argv) == 3 and argv[0] == "list":
        result = listing(argv[1], argv[2])
        print("%s %d %s" % (result["commit"], result["total_bytes"], result["hub_version"] or "unknown"))
        print(json.dumps(result))
    elif len(argv) >= 4 and argv[0] == "verify":
        try:
            result = verify(argv[1], argv[2], int(argv[3]), argv[4:])
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
