"""Data sets on the node side: resumable checksummed downloads and data set manifests.

Standard library only, so that the same code runs in the trainer's image and
as Ansible module_utils on nodes that have nothing but python3.
"""

from __future__ import annotations

from .cache import CacheStats, PreprocessCache
from .download import DEFAULT_POLICY, DownloadResult, download
from .errors import DownloadError
from .manifest import (
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
from .retry import RetryPolicy

__all__ = [
    "DEFAULT_POLICY",
    "MANIFEST_NAME",
    "CacheStats",
    "DatasetManifest",
    "DownloadError",
    "DownloadResult",
    "ManifestEntry",
    "ManifestError",
    "PreprocessCache",
    "Problem",
    "RetryPolicy",
    "build_manifest",
    "check",
    "download",
    "read_manifest",
    "write_manifest",
]
