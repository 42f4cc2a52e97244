# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The `hf` stand-in: layout of a --local-dir download, resume, interruption, failure switches."""

import json
import os
import signal
import subprocess
import time

from standin_helpers import HF, HF_WRAPPER, PYTHON, SEED_MODEL, run_hf, standin_env, wait_for

SHARDS = ["model-%05d-of-00008.safetensors" % i for i in range(1, 9)]


def fetched(local_dir):
    log = local_dir / ".cache" / "huggingface" / "standin-fetch.log"
    return log.read_text(encoding="utf-8").split("\n")[:-1] if log.exists() else []


def incomplete(local_dir):
    dl_dir = local_dir / ".cache" / "huggingface" / "download"
    return sorted(p.name for p in dl_dir.glob("*.incomplete")) if dl_dir.exists() else []


def test_fresh_download_is_complete(tmp_path):
    local = tmp_path / "GLM"
    result = run_hf(["download", SEED_MODEL, "--local-dir", str(local)], tmp_path / "control")
    assert result.returncode == 0, result.stderr
    # as huggingface_hub 1.33 prints it into a file: the end on stdout, the file-count bar on stderr
    assert result.stdout == "\x1b[32m\u2713 Downloaded\x1b[0m\n  path: %s\n" % local
    # (text mode turns tqdm's carriage returns into newlines)
    segments = [s for s in result.stderr.split("\n") if s]
    assert segments[0] == "Fetching 13 files:   0%|          | 0/13 [00:00<?, ?it/s]"
    assert [s.split("|")[2].split()[0] for s in segments] == ["%d/13" % i for i in range(14)] + ["13/13"]
    assert segments[-1].startswith("Fetching 13 files: 100%|\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588| 13/13 [")
    index = json.loads((local / "model.safetensors.index.json").read_text(encoding="utf-8"))
    assert sorted(set(index["weight_map"].values())) == SHARDS
    for name in SHARDS + ["config.json", "tokenizer.json", "generation_config.json"]:
        assert (local / name).is_file(), name
    assert all((local / s).stat().st_size == 256 * 1024 for s in SHARDS)
    assert incomplete(local) == []
    assert len(fetched(local)) == 13
    config = json.loads((local / "config.json").read_text(encoding="utf-8"))
    assert config["max_position_embeddings"] == 202752
    # Deterministic: a second download elsewhere has the same bytes.
    other = tmp_path / "other"
    assert run_hf(["download", SEED_MODEL, "--local-dir", str(other), "--quiet"], tmp_path / "control").returncode == 0
    assert (other / SHARDS[3]).read_bytes() == (local / SHARDS[3]).read_bytes()


def test_rerun_skips_complete_files_and_refetches_missing(tmp_path):
    local = tmp_path / "GLM"
    control = tmp_path / "control"
    assert run_hf(["download", SEED_MODEL, "--local-dir", str(local)], control).returncode == 0
    again = run_hf(["download", SEED_MODEL, "--local-dir", str(local)], control)
    assert again.returncode == 0
    assert "13/13" in again.stderr
    assert len(fetched(local)) == 13  # nothing fetched the second time
    (local / SHARDS[4]).unlink()
    third = run_hf(["download", SEED_MODEL, "--local-dir", str(local)], control)
    assert third.returncode == 0
    assert fetched(local)[13:] == ["fetched %s" % SHARDS[4]]


