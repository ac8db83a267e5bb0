//! Server-sent events: bytes to SSE events (eventsource-stream, not a hand-written
//! parser) and SSE events to [`StreamEvent`]s through a provider's `Decoder`.
//!
//! The decoding is pure: the same functions run over a live HTTP body, a recorded
//! fixture and a benchmark, and any split of the bytes into chunks yields the same
//! events (proptested in `tests/suite/llm/decode.rs`). This module knows no provider:
//! each provider's file brings its decoder, and `llm::decoder` picks one by kind.

use std::collections::VecDeque;
use std::pin::Pin;

use bytes::Bytes;
use eventsource_stream::{EventStream, EventStreamError};
use futures::{Stream, StreamExt};

use super::{LlmError, StreamEvent};

pub use eventsource_stream::Event;

/// Turns one provider's SSE events into [`StreamEvent`]s.
pub(crate) trait Decoder: Send {
    /// Feeds one event; returns `true` once the stream's end marker arrived.
    fn event(&mut self, ev: &Event, out: &mut VecDeque<StreamEvent>) -> Result<bool, LlmError>;

    /// Called once, at the end marker or at end of input; emits the closing events
    /// (usage, finish) or fails with [`LlmError::Truncated`] if the response was cut.
    fn finish(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<(), LlmError>;
}

pub(crate) type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, LlmError>> + Send>>;
pub(crate) type SseStream = Pin<Box<dyn Stream<Item = Result<Event, LlmError>> + Send>>;

/// SSE events from a byte stream; transport errors pass through as they are.
pub(crate) fn events(bytes: ByteStream) -> SseStream {
    Box::pin(EventStream::new(bytes).map(|item| {
        item.map_err(|e| match e {
            EventStreamError::Transport(e) => e,
            EventStreamError::Utf8(e) => LlmError::Protocol(format!("stream is not UTF-8: {e}")),
            EventStreamError::Parser(e) => LlmError::Protocol(format!("bad SSE line: {e}")),
        })
    }))
}

/// One event per line of a newline-delimited JSON body (Ollama's `/api/chat`), its
/// `data` the line; blank lines are skipped and a last line without its newline counts.
/// Same contract as [`events`], so the decoders and the drive do not care which.
pub(crate) fn ndjson_lines(bytes: ByteStream) -> SseStream {
    struct Lines {
        bytes: ByteStream,
        buf: Vec<u8>,
        ended: bool,
    }
    fn take_line(buf: &mut Vec<u8>, at_end: bool) -> Option<Vec<u8>> {
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                let mut line: Vec<u8> = buf.drain(..=i).collect();
                line.pop();
                Some(line)
            }
            None if at_end && !buf.is_empty() => Some(std::mem::take(buf)),
            None => None,
        }
    }
    let state = Lines {
        bytes,
        buf: Vec::new(),
        ended: false,
    };
    Box::pin(futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(line) = take_line(&mut st.buf, st.ended) {
                let text = match String::from_utf8(line) {
                    Ok(t) => t,
                    Err(e) => {
                        st.ended = true;
                        st.buf.clear();
                        let err = LlmError::Protocol(format!("stream is not UTF-8: {e}"));
                        return Some((Err(err), st));
                    }
                };
                let data = text.trim();
                if data.is_empty() {
                    continue;
                }
                let ev = Event {
                    data: data.to_owned(),
                    ..Event::default()
                };
                return Some((Ok(ev), st));
            }
            if st.ended {
                return None;
            }
            match st.bytes.next().await {
                Some(Ok(chunk)) => st.buf.extend_from_slice(&chunk),
                Some(Err(e)) => {
                    st.ended = true;
                    st.buf.clear();
                    return Some((Err(e), st));
                }
                None => st.ended = true,
            }
        }
    }))
}

/// Decodes `chunks` (a recorded NDJSON body, split anywhere) to line events.
pub fn decode_ndjson(chunks: Vec<Bytes>) -> Result<Vec<Event>, LlmError> {
    let bytes: ByteStream = Box::pin(futures::stream::iter(chunks.into_iter().map(Ok)));
    futures::executor::block_on(ndjson_lines(bytes).collect::<Vec<_>>())
        .into_iter()
        .collect()
}

