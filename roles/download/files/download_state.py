"""Report, as JSON on stdout, what the download job still has to do.

Usage: download_state.py MODEL_DIR IMAGE

Read-only. The weights are complete when config.json is there, every file named in
model.safetensors.index.json's weight_map is there (or model.safetensors when there is no index), and no
".incomplete" file is left anywhere under MODEL_DIR (hf download's partial files). Also reports the bytes already
present (model dir and image) and the free bytes of the filesystem that holds MODEL_DIR.
"""

import json
import os
import sys

LIST_MAX = 20


def nearest_existing(path):
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def main(model_dir, image):
    state = {
        "model_dir": model_dir,
        "image": image,
        "image_present": os.path.isfile(image),
        "config_present": os.path.isfile(os.path.join(model_dir, "config.json")),
        "index_present": False,
        "index_error": "",
        "weight_files": 0,
        "missing": [],
        "missing_count": 0,
        "incomplete": [],
        "incomplete_count": 0,
        "present_bytes": 0,
    }
    if os.path.isfile(image):
        state["present_bytes"] += os.path.getsize(image)

    index_path = os.path.join(model_dir, "model.safetensors.index.json")
    wanted = set()
    if os.path.isfile(index_path):
        state["index_present"] = True
        try:
            with open(index_path, encoding="utf-8") as handle:
                wanted = set(json.load(handle)["weight_map"].values())
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            state["index_error"] = "%s: %s" % (type(exc).__name__, exc)
    elif os.path.isfile(os.path.join(model_dir, "model.safetensors")):
        wanted = {"model.safetensors"}
    state["weight_files"] = len(wanted)

    missing = sorted(name for name in wanted if not os.path.isfile(os.path.join(model_dir, name)))
    state["missing"] = missing[:LIST_MAX]
    state["missing_count"] = len(missing)

    incomplete = []
    for root, _dirs, files in os.walk(model_dir):
        for name in files:
            full = os.path.join(root, name)
            try:
                state["present_bytes"] += os.path.getsize(full)
            except OSError:
                pass
            if name.endswith(".incomplete"):
                incomplete.append(os.path.relpath(full, model_dir))
    incomplete.sort()
    state["incomplete"] = incomplete[:LIST_MAX]
    state["incomplete_count"] = len(incomplete)

    stats = os.statvfs(nearest_existing(model_dir))
    state["free_bytes"] = stats.f_bavail * stats.f_frsize

    state["weights_complete"] = bool(
        state["config_present"]
        and wanted
        and not state["index_error"]
        and not missing
        and not incomplete
    )
    state["complete"] = state["weights_complete"] and state["image_present"]
    json.dump(state, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.stderr.write("usage: download_state.py MODEL_DIR IMAGE\n")
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
