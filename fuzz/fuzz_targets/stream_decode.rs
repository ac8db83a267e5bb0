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
        format!("{whole:?}"),
        format!("{pieces:?}"),
        "the chunking changed the decoded events"
    );
});
