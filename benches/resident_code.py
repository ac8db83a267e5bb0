#!/usr/bin/env python3
"""Which of the binary's pages a fresh `familiar daemon` holds in RSS, mapping by mapping.

Starts the daemon on a private `dbus-daemon --session` with an empty home, waits for it
to settle, then reads /proc/PID/maps and /proc/PID/pagemap for the mappings of the
binary: how much of each is resident, in how many 64-KiB windows (the kernel's
fault-around maps a faulting page's 64-KiB neighbourhood from the page cache), and how
many of those windows are fully resident (BENCHMARKS.md, "Idle RSS").

Usage: python3 benches/resident_code.py target/release/familiar   (root: pagemap needs it)
"""

import os
import struct
import subprocess
import sys
import tempfile
import time

WINDOW_PAGES = 16  # 64 KiB of 4-KiB pages


def main() -> None:
    binary = os.path.abspath(sys.argv[1])
    home = tempfile.mkdtemp()
    out = subprocess.run(
        ["dbus-daemon", "--session", "--print-address=1", "--fork", "--print-pid=1"],
        capture_output=True, text=True, check=True,
    ).stdout.split()
    address, bus_pid = out[0], int(out[1])
    env = {
        "HOME": home,
        "PATH": os.environ["PATH"],
        "DBUS_SESSION_BUS_ADDRESS": address,
        "XDG_STATE_HOME": home + "/state",
        "XDG_CONFIG_HOME": home + "/config",
    }
    daemon = subprocess.Popen([binary, "daemon"], env=env, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.5)  # start-up takes milliseconds; let it idle
        report(daemon.pid, os.path.basename(binary))
    finally:
        daemon.terminate()
        daemon.wait()
        os.kill(bus_pid, 15)


def report(pid: int, name: str) -> None:
    with open(f"/proc/{pid}/maps") as maps:
        lines = [l.split() for l in maps]
    for f in lines:
        if len(f) < 6 or os.path.basename(f[5]) != name:
            continue
        start, end = (int(x, 16) for x in f[0].split("-"))
        pages = (end - start) >> 12
        with open(f"/proc/{pid}/pagemap", "rb") as pm:
            pm.seek((start >> 12) * 8)
            entries = pm.read(pages * 8)
        resident = [i for i in range(pages) if struct.unpack_from("<Q", entries, i * 8)[0] >> 63]
        first = int(f[2], 16) >> 12
        windows: dict[int, int] = {}
        for i in resident:
            w = (first + i) // WINDOW_PAGES
            windows[w] = windows.get(w, 0) + 1
        full = sum(1 for n in windows.values() if n == WINDOW_PAGES)
        print(
            f"{f[1]}  {pages * 4:>6} KiB mapped  {len(resident) * 4:>6} KiB resident  "
            f"{len(windows)} windows of 64 KiB touched, {full} fully resident"
        )


if __name__ == "__main__":
    main()
