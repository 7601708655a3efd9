//! Durable documents: what Dream curates and every prompt includes. `SOUL.md` (the bot's
//! voice), `USER.md` (who the user is), `memory/MEMORY.md` (long-term facts) and the skills
//! under `skills/<name>/SKILL.md`, each opening with a front matter block.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;

use crate::error::MemoryError;

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
    /// `memory/.dream_review.json`: an operator's decisions about the proposals, and
    /// whether every edit of the scope's Dream waits for review.
    DreamReview,
}

impl AuxFile {
    /// The path relative to the workspace.
    pub fn path(self) -> &'static str {
        match self {
            AuxFile::DreamPrompt => "prompts/dream.md",
            AuxFile::DreamState => "memory/.dream_state.json",
            AuxFile::DreamPending => "memory/.dream_pending.json",
            AuxFile::DreamProposals => "memory/.dream_proposals.json",
            AuxFile::DreamReview => "memory/.dream_review.json",
        }
    }
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

/// A document's version: it changes whenever the document's text changes, so a writer that
/// names the version it read never overwrites a change it did not see. Opaque: compared,
/// never ordered. The file and in-memory backends derive it from the text itself (a 64-bit
/// FNV-1a hash of the bytes); a database may use a counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DocVersion(pub u64);

impl DocVersion {
    /// The version of a document whose stored bytes are `bytes` (the file and in-memory
    /// backends' rule, public so another backend can share it).
    pub fn of_bytes(bytes: &[u8]) -> DocVersion {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in bytes {
            hash = (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
        }
        DocVersion(hash)
    }
}

impl std::fmt::Display for DocVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// What a write expects to find, checked atomically with the write (compare-and-set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    /// The document must not exist (a template for a new workspace).
    Absent,
    /// The document must be at this version (the one the writer read).
    Version(DocVersion),
    /// Whatever is there: an operator's deliberate overwrite. Policies never use it.
    Any,
}

impl Expected {
    /// The expectation of a writer that read `read` (`None`: nothing was there).
    pub fn from_read(read: Option<&DocumentText>) -> Expected {
        match read {
            Some(document) => Expected::Version(document.version),
            None => Expected::Absent,
        }
    }

    /// Whether a document at `current` (`None`: absent) meets the expectation.
    pub fn is_met_by(self, current: Option<DocVersion>) -> bool {
        match self {
            Expected::Any => true,
            Expected::Absent => current.is_none(),
            Expected::Version(version) => current == Some(version),
        }
    }
}

/// A document's text as read, with its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentText {
    /// The text.
    pub text: String,
    /// Its version, to name in the next write.
    pub version: DocVersion,
    /// The stored bytes were not UTF-8 and invalid sequences were replaced with U+FFFD. A
    /// prompt may show such text (with a warning); nothing should write it back.
    pub decoded_lossily: bool,
}

impl DocumentText {
    /// Text stored as given (the version is that of its bytes).
    pub fn new(text: impl Into<String>) -> DocumentText {
        let text = text.into();
        DocumentText {
            version: DocVersion::of_bytes(text.as_bytes()),
            text,
            decoded_lossily: false,
        }
    }

    /// Stored bytes, decoded as UTF-8 where they are, lossily where they are not; the
    /// version is that of the bytes.
    pub fn from_bytes(bytes: Vec<u8>) -> DocumentText {
        let version = DocVersion::of_bytes(&bytes);
        match String::from_utf8(bytes) {
            Ok(text) => DocumentText {
                text,
                version,
                decoded_lossily: false,
            },
            Err(e) => DocumentText {
                text: String::from_utf8_lossy(e.as_bytes()).into_owned(),
                version,
                decoded_lossily: true,
            },
        }
    }
}

/// A skill's `SKILL.md`, as [`MemoryDocuments::skills`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillText {
    /// The skill's name (its folder).
    pub name: String,
    /// Its `SKILL.md`.
    pub document: DocumentText,
}

/// Every skill of a store, sorted by name, and what the listing had to leave out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkillSet {
    /// The skills, sorted by name.
    pub skills: Vec<SkillText>,
    /// What was left out and why, one sentence each (a folder whose name is not a skill
    /// name, a `SKILL.md` behind a symbolic link); a database never has any.
    pub skipped: Vec<String>,
}

/// What a document store offers beyond the contract every store keeps.
/// Build it with `..Default::default()`, so a capability added later keeps compiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DocumentCapabilities {
    /// Several store instances over the same storage (processes, machines) see each other's
    /// writes, and compare-and-set holds between them.
    pub shared_storage: bool,
}

/// A fingerprint of the documents and skills a [`MemoryDocuments`] reads: any change to one
/// of them (a write, a skill created or deleted, through this instance or another) changes
/// it, so a reader that kept what it read under a stamp can skip reading again while the
/// stamp is the same. It may change when nothing it covers did. Opaque: compared only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DocumentsStamp(pub u64);

