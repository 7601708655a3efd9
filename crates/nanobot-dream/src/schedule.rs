//! When Dream runs: every N hours, or at the times of a cron expression (which takes
//! precedence), measured from the last run recorded in the workspace, so a restart catches
//! up instead of starting the clock again.

use chrono::{DateTime, Datelike, Duration, FixedOffset, TimeZone, Timelike, Utc};
use serde_json::Value;

use crate::error::DreamError;
use crate::run::Dream;

/// A five-field cron expression (minute, hour, day of month, month, day of week) with `*`,
/// lists, ranges and steps, evaluated at a fixed UTC offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronExpr {
    text: String,
    minutes: Vec<bool>,
    hours: Vec<bool>,
    days: Vec<bool>,
    months: Vec<bool>,
    weekdays: Vec<bool>,
    any_day: bool,
    any_weekday: bool,
    offset: FixedOffset,
}

impl CronExpr {
    /// Parses `text`, evaluated at `offset` from UTC.
    pub fn parse(text: &str, offset: FixedOffset) -> Result<CronExpr, DreamError> {
        let fields: Vec<&str> = text.split_whitespace().collect();
        let bad = |reason: String| DreamError::InvalidConfig {
            key: "cron",
            reason,
        };
        if fields.len() != 5 {
            return Err(bad(format!(
                "{text:?} has {} fields; a cron expression has five: minute hour day-of-month month day-of-week",
                fields.len()
            )));
        }
        let field = |i: usize, lo: u32, hi: u32| -> Result<Vec<bool>, DreamError> {
            let mut set = vec![false; hi as usize + 1];
            for part in fields[i].split(',') {
                let (range, step) = match part.split_once('/') {
                    Some((r, s)) => (
                        r,
                        s.parse::<u32>()
                            .ok()
                            .filter(|s| *s > 0)
                            .ok_or_else(|| bad(format!("bad step in {part:?}")))?,
                    ),
                    None => (part, 1),
                };
                let (from, to) = if range == "*" {
                    (lo, hi)
                } else if let Some((a, b)) = range.split_once('-') {
                    (
                        num(a, lo, hi).ok_or_else(|| bad(format!("{a:?} is out of {lo}-{hi}")))?,
                        num(b, lo, hi).ok_or_else(|| bad(format!("{b:?} is out of {lo}-{hi}")))?,
                    )
                } else {
                    let v = num(range, lo, hi)
                        .ok_or_else(|| bad(format!("{range:?} is out of {lo}-{hi}")))?;
                    (v, if part.contains('/') { hi } else { v })
                };
                if from > to {
                    return Err(bad(format!("the range {range:?} runs backwards")));
                }
                for v in (from..=to).step_by(step as usize) {
                    set[v as usize] = true;
                }
            }
            Ok(set)
        };
        let mut weekdays = field(4, 0, 7)?;
        if weekdays[7] {
            weekdays[0] = true;
        }
        Ok(CronExpr {
            text: text.to_owned(),
            minutes: field(0, 0, 59)?,
            hours: field(1, 0, 23)?,
            days: field(2, 1, 31)?,
            months: field(3, 1, 12)?,
            weekdays,
            any_day: fields[2] == "*",
            any_weekday: fields[4] == "*",
            offset,
        })
    }

    fn matches(&self, t: DateTime<FixedOffset>) -> bool {
        self.minutes[t.minute() as usize]
            && self.hours[t.hour() as usize]
            && self.months[t.month() as usize]
            && self.day_matches(t)
    }

