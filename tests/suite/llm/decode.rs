//! Recorded streams (from the providers' documented examples) decode to the expected
//! events, whatever the chunking.
// Test helpers: a failed setup step should fail the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use familiar::config::ProviderKind;
use familiar::llm::decode_recorded;
use familiar::llm::sse::decode_sse;
use proptest::prelude::*;

const FIXTURES: &[(&str, ProviderKind)] = &[
    ("openai_text", ProviderKind::Openai),
    ("openai_tool_call", ProviderKind::Openai),
    ("openai_parallel_tools", ProviderKind::Openai),
    ("openai_reasoning", ProviderKind::Openai),
    ("anthropic_text", ProviderKind::Anthropic),
    ("anthropic_tool_use", ProviderKind::Anthropic),
    ("anthropic_parallel_tools", ProviderKind::Anthropic),
    ("anthropic_thinking", ProviderKind::Anthropic),
];

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/tests/fixtures/llm/{name}.sse",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap()
}

/// Splits `body` at the given (sorted, deduplicated) byte offsets.
fn split_at(body: &[u8], cuts: &[usize]) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut prev = 0;
    for &c in cuts {
        out.push(Bytes::copy_from_slice(&body[prev..c]));
        prev = c;
    }
    out.push(Bytes::copy_from_slice(&body[prev..]));
    out
}

#[test]
fn fixtures_decode_to_the_documented_events() {
    for (name, kind) in FIXTURES {
        let body = fixture(name);
        let events: Vec<_> = decode_recorded(*kind, vec![Bytes::from(body)])
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        insta::assert_json_snapshot!(format!("decode_{name}"), events);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_chunking_decodes_to_the_same_events(
        which in 0..FIXTURES.len(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..24),
    ) {
        let (name, kind) = FIXTURES[which];
        let body = fixture(name).into_bytes();
        let mut at: Vec<usize> = cuts.iter().map(|i| i.index(body.len())).collect();
        at.sort_unstable();
        at.dedup();
        let whole_sse = decode_sse(vec![Bytes::from(body.clone())]).unwrap();
        prop_assert_eq!(decode_sse(split_at(&body, &at)).unwrap(), whole_sse);
        let whole = decode_recorded(kind, vec![Bytes::from(body.clone())]);
        prop_assert_eq!(decode_recorded(kind, split_at(&body, &at)), whole);
    }
}
