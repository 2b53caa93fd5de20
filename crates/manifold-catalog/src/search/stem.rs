//! A light English stemmer: enough to make "issues", "issue"; "creating", "created",
//! "creation", "create"; and "queries", "query" meet, without the full Porter algorithm. It
//! maps words to stems that are not always words ("creat", "queri"): only equality between
//! stems matters. Words of three letters or fewer, and words that are not plain ASCII, are
//! left as they are.

/// Plural-looking words that are not plurals.
const NOT_PLURAL: &[&str] = &["alias", "atlas", "canvas", "news", "series", "species"];

/// Plurals of two-letter abbreviations, which are too short for the general rule ("aws" and
/// "dns" must stay).
const SHORT_PLURALS: &[&str] = &["dbs", "ids", "ips", "mrs", "prs", "vms"];

/// The stem of a lowercase word.
pub(crate) fn stem(word: &str) -> String {
    if SHORT_PLURALS.contains(&word) {
        return word[..2].to_owned();
    }
    if word.len() <= 3 || !word.bytes().all(|b| b.is_ascii_lowercase()) {
        return word.to_owned();
    }
    let mut w = word.to_owned();
    if !NOT_PLURAL.contains(&word) {
        plural(&mut w);
    }
    let suffixed = strip_verb_suffix(&mut w);
    if !suffixed {
        strip_tion(&mut w);
    }
    final_y(&mut w);
    final_e(&mut w);
    w
}

/// "entries" -> "entri", "boxes" -> "box", "classes" -> "class", "files" -> "file"; "status"
/// and "analysis" stay.
fn plural(w: &mut String) {
    // "-ies" keeps its "i" (to meet "entry" -> "entri"); the sibilant plurals lose "es".
    let es = (w.ends_with("ies") && w.len() > 4)
        || ["sses", "xes", "ches", "shes", "zzes"]
            .iter()
            .any(|s| w.ends_with(s));
    if es {
        w.truncate(w.len() - 2);
    } else if w.ends_with('s') && !["ss", "us", "is"].iter().any(|s| w.ends_with(s)) {
        w.truncate(w.len() - 1);
    }
}

/// "-ing" and "-ed", when what is left still has a vowel and three letters: "creating" ->
/// "creat", "stopped" -> "stop" (a doubled last consonant is undoubled, but not "ll", "ss" or
/// "zz": "billing" -> "bill"), "copied" -> "copi". "string" and "need" stay.
fn strip_verb_suffix(w: &mut String) -> bool {
    if w.ends_with("ied") && w.len() > 4 {
        w.truncate(w.len() - 2);
        return true;
    }
    let cut = if w.ends_with("ing") {
        3
    } else if w.ends_with("ed") {
        2
    } else {
        return false;
    };
    let rest = &w[..w.len() - cut];
    if rest.len() < 3 || !rest.bytes().any(is_vowel_or_y) {
        return false;
    }
    w.truncate(w.len() - cut);
    // "add" keeps its "dd": an undoubled stem must keep three letters.
    let b = w.as_bytes();
    let n = b.len();
    let doubled = b[n - 1] == b[n - 2] && !is_vowel_or_y(b[n - 1]);
    if n >= 4 && doubled && !b"lsz".contains(&b[n - 1]) {
        w.truncate(n - 1);
    }
    true
}

/// "-tion" nouns meet their verbs: "deletion" -> "delet", "connection" -> "connect". Short
/// ones ("action", "option") stay.
fn strip_tion(w: &mut String) {
    if w.ends_with("tion") && w.len() >= 7 {
        w.truncate(w.len() - 3);
    }
}

/// A final "y" after a consonant becomes "i", to meet the "-ies" plural: "query" -> "queri".
fn final_y(w: &mut String) {
    let b = w.as_bytes();
    let n = b.len();
    if n > 3 && b[n - 1] == b'y' && !is_vowel_or_y(b[n - 2]) {
        w.truncate(n - 1);
        w.push('i');
    }
}

/// A final silent "e" goes, so that "share" meets "sharing": "issue" -> "issu".
fn final_e(w: &mut String) {
    if w.len() > 3 && w.ends_with('e') && !w.ends_with("ee") {
        w.truncate(w.len() - 1);
    }
}

fn is_vowel_or_y(b: u8) -> bool {
    matches!(b, b'a' | b'e' | b'i' | b'o' | b'u' | b'y')
}
