//! The pack tee: an embedder's [`PackTee`] (`receive::Options::pack_tee`) sees the raw bytes
//! of the pushed pack exactly as the unpack phase consumes them from the client, then whether
//! this repository accepted the pack ([`PackSink::end`]); a sink dropped without `end` was
//! aborted. The session never waits for an answer
//! from it: what the sink does with the bytes (a replicated deployment streams them to the
//! other replicas) is the embedder's, and it can only slow the read down, never change it.

use std::io::{self, BufRead, Read};

/// Told about every pack a push receives (at most one per session).
pub trait PackTee: Send + Sync + std::fmt::Debug {
    /// A pack starts arriving: the sink for its bytes. `shallow` is the client's `shallow`
    /// lines: commits whose parents the pack may lack (the ingest here takes them so).
    fn start(&self, shallow: &[gix_hash::ObjectId]) -> Box<dyn PackSink>;
}

/// The bytes of one pack, in order, as read from the client.
pub trait PackSink: Send {
    /// The next bytes of the pack (called with whatever the reader consumed, any size).
    fn data(&mut self, bytes: &[u8]);
    /// The pack ended: `accepted` when it was read, indexed and checked here; `false` when the
    /// unpack failed (the pack was cut off, malformed, or did not check). A sink dropped
    /// without `end` (the session failed) was aborted.
    fn end(self: Box<Self>, accepted: bool);
}

/// A reader that hands what is consumed from `inner` to `sink`.
pub(super) struct Tee<'a, R> {
    pub(super) inner: R,
    pub(super) sink: &'a mut dyn PackSink,
}

impl<R: BufRead> Read for Tee<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let available = self.inner.fill_buf()?;
        let n = available.len().min(buf.len());
        buf[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Tee<'_, R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, amt: usize) {
        if amt > 0 {
            // The buffer `fill_buf` returned is still there: consuming reads nothing new.
            if let Ok(buf) = self.inner.fill_buf() {
                let n = amt.min(buf.len());
                self.sink.data(&buf[..n]);
            }
        }
        self.inner.consume(amt);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Collect(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl PackSink for Collect {
        fn data(&mut self, bytes: &[u8]) {
            if let Ok(mut v) = self.0.lock() {
                v.extend_from_slice(bytes);
            }
        }
        fn end(self: Box<Self>, _: bool) {}
    }

    #[test]
    fn tee_sees_exactly_what_is_consumed() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut sink = Collect(seen.clone());
        let inner = io::BufReader::with_capacity(7, &data[..]);
        let mut tee = Tee {
            inner,
            sink: &mut sink,
        };
        let mut head = [0u8; 12];
        tee.read_exact(&mut head).unwrap();
        let buf = tee.fill_buf().unwrap().to_vec();
        tee.consume(buf.len().min(3));
        let mut rest = Vec::new();
        tee.read_to_end(&mut rest).unwrap();
        assert_eq!(*seen.lock().unwrap(), data);
    }
}
