"""Data sets on the node side: resumable checksummed downloads and data set manifests.

Standard library only, so that the same code runs in the trainer's image and
as Ansible module_utils on nodes that have nothing but python3.
"""

from __future__ import annotations

from nodeprep.data.download import DEFAULT_POLICY, DownloadResult, download
from nodeprep.data.errors import DownloadError
from nodeprep.data.manifest import (
    MANIFEST_NAME,
    DatasetManifest,
    ManifestEntry,
    ManifestError,
    Problem,
    build_manifest,
    check,
    read_manifest,
    write_manifest,
)
from nodeprep.data.retry import RetryPolicy

__all__ = [
    "DEFAULT_POLICY",
    "MANIFEST_NAME",
    "DatasetManifest",
    "DownloadError",
    "DownloadResult",
    "ManifestEntry",
    "ManifestError",
    "Problem",
    "RetryPolicy",
    "build_manifest",
    "check",
    "download",
    "read_manifest",
    "write_manifest",
]
