//! The schedule (spec dream.md cases 77, 78, 89): interval or cron, measured from the last
//! recorded run, so a restart catches up.

use chrono::{Duration, FixedOffset, TimeZone, Utc};
use nanobot_dream::{CronExpr, DreamSchedule, Trigger};
use nanobot_llm_port::Clock;
use nanobot_llm_port::testing::ScriptedLlm;

use crate::support::fixture;

fn utc() -> FixedOffset {
    FixedOffset::east_opt(0).unwrap()
}

#[test]
fn interval_and_cron_settings() {
    let every = DreamSchedule::from_settings(2, None, utc()).unwrap();
    assert_eq!(every.describe(), "every 2h");
    let t = Utc.with_ymd_and_hms(2026, 11, 30, 9, 0, 0).unwrap();
    assert_eq!(every.next_after(t), Some(t + Duration::hours(2)));
    let cron = DreamSchedule::from_settings(5, Some("0 */4 * * *"), utc()).unwrap();
    assert_eq!(cron.describe(), "cron 0 */4 * * *");
    assert_eq!(
        cron.next_after(t),
        Some(Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap())
    );
    assert!(DreamSchedule::from_settings(0, None, utc()).is_err());
    for bad in [
        "* * *",
        "61 * * * *",
        "*/0 * * * *",
        "5-1 * * * *",
        "a b c d e",
    ] {
        assert!(CronExpr::parse(bad, utc()).is_err(), "{bad}");
    }
}

#[test]
fn cron_fields_and_offsets() {
    let t = Utc.with_ymd_and_hms(2026, 11, 30, 9, 0, 0).unwrap(); // a Monday
    let next = |expr: &str, offset: i32| {
        CronExpr::parse(expr, FixedOffset::east_opt(offset * 3600).unwrap())
            .unwrap()
            .next_after(t)
            .unwrap()
    };
    assert_eq!(
        next("30 9 * * *", 0),
        Utc.with_ymd_and_hms(2026, 11, 30, 9, 30, 0).unwrap()
    );
    assert_eq!(
        next("0 3 * * 0", 0),
        Utc.with_ymd_and_hms(2026, 12, 6, 3, 0, 0).unwrap()
    );
    assert_eq!(
        next("0 3 * * 7", 0),
        Utc.with_ymd_and_hms(2026, 12, 6, 3, 0, 0).unwrap()
    );
    assert_eq!(
        next("0 0 1 1 *", 0),
        Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, 0).unwrap()
    );
    assert_eq!(
        next("15,45 10-11 * * 1-5", 0),
        Utc.with_ymd_and_hms(2026, 11, 30, 10, 15, 0).unwrap()
    );
    // 09:00 at UTC+8 is 01:00 UTC.
    assert_eq!(
        next("0 9 * * *", 8),
        Utc.with_ymd_and_hms(2026, 12, 1, 1, 0, 0).unwrap()
    );
}

#[tokio::test]
async fn a_restart_catches_up_instead_of_starting_the_clock_again() {
    let f = fixture(ScriptedLlm::new());
    let schedule = DreamSchedule::from_settings(2, None, utc()).unwrap();
    let start = f.clock.now();
    // Before any run, the first consultation starts the clock, and keeps it across restarts.
    assert_eq!(
        f.dream.next_run(&schedule, start).await.unwrap(),
        Some(start + Duration::hours(2))
    );
    assert_eq!(
        f.dream
            .next_run(&schedule, start + Duration::hours(1))
            .await
            .unwrap(),
        Some(start + Duration::hours(2))
    );
    f.dream.run(Trigger::Scheduled).await.unwrap();
    // The process is down for five hours: the next run is overdue at start.
    let later = start + Duration::hours(5);
    let due = f.dream.next_run(&schedule, later).await.unwrap().unwrap();
    assert!(due <= later);
    assert_eq!(due, start + Duration::hours(2));
}
