//! get_history: the spec's acceptance cases 48-75 (session.md, section 8), with our three
//! documented departures from Python quirks.

use nanobot_llm_port::testing::MockTokenCounter;
use nanobot_llm_port::{Cl100kBase, Utf8Bytes};
use nanobot_session_store::{HistoryOptions, StoredMessage, get_history, replay_token_budget};
use serde_json::{Value, json};

use crate::support::{a, contents, msg, tt, u};

fn history(
    messages: &[StoredMessage],
    pointer: usize,
    options: HistoryOptions,
) -> Vec<nanobot_session_store::Replayed> {
    get_history(messages, pointer, &options, &Cl100kBase)
}

fn all(messages: &[StoredMessage]) -> Vec<String> {
    contents(&history(messages, 0, HistoryOptions::default()))
}

fn cap(n: usize) -> HistoryOptions {
    {
        let mut value = HistoryOptions::default();
        value.max_messages = n;
        value
    }
}

fn pairs(n: usize) -> Vec<StoredMessage> {
    (0..n)
        .flat_map(|i| [u(&format!("msg{i}")), a(&format!("resp{i}"))])
        .collect()
}

#[test]
fn case_48_49_empty_and_everything() {
    assert!(all(&[]).is_empty());
    let messages: Vec<StoredMessage> = (0..1001)
        .flat_map(|i| [u(&format!("msg-{i}")), a(&format!("r-{i}"))])
        .collect();
    let out = all(&messages);
    assert_eq!(out.len(), 2002);
    assert_eq!(out[0], "msg-0");
}

#[test]
fn case_50_message_cap() {
    let out = contents(&history(&pairs(10), 0, cap(6)));
    assert_eq!(out, ["msg7", "resp7", "msg8", "resp8", "msg9", "resp9"]);
    let out = history(&pairs(30), 0, cap(25));
    assert!(out.len() <= 25);
    assert_eq!(out[0]["role"], "user");
}

fn has_orphans(history: &[nanobot_session_store::Replayed]) -> bool {
    let mut declared = std::collections::HashSet::new();
    for m in history {
        if let Some(Value::Array(calls)) = m.get("tool_calls") {
            declared.extend(
                calls
                    .iter()
                    .filter_map(|c| c["id"].as_str().map(str::to_owned)),
            );
        }
        if m["role"] == "tool" && !declared.contains(m["tool_call_id"].as_str().unwrap_or("")) {
            return true;
        }
    }
    false
}

#[test]
fn case_51_no_orphans_under_a_cap() {
    let mut messages = vec![u("old turn")];
    (0..20).for_each(|i| messages.extend(tt("old", i)));
    messages.push(u("problem turn"));
    (0..25).for_each(|i| messages.extend(tt("cur", i)));
    messages.push(u("new"));
    let out = history(&messages, 0, cap(100));
    assert!(!has_orphans(&out));
    assert_eq!(out.last().unwrap()["content"], "new");
}

#[test]
fn case_52_53_orphans() {
    let gone = |id: &str| msg(json!({"role": "tool", "content": "x", "tool_call_id": id}));
    assert_eq!(
        all(&[gone("gone_1"), gone("gone_2"), u("u"), a("a")]),
        ["u", "a"]
    );
    // Case 53, a deliberate departure: nanobot keeps only [u2]; we drop only the orphan.
    let call = msg(
        json!({"role": "assistant", "content": "", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}),
    );
    let answer = msg(json!({"role": "tool", "content": "ok", "tool_call_id": "a", "name": "f"}));
    let out = history(
        &[u("u"), call, answer, gone("zzz"), u("u2")],
        0,
        HistoryOptions::default(),
    );
    let roles: Vec<&str> = out.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "user"]);
    assert!(!has_orphans(&out));
}