    /// The first matching minute strictly after `after`, within five years.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = after.with_timezone(&self.offset);
        let mut t = self
            .offset
            .with_ymd_and_hms(
                local.year(),
                local.month(),
                local.day(),
                local.hour(),
                local.minute(),
                0,
            )
            .single()?
            + Duration::minutes(1);
        let limit = t + Duration::days(366 * 5);
        while t < limit {
            if !self.months[t.month() as usize] {
                t = next_month(t)?;
                continue;
            }
            if !self.day_matches(t) {
                t = (t + Duration::days(1)).with_hour(0)?.with_minute(0)?;
                continue;
            }
            if !self.hours[t.hour() as usize] {
                t = (t + Duration::hours(1)).with_minute(0)?;
                continue;
            }
            if self.matches(t) {
                return Some(t.with_timezone(&Utc));
            }
            t += Duration::minutes(1);
        }
        None
    }

    /// Cron's rule: with both day fields restricted, either may match.
    fn day_matches(&self, t: DateTime<FixedOffset>) -> bool {
        let day = self.days[t.day() as usize];
        let weekday = self.weekdays[t.weekday().num_days_from_sunday() as usize];
        match (self.any_day, self.any_weekday) {
            (true, true) => true,
            (false, true) => day,
            (true, false) => weekday,
            (false, false) => day || weekday,
        }
    }
}

fn next_month(t: DateTime<FixedOffset>) -> Option<DateTime<FixedOffset>> {
    let (y, m) = if t.month() == 12 {
        (t.year() + 1, 1)
    } else {
        (t.year(), t.month() + 1)
    };
    t.timezone().with_ymd_and_hms(y, m, 1, 0, 0, 0).single()
}

fn num(text: &str, lo: u32, hi: u32) -> Option<u32> {
    text.parse::<u32>().ok().filter(|v| (lo..=hi).contains(v))
}

/// When Dream runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DreamSchedule {
    /// Every this many hours after the last run.
    Every {
        /// Hours, at least 1.
        hours: u32,
    },
    /// At the times of a cron expression.
    Cron(CronExpr),
}

impl DreamSchedule {
    /// nanobot's settings: `interval_h` (default 2), and `cron`, which wins when set.
    pub fn from_settings(
        interval_h: u32,
        cron: Option<&str>,
        offset: FixedOffset,
    ) -> Result<Self, DreamError> {
        match cron.map(str::trim).filter(|c| !c.is_empty()) {
            Some(expr) => Ok(DreamSchedule::Cron(CronExpr::parse(expr, offset)?)),
            None if interval_h == 0 => Err(DreamError::InvalidConfig {
                key: "interval_h",
                reason: "must be at least 1 (hours); disable Dream instead".into(),
            }),
            None => Ok(DreamSchedule::Every { hours: interval_h }),
        }
    }

    /// The next run after `last`.
    pub fn next_after(&self, last: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            DreamSchedule::Every { hours } => Some(last + Duration::hours(i64::from(*hours))),
            DreamSchedule::Cron(expr) => expr.next_after(last),
        }
    }

    /// `every 2h` or `cron 0 */4 * * *`.
    pub fn describe(&self) -> String {
        match self {
            DreamSchedule::Every { hours } => format!("every {hours}h"),
            DreamSchedule::Cron(expr) => format!("cron {}", expr.text),
        }
    }
}

impl Dream {
    /// When the next scheduled run is due: after the last recorded run, or, before the
    /// first, after the moment the schedule was first consulted (recorded then). A time in
    /// the past means a run is overdue: run now.
    pub async fn next_run(
        &self,
        schedule: &DreamSchedule,
        now: DateTime<Utc>,
    ) -> Result<Option<DateTime<Utc>>, DreamError> {
        let base = match self.last_run().await? {
            Some(last) => last,
            None => {
                let mut state = self.state().await?;
                let since = state
                    .get("scheduled_since")
                    .and_then(Value::as_str)
                    .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                    .map(|t| t.with_timezone(&Utc));
                match since {
                    Some(since) => since,
                    None => {
                        state.insert("scheduled_since".into(), Value::String(now.to_rfc3339()));
                        self.write_state(state).await?;
                        now
                    }
                }
            }
        };
        Ok(schedule.next_after(base))
    }
}
