"""Probes for an emulated cluster: ICMP echo and TCP goodput between its hosts.

The parent-side helpers (`ping`, `measure`) start this file as a script inside the hosts'
namespaces (Emulation.exec_prefix), so a probe process imports the standard library only:

    probe.py echo ADDRESS                 prints one ICMP round trip in ms (raw socket: root)
    probe.py recv ADDRESS PORT FLOWS      prints `ready`, accepts FLOWS connections, prints `connected`,
                                          reads `START END` (time.monotonic() readings) from stdin,
                                          closes at END and prints each flow's Mbit/s in [START, END]
    probe.py send ADDRESS PORT            sends until the receiver closes (at most 60 s)

The window is chosen once every flow is connected, so slow process start-up on a busy machine does
not eat into it; CLOCK_MONOTONIC is one clock for every namespace, so receivers in different hosts
count over the same window and their rates add up.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from real.emulate.emulation import Emulation

CHUNK = 1 << 16
SEND_MAX_S = 60.0
ACCEPT_TIMEOUT_S = 15.0


# --- parent side -------------------------------------------------------------------------------


def ping(emulation: Emulation, src: str, dst: str) -> float:
    """One ICMP echo from host `src` to host `dst`; the round trip in seconds."""
    done = subprocess.run(
        emulation.exec_prefix(src) + [sys.executable, __file__, "echo", emulation.address(dst)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"ping {src} -> {dst} failed: {done.stderr.strip()}")
    return float(done.stdout) / 1e3


def measure(
    emulation: Emulation,
    pairs: Sequence[tuple[str, str]],
    port: int = 5301,
    warmup_s: float = 0.3,
    window_s: float = 1.0,
) -> list[float]:
    """Run one TCP flow per (src, dst) host pair at once; each flow's goodput in bit/s over one window.

    The window opens `warmup_s` after every flow is connected (past TCP slow start) and lasts `window_s`.
    """

    def start(host: str, *args: str) -> subprocess.Popen[str]:
        argv = emulation.exec_prefix(host) + [sys.executable, __file__, *args]
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    receivers, senders = [], []
    try:
        for k, (_, dst) in enumerate(pairs):
            receivers.append(start(dst, "recv", emulation.address(dst), str(port + k), "1"))
            _expect(receivers[-1], "ready")
        for k, (src, dst) in enumerate(pairs):
            senders.append(start(src, "send", emulation.address(dst), str(port + k)))
        for r in receivers:
            _expect(r, "connected")
        opens = time.monotonic() + warmup_s
        for r in receivers:
            assert r.stdin is not None
            r.stdin.write(f"{opens!r} {opens + window_s!r}\n")
            r.stdin.flush()
        rates = [float(r.communicate(timeout=window_s + warmup_s + 30)[0]) * 1e6 for r in receivers]
        for s in senders:
            s.communicate(timeout=30)
        return rates
    finally:
        for p in receivers + senders:
            if p.poll() is None:
                p.kill()
                p.wait()


def _expect(process: subprocess.Popen[str], word: str) -> None:
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if line != word:
        raise RuntimeError(f"probe {process.args[-4:]} said {line!r}, expected {word!r} (exit {process.poll()})")


# --- inside a host -------------------------------------------------------------------------------


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def echo(address: str, timeout_s: float = 2.0) -> float:
    """One ICMP echo to `address` over a raw socket; the round trip in seconds."""
    ident, payload = os.getpid() & 0xFFFF, b"syncsim-emulate"
    header = struct.pack("!BBHHH", 8, 0, 0, ident, 1)
    packet = struct.pack("!BBHHH", 8, 0, _checksum(header + payload), ident, 1) + payload
    with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP) as sock:
        sock.settimeout(timeout_s)
        sent = time.monotonic()
        sock.sendto(packet, (address, 0))
        while True:
            data, (source, _) = sock.recvfrom(2048)
            icmp = data[(data[0] & 0x0F) * 4 :]
            kind, _, _, got_id, _ = struct.unpack("!BBHHH", icmp[:8])
            if kind == 0 and got_id == ident and source == address:
                return time.monotonic() - sent


def receive(address: str, port: int, flows: int) -> list[float]:
    """Accept `flows` connections; each flow's goodput in bit/s over the window read from stdin."""
    window: list[float] = []
    counted = [0] * flows

    def drain(i: int, conn: socket.socket) -> None:
        try:
            while n := len(conn.recv(CHUNK)):
                if window and window[0] <= time.monotonic() <= window[1]:
                    counted[i] += n
        except OSError:
            pass  # the sender went away; what arrived is counted

    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.settimeout(ACCEPT_TIMEOUT_S)
        server.bind((address, port))
        server.listen(flows)
        print("ready", flush=True)
        conns = [server.accept()[0] for _ in range(flows)]
    threads = [threading.Thread(target=drain, args=(i, c)) for i, c in enumerate(conns)]
    for t in threads:
        t.start()
    print("connected", flush=True)
    window.extend(float(x) for x in sys.stdin.readline().split())
    time.sleep(max(0.0, window[1] - time.monotonic()))
    for conn in conns:
        try:
            conn.shutdown(socket.SHUT_RDWR)  # wakes the drain threads
        except OSError:
            pass
    for t in threads:
        t.join()
    for conn in conns:
        conn.close()
    return [n * 8 / (window[1] - window[0]) for n in counted]


def send(address: str, port: int) -> None:
    """Send zeros to `address:port` until the receiver closes the connection."""
    data = bytes(CHUNK)
    with socket.create_connection((address, port), timeout=ACCEPT_TIMEOUT_S) as sock:
        deadline = time.monotonic() + SEND_MAX_S
        try:
            while time.monotonic() < deadline:
                sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the receiver closed: the measurement is over


def main(argv: list[str]) -> int:
    cmd, args = (argv[0], argv[1:]) if argv else ("", [])
    if cmd == "echo":
        print(f"{echo(args[0]) * 1e3:.3f}")
    elif cmd == "recv":
        print(" ".join(f"{r / 1e6:.2f}" for r in receive(args[0], int(args[1]), int(args[2]))))
    elif cmd == "send":
        send(args[0], int(args[1]))
    else:
        print(f"unknown probe {cmd!r}; allowed: echo, recv, send", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
