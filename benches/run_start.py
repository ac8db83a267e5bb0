#!/usr/bin/env python3
"""Benchmark: the start-up cost of a `familiar run` that makes no tool call (the model
answers with text at once), against a loopback `http://` model.

Run: `cargo build --release && python3 benches/run_start.py BIN [BIN ...]`, as nobody
like the other run benches. Several binaries (e.g. a copy of main's build beside this
branch's) are run alternately, so a slower moment of the machine hits them alike.

The soul, workspace, throwaway HOME and loopback model are those of run_overhead.py with
no iterations. Reported per binary: the median and spread of the wall time and of the
CPU time of the process (getrusage(RUSAGE_CHILDREN) around each run). With `PERF=1` each
binary is then also run under `perf stat -r RUNS -e task-clock,page-faults` for perf's
own mean and variation.
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

BINS = [os.path.abspath(b) for b in sys.argv[1:]] or [os.path.abspath("target/release/familiar")]
RUNS = int(os.environ.get("RUNS", "50"))


def setup(port):
    home = tempfile.mkdtemp(prefix="familiar-start-")
    cfg = f"{home}/.config/familiar"
    os.makedirs(f"{cfg}/souls")
    with open(f"{cfg}/config.toml", "w") as f:
        f.write(f'[providers.local]\nbase_url = "http://127.0.0.1:{port}/v1"\nmax_retries = 0\n')
    with open(f"{cfg}/souls/bench.toml", "w") as f:
        f.write('description = "bench"\nprompt = "bench"\nmax_iterations = 30\n'
                'tools = ["read_file"]\n[sandbox]\nread = ["/etc"]\n')
    workspace = f"{home}/work"
    os.makedirs(workspace)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": home,
        "XDG_CONFIG_HOME": f"{home}/.config",
        "XDG_STATE_HOME": f"{home}/.local/state",
    }
    return env, workspace


def main():
    c.ITERATIONS = 0
    model = c.Server(("127.0.0.1", 0), c.Model)
    threading.Thread(target=model.serve_forever, daemon=True).start()
    env, workspace = setup(model.server_address[1])
    args = ["run", "--soul", "bench", "--workspace", workspace, "x"]
    wall = {b: [] for b in BINS}
    cpu = {b: [] for b in BINS}
    try:
        for i in range(RUNS + 1):
            for b in BINS:
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                t = time.perf_counter()
                subprocess.run([b, *args], env=env, check=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
                elapsed = time.perf_counter() - t
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                if i > 0:  # the first round warms the page cache
                    wall[b].append(elapsed * 1000)
                    cpu[b].append((after.ru_utime - before.ru_utime
                                   + after.ru_stime - before.ru_stime) * 1000)
        for b in BINS:
            print(f"familiar run, no tool call, {RUNS} runs ({b})")
            for name, v in (("wall", wall[b]), ("CPU ", cpu[b])):
                print(f"  {name} median {statistics.median(v):.1f} ms "
                      f"(min {min(v):.1f}, max {max(v):.1f})")
        if os.environ.get("PERF") == "1":
            for b in BINS:
                with tempfile.NamedTemporaryFile("r", suffix=".perf") as out:
                    subprocess.run(["perf", "stat", "-r", str(RUNS), "-o", out.name,
                                    "-e", "task-clock,page-faults", b, *args], env=env,
                                   check=True, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
                    print(out.read().strip())
    finally:
        model.shutdown()


if __name__ == "__main__":
    main()
