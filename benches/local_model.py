#!/usr/bin/env python3
"""familiar against a real llama.cpp server: the figures a local model's user pays for.

Starts tests/fixtures/llama_server.py (xllamacpp + SmolLM2-135M-Instruct, see
tests/README.md) and runs the `familiar` binary given on the command line with
`familiar run --json --ephemeral` in a private home (its own config.toml, the built-in
souls), reading the server's own counts from the `model_progress` events
(`total`, `cached`: the prompt's tokens and those the server reused).

Scenarios:
- new-task: RUNS tasks of the default soul in a row, each in a new session (a
  keybinding, a timer). For every task after the first, the first request's tokens the
  server had to evaluate (total - cached), as a share of the prompt, and the time from
  start to the first streamed token.
- warm: the first desktop request after `familiar daemon` starts, on a fresh server,
  cold (`[warm] enabled = false`) against warmed (the daemon sent the default soul's
  prefix first, waited for in `familiar status`), then a later request of the warmed
  daemon: the share of the first request's prompt the server evaluated and the time
  from `familiar ask` to its first streamed token. RUNS of each, a fresh server and
  daemon per run (needs dbus-daemon).
- slow-prefill: one-batch prefills (n_batch 4096 and one thread: llama.cpp reports no
  progress until the whole prompt is read, a fresh server each run so nothing is
  cached) against `stall_timeout = "3s"`, so the wait for the first token is longer
  than the stall timeout: each task must reach the model's answer with no retry.

Usage: benches/local_model.py FAMILIAR_BINARY [new-task|warm|slow-prefill] [RUNS]
(FAMILIAR_LLAMA_VENV: the venv's directory; default ~/.cache/familiar/venv-llama)
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "..", "tests", "fixtures", "llama_server.py")
VENV = os.environ.get(
    "FAMILIAR_LLAMA_VENV", os.path.expanduser("~/.cache/familiar/venv-llama")
)
PROMPTS = [
    "Which apps are open?",
    "How full is my disk?",
    "Is anything using a lot of memory?",
    "Say hi.",
]


def start_server(port, n_ctx, n_batch, threads=None):
    env = dict(os.environ)
    if threads:
        env["FAMILIAR_LLAMA_THREADS"] = str(threads)
    server = subprocess.Popen(
        [os.path.join(VENV, "bin", "python"), SERVER, str(port), str(n_ctx), str(n_batch)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    line = server.stdout.readline()
    if not line.startswith("listening"):
        sys.exit(f"the llama.cpp server did not start: {line!r}")
    return server


def home(port, extra, tables=""):
    root = tempfile.mkdtemp(prefix="familiar-bench-")
    conf = os.path.join(root, "config", "familiar")
    os.makedirs(conf)
    with open(os.path.join(conf, "config.toml"), "w") as f:
        f.write(
            'default_provider = "local"\n[providers.local]\nkind = "openai"\n'
            f'base_url = "http://127.0.0.1:{port}/v1"\nmodel = "smollm2"\n'
            "context_window = 8192\nmax_output_tokens = 8\ntemperature = 0.0\n"
            "max_retries = 2\n" + extra + tables
        )
    env = dict(os.environ)
    env.update(
        HOME=root,
        XDG_CONFIG_HOME=os.path.join(root, "config"),
        XDG_DATA_HOME=os.path.join(root, "data"),
        XDG_STATE_HOME=os.path.join(root, "state"),
        XDG_RUNTIME_DIR=root,
    )
    return env


def task(binary, env, prompt, command="run"):
    """One `familiar run` (or `ask`, through the daemon): its first request's (total,
    cached), seconds to the first streamed token, the whole run's seconds, retries and
    the final status."""
    start = time.monotonic()
    proc = subprocess.Popen(
        [binary, command, "--json"] + (["--ephemeral"] if command == "run" else []) + [prompt],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    first, first_token, retries, status = None, None, 0, None
    for line in proc.stdout:
        try:
            e = json.loads(line)
        except ValueError:
            continue
        kind = e.get("kind")
        if kind == "model_progress" and first is None and e["processed"] == e["total"]:
            first = (e["total"], e["cached"])
        elif kind == "text_delta" and first_token is None:
            first_token = time.monotonic() - start
        elif kind == "retry":
            retries += 1
        elif kind == "task_finished":
            status = e.get("status")
    proc.wait(timeout=900)
    return first, first_token, time.monotonic() - start, retries, status


def spread(values, fmt):
    values = sorted(values)
    return f"median {fmt(statistics.median(values))} ({fmt(values[0])}–{fmt(values[-1])})"


def new_task(binary, runs):
    server = start_server(8095, 8192, 512)
    try:
        env = home(8095, "")
        task(binary, env, "Say hi.")  # warms the server's cache with the soul's prefix
        shares, tokens, firsts = [], [], []
        for i in range(runs):
            first, first_token, _, _, status = task(binary, env, PROMPTS[i % len(PROMPTS)])
            if first is None:
                sys.exit(f"run {i}: no model_progress event (status {status})")
            total, cached = first
            tokens.append(total - cached)
            shares.append((total - cached) * 100 / total)
            firsts.append(first_token or 0.0)
            print(f"run {i + 1}: {total - cached} of {total} tokens evaluated, first token {first_token:.2f} s")
        print(f"new task, first request: evaluated {spread(tokens, str)} tokens, "
              f"{spread(shares, lambda v: f'{v:.1f} %')}; first token {spread(firsts, lambda v: f'{v:.2f} s')}")
    finally:
        server.stdin.close()
        server.wait()


def daemon(binary, env):
    """A session bus and `familiar daemon` on it; returns (processes, env with the bus)."""
    bus = subprocess.Popen(
        ["dbus-daemon", "--session", "--nofork", "--print-address=1"],
        stdout=subprocess.PIPE, text=True,
    )
    env = dict(env, DBUS_SESSION_BUS_ADDRESS=bus.stdout.readline().strip())
    d = subprocess.Popen([binary, "daemon"], env=env, stderr=subprocess.DEVNULL)
    for _ in range(200):
        if subprocess.run([binary, "status"], env=env, capture_output=True).returncode == 0:
            break
        time.sleep(0.05)
    return (d, bus), env


def warm_state(binary, env):
    out = subprocess.run([binary, "status", "--json"], env=env, capture_output=True, text=True)
    try:
        return json.loads(out.stdout)["daemon_config"]["warm"]
    except (ValueError, KeyError, TypeError):
        return {}


def warm(binary, runs):
    rows = {"cold": [], "warmed": [], "later": []}
    for i in range(runs):
        for mode in ("cold", "warmed"):
            server = start_server(8097, 8192, 512)
            procs = ()
            try:
                extra = "[warm]\nenabled = false\n" if mode == "cold" else ""
                (procs, env) = daemon(binary, home(8097, "", tables=extra))
                if mode == "warmed":
                    start = time.monotonic()
                    while warm_state(binary, env).get("safe_assistant", {}).get("state") != "warm":
                        if time.monotonic() - start > 900:
                            sys.exit("the daemon did not warm the default soul")
                        time.sleep(0.5)
                    w = warm_state(binary, env)["safe_assistant"]
                    print(f"run {i + 1}: warmed {w['prompt_tokens']} tokens in {w['ms'] / 1000:.1f} s")
                first, first_token, _, _, status = task(binary, env, PROMPTS[i % len(PROMPTS)], "ask")
                runs_of = [(mode, first, first_token, status)]
                if mode == "warmed":
                    later = task(binary, env, PROMPTS[(i + 1) % len(PROMPTS)], "ask")
                    runs_of.append(("later", later[0], later[1], later[4]))
                for name, first, first_token, status in runs_of:
                    if first is None:
                        sys.exit(f"run {i + 1} {name}: no model_progress event (status {status})")
                    total, cached = first
                    rows[name].append(((total - cached) * 100 / total, first_token or 0.0))
                    print(f"run {i + 1} {name}: {total - cached} of {total} tokens evaluated, "
                          f"first token {first_token or 0:.2f} s")
            finally:
                for p in procs:
                    p.terminate()
                    p.wait()
                server.stdin.close()
                server.wait()
    for name, r in rows.items():
        print(f"{name}: evaluated {spread([s for s, _ in r], lambda v: f'{v:.1f} %')} of the prompt; "
              f"first token {spread([t for _, t in r], lambda v: f'{v:.2f} s')}")


def slow_prefill(binary, runs):
    waits, totals, retried, answered = [], [], 0, 0
    for i in range(runs):
        # A new server each run: nothing cached, the whole prompt is read in one batch.
        server = start_server(8096, 8192, 4096, threads=1)
        try:
            env = home(8096, 'stall_timeout = "3s"\n')
            first, first_token, total, retries, status = task(binary, env, PROMPTS[i % len(PROMPTS)])
        finally:
            server.stdin.close()
            server.wait()
        retried += retries
        answered += first_token is not None
        waits.append(first_token or 0.0)
        totals.append(total)
        print(f"run {i + 1}: status {status}, prompt {first}, retries {retries}, "
              f"first token {first_token or 0:.1f} s, whole run {total:.1f} s")
    print(f"slow prefill (stall_timeout 3 s): {answered}/{runs} runs streamed the model's answer, {retried} retries; "
          f"first token {spread(waits, lambda v: f'{v:.1f} s')}; whole run {spread(totals, lambda v: f'{v:.1f} s')}")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = os.path.abspath(sys.argv[1])
    scenario = sys.argv[2] if len(sys.argv) > 2 else "new-task"
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    {"new-task": new_task, "warm": warm, "slow-prefill": slow_prefill}[scenario](binary, runs)


if __name__ == "__main__":
    main()
