//! The pack stream of a push through ingestion (indexing, thin-pack completion, fsck,
//! unpack-objects for small packs, the connectivity walk) into a scratch repository.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    berth::fuzzing::pack(data);
});
