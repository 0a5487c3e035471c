"""training_job hashes an image once per version of the file: the stat-keyed record is used
while the file is unchanged, and any change (content, size, times) hashes it again."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from collection_plugins import load

training_job = load("training_job")


def test_the_hash_is_kept_per_version_of_the_file(tmp_path: Path) -> None:
    image, cache = tmp_path / "t.sif", tmp_path / "state" / "image-sha256.json"
    image.write_bytes(b"a" * 4096)
    first = training_job.sha256_of(str(image), str(cache))
    assert first == hashlib.sha256(b"a" * 4096).hexdigest()
    if os.geteuid() != 0:
        assert not cache.exists()  # only root's record is kept (and trusted)
        return
    record = json.loads(cache.read_text())
    assert record[str(image)]["sha256"] == first
    # A forged record for the current stat is what the cache returns: it is root's file.
    record[str(image)]["sha256"] = "f" * 64
    cache.write_text(json.dumps(record))
    assert training_job.sha256_of(str(image), str(cache)) == "f" * 64
    # The same size, another byte, the old mtime put back: ctime moved, so it is hashed again.
    stat = image.stat()
    time.sleep(0.05)  # past the filesystem's timestamp granularity (a jiffy on ext4)
    image.write_bytes(b"b" + b"a" * 4095)
    os.utime(image, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    again = training_job.sha256_of(str(image), str(cache))
    assert again == hashlib.sha256(b"b" + b"a" * 4095).hexdigest()
