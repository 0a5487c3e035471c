"""The segment peer of a wired lab answers ARP and ping for the gateway, and nothing else;
it also links the two bond segments, as two switches are joined."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time

import pytest

from nodeprep.lab import peer
from nodeprep.lab.lifecycle import free_udp_ports, stop_peer

GUEST_MAC = bytes.fromhex("525400aabbcc")
GUEST_IP, PEER_IP = socket.inet_aton("10.77.0.16"), socket.inet_aton("10.77.0.2")


def arp_request(target: bytes) -> bytes:
    body = bytes.fromhex("000108000604") + struct.pack("!H", 1) + GUEST_MAC + GUEST_IP
    body += b"\0" * 6 + target
    return b"\xff" * 6 + GUEST_MAC + struct.pack("!H", 0x0806) + body + b"\0" * 18


def ping(dst: bytes, mac: bytes = peer.PEER_MAC, payload: bytes = b"nodeprep" * 7) -> bytes:
    icmp = struct.pack("!BBHHH", 8, 0, 0, 0x1234, 7) + payload
    icmp = icmp[:2] + struct.pack("!H", peer._checksum(icmp)) + icmp[4:]
    header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(icmp), 1, 0x4000, 64, 1, 0,
                         GUEST_IP, dst)  # fmt: skip
    header = header[:10] + struct.pack("!H", peer._checksum(header)) + header[12:]
    return mac + GUEST_MAC + struct.pack("!H", 0x0800) + header + icmp


def test_arp_for_the_gateway_is_answered_with_its_mac() -> None:
    reply = peer.answer(arp_request(PEER_IP), PEER_IP)
    assert reply is not None
    assert reply[:6] == GUEST_MAC
    assert struct.unpack("!H", reply[20:22])[0] == 2  # ARP reply
    assert reply[22:28] == peer.PEER_MAC
    assert reply[28:32] == PEER_IP
    assert reply[32:38] == GUEST_MAC
    assert reply[38:42] == GUEST_IP
    assert peer.answer(arp_request(socket.inet_aton("10.77.0.15")), PEER_IP) is None


def test_ping_to_the_gateway_is_echoed_with_valid_checksums() -> None:
    request = ping(PEER_IP)
    reply = peer.answer(request, PEER_IP)
    assert reply is not None
    header, icmp = reply[14:34], reply[34:]
    assert peer._checksum(header) == 0
    assert peer._checksum(icmp) == 0
    assert header[12:16] == PEER_IP
    assert header[16:20] == GUEST_IP
    assert icmp[0] == 0  # echo reply
    assert icmp[4:] == request[38:]  # identifier, sequence and payload come back


def test_everything_else_is_ignored() -> None:
    """Frames between nodes (a TCP SYN, a ping to another node) get no answer: this is what
    slirp did wrong on a shared segment. (Whether they cross to the other segment is the
    link's business, below.)"""
    assert peer.answer(ping(GUEST_IP), PEER_IP) is None
    assert peer.answer(ping(PEER_IP, mac=GUEST_MAC), PEER_IP) is None
    syn = bytearray(ping(PEER_IP))
    syn[23] = 6  # protocol TCP
    assert peer.answer(bytes(syn), PEER_IP) is None
    assert peer.answer(b"\0" * 10, PEER_IP) is None


def test_the_process_answers_on_its_wire_and_ends_by_pid() -> None:
    mine, its = free_udp_ports(2)
    proc = subprocess.Popen([sys.executable, "-m", peer.PROGRAM, f"{its}:{mine}"])
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as wire:
            wire.bind(("127.0.0.1", mine))
            wire.settimeout(1.0)
            reply = None
            for _ in range(50):  # until the process has bound its port
                wire.sendto(arp_request(PEER_IP), ("127.0.0.1", its))
                try:
                    reply = wire.recv(2048)
                    break
                except TimeoutError:
                    time.sleep(0.1)
            assert reply is not None
            assert reply[22:28] == peer.PEER_MAC
    finally:
        assert stop_peer(proc.pid)
        proc.wait(timeout=5)
    assert not stop_peer(proc.pid)


NODE1, NODE2 = socket.inet_aton("10.77.0.15"), socket.inet_aton("10.77.0.16")
BOND_MAC = bytes.fromhex("525400123456")  # every node's bond has it (one saved state)


def ipv4(src: bytes, dst: bytes, mac: bytes = BOND_MAC) -> bytes:
    header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40, 1, 0x4000, 64, 6, 0, src, dst)
    return mac + BOND_MAC + struct.pack("!H", 0x0800) + header + b"\0" * 20


def gratuitous_arp(sender: bytes) -> bytes:
    body = bytes.fromhex("000108000604") + struct.pack("!H", 1) + BOND_MAC + sender
    body += b"\0" * 6 + sender
    return b"\xff" * 6 + BOND_MAC + struct.pack("!H", 0x0806) + body + b"\0" * 18


