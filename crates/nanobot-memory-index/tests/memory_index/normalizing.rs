use nanobot_memory_index::{MAX_TOKEN_CHARS, normalize, query_terms, tokens};

#[test]
fn full_width_forms_fold_and_case_is_lowered() {
    assert_eq!(tokens("ＥＲＲ＿ＣＯＮＮ 5432"), ["err", "conn", "5432"]);
    assert_eq!(normalize("Hello, WORLD!"), "hello world");
}

#[test]
fn punctuation_separates_ids_into_their_parts() {
    assert_eq!(tokens("A7-99213-K"), ["a7", "99213", "k"]);
    assert_eq!(
        tokens("api.weatherly.io/v2"),
        ["api", "weatherly", "io", "v2"]
    );
    assert_eq!(tokens("v2.14.3"), ["v2", "14", "3"]);
}

#[test]
fn chinese_runs_become_overlapping_bigrams() {
    assert_eq!(
        tokens("用户喜欢喝茶。"),
        ["用户", "户喜", "喜欢", "欢喝", "喝茶"]
    );
    // A run broken by punctuation is two runs; a lone character stays itself.
    assert_eq!(tokens("茶，好"), ["茶", "好"]);
    // Latin inside a CJK run splits it.
    assert_eq!(tokens("用户ABC喝茶"), ["用户", "abc", "喝茶"]);
}

#[test]
fn kana_and_hangul_are_bigrams_too() {
    assert_eq!(tokens("カタカナ"), ["カタ", "タカ", "カナ"]);
    assert_eq!(tokens("한국어"), ["한국", "국어"]);
}

#[test]
fn accents_are_kept_with_their_letters() {
    // Decomposed and composed forms give the same token.
    assert_eq!(tokens("cafe\u{301}"), tokens("café"));
    assert_eq!(tokens("naïve Zoë"), ["naïve", "zoë"]);
    // A Devanagari word with its vowel signs is one token.
    assert_eq!(tokens("नमस्ते दुनिया").len(), 2);
}

#[test]
fn very_long_tokens_are_cut() {
    let blob = "x".repeat(500);
    let got = tokens(&blob);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].chars().count(), MAX_TOKEN_CHARS);
}

#[test]
fn query_terms_are_distinct_and_a_lone_cjk_character_is_a_prefix() {
    let terms = query_terms("Tea tea 茶 喝茶");
    let texts: Vec<&str> = terms.iter().map(|t| t.text.as_str()).collect();
    assert_eq!(texts, ["tea", "茶", "喝茶"]);
    assert_eq!(
        terms.iter().map(|t| t.prefix).collect::<Vec<_>>(),
        [false, true, false]
    );
    assert!(query_terms("?!…").is_empty());
}
