//! A sandboxed command's output, captured: stdout and stderr drained into buffers
//! that keep the first and last half of the cap and count what came between. The
//! readers keep draining past the cap, so the command never blocks on a full pipe; far
//! past it, the launcher is told to stop the command.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use familiar_sandbox::exec::{HelperReport, REPORT_PREFIX};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use tokio::process::Child;
use tokio::sync::{Notify, SemaphorePermit};
use tokio::task::JoinHandle;

/// After the helper is gone, how long the readers may take to see end-of-file.
const DRAIN_GRACE: Duration = Duration::from_secs(2);
/// Output past `cap * OVERFLOW_KILL_FACTOR` on one stream kills the command: it is
/// not going to say anything useful in the part we would keep.
pub const OVERFLOW_KILL_FACTOR: u64 = 8;
const READ_CHUNK: usize = 64 * 1024;
/// The longest helper report line read as one (it is a short JSON object).
const MAX_REPORT_LINE: u64 = 64 * 1024;

/// The helper's stdout and stderr, each drained in the background into a [`Capped`]
/// buffer; stderr's first line is the helper's report.
pub(super) struct Streams {
    stdout: Arc<Mutex<Capped>>,
    stderr: Arc<Mutex<Capped>>,
    out_task: Option<JoinHandle<()>>,
    err_task: Option<JoinHandle<Option<HelperReport>>>,
}

impl Streams {
    /// Takes the child's pipes and starts their readers; more than the cap times
    /// [`OVERFLOW_KILL_FACTOR`] on one stream notifies `overflow`. The start `permit`
    /// goes back once the report is in.
    pub(super) fn start(
        child: &mut Child,
        cap: usize,
        overflow: &Arc<Notify>,
        permit: Option<SemaphorePermit<'static>>,
    ) -> Streams {
        let stdout = Arc::new(Mutex::new(Capped::new(cap)));
        let stderr = Arc::new(Mutex::new(Capped::new(cap)));
        let out_task = child
            .stdout
            .take()
            .map(|pipe| tokio::spawn(drain(pipe, stdout.clone(), overflow.clone())));
        let err_task = child
            .stderr
            .take()
            .map(|pipe| tokio::spawn(drain_stderr(pipe, stderr.clone(), overflow.clone(), permit)));
        Streams {
            stdout,
            stderr,
            out_task,
            err_task,
        }
    }

    /// The helper's report, once the helper is gone.
    pub(super) async fn report(&mut self) -> Option<HelperReport> {
        match self.err_task.take() {
            Some(task) => {
                // Drained in the background: the report line came first, long ago.
                match tokio::time::timeout(DRAIN_GRACE, task).await {
                    Ok(Ok(report)) => report,
                    Ok(Err(_)) | Err(_) => None,
                }
            }
            None => None,
        }
    }

    /// Stdout and stderr as kept, and whether either was cut, once stdout is at its end
    /// (or [`DRAIN_GRACE`] passed).
    pub(super) async fn finish(self) -> (String, String, bool) {
        if let Some(task) = self.out_task
            && tokio::time::timeout(DRAIN_GRACE, task).await.is_err()
        {
            tracing::warn!("sandboxed command left its stdout open after exiting");
        }
        let (stdout, out_cut) = take(&self.stdout);
        let (stderr, err_cut) = take(&self.stderr);
        (stdout, stderr, out_cut || err_cut)
    }
}

/// Reads the helper's report line, then drains the rest like stdout. The start permit
/// goes back once the report is in (the helper is set up, or gone).
async fn drain_stderr(
    pipe: impl AsyncRead + Unpin,
    buf: Arc<Mutex<Capped>>,
    overflow: Arc<Notify>,
    permit: Option<SemaphorePermit<'static>>,
) -> Option<HelperReport> {
    let mut reader = BufReader::new(pipe);
    let mut first = Vec::new();
    // The report is one short line; whatever a command writes when there is none
    // (a helper that failed early) goes to the capped buffer, not into this one.
    let mut report_line = (&mut reader).take(MAX_REPORT_LINE);
    if let Err(e) = report_line.read_until(b'\n', &mut first).await {
        tracing::debug!("sandbox stderr: {e}");
    }
    drop(permit);
    let report = std::str::from_utf8(&first)
        .ok()
        .and_then(|l| l.strip_prefix(REPORT_PREFIX))
        .and_then(|json| serde_json::from_str(json.trim_end()).ok());
    if report.is_none() {
        lock(&buf).push(&first);
    }
    drain(reader, buf, overflow).await;
    report
}

async fn drain(mut pipe: impl AsyncRead + Unpin, buf: Arc<Mutex<Capped>>, overflow: Arc<Notify>) {
    let mut chunk = vec![0u8; READ_CHUNK];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) => return,
            Ok(n) => {
                let mut b = lock(&buf);
                b.push(&chunk[..n]);
                if b.total > (b.half as u64 * 2).saturating_mul(OVERFLOW_KILL_FACTOR) {
                    overflow.notify_one();
                }
            }
            Err(e) => {
                tracing::debug!("sandbox output: {e}");
                return;
            }
        }
    }
}

fn lock(buf: &Mutex<Capped>) -> std::sync::MutexGuard<'_, Capped> {
    buf.lock().unwrap_or_else(PoisonError::into_inner)
}

fn take(buf: &Mutex<Capped>) -> (String, bool) {
    lock(buf).finish()
}

/// The first and last `cap / 2` bytes of a stream, and how many came in between.
#[derive(Debug)]
struct Capped {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    half: usize,
    total: u64,
}

impl Capped {
    fn new(cap: usize) -> Capped {
        Capped {
            head: Vec::new(),
            tail: VecDeque::new(),
            half: cap / 2,
            total: 0,
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = self.half.saturating_sub(self.head.len()).min(bytes.len());
        self.head.extend_from_slice(&bytes[..room]);
        bytes = &bytes[room..];
        if bytes.len() >= self.half {
            self.tail.clear();
            bytes = &bytes[bytes.len() - self.half..];
        }
        self.tail.extend(bytes);
        let excess = self.tail.len().saturating_sub(self.half);
        self.tail.drain(..excess);
    }

    fn finish(&mut self) -> (String, bool) {
        let kept = (self.head.len() + self.tail.len()) as u64;
        let omitted = self.total - kept;
        let mut out = String::from_utf8_lossy(&self.head).into_owned();
        if omitted > 0 {
            out.push_str(&format!("\n[… {omitted} bytes omitted …]\n"));
        }
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        out.push_str(&String::from_utf8_lossy(&tail));
        (out, omitted > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capped_keeps_head_and_tail_and_counts_the_middle() {
        let mut c = Capped::new(8);
        c.push(b"abcdefgh");
        c.push(b"ijklmnop");
        assert_eq!(
            c.finish(),
            ("abcd\n[… 8 bytes omitted …]\nmnop".to_owned(), true)
        );
    }

    #[test]
    fn capped_under_the_cap_is_verbatim() {
        let mut c = Capped::new(100);
        c.push(b"hello\n");
        assert_eq!(c.finish(), ("hello\n".to_owned(), false));
    }
}
