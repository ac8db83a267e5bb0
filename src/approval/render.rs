//! What a person (or a model) is shown of text they did not write. The rules for
//! untrusted text live in the protocol crate ([`familiar_protocol::display`]: every
//! client that shows an approval needs them); the daemon adds what only it can know:
//! the program a launch call will run (resolved on this machine).
//!
//! The invariant: an approval of a call that starts a program names the file that
//! will run, so what is approved is what runs.

use familiar_protocol::display;
use familiar_protocol::display::{REVIEW_MAX_BYTES, is_cut, visible, visible_capped};
use serde_json::Value;

/// What an approval shows of a call ([`display::describe_call`]), and for a call
/// that starts a program, the program it finds and the words it passes.
pub fn describe_call(tool: &str, args: &Value) -> String {
    let runs = launched(tool, args)
        .map(|r| format!("\n  runs: {}", visible_capped(&r)))
        .unwrap_or_default();
    display::describe_call(tool, args) + &runs
}

/// What an approval asks about ([`display::describe_call_whole`]), with the program a
/// launch runs; past [`REVIEW_MAX_BYTES`] in all the call is shown cut.
pub fn describe_call_whole(tool: &str, args: &Value) -> String {
    let Some(runs) = launched(tool, args) else {
        return display::describe_call_whole(tool, args);
    };
    let whole = format!(
        "{}\n  runs: {}",
        display::describe_call_whole(tool, args),
        visible(&runs)
    );
    if whole.len() <= REVIEW_MAX_BYTES || is_cut(&whole) {
        whole
    } else {
        describe_call(tool, args)
    }
}

/// For a call that starts a program through the compositor, the program it finds and
/// the words it passes, or why it will be refused: what is approved is that file.
fn launched(tool: &str, args: &Value) -> Option<String> {
    use crate::programs::argv::Argv;
    let str_arg = |k: &str| args.get(k).and_then(Value::as_str);
    let argv = match tool {
        "desktop_dispatch" if str_arg("action") == Some("launch") => Argv::from_call(args),
        "hypr_dispatch" if matches!(str_arg("dispatcher"), Some("exec" | "execr")) => {
            Argv::from_words(str_arg("args").unwrap_or_default())
        }
        _ => return None,
    };
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    Some(match argv.and_then(|a| a.resolve(home.as_deref())) {
        Ok(resolved) => resolved.display(),
        Err(e) => format!("nothing, it is refused: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// See: issue 39: an approval of a launch names the file that will run.
    #[test]
    fn a_launch_shows_the_program_found_and_its_words() {
        let sh = crate::programs::find("sh").unwrap();
        let args = json!({"action": "launch", "program": "sh", "args": ["-c", "it's"]});
        assert_eq!(
            describe_call("desktop_dispatch", &args),
            format!(
                "desktop_dispatch: launch\n  args: [\"-c\",\"it's\"]\n  program: sh\n  runs: {} -c 'it'\\''s'",
                sh.display()
            )
        );
        let refused = json!({"action": "launch", "command": "foot && touch x"});
        assert!(
            describe_call("desktop_dispatch", &refused)
                .contains("runs: nothing, it is refused: launch takes one program"),
        );
    }
}
