//! Entry points for the cargo-fuzz targets in `fuzz/` (hidden from the docs; not a
//! stable API). Each wraps a real code path with the fixtures it needs built once: an
//! open policy (every tier `allow`, the built-in protected paths and blocked patterns
//! kept), a soul offering every tool, and a scratch data directory.
//!
//! Invariant: nothing here has its own logic worth testing; a fuzz target that finds a
//! bug finds it in the code these call.
// The targets want a panic on a broken invariant: that is how libFuzzer reports it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use familiar_protocol::ids::SessionId;

use crate::policy::{Call, Decision, PathContext, Policy};
use crate::soul::{PromptSource, Soul, SoulOrigin};
use crate::store::Store;

const HOME: &str = "/home/fuzz";
const OPEN_POLICY: &str = "[tiers]\nread = \"allow\"\nwrite = \"allow\"\nexecute = \"allow\"\nsystem_critical = \"allow\"\n";
/// The session id the context target loads (seed contexts carry it).
pub const CONTEXT_SESSION: &str = "s-000000000000";

struct Fixtures {
    policy: Policy,
    soul: Soul,
}

fn fixtures() -> &'static Fixtures {
    static F: OnceLock<Fixtures> = OnceLock::new();
    F.get_or_init(|| {
        let home = Path::new(HOME);
        let policy = Policy::from_toml("open.toml", OPEN_POLICY, home).expect("open policy");
        let tools: Vec<String> = crate::catalog::names()
            .map(|n| format!("\"{n}\""))
            .collect();
        let src = format!(
            // `delegate` needs someone to hand sub-tasks to.
            "id = \"fuzz\"\ndescription = \"every tool\"\nprompt = \"p\"\ntools = [{}]\n\
             delegates = [\"safe_assistant\"]\n",
            tools.join(", ")
        );
        let soul = crate::soul::parse(
            "fuzz.toml",
            "fuzz",
            &src,
            PromptSource::BuiltIn,
            home,
            Some(&policy),
            SoulOrigin::BuiltIn,
        )
        .expect("soul with every tool");
        Fixtures { policy, soul }
    })
}

/// Every tool name.
pub fn tool_names() -> Vec<&'static str> {
    crate::catalog::names().collect()
}

/// The policy's decision for `tool` called with `args`, as `familiar policy check`
/// makes it (tier from the arguments, then the whole pipeline).
pub fn decide_call(tool: &str, args: &serde_json::Value) -> Decision {
    let f = fixtures();
    let tier = match crate::catalog::info(tool) {
        Some(info) => crate::catalog::tier_for_call(info, args),
        None => familiar_protocol::tier::Tier::SystemCritical,
    };
    let ctx = PathContext {
        home: Path::new(HOME),
        cwd: Path::new("/home/fuzz/work"),
    };
    let call = Call { tool, tier, args };
    crate::policy::decide(&f.soul.id, &f.soul.grant, &f.policy, &call, &ctx).decision
}

/// The decision for `shell` running `command`.
pub fn shell_decision(command: &str) -> Decision {
    decide_call("shell", &serde_json::json!({ "command": command }))
}

fn scratch_store() -> &'static (PathBuf, Store) {
    static S: OnceLock<(PathBuf, Store)> = OnceLock::new();
    S.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("familiar-fuzz-{}", std::process::id()));
        let store = Store::open(&dir).expect("scratch store");
        (dir, store)
    })
}

/// Loads `bytes` as the context file of [`CONTEXT_SESSION`] the way a task does; a
/// context that loads must save and reload unchanged. A refused one is cleaned up.
pub fn load_context_bytes(bytes: &[u8]) {
    let (dir, store) = scratch_store();
    let id = SessionId::new(CONTEXT_SESSION).expect("session id");
    let path = store.context_path(&id);
    std::fs::write(&path, bytes).expect("write the context");
    match store.load_context(&id) {
        Ok(Some(mut ctx)) => {
            store.save_context(&mut ctx).expect("save what loaded");
            let again = store.load_context(&id).expect("reload").expect("saved");
            assert_eq!(ctx, again, "a save and reload changed the context");
        }
        Ok(None) => panic!("the context file was just written"),
        Err(_) => {
            // Moved aside as corrupt: keep the scratch dir from filling up.
            for entry in std::fs::read_dir(dir.join("context")).expect("context dir") {
                let path = entry.expect("entry").path();
                if path.to_string_lossy().contains(".corrupt-") {
                    std::fs::remove_file(path).ok();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The fixture soul lists every tool; `delegate` made it fail validation, so every
    // policy fuzz target died on its first input (found by `cargo fuzz run shell_policy`).
    #[test]
    fn the_fixture_soul_with_every_tool_loads() {
        assert!(matches!(
            shell_decision("ls"),
            Decision::Allow | Decision::Ask { .. }
        ));
        decide_call("read_file", &serde_json::json!({"path": "/etc/hostname"}));
    }

    // Found by the shell_policy fuzzer (a 13 s timeout): star-heavy paths made the
    // protected-path glob matcher backtrack exponentially on the daemon's thread.
    #[test]
    fn a_command_with_star_heavy_paths_is_decided_at_once() {
        let command = "c/\u{1}&(/************************&/.&.)cd&I(&.**************\u{1}\u{703}/...).&.\u{703}  -~";
        shell_decision(command);
        let path = format!("/etc/{}p*x", "*".repeat(54));
        decide_call("read_file", &serde_json::json!({ "path": path }));
    }
}
