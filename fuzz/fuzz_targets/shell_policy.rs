//! `policy check` on arbitrary shell commands: never a panic, and never `allow` for a
//! command whose plain spelling is denied. The plain spelling is what the shell would
//! run: the words after quote removal and escapes (shell-words), re-joined. Only
//! commands whose words stay plain after that (no spaces, globs, `~`, `$` or shell
//! operators) are compared, since re-joining other words would change their meaning;
//! nor are commands of several lines.
#![no_main]

use familiar::fuzzing::shell_decision;
use familiar::policy::Decision;
use libfuzzer_sys::fuzz_target;

fn plain(word: &str) -> bool {
    !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=+,:@%".contains(c))
}

fuzz_target!(|data: &[u8]| {
    let Ok(command) = std::str::from_utf8(data) else {
        return;
    };
    let spelled = shell_decision(command);
    // A newline ends a command in the shell, but shell-words takes it for a space:
    // re-joining would make `chmod⏎-R 777 /` (two harmless commands) into one that is
    // not (a false alarm the fuzzer raised). Lines are compared when they come alone.
    if command.contains('\n') {
        return;
    }
    let Ok(words) = shell_words::split(command) else {
        return;
    };
    if words.is_empty() || !words.iter().all(|w| plain(w)) {
        return;
    }
    let normal = words.join(" ");
    if normal == command {
        return;
    }
    if let Decision::Deny { reason, .. } = shell_decision(&normal) {
        assert!(
            !matches!(spelled, Decision::Allow),
            "`{command}` is allowed but its plain spelling `{normal}` is denied: {reason}"
        );
    }
});
