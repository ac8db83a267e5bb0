//! Soul files: parsing and validation against the default policy never panic; every
//! rejection is a located error.
#![no_main]

use std::path::Path;

use familiar::soul::{PromptSource, SoulOrigin, parse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let home = Path::new("/home/fuzz");
    let policy = familiar::policy::Policy::from_toml("default.toml", "", home).ok();
    if let Err(e) = parse(
        "fuzz.toml",
        "fuzz",
        src,
        PromptSource::BuiltIn,
        home,
        policy.as_ref(),
        SoulOrigin::BuiltIn,
    ) {
        assert!(!e.to_string().is_empty());
    }
});
