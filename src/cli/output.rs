//! Where command output goes: a buffered stdout, or a buffer in tests.

use std::io::{self, Write};

/// Command output. `writeln!(out, ...)` works on it.
pub struct Out {
    inner: Box<dyn Write + Send>,
}

impl Out {
    pub fn stdout() -> Out {
        Out {
            inner: Box::new(io::BufWriter::new(io::stdout())),
        }
    }

    /// Writes `value` as one line of JSON.
    pub fn json_line(&mut self, value: &impl serde::Serialize) -> io::Result<()> {
        serde_json::to_writer(&mut self.inner, value)?;
        self.inner.write_all(b"\n")
    }

    /// Writes `value` as pretty JSON.
    pub fn json_pretty(&mut self, value: &impl serde::Serialize) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut self.inner, value)?;
        self.inner.write_all(b"\n")
    }
}

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl Drop for Out {
    fn drop(&mut self) {
        // A closed pipe at exit is not an error worth reporting.
        self.inner.flush().ok();
    }
}