#[test]
fn case_54_55_tool_rows_without_id_and_unanswered_calls() {
    let no_id = msg(json!({"role": "tool", "content": "free"}));
    assert_eq!(all(&[u("u"), no_id]), ["u", "free"]);
    let call = msg(json!({"role": "assistant", "content": "", "tool_calls": [{"id": "q"}]}));
    assert_eq!(all(&[u("u"), call, u("u2")]).len(), 3);
}

#[test]
fn case_56_only_provider_fields_are_replayed() {
    let answer = msg(json!({
        "role": "assistant", "content": "done", "reasoning_content": "because",
        "thinking_blocks": [{"type": "thinking", "thinking": "t", "signature": "s"}],
        "timestamp": "2026-01-01T00:00:00", "media": ["/x.png"], "latency_ms": 5, "mystery": 1
    }));
    let out = history(
        &[u("hi").with("timestamp", "t"), answer],
        0,
        HistoryOptions::default(),
    );
    assert_eq!(
        *out[0],
        *json!({"role": "user", "content": "hi"})
            .as_object()
            .unwrap()
    );
    let keys: Vec<&str> = out[1].keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        ["role", "content", "reasoning_content", "thinking_blocks"]
    );
}

#[test]
fn case_57_media_breadcrumbs() {
    let look = u("look").with("media", json!(["/m/a.png", "/m/b.png"]));
    let pic = u("").with("media", json!(["/m/pic.png"]));
    let assistant = a("here").with("media", json!(["/m/c.png"]));
    let list = msg(json!({"role": "assistant", "content": [{"type": "text", "text": "x"}]}));
    let out = history(&[look, assistant, pic, list], 0, HistoryOptions::default());
    assert_eq!(
        out[0]["content"],
        "look\n[image: /m/a.png]\n[image: /m/b.png]"
    );
    assert_eq!(out[1]["content"], "here");
    assert_eq!(out[2]["content"], "[image: /m/pic.png]");
    assert_eq!(out[3]["content"], json!([{"type": "text", "text": "x"}]));
}

#[test]
fn case_58_59_assistant_sanitizer() {
    let noisy = "[Message Time: 2026-05-09 00:33:48]\n来了 🎨\n[image: /home/u/img.png]\n\ngenerate_image(\"16:9\")\nmessage(\"来了 🎨\")";
    let out = all(&[
        u("[Message Time: 2026-05-09 00:33:48]\nkept"),
        a(noisy),
        a("  hi \r\n there  \n"),
    ]);
    assert_eq!(
        out,
        [
            "[Message Time: 2026-05-09 00:33:48]\nkept",
            "来了 🎨",
            "hi \n there"
        ]
    );
}

#[test]
fn case_60_empty_assistants() {
    let blank = a("   ");
    let null = msg(json!({"role": "assistant", "content": null}));
    let with_reasoning =
        msg(json!({"role": "assistant", "content": "", "reasoning_content": null}));
    let out = history(
        &[u("u"), blank, null, with_reasoning],
        0,
        HistoryOptions::default(),
    );
    assert_eq!(out.len(), 3);
    assert_eq!(out[1]["content"], Value::Null);
}

#[test]
fn case_61_62_commands_and_deliveries() {
    let status = u("/status").with("_command", true);
    let reply = a("ok").with("_command", true);
    assert_eq!(all(&[status, reply, u("u2"), a("a2")]), ["u2", "a2"]);
    let delivery = a("记得喝水").with("_channel_delivery", true);
    assert_eq!(all(&[delivery, u("好")]), ["记得喝水", "好"]);
}

#[test]
fn case_63_budget_keeps_the_delivery_the_user_answers() {
    // A deliberate departure: nanobot returns only ["好"] under a budget.
    let delivery = a("记得喝水").with("_channel_delivery", true);
    let out = history(
        &[delivery, u("好")],
        0,
        HistoryOptions::with_token_budget(10_000),
    );
    assert_eq!(contents(&out), ["记得喝水", "好"]);
}

