#!/usr/bin/env python3
"""Benchmark: the sandbox helper alone, exec to exit, for a `read_file` and for
`/bin/true`, through `familiar-sandbox` and through `familiar sandbox-exec`, next to a
bare `/bin/true` (what any exec costs here).

Run: `cargo build --release && python3 benches/helper_exec.py [target/release]`
(`PIDNS=0` runs the command without its own PID namespace, to measure what that
costs; `VS=OTHER/familiar-sandbox` adds that helper's two runs, interleaved with the rest:
another build of it, say the commit before a change, on the same machine at the same
time)
(as an unprivileged user, as BENCHMARKS.md says why: `setpriv --reuid=65534
--regid=65534 --clear-groups env HOME=/tmp python3 …`).

The spec is what the launcher would send for a soul reading a workspace (the baseline
rules plus the workspace, no protected path carving): written once to a file and fed
to each run on stdin. Reported per variant: wall time from spawn to exit (median, p95)
and CPU time of the child (user + system, from getrusage), over RUNS runs after 20
warm-up runs, variants interleaved.
"""

import json
import os
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

DIR = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/release")
RUNS = int(os.environ.get("RUNS", "300"))
BASELINE = ["/usr", "/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib64", "/bin", "/sbin",
            "/lib", "/lib64", "/lib32", "/etc/ld.so.cache", "/etc/ld.so.conf",
            "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime",
            "/etc/nsswitch.conf", "/etc/passwd", "/etc/group", "/dev/null", "/dev/zero",
            "/dev/urandom", "/dev/random", "/proc", "/sys/devices/system/cpu"]


def rule(path, grant):
    st = os.stat(path, follow_symlinks=False)
    return {"path": path, "dev": st.st_dev, "ino": st.st_ino, "grant": grant}


def spec(work):
    rules = [rule(p, "read") for p in BASELINE
             if os.path.lexists(p) and not os.path.islink(p)]
    # The workspace is the one tree where removing and truncating are granted
    # ("destroy", issue 40); the soul's other writable trees would be "write".
    rules += [rule(work, "read"), rule("/dev/null", "write"), rule(work, "destroy")]
    return json.dumps({
        "plan": {"rules": rules}, "network": False, "scope_signals": True,
        "require_full": False,
        # PIDNS=0: the command in the helper's own PID namespace, as before the command
        # got one of its own (the cost of that namespace, paired on one machine).
        "pid_namespace": os.environ.get("PIDNS", "1") != "0",
        "limits": {"timeout": 60000, "output_cap_bytes": 131072, "max_processes": 256,
                   "max_file_size": 1 << 30, "cpu_seconds": 120},
        "env": [["HOME", work], ["PATH", "/usr/bin:/bin"], ["TMPDIR", work]],
        "cwd": work,
    }).encode()


def main():
    work = tempfile.mkdtemp(prefix="familiar-helper-")
    with open(f"{work}/notes.txt", "w") as f:
        f.write("some notes\n" * 20)
    s = spec(work)
    framed = struct.pack("<Q", len(s)) + s
    read = json.dumps({"op": "read", "path": f"{work}/notes.txt", "offset": None,
                       "limit": None}).encode()
    inputs = {}
    for name, data in [("read", framed + read), ("true", framed), ("none", b"")]:
        inputs[name] = f"{work}/{name}.in"
        with open(inputs[name], "wb") as f:
            f.write(data)
    helper, familiar = f"{DIR}/familiar-sandbox", f"{DIR}/familiar"
    variants = [
        ("/bin/true alone", ["/bin/true"], "none"),
        ("familiar-sandbox --op read", [helper, "--op", "read"], "read"),
        ("familiar sandbox-exec --op read", [familiar, "sandbox-exec", "--op", "read"], "read"),
        ("familiar-sandbox -- /bin/true", [helper, "--", "/bin/true"], "true"),
        ("familiar sandbox-exec -- /bin/true", [familiar, "sandbox-exec", "--", "/bin/true"], "true"),
    ]
    other = os.environ.get("VS")
    if other:
        variants += [
            ("VS familiar-sandbox --op read", [other, "--op", "read"], "read"),
            ("VS familiar-sandbox -- /bin/true", [other, "--", "/bin/true"], "true"),
        ]
    wall = {v[0]: [] for v in variants}
    cpu = {v[0]: [] for v in variants}
    for i in range(RUNS + 20):
        for name, argv, stdin in variants:
            with open(inputs[stdin], "rb") as f:
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                t = time.perf_counter()
                out = subprocess.run(argv, stdin=f, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env={})
                elapsed = time.perf_counter() - t
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if out.returncode != 0 or (stdin == "read" and b"some notes" not in out.stdout):
                sys.exit(f"{name}: exit {out.returncode}: {out.stderr[:300]!r}")
            if i >= 20:
                wall[name].append(elapsed * 1000)
                cpu[name].append((after.ru_utime - before.ru_utime
                                  + after.ru_stime - before.ru_stime) * 1000)
    shutil.rmtree(work)
    print(f"the helper alone, spawn to exit ({RUNS} runs, {DIR})")
    print(f"  {'':36} {'wall median / p95':>20} {'CPU median':>12}")
    for name, _, _ in variants:
        w = sorted(wall[name])
        print(f"  {name:<36} {statistics.median(w):>8.2f} / {w[int(len(w) * 0.95)]:.2f} ms"
              f" {statistics.median(cpu[name]):>9.2f} ms")


if __name__ == "__main__":
    main()
