//! `/metrics`: who may read it (loopback, or its own key; never the chat keys), and the
//! recorder's text format (cumulative buckets, escaped labels, every series present).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use nanobot_serve::{MetricsAccess, PrometheusRecorder, ServeSettings, Server};
use tower::ServiceExt;

use crate::{agent, keys};

async fn scrape(
    access: MetricsAccess,
    peer: Option<&str>,
    bearer: Option<&str>,
) -> (StatusCode, String) {
    let mut settings = ServeSettings::new("nanobot");
    settings.keys = keys();
    settings.metrics = access;
    let llm = Arc::new(nanobot_llm_port::testing::ScriptedLlm::new());
    let router = Server::new(
        agent(
            llm,
            nanobot_turn::AgentSettings::new("nanobot", 32_768, 512),
        ),
        settings,
    )
    .with_metrics(Arc::new(|| "nanobot_up 1\n".to_owned()))
    .router();
    let mut request = Request::builder().uri("/metrics");
    if let Some(key) = bearer {
        request = request.header("authorization", format!("Bearer {key}"));
    }
    let mut request = request.body(Body::empty()).unwrap();
    if let Some(peer) = peer {
        let address: SocketAddr = peer.parse().unwrap();
        request.extensions_mut().insert(ConnectInfo(address));
    }
    let response = router.oneshot(request).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn metrics_answer_loopback_or_their_own_key_only() {
    assert_eq!(
        scrape(MetricsAccess::Loopback, Some("127.0.0.1:5000"), None)
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(
        scrape(MetricsAccess::Loopback, Some("[::1]:5000"), None)
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(
        scrape(MetricsAccess::Loopback, Some("10.1.2.3:5000"), None)
            .await
            .0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        scrape(
            MetricsAccess::Loopback,
            Some("10.1.2.3:5000"),
            Some("sk-alice")
        )
        .await
        .0,
        StatusCode::FORBIDDEN,
        "a chat key does not open it"
    );
    let key = MetricsAccess::Key("m-secret".into());
    assert_eq!(
        scrape(key.clone(), Some("10.1.2.3:5000"), Some("m-secret")).await,
        (StatusCode::OK, "nanobot_up 1\n".into())
    );
    assert_eq!(
        scrape(key.clone(), Some("127.0.0.1:5000"), None).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        scrape(key, Some("127.0.0.1:5000"), Some("sk-alice"))
            .await
            .0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        scrape(MetricsAccess::Off, Some("127.0.0.1:5000"), None)
            .await
            .0,
        StatusCode::NOT_FOUND
    );
}

#[test]
fn the_recorder_renders_prometheus_text() {
    let recorder = PrometheusRecorder::new();
    metrics::with_local_recorder(&recorder, || {
        metrics::describe_histogram!("t_seconds", metrics::Unit::Seconds, "A latency.");
        metrics::counter!("t_total", "kind" => "a\"b\\c\nd").increment(2);
        metrics::counter!("t_total", "kind" => "plain").increment(1);
        metrics::gauge!("t_open").set(3.0);
        metrics::gauge!("t_open").decrement(1.0);
        for value in [0.0005, 0.02, 0.02, 500.0] {
            metrics::histogram!("t_seconds", "lane" => "words").record(value);
        }
    });
    let text = recorder.render();
    for line in [
        "# TYPE t_total counter",
        r#"t_total{kind="a\"b\\c\nd"} 2"#,
        r#"t_total{kind="plain"} 1"#,
        "# TYPE t_open gauge",
        "t_open 2",
        "# HELP t_seconds A latency. (in seconds)",
        "# TYPE t_seconds histogram",
        r#"t_seconds_bucket{lane="words",le="0.001"} 1"#,
        r#"t_seconds_bucket{lane="words",le="0.01"} 1"#,
        r#"t_seconds_bucket{lane="words",le="0.025"} 3"#,
        r#"t_seconds_bucket{lane="words",le="300"} 3"#,
        r#"t_seconds_bucket{lane="words",le="+Inf"} 4"#,
        r#"t_seconds_count{lane="words"} 4"#,
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
    assert!(
        text.contains(r#"t_seconds_sum{lane="words"} 500.04"#),
        "{text}"
    );
}
