//! Lines read from a child's pipe with a ceiling on what is held: a process that
//! writes without a newline cannot make the reader buffer without end (an MCP
//! server's 2.6 GB of stderr once took the daemon to 2.5 GiB).
//!
//! The invariant: a [`BoundedLines`] holds at most its `max` bytes of a line plus its
//! read buffer, whatever the child writes; the rest of a long line is counted and
//! dropped, and the line is reported as cut.

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// One line (without its newline), whole or cut to the reader's `max`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub bytes: Vec<u8>,
    /// Bytes of the line dropped past `max`.
    pub dropped: u64,
}

impl Line {
    /// The line as text for a log or a message: invalid UTF-8 replaced, a cut line
    /// marked with how much was dropped.
    pub fn text(&self) -> String {
        let text = String::from_utf8_lossy(&self.bytes);
        if self.dropped == 0 {
            text.into_owned()
        } else {
            format!("{text}[… {} more bytes of this line dropped]", self.dropped)
        }
    }
}

/// Lines of at most `max` bytes from `R`.
pub struct BoundedLines<R> {
    reader: BufReader<R>,
    max: usize,
}

impl<R: AsyncRead + Unpin> BoundedLines<R> {
    pub fn new(pipe: R, max: usize) -> BoundedLines<R> {
        BoundedLines {
            reader: BufReader::new(pipe),
            max,
        }
    }
}

impl<R: AsyncRead + Unpin> BoundedLines<R> {
    /// The next line; `None` at end of stream. A last line without a newline counts.
    /// Not cancellation safe: a line half read is lost when the future is dropped.
    pub async fn next_line(&mut self) -> std::io::Result<Option<Line>> {
        let mut line = Line {
            bytes: Vec::new(),
            dropped: 0,
        };
        let mut any = false;
        loop {
            let available = self.reader.fill_buf().await?;
            if available.is_empty() {
                return Ok(any.then_some(line));
            }
            any = true;
            let newline = available.iter().position(|b| *b == b'\n');
            let part = &available[..newline.unwrap_or(available.len())];
            let room = self.max.saturating_sub(line.bytes.len()).min(part.len());
            line.bytes.extend_from_slice(&part[..room]);
            line.dropped += (part.len() - room) as u64;
            let used = newline.map_or(available.len(), |i| i + 1);
            self.reader.consume(used);
            if newline.is_some() {
                return Ok(Some(line));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], max: usize) -> Vec<Line> {
        let mut r = BoundedLines::new(input, max);
        let mut out = Vec::new();
        while let Some(l) = r.next_line().await.unwrap() {
            out.push(l);
        }
        out
    }

    fn line(bytes: &[u8], dropped: u64) -> Line {
        Line {
            bytes: bytes.to_vec(),
            dropped,
        }
    }

    #[tokio::test]
    async fn short_lines_come_whole_and_a_long_one_is_cut_and_counted() {
        let mut input = b"one\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 100_000));
        input.extend(b"\ntwo");
        assert_eq!(
            lines(&input, 10).await,
            [
                line(b"one", 0),
                line(b"xxxxxxxxxx", 99_990),
                line(b"two", 0)
            ]
        );
        assert_eq!(
            line(b"ab", 3).text(),
            "ab[… 3 more bytes of this line dropped]"
        );
        assert!(lines(b"", 10).await.is_empty());
        assert_eq!(lines(b"\n", 10).await, [line(b"", 0)]);
    }
}
