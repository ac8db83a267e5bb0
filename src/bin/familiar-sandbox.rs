//! `familiar-sandbox [--op KIND] [-- ARGV...]`: the sandbox helper the daemon starts for
//! every sandboxed tool call (docs/sandbox.md). The same as `familiar sandbox-exec`, in
//! a binary a seventh of the size: it is exec'd per call, and mapping and relocating the
//! full `familiar` was most of a call's cost (BENCHMARKS.md). It reaches only
//! [`familiar::sandbox::exec`]; link-time optimisation drops the rest of the library.

use std::process::ExitCode;

fn main() -> ExitCode {
    familiar::sandbox::exec::main(std::env::args_os().skip(1))
}
