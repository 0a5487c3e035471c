"""The qemu command line keeps every packet inside qemu or on loopback, and matches on restore."""

from __future__ import annotations

from pathlib import Path

from nodeprep.lab.image import Image
from nodeprep.lab.lifecycle import wire_nodes
from nodeprep.lab.node import Link, Machine, NodeFiles, qemu_argv
from nodeprep.lab.savedstate import state_key
from nodeprep.lab.state import NodeRecord


def _values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv) if arg == flag]


def test_network_stays_inside_qemu_and_loopback(tmp_path: Path) -> None:
    argv = qemu_argv(NodeFiles(tmp_path), Machine("tcg"), tmp_path / "k", tmp_path / "i", 40123)
    netdevs = _values(argv, "-netdev")
    slirps = [n for n in netdevs if n.startswith("user,")]
    assert [n.split(",")[1] for n in slirps] == ["id=mgmt", "id=bond-slirp"]
    assert all("restrict=on" in netdev for netdev in slirps)
    assert "hostfwd=tcp:127.0.0.1:40123-:22" in netdevs[0]
    # One segment: both bond NICs and the one slirp are ports of hub 0, as on one switch.
    assert [n for n in netdevs if n.startswith("hubport,")] == [
        "hubport,id=bond-hub-slirp,hubid=0,netdev=bond-slirp",
        "hubport,id=b0,hubid=0",
        "hubport,id=b1,hubid=0",
    ]
    assert len(netdevs) == 5


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


def test_wires_join_the_bond_segments_on_loopback_without_changing_the_devices(
    tmp_path: Path,
) -> None:
    files, k = NodeFiles(tmp_path), tmp_path / "k"
    alone = qemu_argv(files, Machine("tcg"), k, k, 1)
    links = (Link("b0", 41000, 41001), Link("b1", 41002, 41003), Link("b1", 41004, 41005))
    wired = qemu_argv(files, Machine("tcg"), k, k, 1, links=links)
    # The devices (what a saved state holds) are the same; only the back ends differ.
    assert _values(wired, "-device") == _values(alone, "-device")
    netdevs = _values(wired, "-netdev")
    wires = [n for n in netdevs if n.startswith("dgram,")]
    assert len(wires) == 3
    for wire in wires:
        assert "local.host=127.0.0.1" in wire
        assert "remote.host=127.0.0.1" in wire
    assert "local.port=41000" in wires[0]
    assert "remote.port=41001" in wires[0]
    # Each NIC is a port of its own hub; its slirp and its wires are the hub's other ports.
    assert "hubport,id=b0,hubid=0" in netdevs
    assert "hubport,id=b1,hubid=1" in netdevs
    assert sum(n.startswith("hubport,") and "hubid=1" in n for n in netdevs) == 4
    assert all("restrict=on" in n for n in netdevs if n.startswith("user,"))
    # One gateway per segment: the other nodes' hubs hold only the NIC and the wires.
    other = _values(
        qemu_argv(files, Machine("tcg"), k, k, 1, links=links, gateway=False), "-netdev"
    )
    assert [n.split(",")[1] for n in other if n.startswith("user,")] == ["id=mgmt"]
    assert not any("slirp" in n for n in other)


def test_wire_nodes_chains_the_nodes_with_mirrored_ports_and_node1_to_the_peer() -> None:
    assert wire_nodes([NodeRecord("node1", 0, "/n1")]) == []  # one node keeps its slirp
    records = [NodeRecord(f"node{i}", 0, f"/n{i}") for i in (1, 2, 3)]
    peer = wire_nodes(records)
    assert [len(r.links) for r in records] == [4, 4, 2]
    assert [r.gateway for r in records] == [False, False, False]
    first, middle, last = (r.wires for r in records)
    assert (first[0].local_port, first[0].remote_port) == (
        middle[0].remote_port, middle[0].local_port)  # fmt: skip
    assert (last[1].local_port, last[1].remote_port) == (
        middle[3].remote_port, middle[3].local_port)  # fmt: skip
    # node1's last wires (one per NIC) end at the peer's ports.
    assert [(w.remote_port, w.local_port) for w in first[2:]] == peer
    ports = [link.local_port for r in records for link in r.wires] + [p for p, _ in peer]
    assert len(set(ports)) == len(ports) == 12
