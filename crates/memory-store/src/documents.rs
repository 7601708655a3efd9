//! Durable documents: what Dream curates and every prompt includes. `SOUL.md` (the bot's
//! voice), `USER.md` (who the user is), `memory/MEMORY.md` (long-term facts) and the skills
//! under `skills/<name>/SKILL.md`, each opening with a front matter block.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::error::MemoryError;
use crate::front_matter::parse_front_matter;

/// One of the three durable files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Document {
    /// `SOUL.md`: the bot's personality and voice.
    Soul,
    /// `USER.md`: what the bot knows about its user.
    User,
    /// `memory/MEMORY.md`: long-term facts.
    Memory,
}

impl Document {
    /// Every document, in prompt order.
    pub const ALL: [Document; 3] = [Document::Soul, Document::User, Document::Memory];

    /// The path relative to the workspace.
    pub fn path(self) -> &'static str {
        match self {
            Document::Soul => "SOUL.md",
            Document::User => "USER.md",
            Document::Memory => "memory/MEMORY.md",
        }
    }

    /// The text a new workspace starts with: nanobot-ai's template, so both programs agree
    /// on what an unedited file is.
    pub fn template(self) -> &'static str {
        match self {
            Document::Soul => SOUL_TEMPLATE,
            Document::User => USER_TEMPLATE,
            Document::Memory => MEMORY_TEMPLATE,
        }
    }

    /// The template older nanobot releases wrote, for documents that had one (`SOUL.md`).
    /// A prompt shows the current template in its place.
    pub fn legacy_template(self) -> Option<&'static str> {
        (self == Document::Soul).then_some(LEGACY_SOUL_TEMPLATE)
    }

    /// Whether `text` is still a template nobody has edited (surrounding whitespace
    /// ignored, as nanobot compares): the current template, or for `SOUL.md` the one older
    /// nanobot releases wrote. A prompt leaves such a file out, or for `SOUL.md` uses the
    /// current template instead of the legacy one.
    pub fn is_unedited_template(self, text: &str) -> bool {
        let text = text.trim();
        text == self.template().trim()
            || (self == Document::Soul && text == LEGACY_SOUL_TEMPLATE.trim())
    }
}

// nanobot-ai 0.3.5's own templates, byte for byte (see templates/README.md).
const SOUL_TEMPLATE: &str = include_str!("../templates/SOUL.md");
const LEGACY_SOUL_TEMPLATE: &str = include_str!("../templates/legacy/SOUL.md");
const USER_TEMPLATE: &str = include_str!("../templates/USER.md");
const MEMORY_TEMPLATE: &str = include_str!("../templates/memory/MEMORY.md");

/// Small files beside the durable documents that configure or record Dream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AuxFile {
    /// `prompts/dream.md`: the workspace's own Dream instructions, replacing the default.
    DreamPrompt,
    /// `memory/.dream_state.json`: when Dream last ran, so a restart catches up.
    DreamState,
    /// `memory/.dream_pending.json`: a completed run's changes while they are applied, so a
    /// crash in the middle is finished on the next start instead of half-applied.
    DreamPending,
    /// `memory/.dream_proposals.json`: changes a user's or a chat's Dream proposed to the
    /// agent's shared `SOUL.md` and skills, waiting for an operator's review.
    DreamProposals,
}

impl AuxFile {
    /// The path relative to the workspace.
    pub fn path(self) -> &'static str {
        match self {
            AuxFile::DreamPrompt => "prompts/dream.md",
            AuxFile::DreamState => "memory/.dream_state.json",
            AuxFile::DreamPending => "memory/.dream_pending.json",
            AuxFile::DreamProposals => "memory/.dream_proposals.json",
        }
    }
}

/// A skill as a prompt lists it: its name, description and front matter.
#[derive(Debug, Clone, PartialEq)]
pub struct SkillInfo {
    /// The folder name (`skills/<name>/`), which is also the skill's identity.
    pub name: String,
    /// The front matter's `description`, if any.
    pub description: Option<String>,
    /// Every front matter field, decoded as far as the simple `key: value` form goes.
    pub front_matter: Map<String, Value>,
}

/// The longest skill name accepted.
pub const MAX_SKILL_NAME: usize = 64;

/// Checks a skill name: 1 to 64 characters of ASCII letters, digits, `-` and `_`, so it can
/// never name a path outside `skills/`.
pub fn validate_skill_name(name: &str) -> Result<(), MemoryError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_SKILL_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(MemoryError::InvalidName {
            name: name.chars().take(80).collect(),
            reason: format!(
                "a skill name is 1 to {MAX_SKILL_NAME} ASCII letters, digits, '-' or '_'"
            ),
        })
    }
}