fn fifty_each() -> MockTokenCounter {
    let mut counter = MockTokenCounter::new();
    counter.expect_count().returning(|_| 46);
    counter.expect_encoding().return_const("fifty".to_owned());
    counter
}

#[test]
fn case_64_65_66_token_budget() {
    let counter = fifty_each();
    let six = [u("u1"), a("a1"), u("u2"), a("a2"), u("u3"), a("a3")];
    let out = get_history(&six, 0, &HistoryOptions::with_token_budget(120), &counter);
    assert_eq!(contents(&out), ["u3", "a3"]);

    let mut hundred = MockTokenCounter::new();
    hundred.expect_count().returning(|_| 96);
    hundred.expect_encoding().return_const("hundred".to_owned());
    let four = [u("u1"), a("a1"), u("u2"), a("a2")];
    let out = get_history(&four, 0, &HistoryOptions::with_token_budget(100), &hundred);
    assert_eq!(contents(&out), ["u2", "a2"]);

    let huge = u(&"word ".repeat(500));
    assert_eq!(
        get_history(
            &[huge],
            0,
            &HistoryOptions::with_token_budget(5),
            &Cl100kBase
        )
        .len(),
        1
    );
}

#[test]
fn case_67_70_archived_sessions_replay_the_last_turns() {
    let out = contents(&history(&pairs(10), 20, cap(100)));
    assert_eq!(
        out,
        [
            "msg6", "resp6", "msg7", "resp7", "msg8", "resp8", "msg9", "resp9"
        ]
    );
    let users: Vec<StoredMessage> = (0..20).map(|i| u(&format!("m{i}"))).collect();
    let out = contents(&history(&users, 5, HistoryOptions::default()));
    assert_eq!((out.len(), out[0].as_str()), (15, "m5"));
    let out = contents(&history(&users, 15, HistoryOptions::default()));
    assert_eq!((out.len(), out[0].as_str()), (8, "m12"));
    assert_eq!(history(&users, 20, HistoryOptions::default()).len(), 8);
}

#[test]
fn case_68_69_tool_turns_across_the_archive_boundary() {
    let mut messages = vec![u("old"), a("old answer"), u("run tools")];
    (0..3).for_each(|i| messages.extend(tt("t", i)));
    messages.push(a("done"));
    let out = history(&messages, messages.len(), HistoryOptions::default());
    assert_eq!(out.first().unwrap()["content"], "run tools");
    assert_eq!(out.last().unwrap()["content"], "done");
    assert!(!has_orphans(&out));

    let mut many = vec![u("old"), a("old answer"), u("run many tools")];
    (0..50).for_each(|i| many.extend(tt("m", i)));
    many.push(a("done"));
    let out = history(&many, many.len(), cap(120));
    assert!(out.len() > 120);
    assert_eq!(out.first().unwrap()["content"], "run many tools");
}

#[test]
fn case_71_72_extend_to_user() {
    let mut messages = vec![u("old"), a("a"), u("record this")];
    (0..4).for_each(|i| messages.extend(tt("r", i)));
    messages.push(a("done"));
    assert!(history(&messages, 0, cap(8)).len() <= 8);
    let extended = {
        let mut value = HistoryOptions::default();
        value.max_messages = 8;
        value.extend_to_user = true;
        value
    };
    let out = history(&messages, 0, extended);
    assert!(out.len() > 8);
    assert_eq!(out.first().unwrap()["content"], "record this");
    assert_eq!(out.last().unwrap()["content"], "done");

    let mut messages = vec![u("old"), a("a"), u("long")];
    (0..8).for_each(|i| messages.extend(tt("l", i)));
    messages.extend([a("final"), u("new question"), a("new answer")]);
    let extended = {
        let mut value = HistoryOptions::default();
        value.max_messages = 6;
        value.extend_to_user = true;
        value
    };
    assert_eq!(
        contents(&history(&messages, 0, extended)),
        ["new question", "new answer"]
    );
}

