//! Both providers' stream decoders (SSE framing, JSON, tool-call accumulation) on
//! arbitrary bytes in arbitrary chunkings: never a panic, and the chunking never
//! changes the result (the body decoded whole must equal the body decoded in pieces).
#![no_main]

use bytes::Bytes;
use familiar::config::ProviderKind;
use familiar::llm::decode_recorded;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Byte 0: the provider; byte 1: how many split points; then the split points; the
    // rest is the body.
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    let kind = if kind & 1 == 0 {
        ProviderKind::Openai
    } else {
        ProviderKind::Anthropic
    };
    let Some((&n, rest)) = rest.split_first() else {
        return;
    };
    let n = usize::from(n % 16).min(rest.len());
    let (cuts, body) = rest.split_at(n);
    let mut points: Vec<usize> = cuts
        .iter()
        .map(|c| usize::from(*c) * body.len() / 256)
        .collect();
    points.sort_unstable();
    let mut chunks = Vec::new();
    let mut at = 0;
    for p in points {
        chunks.push(Bytes::copy_from_slice(&body[at..p]));
        at = p;
    }
    chunks.push(Bytes::copy_from_slice(&body[at..]));
    let pieces = decode_recorded(kind, chunks);
    let whole = decode_recorded(kind, vec![Bytes::copy_from_slice(body)]);
    assert_eq!(
        without_generated_ids(&format!("{whole:?}")),
        without_generated_ids(&format!("{pieces:?}")),
        "the chunking changed the decoded events"
    );
});

/// A tool call without an id gets a random one (`call-` and 12 hex digits): the two
/// decodes differ there by design, so those ids are blanked before comparing.
fn without_generated_ids(text: &str) -> String {
    const PREFIX: &str = "CallId(\"call-";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(PREFIX) {
        let (head, tail) = rest.split_at(at + PREFIX.len());
        out.push_str(head);
        let hex = tail.bytes().take_while(u8::is_ascii_hexdigit).count();
        if hex == 12 && tail[12..].starts_with("\")") {
            out.push_str("GENERATED");
            rest = &tail[12..];
        } else {
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}
