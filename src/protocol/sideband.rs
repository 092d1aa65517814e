//! The session's one sideband muxer: every byte the client sees after the advertisement goes
//! through a [`Sideband`], in program order.
//!
//! With `side-band-64k` negotiated, band 1 carries the report, band 2 progress and messages
//! (`remote: …` on the client), and `0005\1` is a keepalive. Without it, the report is written
//! as plain pkt-lines and what would be band 2 goes to the server's stderr, as git does.
//! `gix-packetline` encodes single band packets; the chunking and the no-sideband fallback are
//! ours.

use std::io::{self, Write};

/// The largest data payload of one `side-band-64k` packet that git sends (65520 - 4 - 1).
pub const BAND_64K_DATA_MAX: usize = 65515;
/// git truncates `error: …` / `warning: …` lines (prefix and LF included) to this many bytes.
pub const MESSAGE_MAX: usize = 4096;

/// The line git's `die()` writes for `msg` (`vreportf`): `fatal: <msg>`, control characters
/// other than tab and newline shown as `?`, cut to [`MESSAGE_MAX`] bytes with the newline.
pub fn die_line(msg: impl std::fmt::Display) -> Vec<u8> {
    let mut line = format!("fatal: {msg}").into_bytes();
    line.truncate(MESSAGE_MAX - 1);
    for b in &mut line {
        if (b.is_ascii_control() && *b != b'\t' && *b != b'\n') || *b == 0x7f {
            *b = b'?';
        }
    }
    line.push(b'\n');
    line
}

static MUXERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many muxers this process has created (one per session), for tests.
#[cfg(feature = "internals")]
pub fn muxers_created() -> usize {
    MUXERS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Whether the client asked for the sideband.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Plain pkt-lines on the output, messages on stderr.
    None,
    /// `side-band-64k`: bands 1, 2 (and keepalives).
    Band64k,
}

/// The muxer. `W` is the client-facing output, `E` the server's stderr.
pub struct Sideband<W: Write, E: Write> {
    out: W,
    err: E,
    mode: Mode,
}

impl<W: Write, E: Write> Sideband<W, E> {
    /// A muxer writing to `out`, with messages going to `err` when there is no sideband.
    pub fn new(out: W, err: E, mode: Mode) -> Self {
        MUXERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Sideband { out, err, mode }
    }

    /// The negotiated mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Band 1, the primary data (the report), as a writer: what is written goes out in packets
    /// of [`BAND_64K_DATA_MAX`] bytes, the packets git's `send_sideband` cuts the whole report
    /// into, however it is written (without sideband, as it is). [`Band1::finish`] sends the
    /// last, shorter packet.
    pub fn band1(&mut self) -> Band1<'_, W, E> {
        let pending = match self.mode {
            Mode::Band64k => Vec::with_capacity(BAND_64K_DATA_MAX),
            Mode::None => Vec::new(),
        };
        Band1 {
            sideband: self,
            pending,
        }
    }

    /// Band 2: progress and hook output; on stderr without sideband.
    pub fn progress(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.band(2, bytes)?;
        self.flush()
    }

    /// An `error: <msg>` line, as git's `rp_error`.
    pub fn error(&mut self, msg: impl std::fmt::Display) -> io::Result<()> {
        self.message("error", msg)
    }

    /// A `warning: <msg>` line, as git's `rp_warning`.
    pub fn warning(&mut self, msg: impl std::fmt::Display) -> io::Result<()> {
        self.message("warning", msg)
    }

    fn message(&mut self, prefix: &str, msg: impl std::fmt::Display) -> io::Result<()> {
        let mut line = format!("{prefix}: {msg}").into_bytes();
        line.truncate(MESSAGE_MAX - 1);
        line.push(b'\n');
        self.progress(&line)
    }

    /// receive-pack's own stderr, outside the muxer: what git writes there with `error()` (a
    /// missing object after the unpack, a hook that cannot start, the output of the
    /// reference-transaction and push-to-checkout hooks). The client sees it over ssh and a
    /// local push, not over smart HTTP.
    pub fn stderr(&mut self) -> &mut E {
        &mut self.err
    }

    /// The keepalive packet `0005\1`; nothing without sideband.
    pub fn keepalive(&mut self) -> io::Result<()> {
        if self.mode == Mode::Band64k {
            self.out.write_all(b"0005\x01")?;
            self.out.flush()?;
        }
        Ok(())
    }

    /// End the conversation: the final flush packet git sends after everything when the
    /// sideband is in use.
    pub fn finish(&mut self) -> io::Result<()> {
        if self.mode == Mode::Band64k {
            self.out.write_all(b"0000")?;
        }
        self.flush()
    }

    /// Flush both outputs.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()?;
        self.err.flush()
    }

    fn band(&mut self, band: u8, bytes: &[u8]) -> io::Result<()> {
        match self.mode {
            Mode::None if band == 1 => self.out.write_all(bytes),
            Mode::None => self.err.write_all(bytes),
            Mode::Band64k => {
                for chunk in bytes.chunks(BAND_64K_DATA_MAX) {
                    write!(self.out, "{:04x}", chunk.len() + 5)?;
                    self.out.write_all(&[band])?;
                    self.out.write_all(chunk)?;
                }
                Ok(())
            }
        }
    }
}

