#!/usr/bin/env python3
"""Benchmark: the daemon's start-to-READY time, idle RSS and wakeups, and the
`familiar ask --detach` round trip.

Run: `cargo build --release && python3 benches/daemon.py [target/release/familiar]`.

Everything runs against a private `dbus-daemon --session` and a throwaway HOME, so it
touches nothing of the user's. READY is read from a NOTIFY_SOCKET this script owns,
exactly as systemd would. The model is the loopback server of benches/concurrency.py:
each task makes one sandboxed `read_file` call, then answers. After the `--detach`
round trips, TASKS (8) more tasks run to completion one after another, and the idle
RSS is read again, broken down from `/proc/PID/smaps_rollup` into anonymous memory
(heap, stacks) and file-backed pages (the binary's text and the libraries).

"Fresh" is read once the idle daemon has released its start-up code's pages
(daemon/trim.rs: after the warm request, the `released the binary's code pages` line
of its debug log; a binary without it is read after 30 s), and again after the tasks
once it has released the pages they ran (when their blocking threads leave, 10 s after
the last job), before the idle window in which wakeups are counted.
"""

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import concurrency as c


def drain(sock):
    try:
        while sock.recv(4096):
            pass
    except OSError:
        pass

BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/release/familiar")
RUNS = 5
ASKS = 20
IDLE_SECS = 10
# The default policy allows 30 submissions a minute ([rate_limits] submits): the 20
# round trips and these stay under it.
TASKS = int(os.environ.get("TASKS", "8"))


