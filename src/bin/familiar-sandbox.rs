//! `familiar-sandbox [--op KIND] [-- ARGV...]`: the sandbox helper the daemon starts for
//! every sandboxed tool call (docs/sandbox.md). The same as `familiar sandbox-exec`, in
//! a binary a fraction of the size: it is exec'd per call, and mapping and relocating
//! the full `familiar` was most of a call's cost (BENCHMARKS.md). Its code is the
//! `familiar-sandbox` crate, which depends on neither tokio nor zbus; this target sits
//! in the root package only so that `cargo install --path .` installs it.

use std::process::ExitCode;

fn main() -> ExitCode {
    familiar_sandbox::main(std::env::args_os().skip(1))
}