#[test]
fn case_73_74_cli_apps_and_runtime_context() {
    let apps = json!([{"name": " DrawIO ", "entry_point": "cli-anything-drawio"}]);
    let plain = u("please use @drawio").with("cli_apps", apps.clone());
    let crumb = "\n[CLI App Attachment: @drawio; tool=run_cli_app; entry_point=cli-anything-drawio; skill=skills/cli-app-drawio/SKILL.md]";
    assert_eq!(
        all(std::slice::from_ref(&plain)),
        [format!("please use @drawio{crumb}")]
    );
    let public = {
        let mut value = HistoryOptions::default();
        value.include_runtime_context = false;
        value
    };
    assert_eq!(
        contents(&history(&[plain], 0, public)),
        ["please use @drawio"]
    );

    let stored = u(&format!("hi\n\nRUNTIME{crumb}"))
        .with(
            "_runtime_context",
            json!({"version": 1, "sources": [], "suffix": format!("RUNTIME{crumb}")}),
        )
        .with("cli_apps", apps);
    assert_eq!(
        all(std::slice::from_ref(&stored)),
        [format!("hi\n\nRUNTIME{crumb}")]
    );
    assert_eq!(contents(&history(&[stored], 0, public)), ["hi"]);
}

#[test]
fn case_75_records_without_a_usable_role_are_skipped() {
    // A deliberate departure: nanobot fails the whole turn with a KeyError.
    let future = msg(json!({"_type": "future", "x": 1}));
    let wizard = msg(json!({"role": "wizard", "content": "?"}));
    assert_eq!(all(&[u("u"), future, wizard, a("a")]), ["u", "a"]);
}

#[test]
fn token_counts_are_cached_per_message() {
    let messages: Vec<StoredMessage> = (0..20)
        .flat_map(|i| [u(&format!("q{i}")), a(&format!("r{i}"))])
        .collect();
    let mut counter = MockTokenCounter::new();
    // 40 messages are counted once, not once per call.
    counter.expect_count().times(40).returning(|_| 10);
    counter.expect_encoding().return_const("counted".to_owned());
    for _ in 0..5 {
        assert_eq!(
            get_history(
                &messages,
                0,
                &HistoryOptions::with_token_budget(100_000),
                &counter
            )
            .len(),
            40
        );
    }
    // Another encoding is not served from that cache: "r19" alone fits 10 bytes, and the
    // user turn it answers is recovered beyond the budget.
    let out = get_history(
        &messages,
        0,
        &HistoryOptions::with_token_budget(10),
        &Utf8Bytes,
    );
    assert_eq!(contents(&out), ["q19", "r19"]);
}

#[test]
fn replay_budget_follows_nanobot() {
    assert_eq!(replay_token_budget(200_000, 8192), 190_784);
    assert_eq!(replay_token_budget(0, 8192), 0);
    assert_eq!(replay_token_budget(4096, 8192), 2048);
    assert_eq!(replay_token_budget(100, 0), 128);
}

fn users(n: usize) -> Vec<StoredMessage> {
    (0..n).map(|i| u(&format!("msg{i}"))).collect()
}

fn session_of(messages: Vec<StoredMessage>, pointer: usize) -> nanobot_session_store::Session {
    let mut session =
        nanobot_session_store::Session::new(crate::support::key("c:retain"), crate::support::at(0));
    session.replace_messages(messages, crate::support::at(0));
    session.set_last_consolidated(pointer).unwrap();
    session
}

