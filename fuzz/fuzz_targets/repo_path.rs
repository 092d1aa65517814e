//! A request path's repository part: one repository name in every spelling, judged as that name.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    berth::fuzzing::repo_path(data);
});
