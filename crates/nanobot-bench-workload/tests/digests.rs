//! The replay check of workload.md section 2.6: our generator makes the peer's bytes.

use nanobot_bench_workload::{
    SEED, SplitMix64, canonical_jsonl, fake_summary, history_entries, memory_md, message_stream,
};
use sha2::{Digest, Sha256};

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn splitmix_test_vector() {
    let mut rng = SplitMix64::new(SEED);
    assert_eq!(
        [rng.next_u64(), rng.next_u64(), rng.next_u64()],
        [
            13679457532755275413,
            2949826092126892291,
            5139283748462763858
        ]
    );
}

#[test]
fn message_stream_matches_peer_digest_and_mix() {
    let stream = message_stream(SEED, 10_000);
    assert_eq!(
        sha256_hex(canonical_jsonl(&stream).as_bytes()),
        "9d2a7ebf45e9bfe6604843fbae5f16cc0d931a9c53aa1df671f41bb038f13b45"
    );
    let count = |role: &str| stream.iter().filter(|m| m["role"] == role).count();
    assert_eq!(
        (count("user"), count("assistant"), count("tool")),
        (4027, 5000, 973)
    );
}

#[test]
fn other_inputs_match_peer_digests() {
    assert_eq!(
        sha256_hex(history_entries(SEED + 1, 10_000).join("\n").as_bytes()),
        "738c8a261bfc61a93f71cda37617b04e2a02da72e5b07fe3539d320084e1be8c"
    );
    let memory = memory_md(SEED, 20_480);
    assert!(memory.len() <= 20_480);
    assert_eq!(
        sha256_hex(memory.as_bytes()),
        "1446d7ba6ceca6b2f29a00cf43ba6c6c4466ca68f13e8375c3cf0da151657851"
    );
    assert_eq!(
        sha256_hex(fake_summary(SEED).as_bytes()),
        "5676591af6439aa506904b9e863a312eb841598da8f8d9830989e296d3d6eaca"
    );
}