/// The most a model's response body may hold. A real answer streams a few hundred
/// bytes of SSE framing per token, so this allows ~80k output tokens; past it the
/// response is abandoned instead of growing the daemon's memory without bound.
pub const MAX_RESPONSE_BYTES: usize = 16 << 20;

/// Fails the byte stream with [`LlmError::Protocol`] once more than `max` bytes came.
pub(crate) fn size_guard(bytes: ByteStream, max: usize) -> ByteStream {
    Box::pin(futures::stream::unfold(
        Some((bytes, 0usize)),
        move |state| async move {
            let (mut bytes, seen) = state?;
            match bytes.next().await? {
                Ok(chunk) if seen + chunk.len() > max => Some((
                    Err(LlmError::Protocol(format!(
                        "the response passed {} MiB and was abandoned (a runaway model?)",
                        max >> 20
                    ))),
                    None,
                )),
                Ok(chunk) => {
                    let seen = seen + chunk.len();
                    Some((Ok(chunk), Some((bytes, seen))))
                }
                Err(e) => Some((Err(e), None)),
            }
        },
    ))
}

/// Decodes `chunks` (a recorded body, split anywhere) to SSE events.
pub fn decode_sse(chunks: Vec<Bytes>) -> Result<Vec<Event>, LlmError> {
    let bytes: ByteStream = Box::pin(futures::stream::iter(chunks.into_iter().map(Ok)));
    futures::executor::block_on(events(bytes).collect::<Vec<_>>())
        .into_iter()
        .collect()
}

/// Decodes a recorded response body, split into `chunks`, through `dec` to the events
/// a live stream would yield (the error, if any, last).
pub(crate) fn decode_with(
    mut dec: Box<dyn Decoder>,
    chunks: Vec<Bytes>,
    frame: fn(ByteStream) -> SseStream,
) -> Vec<Result<StreamEvent, LlmError>> {
    let bytes: ByteStream = Box::pin(futures::stream::iter(chunks.into_iter().map(Ok)));
    let mut sse = frame(bytes);
    let mut queue = VecDeque::new();
    let mut out = Vec::new();
    let result = futures::executor::block_on(async {
        while let Some(ev) = sse.next().await {
            let done = dec.event(&ev?, &mut queue)?;
            out.extend(queue.drain(..).map(Ok));
            if done {
                break;
            }
        }
        dec.finish(&mut queue)
    });
    out.extend(queue.drain(..).map(Ok));
    if let Err(e) = result {
        out.push(Err(e));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_past_the_size_cap_is_abandoned() {
        let chunks: Vec<Result<Bytes, LlmError>> = (0..4)
            .map(|_| Ok(Bytes::from_static(b"0123456789")))
            .collect();
        let bytes: ByteStream = Box::pin(futures::stream::iter(chunks));
        let got: Vec<_> = futures::executor::block_on(size_guard(bytes, 25).collect::<Vec<_>>());
        assert_eq!(
            got.len(),
            3,
            "two chunks pass, the third fails, nothing after"
        );
        assert!(got[0].is_ok() && got[1].is_ok());
        assert!(
            matches!(&got[2], Err(LlmError::Protocol(m)) if m.contains("abandoned")),
            "{:?}",
            got[2]
        );
    }

    fn split(s: &str, at: &[usize]) -> Vec<Bytes> {
        let b = s.as_bytes();
        let mut out = Vec::new();
        let mut prev = 0;
        for &i in at {
            out.push(Bytes::copy_from_slice(&b[prev..i]));
            prev = i;
        }
        out.push(Bytes::copy_from_slice(&b[prev..]));
        out
    }

    #[test]
    fn crlf_split_between_cr_and_lf_is_one_event() {
        let body = "event: a\r\ndata: 1\r\n\r\nevent: b\r\ndata: 2\r\n\r\n";
        let whole = decode_sse(split(body, &[])).unwrap();
        assert_eq!(whole.len(), 2);
        for i in 1..body.len() {
            assert_eq!(
                decode_sse(split(body, &[i])).unwrap(),
                whole,
                "split at {i}"
            );
        }
    }

    #[test]
    fn comments_and_multiline_data() {
        let body = ": keepalive\ndata: a\ndata: b\n\n";
        let ev = decode_sse(split(body, &[3, 12])).unwrap();
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].data, "a\nb");
        assert_eq!(ev[0].event, "message");
    }
}