impl DocumentsStamp {
    /// The stamp of two stores read together (a scope's own documents and the agent's).
    pub fn combine(self, other: DocumentsStamp) -> DocumentsStamp {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&self.0.to_be_bytes());
        bytes[8..].copy_from_slice(&other.0.to_be_bytes());
        DocumentsStamp(DocVersion::of_bytes(&bytes).0)
    }
}

/// Where the durable documents and skills are kept.
///
/// Contract (conformance suite, feature `conformance`):
///
/// - A missing document reads as `None`; a read gives the text and its version.
/// - **Compare-and-set.** Every write names what it expects ([`Expected`]); when the
///   stored document differs, the write fails with [`MemoryError::Conflict`] and changes
///   nothing. The check and the write are one atomic step, across processes for stores
///   that share storage. A successful write returns the new version.
/// - A write replaces the whole text atomically: a reader sees the old text or the new.
/// - Skills list sorted by name, so two machines build the same prompt; names outside
///   [`validate_skill_name`] are refused.
/// - A [`DocumentsStamp`], when the store gives one, changes with every change to a
///   document or skill and stays the same while nothing changes.
#[async_trait]
pub trait MemoryDocuments: Send + Sync {
    /// The document's text and version, `None` when it does not exist.
    async fn read(&self, document: Document) -> Result<Option<DocumentText>, MemoryError>;

    /// Replaces the document's text atomically if it is as `expected`; the new version.
    async fn write(
        &self,
        document: Document,
        text: &str,
        expected: Expected,
    ) -> Result<DocVersion, MemoryError>;

    /// Every skill with a `SKILL.md`, sorted by name, with its text and version.
    async fn skills(&self) -> Result<SkillSet, MemoryError>;

    /// A skill's `SKILL.md`, `None` when there is no such skill.
    async fn read_skill(&self, name: &str) -> Result<Option<DocumentText>, MemoryError>;

    /// Creates or replaces a skill's `SKILL.md` atomically if it is as `expected`.
    async fn write_skill(
        &self,
        name: &str,
        text: &str,
        expected: Expected,
    ) -> Result<DocVersion, MemoryError>;

    /// Removes a skill if it is as `expected`; whether it existed.
    async fn delete_skill(&self, name: &str, expected: Expected) -> Result<bool, MemoryError>;

    /// An auxiliary file's text, `None` when it does not exist.
    async fn read_aux(&self, file: AuxFile) -> Result<Option<String>, MemoryError>;

    /// Replaces an auxiliary file's text atomically (Dream's own records, written under its
    /// lease).
    async fn write_aux(&self, file: AuxFile, text: &str) -> Result<(), MemoryError>;

    /// The stamp of the documents and skills as they are now, or `None` when the store
    /// cannot tell one more cheaply than reading them (then a reader reads what it needs).
    async fn stamp(&self) -> Result<Option<DocumentsStamp>, MemoryError>;

    /// What this store offers beyond the contract.
    fn capabilities(&self) -> DocumentCapabilities;
}

/// Conveniences over any document store.
#[async_trait]
pub trait MemoryDocumentsExt: MemoryDocuments {
    /// The document's text alone, `None` when it does not exist.
    async fn read_text(&self, document: Document) -> Result<Option<String>, MemoryError> {
        Ok(self.read(document).await?.map(|d| d.text))
    }

    /// The skills' names, sorted.
    async fn skill_names(&self) -> Result<Vec<String>, MemoryError> {
        Ok(self
            .skills()
            .await?
            .skills
            .into_iter()
            .map(|s| s.name)
            .collect())
    }

