//! Keys and file names (spec cases 6-10) and bad keys.

use nanobot_session_store::{SessionError, SessionKey};

#[test]
fn storage_stems_match_nanobot() {
    for (key, stem) in [
        ("telegram:123", "dGVsZWdyYW06MTIz"),
        ("a", "YQ"),
        ("ab", "YWI"),
        ("日本", "5pel5pys"),
        ("telegram:42", "dGVsZWdyYW06NDI"),
    ] {
        assert_eq!(SessionKey::new(key).unwrap().storage_stem(), stem);
        assert_eq!(SessionKey::from_storage_stem(stem).unwrap().as_str(), key);
    }
    for stem in ["YQ==", "Y", "telegram_12345", ""] {
        assert!(SessionKey::from_storage_stem(stem).is_none(), "{stem}");
    }
    let a = SessionKey::new("telegram:a_b").unwrap();
    let b = SessionKey::new("telegram:a:b").unwrap();
    assert_ne!(a.storage_stem(), b.storage_stem());
}

#[test]
fn long_keys_get_a_hashed_name_that_fits() {
    let long = SessionKey::new("x".repeat(1000)).unwrap();
    let stem = long.storage_stem();
    assert!(stem.starts_with("~h") && stem.len() == 66, "{stem}");
    assert!(SessionKey::is_hashed_stem(&stem));
    assert!(SessionKey::from_storage_stem(&stem).is_none());
    let short = SessionKey::new("x".repeat(150)).unwrap();
    assert!(!SessionKey::is_hashed_stem(&short.storage_stem()));
}

#[test]
fn bad_keys_are_refused_with_a_reason() {
    let cases = [
        ("", "empty"),
        ("a\0b", "NUL"),
        (&"k".repeat(10 * 1024), "more than the 1024"),
    ];
    for (key, reason) in cases {
        let error = SessionKey::new(key).unwrap_err();
        assert!(matches!(error, SessionError::InvalidKey { .. }));
        assert!(error.to_string().contains(reason), "{error}");
    }
    // Path-like keys are fine: they never become paths.
    for key in ["../../etc/passwd", "a/b", "..", "/abs"] {
        let key = SessionKey::new(key).unwrap();
        assert!(!key.storage_stem().contains('/'));
        assert!(!key.storage_stem().starts_with('.'));
    }
    assert_eq!(
        SessionKey::new("telegram:42").unwrap().channel(),
        "telegram"
    );
    assert!(SessionKey::new("dream:run").unwrap().is_internal());
}

/// The hand-written timestamp is what chrono's format strings (Python's `isoformat`) write,
/// with and without microseconds, over the years Python knows.
#[test]
fn isoformat_matches_the_format_strings() {
    use chrono::{NaiveDate, NaiveDateTime};
    use nanobot_session_store::python_isoformat;
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    let mut next = move |below: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % below
    };
    for _ in 0..10_000 {
        let date = NaiveDate::from_ymd_opt(
            1 + next(9999) as i32,
            1 + next(12) as u32,
            1 + next(28) as u32,
        )
        .unwrap();
        let micros = if next(3) == 0 {
            0
        } else {
            next(1_000_000) as u32
        };
        let time: NaiveDateTime = date
            .and_hms_micro_opt(next(24) as u32, next(60) as u32, next(60) as u32, micros)
            .unwrap();
        let expected = if micros == 0 {
            time.format("%Y-%m-%dT%H:%M:%S").to_string()
        } else {
            time.format("%Y-%m-%dT%H:%M:%S%.6f").to_string()
        };
        assert_eq!(python_isoformat(time), expected);
    }
}
