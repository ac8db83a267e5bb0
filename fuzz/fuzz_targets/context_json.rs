//! Session contexts as read from disk: any bytes either load or are refused (moved
//! aside as corrupt), never a panic; what loads survives a save and a reload unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    familiar::fuzzing::load_context_bytes(data);
});
