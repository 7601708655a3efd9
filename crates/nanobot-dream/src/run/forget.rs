//! Forgetting by source: the curated lines whose every recorded source is forgotten are
//! taken out, as one Dream version that says so (counts only: the version message must
//! not repeat what is forgotten); lines another conversation also taught stay.

use super::lineage::Replay;
use super::versions::Plan;
use super::*;
use crate::lines::{is_fact, take_out};
use crate::provenance::Source;

/// What forgetting some sources does to the memory files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ForgetLines {
    /// Lines every recorded source of which is forgotten: (file, line). They go.
    pub removed: Vec<(String, String)>,
    /// Lines a forgotten source taught and another one too: (file, line). They stay.
    pub kept: Vec<(String, String)>,
}

impl ForgetLines {
    /// Whether nothing would change.
    pub fn is_empty(&self) -> bool {
        self.removed.is_empty()
    }
}

/// Which sources are forgotten.
pub type Forgotten<'a> = &'a (dyn Fn(&Source) -> bool + Send + Sync);

impl Dream {
    /// What forgetting the sources `forgotten` names would take out of the memory files
    /// (nothing is changed).
    pub async fn lines_from(&self, forgotten: Forgotten<'_>) -> Result<ForgetLines, DreamError> {
        let replay = self.replay().await?;
        let now = self.snapshot_now().await?;
        Ok(select(&replay, &now, forgotten))
    }

    /// Takes the lines [`Dream::lines_from`] names out of the memory files, under the lease,
    /// as a version whose message is `dream: forget {what}`. Run again, it finds nothing.
    pub async fn forget_lines(
        &self,
        forgotten: Forgotten<'_>,
        what: &str,
    ) -> Result<(ForgetLines, Option<Version>), DreamError> {
        let lease = self.acquire("forget").await?;
        let result = self.forget_leased(forgotten, what, &lease).await;
        self.give_back(lease).await;
        result
    }

    async fn forget_leased(
        &self,
        forgotten: Forgotten<'_>,
        what: &str,
        lease: &Lease,
    ) -> Result<(ForgetLines, Option<Version>), DreamError> {
        self.recover(lease).await?;
        self.record_outside_edits(lease).await?;
        let replay = self.replay().await?;
        let now = self.snapshot_now().await?;
        let lines = select(&replay, &now, forgotten);
        if lines.is_empty() {
            return Ok((lines, None));
        }
        let mut files = BTreeMap::new();
        for (path, text) in &now {
            let gone: Vec<&str> = lines
                .removed
                .iter()
                .filter(|(p, _)| p == path)
                .map(|(_, l)| l.as_str())
                .collect();
            if !gone.is_empty() {
                files.insert(path.clone(), Some(take_out(text, &gone).concat()));
            }
        }
        let message = format!(
            "dream: forget {what}\n\nRemoved {} memory lines whose only sources were forgotten; kept {} that another conversation also taught.",
            lines.removed.len(),
            lines.kept.len()
        );
        let plan = Plan {
            files,
            cursor: None,
            message: Some(message),
        };
        let version = self.apply(plan, &now, lease).await?;
        Ok((lines, version))
    }
}

/// The lines of `now` (tracked files) whose sources `forgotten` names: all of them
/// (removed) or some (kept).
fn select(replay: &Replay, now: &Snapshot, forgotten: Forgotten<'_>) -> ForgetLines {
    let mut lines = ForgetLines::default();
    for (path, blamed) in replay.blame_files(now) {
        for line in blamed {
            // Only what Dream wrote: a line written by hand is the operator's.
            let Some(origin) = line.origin.filter(|o| o.by_dream && is_fact(&line.text)) else {
                continue;
            };
            let hit = origin.sources.iter().filter(|s| forgotten(s)).count();
            if hit == 0 {
                continue;
            }
            let entry = (path.clone(), line.text);
            if hit == origin.sources.len() {
                lines.removed.push(entry);
            } else {
                lines.kept.push(entry);
            }
        }
    }
    lines
}

impl Dream {
    /// Erases from every memory version the lines, held now or once, whose every recorded
    /// source `forgotten` names, and the version message lines that quote them (a real
    /// erasure: [`Dream::forget_lines`] leaves them in the history). Version ids change.
    /// Returns how many versions changed.
    pub async fn erase_from_history(&self, forgotten: Forgotten<'_>) -> Result<usize, DreamError> {
        let lease = self.acquire("erase").await?;
        let result = self.erase_leased(forgotten, &lease).await;
        self.give_back(lease).await;
        result
    }

    async fn erase_leased(
        &self,
        forgotten: Forgotten<'_>,
        lease: &Lease,
    ) -> Result<usize, DreamError> {
        self.recover(lease).await?;
        let replay = self.replay().await?;
        let only = |origin: &Option<super::Origin>| {
            origin.as_ref().is_some_and(|o| {
                o.by_dream && !o.sources.is_empty() && o.sources.iter().all(forgotten)
            })
        };
        let mut erased: Vec<(String, String)> = replay
            .past
            .iter()
            .filter(|p| only(&p.origin))
            .map(|p| (p.path.clone(), p.text.trim().to_owned()))
            .collect();
        for (path, lines) in &replay.files {
            for (text, origin) in lines {
                if is_fact(text) && only(origin) {
                    erased.push((path.clone(), text.trim().to_owned()));
                }
            }
        }
        if erased.is_empty() {
            return Ok(0);
        }
        self.lease.check(lease.fence).await?;
        let edit = |version: &Version, mut files: Snapshot| {
            // Wherever the line stood in that version (it may have moved between files).
            for text in files.values_mut() {
                let kept: String = text
                    .split_inclusive('\n')
                    .filter(|l| !erased.iter().any(|(_, e)| l.trim() == e))
                    .collect();
                *text = kept;
            }
            let quoted = |line: &str| {
                erased
                    .iter()
                    .any(|(_, e)| line.contains(e.trim_start_matches(['-', '*', ' '])))
            };
            let message: Vec<&str> = version.message.lines().filter(|l| !quoted(l)).collect();
            (message.join("\n"), files)
        };
        Ok(self.versions()?.rewrite(&edit).await?)
    }
}
