//! pkt-line framing: reading the client's packets with git's limits and git's error messages,
//! and writing packets.
//!
//! Writing goes through `gix-packetline`'s encoder. Reading is our own small loop because git's
//! reader accepts things `gix-packetline` refuses (the empty `0004` data packet, payloads of up to
//! 65519 bytes) and because a client must see git's exact wording for a malformed length
//! (`protocol error: bad line length character: …`).

use std::io::{self, Read, Write};

/// git's `LARGE_PACKET_MAX`: the largest packet git writes; its reader accepts payloads shorter than this.
pub const LARGE_PACKET_MAX: usize = 65520;
/// The largest payload git writes in one data packet.
pub const LARGE_PACKET_DATA_MAX: usize = LARGE_PACKET_MAX - 4;

/// One packet read from the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packet<'a> {
    /// `0000`
    Flush,
    /// `0001`
    Delimiter,
    /// `0002`
    ResponseEnd,
    /// A data packet's payload (possibly empty, from `0004`).
    Data(&'a [u8]),
}

/// Why a packet could not be read. The `Display` text is git's.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The stream ended in or before a packet.
    #[error("the remote end hung up unexpectedly")]
    HungUp,
    /// The four length bytes were not hex.
    #[error("protocol error: bad line length character: {0}")]
    BadLengthCharacter(String),
    /// The length was 3 or more than git accepts.
    #[error("protocol error: bad line length {0}")]
    BadLength(usize),
    /// The client sent an `ERR` packet.
    #[error("remote error: {0}")]
    Remote(String),
    /// Reading failed.
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// Reads packets from a byte stream, one at a time, never reading past the current packet,
/// so that what follows the last packet (the pack) is left in the stream untouched.
pub struct Reader<R> {
    inner: R,
    buf: Vec<u8>,
    bytes_read: u64,
}

impl<R: Read> Reader<R> {
    /// Wrap `inner`; it should be buffered, since every packet costs two reads.
    pub fn new(inner: R) -> Self {
        Reader {
            inner,
            buf: Vec::with_capacity(256),
            bytes_read: 0,
        }
    }

    /// The number of bytes consumed so far (length prefixes included).
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// Read the next packet.
    pub fn read(&mut self) -> Result<Packet<'_>, Error> {
        let mut len = [0u8; 4];
        read_exact(&mut self.inner, &mut len)?;
        self.bytes_read += 4;
        let mut n = 0usize;
        for &b in &len {
            let digit = match b {
                b'0'..=b'9' => b - b'0',
                b'a'..=b'f' => b - b'a' + 10,
                b'A'..=b'F' => b - b'A' + 10,
                _ => {
                    return Err(Error::BadLengthCharacter(
                        String::from_utf8_lossy(&len).into_owned(),
                    ));
                }
            };
            n = n * 16 + digit as usize;
        }
        match n {
            0 => return Ok(Packet::Flush),
            1 => return Ok(Packet::Delimiter),
            2 => return Ok(Packet::ResponseEnd),
            3 => return Err(Error::BadLength(3)),
            _ => {}
        }
        // git's reader has a LARGE_PACKET_MAX buffer and needs one byte for a NUL.
        if n - 4 >= LARGE_PACKET_MAX {
            return Err(Error::BadLength(n - 4));
        }
        self.buf.resize(n - 4, 0);
        read_exact(&mut self.inner, &mut self.buf)?;
        self.bytes_read += (n - 4) as u64;
        if let Some(msg) = self.buf.strip_prefix(b"ERR ") {
            return Err(Error::Remote(String::from_utf8_lossy(msg).into_owned()));
        }
        Ok(Packet::Data(&self.buf))
    }

    /// The underlying stream, positioned right after the last packet read.
    pub fn inner_mut(&mut self) -> &mut R {
        &mut self.inner
    }

    /// Give back the underlying stream, positioned right after the last packet read.
    pub fn into_inner(self) -> R {
        self.inner
    }
}

fn read_exact(r: &mut impl Read, buf: &mut [u8]) -> Result<(), Error> {
    r.read_exact(buf).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => Error::HungUp,
        _ => Error::Io(e),
    })
}

/// Strip one trailing LF, as git's reader does with `PACKET_READ_CHOMP_NEWLINE`.
pub fn chomp(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\n").unwrap_or(line)
}

/// Append one data packet carrying `data` to `out`. `data` must not be empty nor longer than
/// [`LARGE_PACKET_DATA_MAX`].
pub fn write_data(out: &mut impl Write, data: &[u8]) -> io::Result<()> {
    gix_packetline::blocking_io::encode::data_to_write(data, out).map_err(io::Error::other)?;
    Ok(())
}

/// Append a flush packet to `out`.
pub fn write_flush(out: &mut impl Write) -> io::Result<()> {
    out.write_all(b"0000")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(bytes: &[u8]) -> Vec<Result<Vec<u8>, String>> {
        let mut r = Reader::new(bytes);
        let mut out = Vec::new();
        loop {
            match r.read() {
                Ok(Packet::Data(d)) => out.push(Ok(d.to_vec())),
                Ok(Packet::Flush) => out.push(Ok(b"<flush>".to_vec())),
                Ok(p) => out.push(Ok(format!("{p:?}").into_bytes())),
                Err(e) => {
                    out.push(Err(e.to_string()));
                    return out;
                }
            }
        }
    }

    #[test]
    fn frames_and_errors_as_git() {
        let got = read_all(b"0006a\n00040000");
        assert_eq!(got[0], Ok(b"a\n".to_vec()));
        assert_eq!(got[1], Ok(Vec::new()));
        assert_eq!(got[2], Ok(b"<flush>".to_vec()));
        assert_eq!(got[3], Err("the remote end hung up unexpectedly".into()));
        assert_eq!(
            read_all(b"00zzabc")[0],
            Err("protocol error: bad line length character: 00zz".into())
        );
        assert_eq!(
            read_all(b"0003")[0],
            Err("protocol error: bad line length 3".into())
        );
        assert_eq!(
            read_all(b"fff4")[0],
            Err("protocol error: bad line length 65520".into())
        );
        assert_eq!(read_all(b"0009ERR x")[0], Err("remote error: x".into()));
        assert_eq!(
            read_all(b"0009ab")[0],
            Err("the remote end hung up unexpectedly".into())
        );
    }

    #[test]
    fn accepts_git_maximum() {
        let mut bytes = b"fff3".to_vec();
        bytes.extend(std::iter::repeat_n(b'x', 0xfff3 - 4));
        let mut r = Reader::new(&bytes[..]);
        assert!(matches!(r.read(), Ok(Packet::Data(d)) if d.len() == 65519));
    }
}
