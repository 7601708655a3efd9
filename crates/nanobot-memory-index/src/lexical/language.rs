//! What a query's words are in its language: which are function words (left out of the
//! ranking: "when did", "the", "was"), and which word forms count as the same word
//! (Snowball stems: "paintings" / "painted" / "painting"; English irregular verbs: "went"
//! / "go"). The language is the one whose function words the query uses most (English on a
//! tie or when it uses none). CJK bigrams and tokens with digits are never touched: ids,
//! codes and Chinese queries match exactly, as before.

use rust_stemmers::{Algorithm, Stemmer};

/// A language the lexical lane knows the function words and stems of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Language {
    English,
    German,
    French,
    Spanish,
    Italian,
    Portuguese,
    Dutch,
}

const LANGUAGES: [Language; 7] = [
    Language::English,
    Language::German,
    Language::French,
    Language::Spanish,
    Language::Italian,
    Language::Portuguese,
    Language::Dutch,
];

const ENGLISH: &[&str] = &[
    "a", "about", "after", "again", "all", "am", "an", "and", "any", "are", "as", "at", "be",
    "been", "before", "being", "both", "but", "by", "can", "could", "did", "do", "does", "doing",
    "during", "each", "for", "from", "had", "has", "have", "having", "he", "her", "here", "hers",
    "him", "his", "how", "i", "if", "in", "into", "is", "it", "its", "just", "me", "my", "no",
    "not", "of", "on", "or", "our", "she", "should", "so", "some", "than", "that", "the", "their",
    "them", "then", "there", "these", "they", "this", "those", "to", "too", "up", "very", "was",
    "we", "were", "what", "when", "where", "which", "while", "who", "whom", "why", "will", "with",
    "would", "you", "your", "s", "t", "ve", "ll", "d", "m", "re",
];
const GERMAN: &[&str] = &[
    "der", "die", "das", "den", "dem", "des", "ein", "eine", "einen", "einem", "einer", "und",
    "oder", "aber", "ist", "sind", "war", "hat", "habe", "haben", "ich", "du", "er", "sie", "es",
    "wir", "ihr", "mein", "meine", "dein", "sein", "seine", "nicht", "mit", "von", "zu", "im",
    "in", "auf", "für", "an", "am", "wann", "wie", "was", "wo", "wer", "welche", "welcher", "hast",
    "auch", "noch", "dass", "bei", "nach", "aus", "um",
];
const FRENCH: &[&str] = &[
    "le", "la", "les", "un", "une", "des", "du", "de", "et", "ou", "mais", "est", "sont", "était",
    "a", "ai", "as", "avons", "je", "tu", "il", "elle", "nous", "vous", "ils", "elles", "mon",
    "ma", "mes", "son", "sa", "ses", "ne", "pas", "avec", "pour", "dans", "sur", "au", "aux",
    "quand", "comment", "quoi", "que", "qui", "où", "quel", "quelle", "ce", "cette", "en", "l",
    "d", "j", "qu", "c", "s", "n",
];
const SPANISH: &[&str] = &[
    "el", "la", "los", "las", "un", "una", "unos", "unas", "y", "o", "pero", "es", "son", "era",
    "fue", "ha", "he", "has", "yo", "tú", "él", "ella", "nosotros", "ellos", "mi", "mis", "su",
    "sus", "no", "con", "para", "por", "en", "de", "del", "al", "cuándo", "cuando", "cómo", "como",
    "qué", "que", "quién", "dónde", "cuál", "se", "lo", "le",
];
const ITALIAN: &[&str] = &[
    "il", "lo", "la", "i", "gli", "le", "un", "uno", "una", "e", "o", "ma", "è", "sono", "era",
    "ha", "ho", "hai", "io", "tu", "lui", "lei", "noi", "voi", "loro", "mio", "mia", "suo", "sua",
    "non", "con", "per", "in", "di", "del", "della", "al", "alla", "quando", "come", "cosa", "che",
    "chi", "dove", "quale", "si", "ci",
];
const PORTUGUESE: &[&str] = &[
    "o", "a", "os", "as", "um", "uma", "e", "ou", "mas", "é", "são", "era", "foi", "tem", "eu",
    "tu", "ele", "ela", "nós", "eles", "elas", "meu", "minha", "seu", "sua", "não", "com", "para",
    "por", "em", "no", "na", "de", "do", "da", "dos", "das", "quando", "como", "que", "quem",
    "onde", "qual", "se",
];
const DUTCH: &[&str] = &[
    "de", "het", "een", "en", "of", "maar", "is", "zijn", "was", "heeft", "heb", "ik", "jij", "je",
    "hij", "zij", "ze", "wij", "we", "mijn", "zijn", "haar", "niet", "met", "voor", "in", "op",
    "van", "aan", "wanneer", "hoe", "wat", "waar", "wie", "welke", "dat", "die",
];

