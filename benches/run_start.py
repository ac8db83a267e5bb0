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
import statistics
import subprocess
import sys
import tempfile
import threading

import concurrency as c
from run_overhead import setup, timed_run

BINS = [os.path.abspath(b) for b in sys.argv[1:]] or [os.path.abspath("target/release/familiar")]
RUNS = int(os.environ.get("RUNS", "50"))


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
                wall_ms, cpu_ms = timed_run([b, *args], env)
                if i > 0:  # the first round warms the page cache
                    wall[b].append(wall_ms)
                    cpu[b].append(cpu_ms)
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
