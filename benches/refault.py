#!/usr/bin/env python3
"""Benchmark: what the first task after the idle daemon released its code pages costs
(daemon/trim.rs). Each round waits for the release (the `released the binary's code
pages` line of the daemon's debug log), then runs one task and the next, and prints
the daemon's minor faults, CPU ticks and the wall time of each.

Run: `cargo build --release && python3 benches/refault.py [target/release/familiar]`
(ROUNDS, default 4). A private `dbus-daemon`, a throwaway HOME and the loopback model
of benches/concurrency.py, as benches/daemon.py.
"""

import os
import subprocess
import sys
import tempfile
import threading
import time

import concurrency as c
from daemon import Releases

BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/release/familiar")
ROUNDS = int(os.environ.get("ROUNDS", "4"))


def counters(pid):
    """The process's minor faults and CPU ticks (utime + stime)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[7]), int(fields[11]) + int(fields[12])


def main():
    c.ITERATIONS = 1
    model = c.Server(("127.0.0.1", 0), c.Model)
    threading.Thread(target=model.serve_forever, daemon=True).start()
    home = tempfile.mkdtemp(prefix="familiar-refault-")
    os.makedirs(f"{home}/.config/familiar/souls")
    with open(f"{home}/.config/familiar/config.toml", "w") as f:
        f.write(f'[providers.local]\nbase_url = "http://127.0.0.1:{model.server_address[1]}/v1"\n'
                'max_retries = 0\n')
    with open(f"{home}/.config/familiar/souls/bench.toml", "w") as f:
        f.write('description = "bench"\nprompt = "bench"\nmax_iterations = 5\n'
                'tools = ["read_file"]\n[sandbox]\nread = ["/etc"]\n')
    workspace = f"{home}/work"
    os.makedirs(workspace)
    with open(f"{workspace}/notes.txt", "w") as f:
        f.write("some notes\n")
    bus = subprocess.Popen(["dbus-daemon", "--session", "--nofork", "--print-address=1"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": home,
        "XDG_CONFIG_HOME": f"{home}/.config",
        "XDG_STATE_HOME": f"{home}/.local/state",
        "DBUS_SESSION_BUS_ADDRESS": bus.stdout.readline().strip(),
    }
    daemon = subprocess.Popen(
        [BIN, "daemon"], env={**env, "RUST_LOG": "familiar=info,familiar::daemon::trim=debug"},
        stderr=subprocess.PIPE, text=True)
    released = Releases(daemon.stderr)
    ask = [BIN, "ask", "--soul", "bench", "--workspace", workspace, "hello"]
    try:
        since = 0
        for _ in range(ROUNDS):
            if not released.after(since, 60):
                sys.exit("no release of the code pages in 60 s")
            row = []
            for which in ("first after the release", "the next"):
                faults, ticks = counters(daemon.pid)
                start = time.perf_counter()
                subprocess.run(ask, env=env, check=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
                ms = (time.perf_counter() - start) * 1000
                after_faults, after_ticks = counters(daemon.pid)
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
