"""What the dataset role accepts as `datasets`, judged by the one parser the node and the
controller share: each fault is one sentence naming the data set, the file and the fix."""

from __future__ import annotations

from typing import Any

import pytest

from nodeprep.data.staging import StagingError, parse_datasets

SHA = "A" * 64


def one(**file: Any) -> list[dict[str, Any]]:
    return [{"name": "c", "dest": "/data/c", "files": [{"sha256": SHA, **file}]}]


def test_paths_default_to_the_file_name_and_hashes_are_lower_case() -> None:
    (dataset,) = parse_datasets(
        [{"name": "c", "dest": "/data/c/", "files": [
            {"url": "https://d.example/x/train%20000.tar?sig=1", "sha256": SHA, "size": 3},
            {"src": "/srv/vocab.json", "sha256": SHA, "path": "meta/vocab.json"},
        ]}]
    )  # fmt: skip
    assert dataset.dest == "/data/c"
    assert [f.path for f in dataset.files] == ["train 000.tar", "meta/vocab.json"]
    assert {f.sha256 for f in dataset.files} == {"a" * 64}


@pytest.mark.parametrize(
    ("datasets", "said"),
    [
        ({"name": "c"}, "datasets must be a list of data sets, not dict"),
        ([{"name": "bad name", "dest": "/d", "files": []}], "datasets[0].name must be 1-64"),
        ([{"name": "c", "dest": "/", "files": []}], "dest must be an absolute, normalised"),
        ([{"name": "c", "dest": "/data/../etc", "files": []}], "dest must be an absolute"),
        ([{"name": "c", "dest": "/data/c", "files": []}], "files must be a non-empty list"),
        ([{"name": "c", "dest": "/data/c", "files": [{}], "mirror": 1}], "unknown keys ['mirror']"),
        (one(src="/srv/a", md5="x"), "files[0] has unknown keys ['md5']"),
        (one(src="relative/a"), "src must be the absolute path of a file on the controller"),
        (one(url="https://d.example/"), "path must be a plain relative path inside dest"),
        (one(url="https://d.example/a.part"), "path must be a plain relative path"),
        (one(src="/srv/dataset-manifest.json"), "path must be a plain relative path"),
        (one(src="/srv/a", size=-1), "size must be a whole number of bytes, not -1"),
        (one(src="/srv/a", size=True), "size must be a whole number of bytes, not True"),
        ([{"name": "c", "dest": "/data/c", "files": [{"src": "/a/x", "sha256": SHA},
                                                     {"src": "/b/x", "sha256": SHA}]}],
         "files[0] and files[1] both land at x; set path on one of them"),
        ([{"name": "c", "dest": "/data/c", "files": [{"src": "/a/x", "sha256": SHA}]},
          {"name": "c", "dest": "/data/d", "files": [{"src": "/a/x", "sha256": SHA}]}],
         "data set 'c' is listed twice"),
        ([{"name": "c", "dest": "/data/c", "files": [{"src": "/a/x", "sha256": SHA}]},
          {"name": "d", "dest": "/data/c/d", "files": [{"src": "/a/x", "sha256": SHA}]}],
         "share a directory; give each its own dest"),
    ],
)  # fmt: skip
def test_each_fault_is_named(datasets: Any, said: str) -> None:
    with pytest.raises(StagingError) as raised:
        parse_datasets(datasets)
    assert said in str(raised.value)


def test_dest_must_lie_inside_an_allowed_root() -> None:
    typo = [{"name": "c", "dest": "/etc/c", "files": [{"src": "/a/x", "sha256": SHA}]}]
    with pytest.raises(StagingError) as raised:
        parse_datasets(typo)
    assert str(raised.value) == (
        "data set 'c': dest /etc/c is outside the allowed roots (/data, /mnt, /srv, /scratch, "
        "/opt, /home, /var/lib); choose a dest inside one, or add its root to "
        "dataset_allowed_roots"
    )
    assert parse_datasets(typo, ["/etc"])[0].dest == "/etc/c"
    assert parse_datasets(typo, None)[0].dest == "/etc/c"  # the controller leaves it to the node
    with pytest.raises(StagingError, match="dest /data is outside the allowed roots"):
        parse_datasets([{**typo[0], "dest": "/data"}])  # a root itself is not a data set's own
    with pytest.raises(StagingError, match="dataset_allowed_roots holds 'etc'"):
        parse_datasets(typo, ["etc"])
