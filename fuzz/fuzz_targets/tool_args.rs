//! Tool arguments as a model might send them: any JSON for any tool goes through the
//! tier choice and the whole policy pipeline without a panic.
#![no_main]

use familiar::fuzzing::{decide_call, tool_names};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let names = tool_names();
    let tool = names[usize::from(which) % names.len()];
    let Ok(args) = serde_json::from_slice::<serde_json::Value>(rest) else {
        return;
    };
    decide_call(tool, &args);
});
