//! Link settings of the sandbox helper, `familiar-sandbox`, which is exec'd once per
//! sandboxed tool call, so its start-up is paid per call (BENCHMARKS.md, issue 10):
//!
//! - `-no-pie`: a fixed load address, so the dynamic loader applies no relative
//!   relocations at start (7,662 in a PIE build, each page of `.data.rel.ro` copied on
//!   write before `main`);
//! - `-z lazy`: its ~130 imported functions are bound on first call, not all at start.
//!
//! Together 0.4–0.5 ms of a ~2.5 ms call (`benches/helper_exec.py`). What they give up
//! is ASLR of the helper's own image and a read-only GOT, defence in depth against
//! memory corruption in a process whose only inputs are the daemon's spec and request;
//! untrusted bytes (file contents) only pass through safe Rust, and its libraries,
//! stack and heap stay randomised. `familiar` keeps PIE and full RELRO.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo::rustc-link-arg-bin=familiar-sandbox=-no-pie");
        println!("cargo::rustc-link-arg-bin=familiar-sandbox=-Wl,-z,lazy");
    }
}