def _start_slow(local, control):
    return subprocess.Popen([PYTHON, HF, "download", SEED_MODEL, "--local-dir", str(local)],
                            env=standin_env(control, GLM_STANDIN_HF_DELAY="5"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_kill_leaves_incomplete_then_rerun_resumes(tmp_path):
    local = tmp_path / "GLM"
    control = tmp_path / "control"
    for sig in (signal.SIGKILL, signal.SIGTERM):
        proc = _start_slow(local, control)
        try:
            wait_for(lambda: incomplete(local) and (local / ".cache/huggingface/download" / incomplete(local)[0]).stat().st_size > 0)
            time.sleep(0.1)
        finally:
            proc.send_signal(sig)
            proc.wait(timeout=5)
        assert proc.returncode == -sig
        partial = incomplete(local)
        assert len(partial) == 1
        assert not (local / partial[0][:-len(".incomplete")]).exists()
    done = run_hf(["download", SEED_MODEL, "--local-dir", str(local)], control)
    assert done.returncode == 0, done.stderr
    assert fetched(local)[0] == "fetched config.json"   # the partial file was finished, not restarted elsewhere
    assert incomplete(local) == []
    assert len(fetched(local)) == 13


def test_fail_switch_by_env(tmp_path):
    local = tmp_path / "GLM"
    result = run_hf(["download", SEED_MODEL, "--local-dir", str(local)], tmp_path / "control", GLM_STANDIN_HF_FAIL_AFTER="3")
    assert result.returncode == 1
    assert "503 Server Error" in result.stderr
    assert len(fetched(local)) == 3
    assert len(incomplete(local)) == 1


def test_nospace_switch_by_control_file(tmp_path):
    local = tmp_path / "GLM"
    control = tmp_path / "control"
    control.mkdir()
    (control / "hf-nospace-after").write_text("5\n", encoding="utf-8")
    result = run_hf(["download", SEED_MODEL, "--local-dir", str(local)], control)
    assert result.returncode == 1
    assert "OSError: [Errno 28] No space left on device" in result.stderr
    assert len(fetched(local)) == 5
    (control / "hf-nospace-after").unlink()
    resumed = run_hf(["download", SEED_MODEL, "--local-dir", str(local)], control)
    assert resumed.returncode == 0
    assert len(fetched(local)) == 13


def test_usage_errors_and_filters(tmp_path):
    control = tmp_path / "control"
    bad = run_hf(["download", SEED_MODEL, "--local-dir", str(tmp_path / "x"), "--no-such-flag"], control)
    assert bad.returncode == 2
    assert "unrecognized arguments: --no-such-flag" in bad.stderr
    assert run_hf(["upload", SEED_MODEL], control).returncode == 2
    local = tmp_path / "filtered"
    result = run_hf(["download", SEED_MODEL, "--local-dir", str(local), "--include", "*.json", "--exclude", "tokenizer*",
                     "--revision", "main", "--max-workers", "4", "--quiet"], control)
    assert result.returncode == 0
    assert result.stdout == "%s\n" % local
    assert sorted(p.name for p in local.iterdir() if p.is_file()) == ["config.json", "generation_config.json",
                                                                      "model.safetensors.index.json"]
    assert os.path.isdir(local / ".cache" / "huggingface" / "download")


def test_wrapper_on_path_runs_the_standin(tmp_path):
    """bin/hf is what container steps find first on PATH: a bash wrapper that execs the Python stand-in."""
    local = tmp_path / "GLM"
    result = subprocess.run([HF_WRAPPER, "download", SEED_MODEL, "--local-dir", str(local), "--quiet"],
                            env=standin_env(tmp_path / "control"), capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "%s\n" % local
    assert len(fetched(local)) == 13


def test_dry_run_lists_what_is_left_and_downloads_nothing(tmp_path):
    local = tmp_path / "GLM"
    control = tmp_path / "control"
    first = run_hf(["download", SEED_MODEL, "--local-dir", str(local), "--dry-run"], control)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.split("\n")
    assert lines[0] == "[dry-run] Will download 13 files (out of 13) totalling 2.1M."
    assert lines[1].split() == ["FILE", "SIZE"] and set(lines[2]) == {"-", " "}
    assert fetched(local) == []
    assert run_hf(["download", SEED_MODEL, "--local-dir", str(local), "--include", "model-0000[1-3]*"], control).returncode == 0
    listing = run_hf(["download", SEED_MODEL, "--local-dir", str(local), "--dry-run", "--format", "json"], control)
    left = dict((e["file"], e["size"]) for e in json.loads(listing.stdout))
    # as huggingface_hub 1.33 prints them: rounded strings, "-" for what is there
    assert [k for k, v in left.items() if v == "-"] == SHARDS[:3]
    assert left[SHARDS[3]] == "262.1K"


def test_models_ls_lists_exact_sizes():
    result = run_hf(["models", "ls", SEED_MODEL, "-R", "--format", "json"], "/nonexistent-control")
    assert result.returncode == 0, result.stderr
    entries = json.loads(result.stdout)
    sizes = dict((e["path"], e["size"]) for e in entries)
    assert len(entries) == 13 and all(sizes[s] == 256 * 1024 for s in SHARDS)
    assert all(e["lfs"]["size"] == e["size"] for e in entries if e["path"] in SHARDS)
    assert all("lfs" not in e for e in entries if e["path"] not in SHARDS)


def test_gate_holds_the_download_until_the_file_appears(tmp_path):
    local = tmp_path / "GLM"
    proc = subprocess.Popen([PYTHON, HF, "download", SEED_MODEL, "--local-dir", str(local)],
                            env=standin_env(tmp_path / "control", GLM_STANDIN_HF_GATE="go"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for((local / ".cache" / "huggingface").is_dir)
        time.sleep(2)
        assert proc.poll() is None                     # still behind the gate
        assert fetched(local) == [] and not (local / "config.json").exists()
        (local / ".cache" / "huggingface" / "go").write_text("", encoding="utf-8")
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert len(fetched(local)) == 13


def test_listing_and_metadata_carry_the_real_checksums(tmp_path):
    """The Hub's checksums of what the stand-in writes: lfs.sha256 is the sha256 of the shard's bytes, blob_id of a
    small file its git blob id (git hash-object), and the .metadata's etag (second line) is the same (the LFS sha256,
    else the blob id: huggingface_hub _local_folder.py L36-47, L137-139)."""
    import hashlib
    local = tmp_path / "GLM"
    assert run_hf(["download", SEED_MODEL, "--local-dir", str(local), "-q"], tmp_path / "control").returncode == 0
    entries = json.loads(run_hf(["models", "ls", SEED_MODEL, "-R", "--format", "json"], tmp_path / "control").stdout)
    for entry in entries:
        data = (local / entry["path"]).read_bytes()
        meta = (local / ".cache" / "huggingface" / "download" / (entry["path"] + ".metadata")).read_text().split("\n")
        if "lfs" in entry:
            assert entry["lfs"]["sha256"] == hashlib.sha256(data).hexdigest() == meta[1], entry
        else:
            assert entry["blob_id"] == hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == meta[1], entry
            git = subprocess.run(["git", "hash-object", str(local / entry["path"])], capture_output=True, text=True,
                                 check=False)
            assert git.returncode != 0 or git.stdout.strip() == entry["blob_id"]


def test_a_shard_damaged_on_disk_with_its_mtime_kept_is_skipped_as_hf_skips_it(tmp_path):
    """Real hf never reads a file again whose metadata is current (file_download.py L1291-1297 with a commit
    revision, L1373-1384 with a branch): a truncated or flipped shard is skipped. Modified later (mtime past the
    metadata's timestamp + 1 s), the metadata is ignored and an LFS file is hashed against the etag (L1395-1413):
    a bad one is fetched again."""
    local = tmp_path / "GLM"
    control = tmp_path / "control"
    assert run_hf(["download", SEED_MODEL, "--local-dir", str(local), "-q"], control).returncode == 0
    shard = local / SHARDS[2]
    stat = shard.stat()
    shard.write_bytes(shard.read_bytes()[:1000])
    os.utime(shard, (stat.st_atime, stat.st_mtime))
    commit = (local / ".cache" / "huggingface" / "download" / (SHARDS[2] + ".metadata")).read_text().split("\n")[0]
    for revision in ([], ["--revision", commit]):
        assert run_hf(["download", SEED_MODEL, "--local-dir", str(local), "-q"] + revision, control).returncode == 0
        assert len(fetched(local)) == 13 and shard.stat().st_size == 1000          # skipped, as hf does
    later = time.time() + 5
    os.utime(shard, (later, later))
    assert run_hf(["download", SEED_MODEL, "--local-dir", str(local), "-q"], control).returncode == 0
    assert fetched(local)[13:] == ["fetched %s" % SHARDS[2]] and shard.stat().st_size == 256 * 1024


def test_corrupt_switch_flips_one_byte_of_the_first_fetch_only(tmp_path):
    import hashlib
    local = tmp_path / "GLM"
    control = tmp_path / "control"
    sums = dict((e["path"], e.get("lfs", {}).get("sha256")) for e in json.loads(
        run_hf(["models", "ls", SEED_MODEL, "-R", "--format", "json"], control).stdout))
    result = run_hf(["download", SEED_MODEL, "--local-dir", str(local), "-q"], control, GLM_STANDIN_HF_CORRUPT=SHARDS[4])
    assert result.returncode == 0 and all(s.startswith("Fetching 13 files") for s in result.stderr.split("\n") if s)

    def digest(name):
        return hashlib.sha256((local / name).read_bytes()).hexdigest()

    assert digest(SHARDS[4]) != sums[SHARDS[4]] and digest(SHARDS[3]) == sums[SHARDS[3]]
    (local / SHARDS[4]).unlink()
    again = run_hf(["download", SEED_MODEL, SHARDS[4], "--local-dir", str(local), "-q"], control,
                   GLM_STANDIN_HF_CORRUPT=SHARDS[4])
    assert again.returncode == 0 and fetched(local)[13:] == ["fetched %s" % SHARDS[4]]
    assert digest(SHARDS[4]) == sums[SHARDS[4]]


def test_models_ls_of_a_repo_is_refused_below_1_13_as_the_real_cli_refuses_it():
    """`hf models ls REPO -R` exists from huggingface_hub 1.13 (cli/models.py at v1.13.0 L69-135); 1.3 to 1.12 have
    `models ls` without REPO or -R (click: No such option), before 1.3 no `models` (No such command); exit 2."""
    argv = ["models", "ls", SEED_MODEL, "-R", "--format", "json"]
    old = run_hf(argv, "/nonexistent-control", GLM_STANDIN_HF_VERSION="1.12.0")
    assert old.returncode == 2 and old.stdout == ""
    assert old.stderr.startswith("Usage: hf models ls [OPTIONS]\nTry 'hf models ls -h' for help.\n\nError: No such option: -R\n")
    older = run_hf(argv, "/nonexistent-control", GLM_STANDIN_HF_VERSION="1.2.0")
    assert older.returncode == 2 and "Error: No such command 'models'." in older.stderr
    assert run_hf(argv, "/nonexistent-control", GLM_STANDIN_HF_VERSION="1.13.0").returncode == 0


def test_python_api_model_info_answers_the_same_listing(tmp_path):
    """HfApi().model_info(REPO, files_metadata=True) of the huggingface_hub stand-in, in every version."""
    code = ("import json, huggingface_hub as h; i = h.HfApi().model_info(%r, revision=None, files_metadata=True); "
            "print(json.dumps([h.__version__, i.sha, [[s.rfilename, s.size, s.blob_id, s.lfs and s.lfs.sha256] "
            "for s in i.siblings]]))" % SEED_MODEL)
    got = subprocess.run([PYTHON, "-c", code], env=standin_env(tmp_path, GLM_STANDIN_HF_VERSION="1.0.0"),
                         capture_output=True, text=True, check=True)
    version, sha, siblings = json.loads(got.stdout)
    entries = json.loads(run_hf(["models", "ls", SEED_MODEL, "-R", "--format", "json"], tmp_path).stdout)
    assert version == "1.0.0" and len(sha) == 40
    assert siblings == [[e["path"], e["size"], e["blob_id"], e.get("lfs", {}).get("sha256")] for e in entries]
