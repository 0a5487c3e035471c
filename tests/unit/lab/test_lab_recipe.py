"""The recipe hash names the image cache entry: it must follow content, not the SSH key."""

from __future__ import annotations

import pytest

from nodeprep.lab.errors import LabInputError
from nodeprep.lab.recipe import BASE_PACKAGES, Recipe


def test_digest_is_stable_and_follows_content() -> None:
    assert Recipe().digest() == Recipe().digest()
    assert Recipe("bookworm").digest() != Recipe("trixie").digest()
    assert Recipe(packages=BASE_PACKAGES).digest() != Recipe().digest()
    assert Recipe(data_size_mb=2048).digest() != Recipe().digest()
    assert Recipe(hook=Recipe().hook + "true\n").digest() != Recipe().digest()


def test_hook_carries_key_without_changing_digest() -> None:
    recipe = Recipe()
    script = recipe.hook_script("ssh-ed25519 AAAATEST lab")
    assert "ssh-ed25519 AAAATEST lab" in script
    assert "@USER@" not in script
    assert "@PUBKEY@" not in script
    assert "NOPASSWD" in script


def test_image_carries_packages_roles_need_offline() -> None:
    packages = set(Recipe().packages)
    wanted = {"build-essential", "libevent-dev", "libncurses-dev", "bison", "python3-venv"}
    assert wanted <= packages
    assert {"openssh-server", "network-manager", "cloud-guest-utils", "xfsprogs"} <= packages


def test_unknown_distro_is_refused() -> None:
    with pytest.raises(LabInputError, match="Unknown distro 'sid'"):
        Recipe("sid")
