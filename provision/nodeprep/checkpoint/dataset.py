"""The data set version a checkpoint was trained on, and the rule for resuming on other data.

The version is the hash over a data set's files that ``nodeprep.data``'s manifest computes
(any string works). A checkpoint saves it; a resume on another version would silently train
on other bytes than the ones the checkpoint's model has seen, so it is refused with both
versions named, unless the change is allowed explicitly.
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)


class DatasetChangedError(ValueError):
    """A resume found a checkpoint of another data set version; ``str()`` names both."""


def check_dataset_version(
    path: Path, saved: str | None, current: str | None, *, allow_change: bool
) -> None:
    """Raise DatasetChangedError when ``path`` was trained on another version than ``current``.

    Either side unknown (a checkpoint from before versions were saved, a run that names none)
    is not a change.
    """
    if saved is None or current is None or saved == current:
        return
    if allow_change:
        log.warning("%s trained on data set %s; resuming on %s as allowed", path.name, saved,
                    current)  # fmt: skip
        return
    raise DatasetChangedError(
        f"{path} was trained on data set version {saved} and this run has {current}; "
        "stage the same data, or allow the change (allow_dataset_change=True)"
    )