/// The listing entry of a skill whose `SKILL.md` reads `text`.
pub fn skill_info(name: &str, text: &str) -> SkillInfo {
    let (front_matter, _) = parse_front_matter(text);
    SkillInfo {
        name: name.to_owned(),
        description: front_matter
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_owned),
        front_matter,
    }
}

/// Where the durable documents and skills are kept.
///
/// Contract (conformance suite, feature `conformance`): a missing document reads as `None`;
/// a write replaces the whole text atomically; skills list sorted by name, so two machines
/// build the same prompt; names outside [`validate_skill_name`] are refused.
#[async_trait]
pub trait MemoryDocuments: Send + Sync {
    /// The document's text, `None` when it does not exist.
    async fn read(&self, document: Document) -> Result<Option<String>, MemoryError>;

    /// Replaces the document's text atomically.
    async fn write(&self, document: Document, text: &str) -> Result<(), MemoryError>;

    /// Every skill with a `SKILL.md`, sorted by name.
    async fn list_skills(&self) -> Result<Vec<SkillInfo>, MemoryError>;

    /// A skill's `SKILL.md`, `None` when there is no such skill.
    async fn read_skill(&self, name: &str) -> Result<Option<String>, MemoryError>;

    /// Creates or replaces a skill's `SKILL.md` atomically.
    async fn write_skill(&self, name: &str, text: &str) -> Result<(), MemoryError>;

    /// Removes a skill; whether it existed.
    async fn delete_skill(&self, name: &str) -> Result<bool, MemoryError>;

    /// An auxiliary file's text, `None` when it does not exist.
    async fn read_aux(&self, file: AuxFile) -> Result<Option<String>, MemoryError>;

    /// Replaces an auxiliary file's text atomically.
    async fn write_aux(&self, file: AuxFile, text: &str) -> Result<(), MemoryError>;
}

/// Conveniences over any document store.
#[async_trait]
pub trait MemoryDocumentsExt: MemoryDocuments {
    /// Writes the default template of every document that does not exist yet; which ones
    /// were written. Existing documents are never touched.
    async fn initialize(&self) -> Result<Vec<Document>, MemoryError> {
        let mut written = Vec::new();
        for document in Document::ALL {
            if self.read(document).await?.is_none() {
                self.write(document, document.template()).await?;
                written.push(document);
            }
        }
        Ok(written)
    }
}

impl<T: MemoryDocuments + ?Sized> MemoryDocumentsExt for T {}

/// Documents and skills held in memory.
#[derive(Debug, Default)]
pub struct MemoryDocumentStore {
    state: Mutex<(BTreeMap<Document, String>, BTreeMap<String, String>)>,
    aux: Mutex<BTreeMap<AuxFile, String>>,
}

impl MemoryDocumentStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, (BTreeMap<Document, String>, BTreeMap<String, String>)> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl MemoryDocuments for MemoryDocumentStore {
    async fn read(&self, document: Document) -> Result<Option<String>, MemoryError> {
        Ok(self.lock().0.get(&document).cloned())
    }

    async fn write(&self, document: Document, text: &str) -> Result<(), MemoryError> {
        self.lock().0.insert(document, text.to_owned());
        Ok(())
    }

    async fn list_skills(&self) -> Result<Vec<SkillInfo>, MemoryError> {
        Ok(self
            .lock()
            .1
            .iter()
            .map(|(name, text)| skill_info(name, text))
            .collect())
    }

    async fn read_skill(&self, name: &str) -> Result<Option<String>, MemoryError> {
        validate_skill_name(name)?;
        Ok(self.lock().1.get(name).cloned())
    }

    async fn write_skill(&self, name: &str, text: &str) -> Result<(), MemoryError> {
        validate_skill_name(name)?;
        self.lock().1.insert(name.to_owned(), text.to_owned());
        Ok(())
    }

    async fn delete_skill(&self, name: &str) -> Result<bool, MemoryError> {
        validate_skill_name(name)?;
        Ok(self.lock().1.remove(name).is_some())
    }

    async fn read_aux(&self, file: AuxFile) -> Result<Option<String>, MemoryError> {
        Ok(self
            .aux
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&file)
            .cloned())
    }

    async fn write_aux(&self, file: AuxFile, text: &str) -> Result<(), MemoryError> {
        self.aux
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(file, text.to_owned());
        Ok(())
    }
}
