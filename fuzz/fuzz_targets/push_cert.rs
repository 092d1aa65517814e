//! A push certificate: through the request parser as a signed push sends it, then its headers,
//! nonce check and push options as the session handles them (no gpg).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    berth::fuzzing::push_cert(data);
});
