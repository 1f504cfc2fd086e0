//! The bounds every history reader reads within, whatever its format: a
//! line longer than a cap is an error named by its line, found without
//! holding the whole line (`analyze /dev/zero` ends at the cap), and a
//! UTF-8 byte-order mark at the start is skipped.

use std::fmt;
use std::io::{self, Read};

/// The longest line a history may have, by default: 16 MiB. An event is a
/// few hundred bytes; a line this long is not a history's.
pub const DEFAULT_MAX_LINE_BYTES: u64 = 16 << 20;

/// The byte-order mark some editors put at the start of a UTF-8 file.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// A line went past the cap: the io error a [`Capped`] reader gives, which
/// the readers turn into an error naming the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineTooLong {
    /// The line's number, from 1.
    pub line: u64,
    pub max_line_bytes: u64,
}

impl LineTooLong {
    /// The cap an io error reports having hit, if it is one.
    pub fn of(error: &io::Error) -> Option<LineTooLong> {
        error.get_ref().and_then(|inner| inner.downcast_ref::<LineTooLong>()).copied()
    }
}

impl fmt::Display for LineTooLong {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line longer than {} (the cap on a line, --max-line-bytes): not a history's line",
            crate::quote::display(&Bytes(self.max_line_bytes))
        )
    }
}

impl std::error::Error for LineTooLong {}

/// A byte count as people read it: 16 MiB, 1000 bytes.
struct Bytes(u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
        for (size, unit) in UNITS {
            if self.0 >= size && self.0 % size == 0 {
                return write!(f, "{} {unit}", self.0 / size);
            }
        }
        write!(f, "{} bytes", self.0)
    }
}

/// Reads `inner`, skipping a byte-order mark at its start, and fails with
/// [`LineTooLong`] once a line has gone past `max_line_bytes`: the read
/// that crosses the cap still gives the whole lines before it, the next
/// one fails. So a reader holds at most the cap and one read's worth of
/// the long line, and never all of it.
#[derive(Debug)]
pub struct Capped<R> {
    inner: R,
    max_line_bytes: u64,
    /// Newlines read so far.
    newlines: u64,
    /// Bytes read since the last newline.
    line_bytes: u64,
    /// Whether the first bytes have been read and told from a mark.
    started: bool,
    /// First bytes held back to tell a mark, that were not one: given
    /// before any others.
    held: Vec<u8>,
    failed: Option<LineTooLong>,
}

impl<R: Read> Capped<R> {
    pub fn new(inner: R, max_line_bytes: u64) -> Capped<R> {
        Capped {
            inner,
            max_line_bytes: max_line_bytes.max(1),
            newlines: 0,
            line_bytes: 0,
            started: false,
            held: Vec::new(),
            failed: None,
        }
    }

    /// Reads the first bytes until they tell whether they are a mark, and
    /// holds them unless they are.
    fn start(&mut self) -> io::Result<()> {
        let mut held = [0u8; 3];
        let mut len = 0;
        while len < BOM.len() && held[..len] == BOM[..len] {
            match self.inner.read(&mut held[len..]) {
                Ok(0) => break,
                Ok(read) => len += read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
        self.started = true;
        if held[..len] != *BOM {
            self.held = held[..len].to_vec();
        }
        Ok(())
    }

    /// Counts what was read. A line that went past the cap fails the
    /// reader from now on, and the read is cut where that line begins
    /// (where the cap was crossed, if it began in an earlier read): its
    /// bytes are never a whole line. The length to give.
    fn count(&mut self, read: &[u8]) -> usize {
        // Where the line being read began in `read` (0 if it began before).
        let mut from = 0;
        let mut began_here = self.line_bytes == 0;
        for newline in memchr::memchr_iter(b'\n', read) {
            let before = if began_here { 0 } else { self.line_bytes };
            if before + (newline - from) as u64 > self.max_line_bytes {
                self.fail();
                return if began_here { from } else { newline };
            }
            self.newlines += 1;
            from = newline + 1;
            began_here = true;
        }
        let before = if began_here { 0 } else { self.line_bytes };
        self.line_bytes = before + (read.len() - from) as u64;
        if self.line_bytes > self.max_line_bytes {
            self.fail();
            return if began_here { from } else { read.len() };
        }
        read.len()
    }

    fn fail(&mut self) {
        let line = self.newlines + 1;
        self.failed = Some(LineTooLong { line, max_line_bytes: self.max_line_bytes });
    }
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(too_long) = self.failed {
            return Err(io::Error::new(io::ErrorKind::InvalidData, too_long));
        }
        if buf.is_empty() {
            return Ok(0);
        }
        if !self.started {
            self.start()?;
        }
        let read = if self.held.is_empty() {
            self.inner.read(buf)?
        } else {
            let len = self.held.len().min(buf.len());
            buf[..len].copy_from_slice(&self.held[..len]);
            self.held.drain(..len);
            len
        };
        match self.count(&buf[..read]) {
            // Nothing before the long line to give: it fails now.
            0 if read > 0 => self.read(buf),
            len => Ok(len),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::{Capped, LineTooLong};

    /// Reads all of `input` through a cap of `max`, a few bytes a read.
    fn read(input: &[u8], max: u64, step: usize) -> Result<Vec<u8>, LineTooLong> {
        let mut capped = Capped::new(input, max);
        let mut out = Vec::new();
        let mut buf = vec![0; step];
        loop {
            match capped.read(&mut buf) {
                Ok(0) => return Ok(out),
                Ok(read) => out.extend_from_slice(&buf[..read]),
                Err(error) => return Err(LineTooLong::of(&error).expect("a line too long")),
            }
        }
    }

    #[test]
    fn a_byte_order_mark_is_skipped_and_anything_else_kept() {
        for step in [1, 2, 3, 7, 4096] {
            assert_eq!(read(b"\xEF\xBB\xBF{}\n", 100, step).unwrap(), b"{}\n");
            assert_eq!(read(b"\xEF\xBB{}\n", 100, step).unwrap(), b"\xEF\xBB{}\n");
            assert_eq!(read(b"{}\n\xEF\xBB\xBF", 100, step).unwrap(), b"{}\n\xEF\xBB\xBF");
            assert_eq!(read(b"\xEF", 100, step).unwrap(), b"\xEF");
            assert_eq!(read(b"", 100, step).unwrap(), b"");
        }
    }

    #[test]
    fn a_line_past_the_cap_is_named_by_its_number() {
        for step in [1, 3, 5, 4096] {
            assert_eq!(read(b"12345\n123456\n", 6, step).unwrap(), b"12345\n123456\n");
            let error = read(b"12\n\n1234567\n", 6, step).unwrap_err();
            assert_eq!(error, LineTooLong { line: 3, max_line_bytes: 6 }, "step {step}");
            let error = read(b"1\n1234567", 6, step).unwrap_err();
            assert_eq!(error.line, 2, "an unterminated line too: step {step}");
        }
        let error = read(b"\n1234", 3, 1).unwrap_err();
        assert_eq!(
            error.to_string(),
            "line longer than 3 bytes (the cap on a line, --max-line-bytes): not a history's line"
        );
    }

    #[test]
    fn an_endless_line_ends_at_the_cap() {
        let mut capped = Capped::new(std::io::repeat(0), 1 << 20);
        let mut buf = vec![0; 64 << 10];
        let mut total = 0;
        let error = loop {
            match capped.read(&mut buf) {
                Ok(read) => total += read,
                Err(error) => break error,
            }
        };
        assert_eq!(LineTooLong::of(&error).map(|too_long| too_long.line), Some(1));
        assert!(total <= (1 << 20) + buf.len(), "{total}");
    }
}