/// English verbs whose forms a stemmer cannot join (base, past, participle).
const IRREGULAR: &[[&str; 3]] = &[
    ["be", "was", "been"],
    ["become", "became", "become"],
    ["begin", "began", "begun"],
    ["break", "broke", "broken"],
    ["bring", "brought", "brought"],
    ["build", "built", "built"],
    ["buy", "bought", "bought"],
    ["catch", "caught", "caught"],
    ["choose", "chose", "chosen"],
    ["come", "came", "come"],
    ["cut", "cut", "cut"],
    ["do", "did", "done"],
    ["draw", "drew", "drawn"],
    ["drink", "drank", "drunk"],
    ["drive", "drove", "driven"],
    ["eat", "ate", "eaten"],
    ["fall", "fell", "fallen"],
    ["feel", "felt", "felt"],
    ["fight", "fought", "fought"],
    ["find", "found", "found"],
    ["fly", "flew", "flown"],
    ["forget", "forgot", "forgotten"],
    ["get", "got", "gotten"],
    ["give", "gave", "given"],
    ["go", "went", "gone"],
    ["grow", "grew", "grown"],
    ["have", "had", "had"],
    ["hear", "heard", "heard"],
    ["hide", "hid", "hidden"],
    ["hold", "held", "held"],
    ["hurt", "hurt", "hurt"],
    ["keep", "kept", "kept"],
    ["know", "knew", "known"],
    ["lead", "led", "led"],
    ["learn", "learnt", "learnt"],
    ["leave", "left", "left"],
    ["lend", "lent", "lent"],
    ["lose", "lost", "lost"],
    ["make", "made", "made"],
    ["meet", "met", "met"],
    ["pay", "paid", "paid"],
    ["ride", "rode", "ridden"],
    ["ring", "rang", "rung"],
    ["rise", "rose", "risen"],
    ["run", "ran", "run"],
    ["say", "said", "said"],
    ["see", "saw", "seen"],
    ["sell", "sold", "sold"],
    ["send", "sent", "sent"],
    ["sing", "sang", "sung"],
    ["sit", "sat", "sat"],
    ["sleep", "slept", "slept"],
    ["speak", "spoke", "spoken"],
    ["spend", "spent", "spent"],
    ["stand", "stood", "stood"],
    ["steal", "stole", "stolen"],
    ["swim", "swam", "swum"],
    ["take", "took", "taken"],
    ["teach", "taught", "taught"],
    ["tell", "told", "told"],
    ["think", "thought", "thought"],
    ["throw", "threw", "thrown"],
    ["wake", "woke", "woken"],
    ["wear", "wore", "worn"],
    ["win", "won", "won"],
    ["write", "wrote", "written"],
];

impl Language {
    fn function_words(self) -> &'static [&'static str] {
        match self {
            Language::English => ENGLISH,
            Language::German => GERMAN,
            Language::French => FRENCH,
            Language::Spanish => SPANISH,
            Language::Italian => ITALIAN,
            Language::Portuguese => PORTUGUESE,
            Language::Dutch => DUTCH,
        }
    }

    fn algorithm(self) -> Algorithm {
        match self {
            Language::English => Algorithm::English,
            Language::German => Algorithm::German,
            Language::French => Algorithm::French,
            Language::Spanish => Algorithm::Spanish,
            Language::Italian => Algorithm::Italian,
            Language::Portuguese => Algorithm::Portuguese,
            Language::Dutch => Algorithm::Dutch,
        }
    }

    /// The language whose function words `tokens` use most; English on a tie.
    pub(crate) fn of(tokens: &[String]) -> Language {
        let used = |language: Language| {
            tokens
                .iter()
                .filter(|t| language.function_words().contains(&t.as_str()))
                .count()
        };
        let mut best = Language::English;
        let mut most = used(best);
        for language in LANGUAGES.into_iter().skip(1) {
            let count = used(language);
            if count > most {
                (best, most) = (language, count);
            }
        }
        best
    }

    /// Whether `token` is a function word of this language.
    pub(crate) fn is_function_word(self, token: &str) -> bool {
        self.function_words().contains(&token)
    }

    /// The stemmer of this language.
    pub(crate) fn stemmer(self) -> WordForms {
        WordForms {
            language: self,
            stemmer: Stemmer::create(self.algorithm()),
        }
    }
}

/// Decides which indexed words are forms of a query word.
pub(crate) struct WordForms {
    language: Language,
    stemmer: Stemmer,
}

impl WordForms {
    /// Whether `token` is left exactly as it is (ids, numbers, CJK, one letter).
    pub(crate) fn is_literal(token: &str) -> bool {
        token.chars().count() < 2
            || token
                .chars()
                .any(|c| c.is_ascii_digit() || crate::normalize::is_cjk(c))
    }

    /// The stem a form reduces to (for a literal token, the token itself; for a form of an
    /// irregular verb, its base's).
    pub(crate) fn stem(&self, token: &str) -> String {
        if Self::is_literal(token) {
            return token.to_owned();
        }
        let word = self.irregular(token).map_or(token, |forms| forms[0]);
        self.stemmer.stem(word).into_owned()
    }

    /// The English irregular verb `token` is a form of.
    fn irregular(&self, token: &str) -> Option<&'static [&'static str; 3]> {
        if self.language != Language::English {
            return None;
        }
        IRREGULAR.iter().find(|forms| forms.contains(&token))
    }

    /// Where `token`'s forms are in a sorted vocabulary: the prefixes every form with its
    /// stem starts with (the common start of each word and its stem, three letters at
    /// least), and the forms of an irregular verb, exactly.
    pub(crate) fn lookups(&self, token: &str) -> (Vec<String>, Vec<String>) {
        if Self::is_literal(token) {
            return (Vec::new(), Vec::new());
        }
        let mut words = vec![token];
        let mut exact: Vec<String> = Vec::new();
        if let Some(forms) = self.irregular(token) {
            words.push(forms[0]);
            exact.extend(forms.iter().map(|form| (*form).to_owned()));
            exact.extend(["s", "es", "ing"].map(|end| format!("{}{end}", forms[0])));
            exact.sort();
            exact.dedup();
        }
        let stem = self.stem(token);
        let mut prefixes: Vec<String> = words
            .into_iter()
            .map(|word| {
                word.chars()
                    .zip(stem.chars())
                    .take_while(|(a, b)| a == b)
                    .map(|(a, _)| a)
                    .collect::<String>()
            })
            .filter(|prefix| prefix.chars().count() >= 3)
            .collect();
        prefixes.sort();
        prefixes.dedup();
        (prefixes, exact)
    }
}
