//! The vector lane's rules: the hashing embedder is deterministic and word-based, and
//! reciprocal-rank fusion merges lanes the same way every time.

use nanobot_llm_port::{Embedder, EmbeddingModel};
use nanobot_memory_index::{
    HashingEmbedder, Hit, RRF_K, SourceKind, cosine, reciprocal_rank_fusion,
};

#[tokio::test]
async fn the_hashing_embedder_is_deterministic_and_word_based() {
    let embedder = HashingEmbedder::new(256);
    assert_eq!(
        embedder.model(),
        EmbeddingModel {
            name: "hashing-v1".into(),
            dimensions: 256
        }
    );
    let texts = [
        "The nightly backup on pluto-db-02 timed out".to_owned(),
        "backup timed out again on pluto-db-02".to_owned(),
        "The user likes green tea in the morning".to_owned(),
        "用户喜欢喝茶".to_owned(),
        "我喜欢喝茶".to_owned(),
        String::new(),
    ];
    let vectors = embedder.embed(&texts).await.unwrap();
    assert_eq!(vectors.len(), texts.len());
    assert!(vectors.iter().all(|v| v.len() == 256));
    for vector in &vectors[..5] {
        let length: f32 = vector.iter().map(|v| v * v).sum::<f32>().sqrt();
        assert!((length - 1.0).abs() < 1e-5, "{length}");
    }
    assert!(
        vectors[5].iter().all(|v| *v == 0.0),
        "no words, no direction"
    );
    assert!(cosine(&vectors[0], &vectors[1]) > cosine(&vectors[0], &vectors[2]));
    assert!(cosine(&vectors[3], &vectors[4]) > cosine(&vectors[3], &vectors[2]));
    assert_eq!(
        embedder.embed(&texts).await.unwrap(),
        vectors,
        "deterministic"
    );
    // Pinned: a release that changed the hashing would silently mix two embeddings under
    // one model name.
    let pinned = HashingEmbedder::new(8).vector("The nightly backup timed out, 备份超时");
    let rounded: Vec<i32> = pinned.iter().map(|v| (v * 1000.0).round() as i32).collect();
    insta::assert_debug_snapshot!(rounded);
    assert_eq!(cosine(&[1.0, 0.0], &[1.0, 0.0, 0.0]), 0.0, "lengths differ");
}

fn hit(source: &str, snippet: &str) -> Hit {
    Hit {
        source: source.into(),
        kind: SourceKind::History,
        at: None,
        score: 0.0,
        snippet: snippet.into(),
    }
}

#[test]
fn reciprocal_rank_fusion_favours_what_both_lanes_found() {
    let lexical = vec![
        hit("A", "lexical A"),
        hit("B", "lexical B"),
        hit("C", "lexical C"),
    ];
    let vector = vec![
        hit("B", "vector B"),
        hit("D", "vector D"),
        hit("A", "vector A"),
    ];
    let fused = reciprocal_rank_fusion(&[lexical.clone(), vector.clone()], 10);
    let order: Vec<&str> = fused.iter().map(|h| h.source.as_str()).collect();
    assert_eq!(order, ["B", "A", "D", "C"]);
    let expected_b = 1.0 / (RRF_K + 2.0) + 1.0 / (RRF_K + 1.0);
    assert!((fused[0].score - expected_b).abs() < 1e-12);
    assert_eq!(fused[0].snippet, "lexical B", "the first lane's snippet");
    assert_eq!(fused[2].snippet, "vector D");
    assert_eq!(
        reciprocal_rank_fusion(&[lexical.clone(), vector], 2).len(),
        2
    );
    // Ties (one lane each, same rank) by source; one lane alone keeps its order.
    let tied = reciprocal_rank_fusion(&[vec![hit("Z", "")], vec![hit("Y", "")]], 5);
    assert_eq!(tied[0].source, "Y");
    let alone = reciprocal_rank_fusion(std::slice::from_ref(&lexical), 5);
    let order: Vec<&str> = alone.iter().map(|h| h.source.as_str()).collect();
    assert_eq!(order, ["A", "B", "C"]);
    assert!(reciprocal_rank_fusion(&[], 5).is_empty());
}

#[tokio::test]
async fn the_in_memory_index_passes_the_vector_suite() {
    let index = nanobot_memory_index::InMemoryIndex::new();
    nanobot_memory_index::conformance::vector_suite(&index)
        .await
        .unwrap();
}
