#!/usr/bin/env python3
"""Time to first token of a second desktop request against a real llama.cpp server:
what a per-task detail inside the system prompt costs.

Starts tests/fixtures/llama_server.py (xllamacpp + SmolLM2-135M-Instruct, see
tests/README.md), then for each run sends two "tasks" of one soul, each a fresh
conversation: a ~2,400-token system prompt and a short user prompt. The first warms
the server's prompt cache; the second is timed (first streamed token) and its
`timings` read (`cache_n`: tokens reused, `prompt_n`: tokens evaluated).

- before: the task's workspace path (which names the session) sits inside the system
  prompt, 2,117 characters in, as familiar's prompt had it: the two tasks' prompts
  differ from there on.
- after: the system prompt is the same for both tasks; the path travels in the user
  message's <system-reminder>.

Usage: benches/first_token.py [RUNS]   (FAMILIAR_LLAMA_VENV: the venv's directory)
"""

import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "..", "tests", "fixtures", "llama_server.py")
VENV = os.environ.get(
    "FAMILIAR_LLAMA_VENV", os.path.expanduser("~/.cache/familiar/venv-llama")
)
WORDS = ["You", "help", "on", "a", "Linux", "desktop", "with", "care."]


def system_prompt(path_inside):
    body = " ".join(WORDS[i % 8] for i in range(1800))
    if path_inside is None:
        return body
    return body[:2117] + f"\nWorkspace: {path_inside}\n" + body[2117:]


def stream(base, system, user):
    req = {
        "model": "smollm2",
        "stream": True,
        "max_tokens": 4,
        "temperature": 0,
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
        ],
    }
    r = urllib.request.Request(
        base + "/v1/chat/completions",
        data=json.dumps(req).encode(),
        headers={"content-type": "application/json"},
    )
    start = time.monotonic()
    first = None
    timings = {}
    with urllib.request.urlopen(r) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for c in chunk.get("choices", []):
                if first is None and c.get("delta", {}).get("content"):
                    first = time.monotonic() - start
            timings = chunk.get("timings", timings)
    return first, timings


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    port = 8000 + os.getpid() % 1000
    proc = subprocess.Popen(
        [os.path.join(VENV, "bin", "python"), SERVER, str(port), "4096"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    base = proc.stdout.readline().split()[1]
    results = {"before": [], "after": []}
    try:
        for run in range(runs):
            for mode in ("before", "after"):
                for task in (1, 2):
                    path = f"/home/u/.local/state/familiar/sessions/s-{run}{task}{mode}/ws"
                    if mode == "before":
                        system, user = system_prompt(path), "What is using my disk?"
                    else:
                        system = system_prompt(None)
                        user = (
                            "What is using my disk?\n\n<system-reminder>\n"
                            f"Workspace: {path}\n</system-reminder>"
                        )
                    ttft, t = stream(base, system, user)
                    if task == 2:
                        results[mode].append((ttft, t.get("cache_n"), t.get("prompt_n")))
    finally:
        proc.stdin.close()
        proc.wait()
    for mode, rows in results.items():
        ttfts = [r[0] for r in rows]
        print(
            f"{mode}: time to first token median {statistics.median(ttfts) * 1000:.0f} ms "
            f"(min {min(ttfts) * 1000:.0f}, max {max(ttfts) * 1000:.0f}), "
            f"reused {rows[0][1]} / evaluated {rows[0][2]} tokens, runs {len(rows)}"
        )


if __name__ == "__main__":
    main()
