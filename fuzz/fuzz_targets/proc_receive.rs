//! The proc-receive hook's output: version negotiation and report, as the session reads them.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    berth::fuzzing::proc_receive(data);
});
