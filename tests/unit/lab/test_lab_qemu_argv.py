"""The qemu command line keeps every packet inside qemu or on loopback, and matches on restore."""

from __future__ import annotations

from pathlib import Path

from nodeprep.lab.image import Image
from nodeprep.lab.node import Machine, NodeFiles, qemu_argv
from nodeprep.lab.savedstate import state_key


def _values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv) if arg == flag]


def test_network_stays_inside_qemu_and_loopback(tmp_path: Path) -> None:
    argv = qemu_argv(NodeFiles(tmp_path), Machine("tcg"), tmp_path / "k", tmp_path / "i", 40123)
    netdevs = _values(argv, "-netdev")
    assert len(netdevs) == 3
    assert all("restrict=on" in netdev for netdev in netdevs)
    assert "hostfwd=tcp:127.0.0.1:40123-:22" in netdevs[0]
    assert [n.split(",")[1] for n in netdevs] == ["id=mgmt", "id=b0", "id=b1"]


def test_restore_differs_only_by_incoming_and_port(tmp_path: Path) -> None:
    files = NodeFiles(tmp_path)
    booted = qemu_argv(files, Machine("tcg"), tmp_path / "k", tmp_path / "i", 1)
    restored = qemu_argv(
        files, Machine("tcg"), tmp_path / "k", tmp_path / "i", 1, incoming=tmp_path / "vmstate"
    )
    assert restored[: len(booted)] == booted
    assert restored[len(booted) :] == ["-incoming", f"exec:cat {tmp_path / 'vmstate'}"]


def test_accel_flags(tmp_path: Path) -> None:
    tcg = qemu_argv(NodeFiles(tmp_path), Machine("tcg"), tmp_path, tmp_path, 1)
    kvm = qemu_argv(NodeFiles(tmp_path), Machine("kvm", 2048, 4), tmp_path, tmp_path, 1)
    assert _values(tcg, "-accel") == ["tcg,thread=multi"]
    assert _values(kvm, "-accel") == ["kvm"]
    assert _values(kvm, "-m") == ["2048"]
    assert _values(kvm, "-smp") == ["4"]
    assert _values(tcg, "-qmp") == [f"unix:{tmp_path / 'qmp.sock'},server=on,wait=off"]


def test_saved_state_key_follows_machine_shape(tmp_path: Path) -> None:
    image = Image(tmp_path / "abc123")
    small = state_key(image, Machine("tcg", 1024, 2))
    assert small == state_key(image, Machine("tcg", 1024, 2))
    assert small.startswith("abc123-tcg-m1024-c2-")
    assert small != state_key(image, Machine("tcg", 2048, 2))
    assert small != state_key(image, Machine("kvm", 1024, 2))
