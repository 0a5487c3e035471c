"""The segment peer of a wired lab answers ARP and ping for the gateway, and nothing else."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time

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
    slirp did wrong on a shared segment."""
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
