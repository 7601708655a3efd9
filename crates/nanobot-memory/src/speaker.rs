//! Who is talking: the message's origin as a channel adapter knows it, which the identity
//! resolver turns into whose memory a turn reads and writes.

use nanobot_memory_scope::{ChatType, Inbound};
use nanobot_session_store::SessionKey;

/// Who sent a message, and in which chat.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Speaker {
    /// `platform:id` (`telegram:42`), or a bare id on the `cli` platform.
    pub user: Option<String>,
    /// The chat id on the user's platform; a direct chat's id is the user's by default.
    pub chat: Option<String>,
    /// Whether the chat is a group.
    pub group: bool,
}

impl Speaker {
    /// Nobody in particular: the session's own channel and chat (a single-user bot).
    pub fn anonymous() -> Self {
        Speaker::default()
    }

    /// `user` (`platform:id`, or a bare id on the `cli` platform) in a direct chat.
    pub fn user(user: impl Into<String>) -> Self {
        Speaker {
            user: Some(user.into()),
            ..Speaker::default()
        }
    }

    /// The same speaker in the direct chat `chat`.
    pub fn in_chat(mut self, chat: impl Into<String>) -> Self {
        self.chat = Some(chat.into());
        self.group = false;
        self
    }

    /// The same speaker in the group chat `chat`.
    pub fn in_group(mut self, chat: impl Into<String>) -> Self {
        self.chat = Some(chat.into());
        self.group = true;
        self
    }

    /// The message's origin as the resolver reads it, for a turn in session `key`.
    pub fn inbound(&self, key: &SessionKey) -> Inbound {
        let (platform, sender) = match &self.user {
            Some(user) => match user.split_once(':') {
                Some((platform, id)) => (platform.to_owned(), Some(id.to_owned())),
                None => ("cli".to_owned(), Some(user.clone())),
            },
            None => (key.channel().to_owned(), None),
        };
        let chat_id = self
            .chat
            .clone()
            .or_else(|| sender.clone())
            .unwrap_or_else(|| {
                key.as_str()
                    .split_once(':')
                    .map_or(key.as_str(), |(_, c)| c)
                    .to_owned()
            });
        Inbound {
            channel: platform,
            sender_id: sender,
            chat_id,
            chat_type: if self.group {
                ChatType::Group
            } else {
                ChatType::Direct
            },
        }
    }
}
