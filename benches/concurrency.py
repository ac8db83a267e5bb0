#!/usr/bin/env python3
"""Benchmark (opt-in): 100 tasks submitted to the daemon at once over D-Bus, each doing
20 iterations with a sandboxed `read_file`, against a loopback model.

Run: `cargo build --release && python3 benches/concurrency.py [target/release/familiar]`
(`TASKS=` and `ITERATIONS=` in the environment change the load).

A private `dbus-daemon --session`, a throwaway HOME, and a loopback HTTP server speaking
the OpenAI-compatible SSE format: while a request carries fewer than ITERATIONS tool
results it answers with a `read_file` call on a file in the task's workspace (a different line
each time: the loop detector stops a task that repeats a call), then with a final text. Each task is one `familiar ask` client (a D-Bus Submit, then its events),
all started together; `[daemon] queue_limit` is raised to TASKS so none is refused, and
`max_concurrent_tasks` stays at its default (4): the rest queue, as configured.

Reported: failures (a client exiting non-zero), wall time, iterations per second, and the
daemon's peak RSS (VmHWM) and RSS when idle again.

The shipped default policy's `rate_limits` (120 tool calls a minute for the whole daemon)
would refuse most of 2,000 reads in a few seconds, as they should; the bench runs under
`policies/bench.toml`, the default policy with its rate limits raised and nothing else
changed, so every call still goes through the whole decision pipeline and the sandbox.
"""

import http.server
import json
import os
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import re
import time

BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/release/familiar")
TASKS = int(os.environ.get("TASKS", "100"))
ITERATIONS = int(os.environ.get("ITERATIONS", "20"))


def chunk(delta, finish=None):
    return "data: " + json.dumps({
        "id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }) + "\n\n"


STATS = {"requests": 0, "read_ok": 0}
LOCK = threading.Lock()


class Model(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The headers and the body are two writes: with Nagle's algorithm the body waits
    # for the client's delayed ACK of the headers, ~40 ms a request (it once looked like
    # 65 ms of familiar's own time per iteration).
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        tools = [m for m in body.get("messages", []) if m.get("role") == "tool"]
        done = len(tools)
        with LOCK:
            STATS["requests"] += 1
            # The last tool result is the read this request reports on.
            if tools and "some notes" in json.dumps(tools[-1].get("content")):
                STATS["read_ok"] += 1
        if done < ITERATIONS:
            call = {"tool_calls": [{"index": 0, "id": f"call_{done}", "type": "function",
                                    "function": {"name": "read_file",
                                                 "arguments": json.dumps({"path": "notes.txt",
                                                                           "offset": done + 1,
                                                                           "limit": 1})}}]}
            frames = [chunk({"role": "assistant"}), chunk(call), chunk({}, "tool_calls")]
        else:
            frames = [chunk({"role": "assistant", "content": "done"}), chunk({}, "stop")]
        out = ("".join(frames) + "data: [DONE]\n\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    request_queue_size = 256


def status_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def main():
    model = Server(("127.0.0.1", 0), Model)
    threading.Thread(target=model.serve_forever, daemon=True).start()
    port = model.server_address[1]

    home = tempfile.mkdtemp(prefix="familiar-conc-")
    cfg = f"{home}/.config/familiar"
    os.makedirs(f"{cfg}/souls")
    os.makedirs(f"{cfg}/policies")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(f"{repo}/policies/default.toml") as f:
        policy = f.read()
    # Every `NAME = "N/unit"` rate, raised; the rest of the policy as shipped.
    policy = re.sub(r'"\d+/(s|min|hour|day)"', '"100000/s"', policy)
    with open(f"{cfg}/policies/bench.toml", "w") as f:
        f.write(policy)
    with open(f"{cfg}/config.toml", "w") as f:
        f.write('policy = "bench"\n'
                f'[daemon]\nqueue_limit = {TASKS}\n\n'
                f'[providers.local]\nbase_url = "http://127.0.0.1:{port}/v1"\nmax_retries = 0\n')
    with open(f"{cfg}/souls/bench.toml", "w") as f:
        f.write('description = "bench"\nprompt = "bench"\n'
                f'max_iterations = {ITERATIONS + 5}\n'
                'tools = ["read_file"]\n[sandbox]\nread = ["/etc"]\n')
    workspace = f"{home}/work"
    os.makedirs(workspace)
    with open(f"{workspace}/notes.txt", "w") as f:
        f.write("some notes\n" * max(ITERATIONS, 1))

    bus = subprocess.Popen(["dbus-daemon", "--session", "--nofork", "--print-address=1"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": home,
        "XDG_CONFIG_HOME": f"{home}/.config",
        "XDG_STATE_HOME": f"{home}/.local/state",
        "XDG_DATA_HOME": f"{home}/.local/share",
        "DBUS_SESSION_BUS_ADDRESS": bus.stdout.readline().strip(),
    }
    sock_path = f"{home}/notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(sock_path)
    daemon = subprocess.Popen([BIN, "daemon"], env={**env, "NOTIFY_SOCKET": sock_path},
                              stderr=open(f"{home}/daemon.log", "w"))
    try:
        while "READY=1" not in sock.recv(4096).decode():
            pass
        threading.Thread(target=lambda: [sock.recv(4096) for _ in iter(int, 1)],
                         daemon=True).start()
        rss_fresh = status_kib(daemon.pid, "VmRSS")
        start = time.perf_counter()
        clients = [subprocess.Popen([BIN, "ask", "--soul", "bench", "--workspace", workspace,
                                     f"task {i}"], env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True)
                   for i in range(TASKS)]
        failures = []
        for i, c in enumerate(clients):
            _, err = c.communicate()
            if c.returncode != 0:
                failures.append((i, c.returncode, err.strip()[-300:]))
        wall = time.perf_counter() - start
        peak = status_kib(daemon.pid, "VmHWM")
        rss_after = status_kib(daemon.pid, "VmRSS")
        iterations = TASKS * ITERATIONS
        print(f"familiar daemon under load ({BIN})")
        print(f"  {TASKS} tasks x {ITERATIONS} sandboxed read_file iterations, submitted at once")
        print(f"  failures                      {len(failures)}")
        print(f"  model requests / reads that returned the file  {STATS['requests']} / "
              f"{STATS['read_ok']} (expected {TASKS * (ITERATIONS + 1)} / {iterations})")
        for f in failures[:5]:
            print(f"    task {f[0]}: exit {f[1]}: {f[2]}")
        print(f"  wall time                     {wall:.2f} s")
        print(f"  throughput                    {iterations / wall:.0f} iterations/s")
        print(f"  daemon RSS fresh / peak / after  {rss_fresh / 1024:.1f} / {peak / 1024:.1f} / "
              f"{rss_after / 1024:.1f} MiB")
    finally:
        daemon.terminate()
        daemon.wait()
        bus.terminate()
        bus.wait()
        model.shutdown()


if __name__ == "__main__":
    main()
