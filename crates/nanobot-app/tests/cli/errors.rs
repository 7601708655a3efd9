//! The app's error keeps its chain: a failed turn leads to its cause, and that cause to the
//! model's (or a store's) own error.

use std::error::Error;

use nanobot_app::{AppError, Saved};
use nanobot_llm_port::LlmError;

#[test]
fn a_failed_turn_keeps_its_cause_and_the_models_error_beneath() {
    let failed = AppError::Turn {
        key: "cli:direct".into(),
        saved: Saved::UserMessage,
        cause: Box::new(AppError::from(LlmError::transient("the server went away"))),
    };
    let cause = failed.source().expect("the turn's cause");
    assert!(
        cause.to_string().contains("the server went away"),
        "{cause}"
    );
    let model = cause.source().expect("the model's error");
    assert!(model.downcast_ref::<LlmError>().is_some(), "{model:?}");
    assert!(AppError::Usage("bad flag".into()).source().is_none());
}
