#!/usr/bin/env python3
"""The client commands talk to the daemon through the protocol crate alone (issue 42).

`familiar bar`, `approve --dmenu`, `tasks`, `cancel`, `status`, `ask` and their shared
client code may use `familiar_protocol`, the launcher (`crate::launcher`), the other
CLI modules (`super::`, `crate::cli`) and external crates: never the daemon's own
modules, so what a client shows is what any client of the contract can show. Two
files also read this machine, by design: `status` its config and kernel, `ask`'s
context the desktop. A `crate::` path outside the allowlist fails, naming file and line.
"""

import re
import sys
from pathlib import Path

ALWAYS = {"cli", "launcher"}
CLIENTS = {
    "src/cli/bar.rs": set(),
    "src/cli/chooser.rs": set(),
    "src/cli/client.rs": set(),
    "src/cli/submit.rs": set(),
    # This machine's facts beside the daemon's: its config.toml and its kernel.
    "src/cli/status.rs": {"config", "sandbox"},
    "src/cli/ask/mod.rs": set(),
    "src/cli/ask/signals.rs": set(),
    # What the user points at: the selection, the clipboard, the focused window.
    "src/cli/ask/context.rs": {"compositor", "config", "programs"},
}
PATH = re.compile(r"\bcrate::([a-z_]+)")


def main() -> int:
    bad = []
    for name, extra in CLIENTS.items():
        text = Path(name).read_text()
        # Tests may build what they check with the daemon's types.
        code = text.split("#[cfg(test)]")[0]
        for number, line in enumerate(code.splitlines(), 1):
            if line.lstrip().startswith("//"):
                continue
            for module in PATH.findall(line):
                if module not in ALWAYS | extra:
                    bad.append(f"{name}:{number}: crate::{module} ({line.strip()})")
    for b in bad:
        print(f"ci: a client command reaches the daemon's code: {b}", file=sys.stderr)
    if bad:
        print("ci: use familiar_protocol (the contract), the launcher or the CLI's own modules", file=sys.stderr)
        return 1
    print(f"ci: {len(CLIENTS)} client files import only familiar_protocol, the launcher and the CLI")
    return 0


if __name__ == "__main__":
    sys.exit(main())
