"""volume_grow_device names growpart's package only when a partition must grow without it
(the lab's volume_grow stories run the module and the role on a real disk)."""

from __future__ import annotations

from pathlib import Path

import pytest

from collection_plugins import load

device = load("volume_grow_device")


class Node:
    """The one AnsibleModule method missing_growpart calls: a PATH lookup."""

    def __init__(self, found: str | None) -> None:
        self.found = found

    def get_bin_path(self, name: str) -> str | None:
        assert name == "growpart"
        return self.found


@pytest.mark.parametrize(
    ("os_release", "package"),
    [
        ('ID=debian\nVERSION_ID="13"\n', "cloud-guest-utils"),
        ("ID=ubuntu\nID_LIKE=debian\n", "cloud-guest-utils"),
        ('ID="rocky"\nID_LIKE="rhel centos fedora"\n', "cloud-utils-growpart"),
        ('ID="amzn"\nID_LIKE="centos rhel fedora"\n', "cloud-utils-growpart"),
        ('ID="opensuse-leap"\nID_LIKE="suse opensuse"\n', "growpart"),
    ],
)
def test_the_package_is_the_distributions_own(
    os_release: str, package: str, tmp_path: Path
) -> None:
    path = tmp_path / "os-release"
    path.write_text(os_release)
    assert device.growpart_package(device.os_release_words(str(path))) == package


def test_an_unreadable_os_release_falls_back_to_the_debian_package(tmp_path: Path) -> None:
    words = device.os_release_words(str(tmp_path / "absent"))
    assert words == set()
    assert device.growpart_package(words) == "cloud-guest-utils"


def test_nothing_to_install_when_growpart_is_on_path() -> None:
    assert device.missing_growpart(Node("/usr/bin/growpart")) is None


def test_a_node_without_growpart_gets_its_package_named() -> None:
    expected = device.growpart_package(device.os_release_words())
    assert device.missing_growpart(Node(None)) == expected
