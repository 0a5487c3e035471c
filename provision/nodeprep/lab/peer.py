"""The peer on a wired lab's bond segments: answers ARP and ping for the segment's gateway.

On a one-node lab the gateway is the bond NIC's own slirp. Once nodes share the segments
(node.Link), slirp cannot stay on them: it takes every frame on the segment as its own, and
with ``restrict=on`` it answers a TCP SYN between two nodes with a reset (seen: the second
node's connection to the rendezvous store refused; two slirps on one segment answered each
other without end). This process takes slirp's place as the peer that the bond's probe and
the heartbeat ping: it answers ARP requests for BOND_PEER and ICMP echo requests to it.

It is also the link between the segments (b0's and b1's), as between the two switches that
a bond's members are plugged into: a frame it does not answer goes on to the other segment,
so a node that failed over alone (its ens5 active, the others' ens4) still reaches the
others. A broadcast goes on even when the peer answers it, as a switch floods it: the
backup member of an ARP-monitored bond (``arp_validate``) counts itself up only while it
hears its own bond's ARP requests for the peer, which the active member sends on the other
segment. The nodes' bond MACs are all the same (they come from one saved state), so the link
learns where each node is by IPv4 address, not MAC: an IPv4 frame stays on its segment when
its destination was last heard from there; broadcasts, ARP and frames to an address not yet
heard go on. It speaks qemu's ``-netdev dgram`` wire (one Ethernet frame per UDP datagram)
on 127.0.0.1 only, one socket per segment.

    python -m nodeprep.lab.peer LOCAL_PORT:REMOTE_PORT [LOCAL_PORT:REMOTE_PORT ...]
"""

from __future__ import annotations

import selectors
import socket
import struct
import sys
import time
from collections.abc import Callable

from nodeprep.lab.node import BOND_PEER

PEER_MAC = bytes.fromhex("52550a4d0002")  # what slirp would use for 10.77.0.2
ETH_ARP, ETH_IPV4 = 0x0806, 0x0800
PROGRAM = "nodeprep.lab.peer"  # on the command line: how `lab down` knows the process


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(int(word) for word in struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def answer(frame: bytes, peer_ip: bytes) -> bytes | None:
    """The reply to FRAME when it asks the peer something (ARP who-has, ping), else None."""
    if len(frame) < 14:
        return None
    ethertype = struct.unpack("!H", frame[12:14])[0]
    if ethertype == ETH_ARP:
        return _arp_reply(frame, peer_ip)
    if ethertype == ETH_IPV4 and frame[:6] == PEER_MAC:
        return _echo_reply(frame, peer_ip)
    return None


def _arp_reply(frame: bytes, peer_ip: bytes) -> bytes | None:
    arp = frame[14:42]
    if len(arp) < 28 or arp[:6] != bytes.fromhex("000108000604") or arp[6:8] != b"\0\1":
        return None
    sender_mac, sender_ip, target_ip = arp[8:14], arp[14:18], arp[24:28]
    if target_ip != peer_ip:
        return None
    reply = arp[:6] + struct.pack("!H", 2) + PEER_MAC + peer_ip + sender_mac + sender_ip
    return frame[6:12] + PEER_MAC + struct.pack("!H", ETH_ARP) + reply


def _echo_reply(frame: bytes, peer_ip: bytes) -> bytes | None:
    if len(frame) < 34 or frame[14] >> 4 != 4:
        return None
    header_len = (frame[14] & 0x0F) * 4
    ip = frame[14 : 14 + struct.unpack("!H", frame[16:18])[0]]
    unfragmented = not struct.unpack("!H", ip[6:8])[0] & 0x3FFF
    is_ping = len(ip) >= header_len + 8 and ip[9] == 1 and ip[header_len] == 8
    if not (is_ping and unfragmented and ip[16:20] == peer_ip):
        return None
    icmp = b"\0\0\0\0" + ip[header_len + 4 :]
    icmp = icmp[:2] + struct.pack("!H", _checksum(icmp)) + icmp[4:]
    header = bytearray(ip[:20])  # options dropped: a plain 20-byte header
    header[0], header[8] = 0x45, 64
    header[2:4] = struct.pack("!H", 20 + len(icmp))
    header[10:12] = b"\0\0"
    header[12:16], header[16:20] = ip[16:20], ip[12:16]
    header[10:12] = struct.pack("!H", _checksum(bytes(header)))
    return frame[6:12] + PEER_MAC + struct.pack("!H", ETH_IPV4) + bytes(header) + icmp


def _ipv4_ends(frame: bytes) -> tuple[int, bytes, bytes] | None:
    """(ethertype, sender, target IPv4 address) of an IPv4 or ARP frame, else None."""
    ethertype = struct.unpack("!H", frame[12:14])[0] if len(frame) >= 14 else None
    if ethertype == ETH_IPV4 and len(frame) >= 34:
        return ethertype, frame[26:30], frame[30:34]
    if ethertype == ETH_ARP and len(frame) >= 42:
        return ethertype, frame[28:32], frame[38:42]
    return None


class Link:
    """Where a frame that came in on one segment goes on to: the other segments, unless it is
    an IPv4 frame whose destination was heard on the segment it came from within the last
    FRESH_S seconds. An older entry counts as unknown (the frame goes on), so a node that
    moved without a word (a reset, or one that only listens) is found again at once."""

    FRESH_S = 5.0

    def __init__(self, segments: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.segments, self.clock = segments, clock
        self.heard: dict[bytes, tuple[int, float]] = {}  # IPv4 address -> (segment, when)

    def onward(self, segment: int, frame: bytes) -> list[int]:
        now = self.clock()
        ends = _ipv4_ends(frame)
        if ends is not None and ends[1] != b"\0\0\0\0":
            self.heard[ends[1]] = (segment, now)
        if ends is not None and ends[0] == ETH_IPV4 and not frame[0] & 1:
            where, when = self.heard.get(ends[2], (None, 0.0))
            if where is not None and now - when <= self.FRESH_S:
                return [] if where == segment else [where]
        return [other for other in range(self.segments) if other != segment]


def serve(pairs: list[tuple[int, int]], peer: str = BOND_PEER) -> None:
    """Answer, and link the segments, on every (local, remote) UDP port pair until killed."""
    peer_ip = socket.inet_aton(peer)
    selector = selectors.DefaultSelector()
    wires = []
    for index, (local, remote) in enumerate(pairs):
        wire = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        wire.bind(("127.0.0.1", local))
        wires.append((wire, ("127.0.0.1", remote)))
        selector.register(wire, selectors.EVENT_READ, index)
    link = Link(len(wires))
    while True:
        for key, _ in selector.select():
            ready, remote_end = wires[key.data]
            frame = ready.recv(65536)
            onward = link.onward(key.data, frame)
            reply = answer(frame, peer_ip)
            if reply is not None:
                ready.sendto(reply, remote_end)
                if not frame[0] & 1:  # a ping to the peer's own MAC ends here
                    continue
            for other in onward:
                wire, end = wires[other]
                wire.sendto(frame, end)


def main(argv: list[str]) -> int:
    try:
        pairs = [(int(a), int(b)) for a, b in (arg.split(":") for arg in argv)]
    except ValueError:
        print(f"usage: python -m {PROGRAM} LOCAL_PORT:REMOTE_PORT ...", file=sys.stderr)
        return 2
    serve(pairs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
