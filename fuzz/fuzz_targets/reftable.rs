//! One reftable table's bytes through the reader: refs, logs, obj and index blocks, lookups.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    berth::fuzzing::reftable(data);
});
