#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod front_matter;
mod loader;
mod skills;
mod snapshot;

pub use front_matter::{
    FrontMatterError, MAX_FRONT_MATTER_DEPTH, check_front_matter, parse_front_matter,
};
pub use loader::{PromptLoader, SystemProbe};
pub use skills::{
    RequirementProbe, Requirements, SkillFile, SkillInfo, SkillSource, skill_info,
    skill_requirements, strip_front_matter,
};
pub use snapshot::{PromptFiles, WorkspaceSnapshot};
