//! Policy files: parsing and validation never panic; every rejection is an error that
//! names the file.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(e) = familiar::policy::Policy::from_toml("fuzz.toml", src, Path::new("/home/fuzz")) {
        assert!(e.to_string().contains("fuzz.toml"), "{e}");
    }
});
