"""Stand-in for the huggingface_hub Python package in the test cluster's container steps (the doubles' python/ folder is on
their PYTHONPATH, as the image's site-packages would be): only what download.sbatch uses.

STANDS FOR: HfApi().model_info(repo_id, revision=..., files_metadata=True), huggingface_hub 1.x (hf_api.py at v1.0.0
L2480-2487 the signature, L856-870 the siblings: RepoSibling(rfilename, size, blob_id, lfs=BlobLfsInfo(size, sha256,
pointer_size)); without files_metadata the Hub sends the file names only, so size, blob_id and lfs are None).
WHAT IT DOES: answers for the hf stand-in's deterministic checkpoint (hf_standin.py: the same files, sizes and real
checksums; the switches hf-shards, hf-shard-kib), ModelInfo.sha the commit the revision resolves to as the hf
stand-in resolves it. __version__ is the switch hf-version (default as the hf stand-in's).
WHAT IT DOES NOT DO: no network, no other API; a keyword the real method does not take is a TypeError, as there.
"""

from dataclasses import dataclass, field
from typing import List, Optional

import hf_standin

__version__ = hf_standin.switch("hf-version") or hf_standin.VERSION_DEFAULT


@dataclass
class BlobLfsInfo(dict):
    size: int
    sha256: str
    pointer_size: int

    def __post_init__(self):
        self.update(size=self.size, sha256=self.sha256, pointer_size=self.pointer_size)


@dataclass
class RepoSibling:
    rfilename: str
    size: Optional[int] = None
    blob_id: Optional[str] = None
    lfs: Optional[BlobLfsInfo] = None


@dataclass
class ModelInfo:
    id: str
    sha: str
    siblings: List[RepoSibling] = field(default_factory=list)


class HfApi:
    def __init__(self, endpoint=None, token=None, library_name=None, library_version=None, user_agent=None,
                 headers=None):
        self.token = token

    def model_info(self, repo_id, *, revision=None, timeout=None, securityStatus=None, files_metadata=False,
                   expand=None, token=None):
        siblings = []
        for entry in hf_standin.hub_listing(repo_id):
            if not files_metadata:
                siblings.append(RepoSibling(rfilename=entry["path"]))
                continue
            lfs = entry.get("lfs")
            siblings.append(RepoSibling(rfilename=entry["path"], size=entry["size"], blob_id=entry["blob_id"],
                                        lfs=BlobLfsInfo(**lfs) if lfs else None))
        return ModelInfo(id=repo_id, sha=hf_standin.commit_hash(repo_id, revision), siblings=siblings)