/// Band 1 being written ([`Sideband::band1`]): with sideband, the bytes of the packet not yet
/// full, which only [`Band1::finish`] sends.
#[must_use = "the last packet is sent by `finish`"]
pub struct Band1<'a, W: Write, E: Write> {
    sideband: &'a mut Sideband<W, E>,
    pending: Vec<u8>,
}

impl<W: Write, E: Write> Band1<'_, W, E> {
    /// Send what is left as the last packet (none when nothing is).
    pub fn finish(mut self) -> io::Result<()> {
        self.send_pending()
    }

    fn send_pending(&mut self) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.sideband.band(1, &self.pending)?;
        self.pending.clear();
        Ok(())
    }
}

impl<W: Write, E: Write> Write for Band1<'_, W, E> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.sideband.mode == Mode::None {
            return self.sideband.out.write(buf);
        }
        let take = buf.len().min(BAND_64K_DATA_MAX - self.pending.len());
        self.pending.extend_from_slice(&buf[..take]);
        if self.pending.len() == BAND_64K_DATA_MAX {
            self.send_pending()?;
        }
        Ok(take)
    }

    /// Flushes what was sent; a packet not yet full stays (sending it would cut the report
    /// into other packets than git's).
    fn flush(&mut self) -> io::Result<()> {
        self.sideband.out.flush()
    }
}

/// `whole` on band 1 as git's `send_sideband` sends it in one call: the tests' expectation of
/// what [`Band1`] sends however `whole` is written to it.
#[cfg(test)]
pub(crate) fn gits_band1_packets(whole: &[u8]) -> Vec<u8> {
    let mut packets = Vec::new();
    for chunk in whole.chunks(BAND_64K_DATA_MAX) {
        packets.extend(format!("{:04x}\x01", chunk.len() + 5).bytes());
        packets.extend_from_slice(chunk);
    }
    packets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bands_and_chunks() {
        let mut out = Vec::new();
        let mut err = Vec::new();
        let mut sb = Sideband::new(&mut out, &mut err, Mode::Band64k);
        sb.error("hook declined to update refs/heads/bad").unwrap();
        let mut band = sb.band1();
        band.write_all(&vec![b'x'; BAND_64K_DATA_MAX + 1]).unwrap();
        band.finish().unwrap();
        sb.keepalive().unwrap();
        sb.finish().unwrap();
        let expected_msg = b"0033\x02error: hook declined to update refs/heads/bad\n";
        assert_eq!(&out[..expected_msg.len()], expected_msg);
        let rest = &out[expected_msg.len()..];
        assert_eq!(&rest[..5], b"fff0\x01");
        let rest = &rest[5 + BAND_64K_DATA_MAX..];
        assert_eq!(rest, b"0006\x01x0005\x010000");
        assert!(err.is_empty());
    }

    /// The packets of band 1 are git's `send_sideband` cut of the whole: the same however the
    /// bytes are written (a report is written line by line).
    #[test]
    fn band1_written_in_pieces_is_cut_as_a_whole() {
        let whole: Vec<u8> = (0..3 * BAND_64K_DATA_MAX + 17).map(|i| i as u8).collect();
        let expected = gits_band1_packets(&whole);
        for piece in [1, 28, 4096, BAND_64K_DATA_MAX, BAND_64K_DATA_MAX + 3, whole.len()] {
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let mut sb = Sideband::new(&mut out, &mut err, Mode::Band64k);
            let mut band = sb.band1();
            for p in whole.chunks(piece) {
                band.write_all(p).unwrap();
                band.flush().unwrap();
            }
            band.finish().unwrap();
            assert!(out == expected, "written {piece} bytes at a time");
        }
        // Nothing written, nothing sent.
        let (mut out, mut err) = (Vec::new(), Vec::new());
        Sideband::new(&mut out, &mut err, Mode::Band64k)
            .band1()
            .finish()
            .unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn without_sideband_messages_go_to_stderr() {
        let mut out = Vec::new();
        let mut err = Vec::new();
        let mut sb = Sideband::new(&mut out, &mut err, Mode::None);
        sb.warning("deleting a non-existent ref").unwrap();
        let mut band = sb.band1();
        band.write_all(b"000eunpack ok\n0000").unwrap();
        band.finish().unwrap();
        sb.keepalive().unwrap();
        sb.finish().unwrap();
        assert_eq!(out, b"000eunpack ok\n0000");
        assert_eq!(err, b"warning: deleting a non-existent ref\n");
    }
}
