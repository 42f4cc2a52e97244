"""Report, as JSON on stdout, what the download job still has to do.

Usage: download_state.py MODEL_DIR IMAGE REPO [REVISION]

Read-only. The weights are complete when the download job's completion record MODEL_DIR/.glm-serve-complete.json
is there (download.sbatch writes it only after `hf download` exited 0, and removes it before it starts) for REPO
and REVISION, and the files are still there: config.json, every file named in model.safetensors.index.json's
weight_map (or model.safetensors when there is no index), and no ".incomplete" file under MODEL_DIR (hf
download's partial files). Files that merely look whole (every shard, but a download stopped before
tokenizer.json) are not complete without the record; nor is a tree an older version of the download job left:
the next download resumes it, and hf skips the files already there. The image counts when it is a whole squashfs
(its superblock: the magic, version 4, and no more bytes used than the file has; what `unsquashfs -s` and Pyxis
need): an image cut short by a failed save is saved again by the next download job. Also reports the bytes already
present (model dir and image) and the free bytes of the filesystem that holds MODEL_DIR.

Verified, not only complete: the record counts only with its "verified" part, written by the download job once every
file had the Hub's checksum (the listing MODEL_DIR/.glm-serve-listing.json, of the recorded commit). Hashing 328 GB
is the job's, on a compute node, once per revision; here, on the login node, each listed file is only looked at
(stat): of the listing's size, and with the size and mtime_ns the job recorded for it right after its hash matched
("verified": {"files": {PATH: {"size", "mtime_ns"}}}). Compared for equality, not against a time: the compute
node's clock and the file server's (which sets the mtime on NFS or Ceph) may differ by seconds, and the same file
seen from two clients of one filesystem has the same stat values. A file cut short or rewritten since is named, and
the download job hashes only the files whose size or mtime_ns is not the recorded one (weights_check.py verify)
and fetches again only the bad ones.
"""

import json
import os
import struct
import sys

LIST_MAX = 20
RECORD = ".glm-serve-complete.json"
LISTING = ".glm-serve-listing.json"


def read_record(model_dir, repo, revision):
    """(record or None, why it does not count or "")."""
    path = os.path.join(model_dir, RECORD)
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except FileNotFoundError:
        return None, "no completion record (the last download did not finish, or an older version of the job made it)"
    except (OSError, ValueError) as exc:
        return None, "the completion record %s is unreadable (%s)" % (path, exc)
    if not isinstance(record, dict):
        return None, "the completion record %s is not a JSON object" % path
    if record.get("repo") != repo:
        return None, "the completion record is for %s, not %s" % (record.get("repo"), repo)
    if (record.get("revision") or "") != (revision or ""):
        return None, "the completion record is for revision %r, not %r" % (record.get("revision") or "default", revision or "default")
    return record, ""


def verification_problems(model_dir, record):
    """(why the record's verification does not count or "", [bad files "NAME: why"])."""
    verified = record.get("verified")
    if not isinstance(verified, dict) or not isinstance(verified.get("files"), dict):
        return ("the weights were not checked against the Hub's checksums (the completion record of an older version "
                "of the download job): the download job checks every file and fetches again only bad ones"), []
    path = os.path.join(model_dir, os.path.basename(str(verified.get("listing") or LISTING)))
    try:
        with open(path, encoding="utf-8") as handle:
            listing = json.load(handle)
        files = listing["files"]
        if listing.get("commit") != record.get("commit"):
            return "the listing %s is of commit %s, the record of %s" % (path, listing.get("commit"), record.get("commit")), []
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return "the Hub's listing %s that the weights were checked against is unreadable (%s)" % (path, exc), []
    bad = []
    for name in sorted(files):
        want = files[name] if isinstance(files[name], dict) else {}
        try:
            stat = os.stat(os.path.join(model_dir, name))
        except OSError:
            continue                                        # not downloaded (--include/--exclude): the files check says
        seen = verified["files"].get(name)
        if want.get("size") is not None and stat.st_size != want["size"]:
            bad.append("%s: %d bytes, the Hub's has %d" % (name, stat.st_size, want["size"]))
        elif not isinstance(seen, dict):
            bad.append("%s: not checked against the Hub's checksums" % name)
        elif (stat.st_size, stat.st_mtime_ns) != (seen.get("size"), seen.get("mtime_ns")):
            bad.append("%s: modified after the checksum check (%d bytes, mtime_ns %d; at the check %s, %s)" % (
                name, stat.st_size, stat.st_mtime_ns, seen.get("size"), seen.get("mtime_ns")))
    return "", bad