    /// Writes the default template of every document that does not exist yet; which ones
    /// were written. Existing documents are never touched, not even one another writer
    /// creates meanwhile.
    async fn initialize(&self) -> Result<Vec<Document>, MemoryError> {
        let mut written = Vec::new();
        for document in Document::ALL {
            if self.read(document).await?.is_some() {
                continue;
            }
            match self
                .write(document, document.template(), Expected::Absent)
                .await
            {
                Ok(_) => written.push(document),
                Err(MemoryError::Conflict { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(written)
    }
}

impl<T: MemoryDocuments + ?Sized> MemoryDocumentsExt for T {}

/// The conflict a compare-and-set reports for `path`.
pub fn document_conflict(path: &str, expected: Expected, found: Option<DocVersion>) -> MemoryError {
    let expected = match expected {
        Expected::Absent => "no file".to_owned(),
        Expected::Version(v) => format!("version {v}"),
        Expected::Any => "anything".to_owned(),
    };
    let found = found.map_or_else(|| "no file".to_owned(), |v| format!("version {v}"));
    MemoryError::Conflict {
        what: format!(
            "{path}: expected {expected}, found {found}; read it again and redo the change"
        ),
    }
}

#[derive(Debug, Default)]
struct Stored {
    documents: BTreeMap<Document, String>,
    skills: BTreeMap<String, String>,
    aux: BTreeMap<AuxFile, String>,
    /// Counts the changes to documents and skills: the stamp.
    changes: u64,
}

/// Documents and skills held in memory: the reference backend.
#[derive(Debug, Default)]
pub struct InMemoryDocuments {
    state: Mutex<Stored>,
    broken: crate::broken::Switch,
}

impl InMemoryDocuments {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// A store with one contract rule switched off, to show that the conformance suite
    /// notices (feature `conformance`; never for real use).
    #[cfg(feature = "conformance")]
    pub fn broken(rule: crate::BrokenRule) -> Self {
        InMemoryDocuments {
            broken: crate::broken::Switch::on(rule),
            ..Self::default()
        }
    }

    fn lock(&self) -> MutexGuard<'_, Stored> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a change for the stamp (unless the stamp is switched off).
    fn changed(&self, state: &mut Stored) {
        if !self.broken.is(crate::broken::Rule::DocumentsStamp) {
            state.changes += 1;
        }
    }

    /// Checks `expected` against `current` (unless compare-and-set is switched off).
    fn check(
        &self,
        path: &str,
        expected: Expected,
        current: Option<&String>,
    ) -> Result<(), MemoryError> {
        let found = current.map(|t| DocVersion::of_bytes(t.as_bytes()));
        if expected.is_met_by(found) || self.broken.is(crate::broken::Rule::DocumentCompareAndSet) {
            Ok(())
        } else {
            Err(document_conflict(path, expected, found))
        }
    }
}

#[async_trait]
impl MemoryDocuments for InMemoryDocuments {
    async fn read(&self, document: Document) -> Result<Option<DocumentText>, MemoryError> {
        Ok(self
            .lock()
            .documents
            .get(&document)
            .map(|t| DocumentText::new(t.clone())))
    }

    async fn write(
        &self,
        document: Document,
        text: &str,
        expected: Expected,
    ) -> Result<DocVersion, MemoryError> {
        let mut state = self.lock();
        self.check(document.path(), expected, state.documents.get(&document))?;
        state.documents.insert(document, text.to_owned());
        self.changed(&mut state);
        Ok(DocVersion::of_bytes(text.as_bytes()))
    }

    async fn skills(&self) -> Result<SkillSet, MemoryError> {
        Ok(SkillSet {
            skills: self
                .lock()
                .skills
                .iter()
                .map(|(name, text)| SkillText {
                    name: name.clone(),
                    document: DocumentText::new(text.clone()),
                })
                .collect(),
            skipped: Vec::new(),
        })
    }

    async fn read_skill(&self, name: &str) -> Result<Option<DocumentText>, MemoryError> {
        validate_skill_name(name)?;
        Ok(self
            .lock()
            .skills
            .get(name)
            .map(|t| DocumentText::new(t.clone())))
    }

    async fn write_skill(
        &self,
        name: &str,
        text: &str,
        expected: Expected,
    ) -> Result<DocVersion, MemoryError> {
        validate_skill_name(name)?;
        let mut state = self.lock();
        self.check(&skill_path(name), expected, state.skills.get(name))?;
        state.skills.insert(name.to_owned(), text.to_owned());
        self.changed(&mut state);
        Ok(DocVersion::of_bytes(text.as_bytes()))
    }

    async fn delete_skill(&self, name: &str, expected: Expected) -> Result<bool, MemoryError> {
        validate_skill_name(name)?;
        let mut state = self.lock();
        self.check(&skill_path(name), expected, state.skills.get(name))?;
        let existed = state.skills.remove(name).is_some();
        if existed {
            self.changed(&mut state);
        }
        Ok(existed)
    }

    async fn read_aux(&self, file: AuxFile) -> Result<Option<String>, MemoryError> {
        Ok(self.lock().aux.get(&file).cloned())
    }

    async fn write_aux(&self, file: AuxFile, text: &str) -> Result<(), MemoryError> {
        self.lock().aux.insert(file, text.to_owned());
        Ok(())
    }

    async fn stamp(&self) -> Result<Option<DocumentsStamp>, MemoryError> {
        Ok(Some(DocumentsStamp(self.lock().changes)))
    }

    fn capabilities(&self) -> DocumentCapabilities {
        DocumentCapabilities::default()
    }
}

/// The workspace-relative path of skill `name`'s `SKILL.md`.
pub fn skill_path(name: &str) -> String {
    format!("skills/{name}/SKILL.md")
}
