#!/usr/bin/env python3
"""Benchmark: what one iteration with a sandboxed `read_file` adds to a whole
`familiar run` process (20 iterations vs none), against a loopback model.

Run: `cargo build --release && python3 benches/run_overhead.py [target/release/familiar]`.

The same loopback model, soul (reads the workspace and `/etc`, default policy) and
throwaway HOME as benches/concurrency.py. Each run is a fresh process; RUNS runs of each
kind, alternated. Reported: the medians and spreads, and (median with 20 - median
with 0) / 20, for wall time and for the CPU time of the process tree (`familiar run`
and its sandbox helpers: getrusage(RUSAGE_CHILDREN) around each run).
"""

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import concurrency as c

BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/release/familiar")
RUNS = int(os.environ.get("RUNS", "11"))
N = 20


def setup(port):
    """A throwaway HOME with the bench soul and config for the model on `port`:
    (environment, workspace). Shared with run_start.py."""
    home = tempfile.mkdtemp(prefix="familiar-run-")
    cfg = f"{home}/.config/familiar"
    os.makedirs(f"{cfg}/souls")
    with open(f"{cfg}/config.toml", "w") as f:
        f.write(f'[providers.local]\nbase_url = "http://127.0.0.1:{port}/v1"\nmax_retries = 0\n')
    with open(f"{cfg}/souls/bench.toml", "w") as f:
        f.write('description = "bench"\nprompt = "bench"\nmax_iterations = 30\n'
                'tools = ["read_file"]\n[sandbox]\nread = ["/etc"]\n')
    workspace = f"{home}/work"
    os.makedirs(workspace)
    with open(f"{workspace}/notes.txt", "w") as f:
        f.write("some notes\n" * 20)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": home,
        "XDG_CONFIG_HOME": f"{home}/.config",
        "XDG_STATE_HOME": f"{home}/.local/state",
    }
    return env, workspace


def timed_run(argv, env):
    """Runs `argv` to completion: (wall ms, CPU ms of it and its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    elapsed = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return elapsed * 1000, (after.ru_utime - before.ru_utime
                            + after.ru_stime - before.ru_stime) * 1000


def main():
    model = c.Server(("127.0.0.1", 0), c.Model)
    threading.Thread(target=model.serve_forever, daemon=True).start()
    env, workspace = setup(model.server_address[1])
    times = {0: [], N: []}
    cpu = {0: [], N: []}
    try:
        for i in range(RUNS + 1):
            for n in (0, N):
                c.ITERATIONS = n
                wall_ms, cpu_ms = timed_run(
                    [BIN, "run", "--soul", "bench", "--workspace", workspace, "x"], env)
                if i > 0:  # the first round warms the page cache
                    times[n].append(wall_ms)
                    cpu[n].append(cpu_ms)
    finally:
        model.shutdown()
    med = {n: statistics.median(v) for n, v in times.items()}
    print(f"familiar run, {RUNS} runs each ({BIN})")
    for n, v in times.items():
        print(f"  {n:>2} sandboxed read_file iterations   median {med[n]:.1f} ms "
              f"(min {min(v):.1f}, max {max(v):.1f})")
    print(f"  per iteration                       {(med[N] - med[0]) / N:.2f} ms")
    cmed = {n: statistics.median(v) for n, v in cpu.items()}
    for n, v in cpu.items():
        print(f"  CPU, {n:>2} iterations                  median {cmed[n]:.1f} ms "
              f"(min {min(v):.1f}, max {max(v):.1f})")
    print(f"  CPU per iteration                   {(cmed[N] - cmed[0]) / N:.2f} ms")


if __name__ == "__main__":
    main()