def image_problem(path):
    """What is wrong with the squashfs image at PATH, or "" when it is whole (squashfs 4 superblock: magic "hsqs",
    s_major at byte 28, bytes_used at byte 40, little-endian)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(96)
            size = os.fstat(handle.fileno()).st_size
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return "unreadable (%s)" % exc
    if len(head) < 48 or head[:4] != b"hsqs":
        return "not a squashfs image (no superblock)"
    major = struct.unpack_from("<H", head, 28)[0]
    used = struct.unpack_from("<Q", head, 40)[0]
    if major != 4:
        return "a squashfs of version %d, not 4" % major
    if used > size:
        return "truncated: %d bytes of the %d its superblock says (a save that failed)" % (size, used)
    return ""


def nearest_existing(path):
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def wanted_weights(model_dir):
    """(index present, index error or "", the weight files the model needs): those model.safetensors.index.json's
    weight_map names, or model.safetensors when there is no index."""
    index_path = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.isfile(index_path):
        try:
            with open(index_path, encoding="utf-8") as handle:
                return True, "", set(json.load(handle)["weight_map"].values())
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            return True, "%s: %s" % (type(exc).__name__, exc), set()
    if os.path.isfile(os.path.join(model_dir, "model.safetensors")):
        return False, "", {"model.safetensors"}
    return False, "", set()


def walk_tree(model_dir):
    """(bytes of the files under MODEL_DIR, their ".incomplete" files relative to it, sorted)."""
    present, incomplete = 0, []
    for root, _dirs, files in os.walk(model_dir):
        for name in files:
            full = os.path.join(root, name)
            try:
                present += os.path.getsize(full)
            except OSError:
                pass
            if name.endswith(".incomplete"):
                incomplete.append(os.path.relpath(full, model_dir))
    return present, sorted(incomplete)


def weights_why(state, record_why, verify_why, files_whole):
    """Why the weights are not complete ("" when they are), from the record, its verification and the files."""
    record = state["record"]
    if state["weights_complete"]:
        return ""
    if record and files_whole and verify_why:
        return verify_why
    if record and files_whole:
        return "%d files are not what was checked against the Hub's checksums (%s): the download job checks them and fetches the bad ones again" % (
            state["unverified_count"], "; ".join(state["unverified"][:3]))
    if record_why and files_whole:
        return record_why + ": the download runs again and hf skips the files already there"
    if record_why:
        return record_why
    return "files of the recorded download are gone: %d weight files missing, %d partial" % (
        state["missing_count"], state["incomplete_count"])


def listed(state, key, names):
    """STATE[KEY] the first LIST_MAX of NAMES, STATE[KEY_count] how many they are."""
    state[key] = names[:LIST_MAX]
    state[key + "_count"] = len(names)


def initial_state(model_dir, image, record, record_why):
    """The report before any file is looked at (the order of its keys is the JSON's)."""
    return {
        "record": record,
        "record_why": record_why,
        "model_dir": model_dir,
        "image": image,
        "image_present": False,
        "image_problem": "",
        "config_present": os.path.isfile(os.path.join(model_dir, "config.json")),
        "index_present": False,
        "index_error": "",
        "weight_files": 0,
        "missing": [],
        "missing_count": 0,
        "incomplete": [],
        "incomplete_count": 0,
        "present_bytes": 0,
        "unverified": [],
        "unverified_count": 0,
    }


def main(model_dir, image, repo, revision=""):
    record, record_why = read_record(model_dir, repo, revision)
    state = initial_state(model_dir, image, record, record_why)
    verify_why, unverified = verification_problems(model_dir, record) if record else ("", [])
    listed(state, "unverified", unverified)
    if os.path.isfile(image):
        state["present_bytes"] += os.path.getsize(image)
        state["image_problem"] = image_problem(image)
        state["image_present"] = not state["image_problem"]
    state["index_present"], state["index_error"], wanted = wanted_weights(model_dir)
    state["weight_files"] = len(wanted)
    listed(state, "missing", sorted(name for name in wanted if not os.path.isfile(os.path.join(model_dir, name))))
    present, incomplete = walk_tree(model_dir)
    state["present_bytes"] += present
    listed(state, "incomplete", incomplete)
    stats = os.statvfs(nearest_existing(model_dir))
    state["free_bytes"] = stats.f_bavail * stats.f_frsize

    files_whole = bool(state["config_present"] and wanted and not state["index_error"]
                       and not state["missing_count"] and not incomplete)
    verified = bool(record) and not verify_why and not state["unverified_count"]
    state["weights_complete"] = bool(record) and files_whole and verified
    state["why"] = weights_why(state, record_why, verify_why, files_whole)
    if state["image_problem"]:
        state["why"] = "; ".join(w for w in (state["why"], "the image %s is broken: %s; it is saved again" % (
            image, state["image_problem"])) if w)
    state["complete"] = state["weights_complete"] and state["image_present"]
    json.dump(state, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    if len(sys.argv) not in (4, 5):
        sys.stderr.write("usage: download_state.py MODEL_DIR IMAGE REPO [REVISION]\n")
        sys.exit(2)
    sys.exit(main(*sys.argv[1:]))