#[test]
fn case_76_77_retention() {
    let mut session = session_of(users(10), 7);
    let result = session.retain_recent(4, false, crate::support::at(1));
    let kept: Vec<&str> = session
        .messages()
        .iter()
        .map(|m| m.content().unwrap().as_str().unwrap())
        .collect();
    assert_eq!(kept, ["msg6", "msg7", "msg8", "msg9"]);
    assert_eq!(session.last_consolidated(), 1);
    assert_eq!((result.dropped.len(), result.already_consolidated), (6, 6));

    let mut session = session_of(users(5), 3);
    session.set_provider_state(Some(json!({"kind": "k"})));
    let result = session.retain_recent(0, false, crate::support::at(1));
    assert!(session.messages().is_empty());
    assert_eq!(session.last_consolidated(), 0);
    assert_eq!((result.dropped.len(), result.already_consolidated), (5, 3));
    assert!(session.meta().provider_state.is_none());

    let mut small = session_of(users(3), 0);
    small.set_provider_state(Some(json!({"kind": "k"})));
    assert!(
        small
            .retain_recent(4, false, crate::support::at(1))
            .dropped
            .is_empty()
    );
    assert!(small.meta().provider_state.is_some());
}

#[test]
fn case_78_79_retention_keeps_whole_turns_and_the_newest_messages() {
    let mut messages = vec![u("old")];
    messages.extend(tt("o", 0));
    messages.push(u("keep"));
    messages.extend(tt("k", 0));
    messages.push(a("done"));
    let mut session = session_of(messages, 0);
    session.retain_recent(4, false, crate::support::at(1));
    let history = get_history(
        session.messages(),
        0,
        &HistoryOptions::default(),
        &Cl100kBase,
    );
    assert_eq!(history.first().unwrap()["content"], "keep");
    assert_eq!(
        history.last().unwrap()["content"],
        "done",
        "the newest message is kept"
    );
    assert!(!has_orphans(&history));

    // A deliberate departure (case 79): nanobot keeps [u9, a0, a1, a2] and drops a3..a9.
    let mut messages = users(10);
    messages.extend((0..10).map(|i| a(&format!("a{i}"))));
    let mut session = session_of(messages, 12);
    let result = session.retain_recent(4, false, crate::support::at(1));
    let kept: Vec<&str> = session
        .messages()
        .iter()
        .map(|m| m.content().unwrap().as_str().unwrap())
        .collect();
    assert_eq!(kept.first(), Some(&"msg9"));
    assert_eq!(kept.last(), Some(&"a9"));
    assert_eq!(session.last_consolidated(), 3);
    assert_eq!(result.already_consolidated, 9);

    // A delivery just before the kept user turn stays (case 80).
    let delivery = a("reminder").with("_channel_delivery", true);
    let mut session = session_of(vec![u("setup"), delivery, u("ok"), a("great")], 0);
    session.retain_recent(3, false, crate::support::at(1));
    let kept: Vec<&str> = session
        .messages()
        .iter()
        .map(|m| m.content().unwrap().as_str().unwrap())
        .collect();
    assert_eq!(kept, ["reminder", "ok", "great"]);
}

#[test]
fn counted_history_sums_the_cached_per_message_estimates() {
    let messages: Vec<StoredMessage> = nanobot_bench_workload::message_stream(42, 300)
        .into_iter()
        .map(|m| StoredMessage::from_map(m.as_object().cloned().unwrap()))
        .collect();
    let (history, tokens) = nanobot_session_store::get_history_counted(
        &messages,
        0,
        &HistoryOptions::default(),
        &Cl100kBase,
    );
    assert_eq!(
        history,
        get_history(&messages, 0, &HistoryOptions::default(), &Cl100kBase)
    );
    let expected: usize = history
        .iter()
        .map(|m| nanobot_llm_port::tokens::estimate_json_message_tokens(&Cl100kBase, m))
        .sum();
    assert_eq!(tokens, expected);
    // Asked again, the counts come from the cache.
    let mut counter = MockTokenCounter::new();
    counter.expect_count().times(0);
    counter
        .expect_encoding()
        .return_const("cl100k_base".to_owned());
    assert_eq!(
        nanobot_session_store::get_history_counted(
            &messages,
            0,
            &HistoryOptions::default(),
            &counter
        )
        .1,
        tokens
    );
}
