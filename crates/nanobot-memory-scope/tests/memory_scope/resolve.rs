use std::sync::Arc;

use chrono::Utc;
use nanobot_memory_scope::{
    ChatKey, ChatType, IdentityResolver, InMemoryLinks, Inbound, IsolationMode, LinkAction,
    LinkRecord, LinkTable, ModeResolver, NoMemoryReason, Resolution, Subject, UserKey,
};

fn inbound(channel: &str, sender: Option<&str>, chat: &str, chat_type: ChatType) -> Inbound {
    Inbound {
        channel: channel.into(),
        sender_id: sender.map(Into::into),
        chat_id: chat.into(),
        chat_type,
    }
}

async fn subject(resolver: &ModeResolver, inbound: &Inbound) -> Option<Subject> {
    match resolver.resolve(inbound).await.unwrap() {
        Resolution::Memory(scope) => Some(scope.subject),
        Resolution::NoMemory(_) => None,
    }
}

fn user(text: &str) -> Subject {
    Subject::User(UserKey::parse(text).unwrap())
}

fn chat(text: &str) -> Subject {
    Subject::Chat(ChatKey::parse(text).unwrap())
}

fn link(identity: &str, target: &str, action: LinkAction) -> LinkRecord {
    LinkRecord {
        action,
        identity: UserKey::parse(identity).unwrap(),
        target: UserKey::parse(target).unwrap(),
        by: "operator".into(),
        at: Utc::now(),
    }
}

#[tokio::test]
async fn the_mode_table() {
    let links: Arc<dyn LinkTable> = Arc::new(InMemoryLinks::new());
    let direct = inbound("telegram", Some("1"), "1", ChatType::Direct);
    let group = inbound("telegram", Some("1"), "-100", ChatType::Group);
    let workspace = ModeResolver::new(IsolationMode::Workspace, links.clone());
    assert_eq!(subject(&workspace, &direct).await, Some(Subject::Agent));
    assert_eq!(subject(&workspace, &group).await, Some(Subject::Agent));
    let by_user = ModeResolver::new(IsolationMode::User, links.clone());
    assert_eq!(subject(&by_user, &direct).await, Some(user("telegram:1")));
    assert_eq!(subject(&by_user, &group).await, Some(chat("telegram:-100")));
    let by_chat = ModeResolver::new(IsolationMode::Chat, links.clone());
    assert_eq!(subject(&by_chat, &direct).await, Some(chat("telegram:1")));
    assert_eq!(subject(&by_chat, &group).await, Some(chat("telegram:-100")));
    // Platform-qualified: the same number on two platforms is two people.
    let discord = inbound("discord", Some("1"), "1", ChatType::Direct);
    assert_eq!(subject(&by_user, &discord).await, Some(user("discord:1")));
}

#[tokio::test]
async fn a_missing_sender_or_the_bot_itself_gets_no_memory_and_is_counted() {
    let resolver = ModeResolver::new(IsolationMode::User, Arc::new(InMemoryLinks::new()))
        .with_bot_ids(vec![UserKey::parse("telegram:999").unwrap()]);
    for sender in [None, Some(""), Some("  ")] {
        let message = inbound("telegram", sender, "1", ChatType::Direct);
        assert_eq!(
            resolver.resolve(&message).await.unwrap(),
            Resolution::NoMemory(NoMemoryReason::MissingSender)
        );
    }
    let from_bot = inbound("telegram", Some("999"), "999", ChatType::Direct);
    assert_eq!(
        resolver.resolve(&from_bot).await.unwrap(),
        Resolution::NoMemory(NoMemoryReason::BotSender)
    );
    // In a group the bot's own message gets no memory either; a group without a sender
    // still has the chat's.
    let bot_in_group = inbound("telegram", Some("999"), "-1", ChatType::Group);
    assert!(matches!(
        resolver.resolve(&bot_in_group).await.unwrap(),
        Resolution::NoMemory(NoMemoryReason::BotSender)
    ));
    let anonymous_group = inbound("telegram", None, "-1", ChatType::Group);
    assert_eq!(
        subject(&resolver, &anonymous_group).await,
        Some(chat("telegram:-1"))
    );
    assert_eq!(resolver.no_memory_count(), 5);
    // The same bot id on another platform is somebody else.
    let other = inbound("discord", Some("999"), "5", ChatType::Direct);
    assert_eq!(subject(&resolver, &other).await, Some(user("discord:999")));
}

#[tokio::test]
async fn a_spoofed_platform_prefix_stays_inside_its_platform() {
    let resolver = ModeResolver::new(IsolationMode::User, Arc::new(InMemoryLinks::new()));
    let spoof = inbound("telegram", Some("discord:9"), "x", ChatType::Direct);
    let real = inbound("discord", Some("9"), "x", ChatType::Direct);
    let spoofed = subject(&resolver, &spoof).await.unwrap();
    assert_eq!(spoofed, user("telegram:discord:9"));
    assert_ne!(Some(spoofed), subject(&resolver, &real).await);
    // A channel name that tries to carry an id is refused, not merged.
    let bad_channel = inbound("discord:9", Some("1"), "x", ChatType::Direct);
    assert!(resolver.resolve(&bad_channel).await.is_err());
}

#[tokio::test]
async fn links_join_two_identities_and_unlinking_parts_them() {
    let links = Arc::new(InMemoryLinks::new());
    let resolver = ModeResolver::new(IsolationMode::User, links.clone());
    let discord = inbound("discord", Some("9"), "9", ChatType::Direct);
    assert_eq!(subject(&resolver, &discord).await, Some(user("discord:9")));
    links
        .append(link("discord:9", "telegram:1", LinkAction::Link))
        .await
        .unwrap();
    assert_eq!(subject(&resolver, &discord).await, Some(user("telegram:1")));
    // No chains, no self links, no unlinking what is not linked.
    for bad in [
        link("telegram:1", "telegram:1", LinkAction::Link),
        link("slack:3", "discord:9", LinkAction::Link),
        link("telegram:1", "slack:3", LinkAction::Link),
        link("discord:9", "telegram:1", LinkAction::Link),
        link("slack:3", "telegram:1", LinkAction::Unlink),
        link("discord:9", "slack:3", LinkAction::Unlink),
    ] {
        assert!(links.append(bad.clone()).await.is_err(), "{bad:?}");
    }
    links
        .append(link("discord:9", "telegram:1", LinkAction::Unlink))
        .await
        .unwrap();
    assert_eq!(subject(&resolver, &discord).await, Some(user("discord:9")));
    let records = links.records().await.unwrap();
    assert_eq!(records.len(), 2);
    assert!(records.iter().all(|r| r.by == "operator"));
    assert_eq!(
        links
            .forget(&UserKey::parse("telegram:1").unwrap())
            .await
            .unwrap(),
        2
    );
    assert!(links.records().await.unwrap().is_empty());
}

#[test]
fn subjects_round_trip_through_their_canonical_text() {
    for text in [
        "agent",
        "user:telegram:1",
        "user:id:ada",
        "chat:discord:a:b/c",
    ] {
        let subject = Subject::parse(text).unwrap();
        assert_eq!(subject.canonical(), text);
        assert_eq!(
            Subject::from_dir_name(&subject.dir_name().unwrap_or_default())
                .filter(|s| !s.is_agent()),
            (!subject.is_agent()).then(|| subject.clone())
        );
    }
    for bad in [
        "",
        "user:",
        "user:telegram",
        "user::1",
        "chat:x",
        "bot:1",
        "user:tele gram:1",
    ] {
        assert!(Subject::parse(bad).is_err(), "{bad:?}");
    }
}
