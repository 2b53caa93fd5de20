//! Text analysis shared by documents and queries: words are split at anything that is not a
//! letter or digit, at camelCase humps and at letter/digit boundaries; lowercased, with the
//! common Latin accents folded to ASCII; English stop words dropped; and stemmed
//! ([`super::stem`]). Indexing and querying must analyze text the same way, so both go
//! through [`terms`].

use super::stem::stem;

/// Function words that say nothing about what a tool does, and "called", "named" and
/// "titled", which introduce a value ("a folder called backups"). Verbs such as "get",
/// "list", "show" or "find" stay: tool names are made of them.
pub(super) const STOP_WORDS: &[&str] = &[
    "a", "about", "after", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be",
    "been", "before", "being", "but", "by", "called", "can", "could", "did", "do", "does", "doing",
    "each", "eg", "etc", "for", "from", "had", "has", "have", "having", "he", "her", "here", "him",
    "his", "how", "i", "ie", "if", "in", "into", "is", "it", "its", "itself", "just", "let",
    "lets", "me", "might", "mine", "more", "most", "much", "must", "my", "myself", "named", "need",
    "needs", "no", "nor", "not", "of", "on", "onto", "or", "other", "our", "ours", "own", "please",
    "same", "she", "should", "so", "some", "such", "than", "that", "the", "their", "theirs",
    "them", "then", "there", "these", "they", "this", "those", "through", "titled", "to", "too",
    "upon", "us", "use", "uses", "using", "very", "via", "wanna", "want", "was", "we", "were",
    "what", "whatever", "when", "where", "whether", "which", "while", "who", "whom", "whose",
    "why", "will", "with", "within", "would", "you", "your", "yours", "yourself",
];

/// The analyzed terms of `text`, in order, appended to `out` (repeats kept: they are term
/// frequencies).
pub(crate) fn terms(text: &str, out: &mut Vec<String>) {
    let mut run = String::new();
    for c in text.chars() {
        if c.is_alphanumeric() {
            fold_into(c, &mut run);
        } else if !run.is_empty() {
            split_run(&run, out);
            run.clear();
        }
    }
    if !run.is_empty() {
        split_run(&run, out);
    }
}

/// The words of `text`, lowercased and folded, leaving out stop words and words with
/// digits: what a query writes apart that a name may write as one.
pub(crate) fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut run = String::new();
    for c in text.chars().chain([' ']) {
        if c.is_alphanumeric() {
            fold_into(c, &mut run);
        } else if !run.is_empty() {
            let word = run.to_lowercase();
            if !is_stop_word(&word) && word.chars().all(char::is_alphabetic) {
                out.push(word);
            }
            run.clear();
        }
    }
    out
}

/// The analyzed terms of `text` as a new vector.
pub(crate) fn terms_of(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    terms(text, &mut out);
    out
}

/// Whether `word` (lowercase) is a stop word.
pub(crate) fn is_stop_word(word: &str) -> bool {
    STOP_WORDS.binary_search(&word).is_ok()
}

/// Splits one run of letters and digits (case kept) at humps and letter/digit boundaries and
/// emits each part's term. Letters followed by digits are also emitted joined ("s3", "ec2",
/// "sha256"), since such names are searched for whole.
fn split_run(run: &str, out: &mut Vec<String>) {
    let chars: Vec<char> = run.chars().collect();
    let mut parts: Vec<(usize, usize)> = Vec::new();
    let mut start = 0;
    for i in 1..chars.len() {
        if is_boundary(&chars, i) {
            parts.push((start, i));
            start = i;
        }
    }
    parts.push((start, chars.len()));
    let lower = |from: usize, to: usize| -> String {
        chars[from..to]
            .iter()
            .flat_map(|c| c.to_lowercase())
            .collect()
    };
    for (n, &(from, to)) in parts.iter().enumerate() {
        emit(&lower(from, to), out);
        let letters = !chars[from].is_ascii_digit();
        if let Some(&(next, end)) = parts.get(n + 1) {
            if letters && chars[next].is_ascii_digit() {
                out.push(lower(from, end));
            }
        }
    }
}

/// Whether a new part starts at `chars[i]`: a lower-to-upper hump ("getTime"), the last
/// capital of an acronym followed by lowercase ("HTTPServer"), or a letter/digit change.
fn is_boundary(chars: &[char], i: usize) -> bool {
    let (prev, cur) = (chars[i - 1], chars[i]);
    if prev.is_ascii_digit() != cur.is_ascii_digit() {
        return true;
    }
    if prev.is_lowercase() && cur.is_uppercase() {
        return true;
    }
    let next_lower = chars.get(i + 1).is_some_and(|c| c.is_lowercase());
    prev.is_uppercase() && cur.is_uppercase() && next_lower
}

/// Adds one lowercase word's term, unless it is a stop word or a lone letter.
fn emit(word: &str, out: &mut Vec<String>) {
    let lone_letter = word.len() == 1 && !word.as_bytes()[0].is_ascii_digit();
    if lone_letter || is_stop_word(word) {
        return;
    }
    if word.bytes().any(|b| b.is_ascii_digit()) {
        out.push(word.to_owned());
    } else {
        out.push(stem(word));
    }
}

/// Appends `c` with the accents of common Latin letters removed (case kept, for the hump
/// split); other letters pass unchanged.
fn fold_into(c: char, run: &mut String) {
    let folded = match c {
        'à' | 'á' | 'â' | 'ã' | 'ä' | 'å' | 'ā' | 'ă' | 'ą' => "a",
        'À' | 'Á' | 'Â' | 'Ã' | 'Ä' | 'Å' | 'Ā' | 'Ă' | 'Ą' => "A",
        'ç' | 'ć' | 'č' => "c",
        'Ç' | 'Ć' | 'Č' => "C",
        'ď' | 'đ' => "d",
        'è' | 'é' | 'ê' | 'ë' | 'ē' | 'ė' | 'ę' | 'ě' => "e",
        'È' | 'É' | 'Ê' | 'Ë' | 'Ē' | 'Ė' | 'Ę' | 'Ě' => "E",
        'ì' | 'í' | 'î' | 'ï' | 'ī' | 'į' => "i",
        'Ì' | 'Í' | 'Î' | 'Ï' | 'Ī' | 'Į' => "I",
        'ł' => "l",
        'Ł' => "L",
        'ñ' | 'ń' | 'ň' => "n",
        'Ñ' | 'Ń' | 'Ň' => "N",
        'ò' | 'ó' | 'ô' | 'õ' | 'ö' | 'ø' | 'ō' | 'ő' => "o",
        'Ò' | 'Ó' | 'Ô' | 'Õ' | 'Ö' | 'Ø' | 'Ō' | 'Ő' => "O",
        'ř' => "r",
        'ś' | 'š' | 'ş' => "s",
        'Ś' | 'Š' | 'Ş' => "S",
        'ť' | 'ţ' => "t",
        'ù' | 'ú' | 'û' | 'ü' | 'ū' | 'ů' | 'ű' => "u",
        'Ù' | 'Ú' | 'Û' | 'Ü' | 'Ū' | 'Ů' | 'Ű' => "U",
        'ý' | 'ÿ' => "y",
        'Ý' => "Y",
        'ź' | 'ż' | 'ž' => "z",
        'Ź' | 'Ż' | 'Ž' => "Z",
        'ß' => "ss",
        'æ' => "ae",
        'Æ' => "Ae",
        'œ' => "oe",
        'Œ' => "Oe",
        _ => {
            run.push(c);
            return;
        }
    };
    run.push_str(folded);
}