def rollup(pid):
    """The daemon's memory from smaps_rollup, in KiB: RSS, anonymous, file-backed."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
                fields[parts[0][:-1]] = int(parts[1])
    return fields["Rss"], fields["Anonymous"], fields["Rss"] - fields["Anonymous"]


class Releases:
    """When the daemon's log said it released the binary's code pages."""

    def __init__(self, stream):
        self.times = []
        self.changed = threading.Condition()
        threading.Thread(target=self.watch, args=(stream,), daemon=True).start()

    def watch(self, stream):
        for line in stream:
            if "released the binary's code" in line:
                with self.changed:
                    self.times.append(time.monotonic())
                    self.changed.notify_all()

    def after(self, since, timeout=30):
        """Waits for a release later than since (time.monotonic()); False if none came."""
        with self.changed:
            return self.changed.wait_for(lambda: any(t > since for t in self.times), timeout)


def mib(kib):
    return f"{kib / 1024:.1f}"


def proc_status(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def switches(pid):
    """Context switches per thread (a wakeup costs at least one), by thread id."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                out[tid] = sum(int(l.split()[1]) for l in f if "ctxt_switches" in l)
        except FileNotFoundError:
            pass
    return out


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def bench_home(queue_limit=ASKS + 4):
    """A throwaway HOME (the loopback model of concurrency.py as its provider, the
    `bench` soul, a workspace with a file) and a private session bus: the daemon's
    environment, the `ask` command line without its prompt, and the bus process."""
    c.ITERATIONS = 1
    model = c.Server(("127.0.0.1", 0), c.Model)
    threading.Thread(target=model.serve_forever, daemon=True).start()
    home = tempfile.mkdtemp(prefix="familiar-bench-")
    os.makedirs(f"{home}/.config/familiar/souls")
    with open(f"{home}/.config/familiar/config.toml", "w") as f:
        f.write(f'[daemon]\nqueue_limit = {queue_limit}\n\n'
                f'[providers.local]\nbase_url = "http://127.0.0.1:{model.server_address[1]}/v1"\n'
                'max_retries = 0\n')
    with open(f"{home}/.config/familiar/souls/bench.toml", "w") as f:
        f.write('description = "bench"\nprompt = "bench"\nmax_iterations = 5\n'
                'tools = ["read_file"]\n[sandbox]\nread = ["/etc"]\n')
    workspace = f"{home}/work"
    os.makedirs(workspace)
    with open(f"{workspace}/notes.txt", "w") as f:
        f.write("some notes\n")
    ask = [BIN, "ask", "--soul", "bench", "--workspace", workspace]
    bus = subprocess.Popen(
        ["dbus-daemon", "--session", "--nofork", "--print-address=1"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    address = bus.stdout.readline().strip()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": home,
        "XDG_CONFIG_HOME": f"{home}/.config",
        "XDG_STATE_HOME": f"{home}/.local/state",
        "DBUS_SESSION_BUS_ADDRESS": address,
    }
    return env, ask, bus


def main():
    env, ask, bus = bench_home()
    home = env["HOME"]
    ready_ms = []
    try:
        for run in range(RUNS):
            sock_path = f"{home}/notify-{run}"
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.bind(sock_path)
            last = run == RUNS - 1
            log = {"RUST_LOG": "familiar=info,familiar::daemon::trim=debug"} if last else {}
            start = time.perf_counter()
            daemon = subprocess.Popen([BIN, "daemon"], env={**env, **log, "NOTIFY_SOCKET": sock_path},
                                      stderr=subprocess.PIPE if last else subprocess.DEVNULL,
                                      text=True)
            while True:
                msg = sock.recv(4096).decode()
                if "READY=1" in msg:
                    break
            ready_ms.append((time.perf_counter() - start) * 1000)
            # Keep reading STATUS= updates, as systemd does.
            threading.Thread(target=drain, args=(sock,), daemon=True).start()
            if last:
                released = Releases(daemon.stderr)
                if not released.after(0):
                    print("  (no release of the start-up code seen in 30 s)")
                fresh = rollup(daemon.pid)
                asks = []
                for _ in range(ASKS):
                    t = time.perf_counter()
                    subprocess.run(ask + ["--detach", "hello"], env=env, check=True,
                                   stdout=subprocess.DEVNULL)
                    asks.append((time.perf_counter() - t) * 1000)
                # Let the detached tasks finish.
                time.sleep(2)
                after_asks = rollup(daemon.pid)
                for i in range(TASKS):
                    subprocess.run(ask + [f"task {i}"], env=env, check=True,
                                   stdout=subprocess.DEVNULL)
                tasks_done = time.monotonic()
                # Then watch the daemon do nothing.
                time.sleep(2)
                after_tasks = rollup(daemon.pid)
                if not released.after(tasks_done):
                    print("  (no release of the tasks' code seen in 30 s)")
                after_release = rollup(daemon.pid)
                sw0, cpu0 = switches(daemon.pid), cpu_ticks(daemon.pid)
                time.sleep(IDLE_SECS)
                sw1, cpu1 = switches(daemon.pid), cpu_ticks(daemon.pid)
                woke = sum(sw1[t] - sw0[t] for t in sw1 if t in sw0)
                rss, rss_anon, _ = rollup(daemon.pid)
                threads = proc_status(daemon.pid, "Threads")
            daemon.terminate()
            daemon.wait()
            sock.close()
        ready_ms.sort()
        asks.sort()
        print(f"familiar daemon ({BIN})")
        print(f"  start to READY=1 ({RUNS} runs)        median {statistics.median(ready_ms):.1f} ms, max {ready_ms[-1]:.1f} ms")
        print(f"  ask --detach round trip ({ASKS} runs)  median {statistics.median(asks):.1f} ms, p95 {asks[int(len(asks) * 0.95) - 1]:.1f} ms")
        print(f"  idle RSS (anonymous + file-backed), MiB, {threads} threads:")
        for label, (total, anon, file) in [("fresh", fresh), (f"after {ASKS} detached tasks", after_asks),
                                           (f"after {ASKS + TASKS} tasks", after_tasks),
                                           ("their code released", after_release),
                                           (f"after {IDLE_SECS} s more idle", (rss, rss_anon, rss - rss_anon))]:
            print(f"    {label:<28} {mib(total)} ({mib(anon)} + {mib(file)})")
        print(f"  idle for {IDLE_SECS} s: context switches  {woke}, CPU ticks {cpu1 - cpu0}")
    finally:
        bus.terminate()
        bus.wait()


if __name__ == "__main__":
    main()
