//! `OpenAiEmbedder` against recorded llama.cpp answers: what it sends, what it reads, and
//! every way an answer can be unusable named, never a silent mix of vectors.

use std::time::Duration;

use nanobot_llm_http::testing::{FakeServer, Reply};
use nanobot_llm_http::{ApiKey, Timeouts};
use nanobot_llm_openai::{EMBEDDING_BATCH, OpenAiConfig, OpenAiEmbedder};
use nanobot_llm_port::{Embedder, EmbeddingModel, LlmError};
use serde_json::{Value, json};

use crate::fixture;

const MODEL: &str = "qwen2.5-coder-1.5b-instruct";

fn embedder(server: &FakeServer, dimensions: usize) -> OpenAiEmbedder {
    OpenAiEmbedder::new(
        OpenAiConfig::new(format!("{}/v1", server.url()), MODEL)
            .with_api_key(ApiKey::new("sk-test-SECRET-42"))
            .with_timeouts({
                let mut value = Timeouts::default();
                value.connect = Duration::from_secs(2);
                value.idle = Duration::from_millis(800);
                value
            }),
        dimensions,
    )
    .unwrap()
}

fn texts(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("text {i}")).collect()
}

/// An answer with `vectors[i]` for input `i`, listed in `order`.
fn answer(vectors: &[Vec<f32>], order: &[usize]) -> Reply {
    let data: Vec<Value> = order
        .iter()
        .map(|&i| json!({"object": "embedding", "index": i, "embedding": vectors[i]}))
        .collect();
    Reply::json(
        200,
        &json!({"object": "list", "model": MODEL, "data": data}),
    )
}

#[tokio::test]
async fn a_recorded_llama_cpp_answer_gives_one_vector_per_text() {
    let recorded: Value = serde_json::from_str(&fixture("llamacpp_embeddings.json")).unwrap();
    let server = FakeServer::start(vec![Reply::json(200, &recorded)]).await;
    let embedder = embedder(&server, 1536);
    assert_eq!(
        embedder.model(),
        EmbeddingModel {
            name: MODEL.into(),
            dimensions: 1536
        }
    );
    let inputs = vec![
        "The nightly backup timed out".to_owned(),
        "备份超时".to_owned(),
    ];
    let vectors = embedder.embed(&inputs).await.unwrap();
    assert_eq!(vectors.len(), 2);
    assert!(vectors.iter().all(|v| v.len() == 1536));
    let first = recorded["data"][0]["embedding"][0].as_f64().unwrap() as f32;
    assert_eq!(vectors[0][0], first);
    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1/embeddings");
    assert_eq!(
        sent.json(),
        json!({"model": MODEL, "input": inputs, "encoding_format": "float"})
    );
    assert_eq!(
        sent.header("authorization"),
        Some("Bearer sk-test-SECRET-42")
    );
    // No text, no request.
    assert!(embedder.embed(&[]).await.unwrap().is_empty());
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn many_texts_go_in_batches_and_come_back_in_their_order() {
    let n = EMBEDDING_BATCH + 3;
    let vectors: Vec<Vec<f32>> = (0..n).map(|i| vec![i as f32, 1.0]).collect();
    let first: Vec<usize> = (0..EMBEDDING_BATCH).rev().collect();
    let second_vectors: Vec<Vec<f32>> = vectors[EMBEDDING_BATCH..].to_vec();
    let server = FakeServer::start(vec![
        answer(&vectors[..EMBEDDING_BATCH], &first),
        answer(&second_vectors, &[2, 0, 1]),
    ])
    .await;
    let got = embedder(&server, 2).embed(&texts(n)).await.unwrap();
    assert_eq!(got, vectors);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[1].json()["input"],
        json!(["text 64", "text 65", "text 66"])
    );
}

#[tokio::test]
async fn an_unusable_answer_is_an_error_naming_what_is_wrong() {
    let two = vec![vec![0.5, 0.5], vec![0.1, 0.9]];
    // (the answer, the dimensions configured, what the error must say)
    let cases: Vec<(Reply, usize, &str)> = vec![
        (
            answer(&two, &[0, 1]),
            3,
            "2 numbers per vector; the model is configured with 3",
        ),
        (answer(&two[..1], &[0]), 2, "1 vectors for 2 texts"),
        (answer(&two, &[0, 0]), 2, "index 0 given twice"),
        (
            Reply::json(
                200,
                &json!({"data": [{"index": 0, "embedding": [1, 2, 3]}, {"index": 7, "embedding": [1, 2, 3]}]}),
            ),
            3,
            "index 7 out of range",
        ),
        (
            Reply::json(
                200,
                &json!({"data": [{"index": 0, "embedding": [1, "x", 3]}, {"index": 1, "embedding": [1, 2, 3]}]}),
            ),
            3,
            "other than numbers",
        ),
        (
            Reply::json(200, &json!({"object": "list"})),
            2,
            "no `data` list",
        ),
    ];
    for (reply, dimensions, expected) in cases {
        let server = FakeServer::start(vec![reply]).await;
        let error = embedder(&server, dimensions)
            .embed(&texts(2))
            .await
            .unwrap_err();
        assert!(
            matches!(error, LlmError::InvalidResponse { .. }),
            "{expected}: {error:?}"
        );
        assert!(error.to_string().contains(expected), "{expected}: {error}");
    }
}

#[tokio::test]
async fn a_server_without_embeddings_says_so_and_the_key_stays_secret() {
    let server = FakeServer::start(vec![Reply::json(
        501,
        &serde_json::from_str(&fixture("llamacpp_embeddings_not_enabled.json")).unwrap(),
    )])
    .await;
    let error = embedder(&server, 1536).embed(&texts(1)).await.unwrap_err();
    assert!(error.to_string().contains("--embeddings"), "{error}");
    assert!(!error.is_retryable(), "{error:?}");

    let echo = FakeServer::start(vec![Reply::json(
        401,
        &json!({"error": {"message": "Incorrect API key provided: sk-test-SECRET-42", "type": "invalid_request_error"}}),
    )])
    .await;
    let error = embedder(&echo, 8).embed(&texts(1)).await.unwrap_err();
    assert!(
        !format!("{error} {error:?}").contains("SECRET"),
        "{error:?}"
    );
    assert!(OpenAiEmbedder::new(OpenAiConfig::new("http://127.0.0.1:1/v1", MODEL), 0).is_err());
}
