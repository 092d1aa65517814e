//! The client's update request (commands, capabilities, shallow lines, push options).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    berth::fuzzing::request(data);
});
