#!/usr/bin/env python3
"""Benchmark: what the first task after the idle daemon released its code pages costs
(daemon/trim.rs). Each round waits for the release (the `released the binary's code
pages` line of the daemon's debug log), then runs one task and the next, and prints
the daemon's minor faults, CPU ticks and the wall time of each.

Run: `cargo build --release && python3 benches/refault.py [target/release/familiar]`
(ROUNDS, default 4). A private `dbus-daemon`, a throwaway HOME and the loopback model
of benches/concurrency.py, as benches/daemon.py (`bench_home`).
"""

import os
import subprocess
import sys
import time

from daemon import BIN, Releases, bench_home, cpu_ticks

ROUNDS = int(os.environ.get("ROUNDS", "4"))


def minor_faults(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def main():
    env, ask, bus = bench_home()
    ask = ask + ["hello"]
    daemon = subprocess.Popen(
        [BIN, "daemon"], env={**env, "RUST_LOG": "familiar=info,familiar::daemon::trim=debug"},
        stderr=subprocess.PIPE, text=True)
    released = Releases(daemon.stderr)
    try:
        since = 0
        for _ in range(ROUNDS):
            if not released.after(since, 60):
                sys.exit("no release of the code pages in 60 s")
            row = []
            for which in ("first after the release", "the next"):
                faults, ticks = minor_faults(daemon.pid), cpu_ticks(daemon.pid)
                start = time.perf_counter()
                subprocess.run(ask, env=env, check=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
                ms = (time.perf_counter() - start) * 1000
                after_faults, after_ticks = minor_faults(daemon.pid), cpu_ticks(daemon.pid)
                row.append(f"{which}: {after_faults - faults} faults, "
                           f"{after_ticks - ticks} ticks, {ms:.1f} ms")
            since = time.monotonic()
            print("  ".join(row), flush=True)
    finally:
        daemon.terminate()
        daemon.wait()
        bus.terminate()
        bus.wait()


if __name__ == "__main__":
    main()