def test_the_link_keeps_a_frame_on_its_segment_once_its_target_was_heard_there() -> None:
    link = peer.Link(2)
    # Before either node was heard, a frame goes on (the target may be on the other side).
    assert link.onward(0, ipv4(NODE1, NODE2)) == [1]
    assert link.onward(0, ipv4(NODE2, NODE1)) == []  # node1 was heard on segment 0
    assert link.onward(0, ipv4(NODE1, NODE2)) == []  # and now node2 too: both on ens4
    assert link.onward(0, b"\xff" * 6 + BOND_MAC + struct.pack("!H", 0x0800) + b"\0" * 40) == [1]
    assert link.onward(1, gratuitous_arp(NODE2)) == [0]  # ARP goes on, and is heard


def test_a_node_that_failed_over_alone_is_reached_on_its_new_segment() -> None:
    """node2 fails over to ens5 (segment 1) and says so with a gratuitous ARP; node1 stays on
    ens4 (segment 0): each one's frames cross the link to the other's segment."""
    link = peer.Link(2)
    link.onward(0, ipv4(NODE1, NODE2))
    link.onward(0, ipv4(NODE2, NODE1))
    assert link.onward(1, gratuitous_arp(NODE2)) == [0]
    assert link.onward(0, ipv4(NODE1, NODE2)) == [1]
    assert link.onward(1, ipv4(NODE2, NODE1)) == [0]
    # Frames that are not IPv4 or ARP (IPv6, LLDP) go on as a switch floods them.
    assert link.onward(0, BOND_MAC + BOND_MAC + struct.pack("!H", 0x86DD) + b"\0" * 40) == [1]


def test_a_node_heard_long_ago_is_looked_for_on_every_segment() -> None:
    """An entry older than FRESH_S counts as unknown: node2 moved back to segment 0 without a
    word (say, a reset) is reached there, and an ARP probe from 0.0.0.0 teaches nothing."""
    now, node3 = [100.0], socket.inet_aton("10.77.0.17")
    link = peer.Link(2, clock=lambda: now[0])
    link.onward(1, gratuitous_arp(NODE2))
    assert link.onward(1, ipv4(node3, NODE2)) == []  # fresh: node2 is on segment 1
    now[0] += peer.Link.FRESH_S + 0.1
    assert link.onward(1, ipv4(node3, NODE2)) == [0]  # stale: it may be anywhere
    link.onward(0, gratuitous_arp(b"\0\0\0\0"))
    assert b"\0\0\0\0" not in link.heard


def test_the_process_links_its_wires_answers_and_floods_the_broadcasts_it_answered() -> None:
    """Two wires (the two segments): a frame between the nodes sent on one comes out of the
    other; an ARP request for the gateway is answered on its own wire and, being a broadcast,
    also crosses (an ARP-monitored bond's backup member counts itself up on hearing it); a
    ping to the gateway's own MAC is answered and does not cross."""
    ports = free_udp_ports(4)
    mine, its = ports[:2], ports[2:]
    proc = subprocess.Popen([sys.executable, "-m", peer.PROGRAM,
                             f"{its[0]}:{mine[0]}", f"{its[1]}:{mine[1]}"])  # fmt: skip
    wires = []
    try:
        for port in mine:
            wire = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            wire.bind(("127.0.0.1", port))
            wire.settimeout(1.0)
            wires.append(wire)
        frame = ipv4(NODE1, NODE2)
        passed = None
        for _ in range(50):  # until the process has bound its ports
            wires[0].sendto(frame, ("127.0.0.1", its[0]))
            try:
                passed = wires[1].recv(2048)
                break
            except TimeoutError:
                time.sleep(0.1)
        assert passed == frame
        wires[1].sendto(arp_request(PEER_IP), ("127.0.0.1", its[1]))
        reply = wires[1].recv(2048)
        while reply == frame:  # a copy of a frame sent again while the process started
            reply = wires[1].recv(2048)
        assert reply[22:28] == peer.PEER_MAC
        assert wires[0].recv(2048) == arp_request(PEER_IP)  # the broadcast crossed as well
        wires[1].sendto(ping(PEER_IP), ("127.0.0.1", its[1]))
        echoed = wires[1].recv(2048)
        assert echoed[:6] == ping(PEER_IP)[6:12], echoed  # back to the sender
        wires[0].settimeout(0.3)
        with pytest.raises(TimeoutError):
            wires[0].recv(2048)  # the answered ping, unicast to the peer, did not cross
    finally:
        for wire in wires:
            wire.close()
        assert stop_peer(proc.pid)
        proc.wait(timeout=5)
