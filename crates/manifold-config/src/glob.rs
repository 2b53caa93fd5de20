//! Include/exclude matching for tool and prompt names.

use crate::NameFilter;

/// Whether `name` matches `pattern`, where `*` matches any run of characters (including none)
/// and every other character matches itself. The whole name must match.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    // Byte-wise matching is safe for UTF-8: literal bytes only match where the same complete
    // characters appear, and `*` is ASCII.
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    let (mut pi, mut ni) = (0, 0);
    // Where the last `*` was and how much of the name it has consumed so far; on a mismatch
    // that star takes one more byte and matching resumes after it. This greedy backtracking
    // is enough because a later `*` can always absorb what an earlier one would have.
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if p.get(pi) == Some(&b'*') {
            star = Some((pi, ni));
            pi += 1;
        } else if p.get(pi) == Some(&n[ni]) {
            pi += 1;
            ni += 1;
        } else if let Some((star_pi, star_ni)) = star {
            star = Some((star_pi, star_ni + 1));
            pi = star_pi + 1;
            ni = star_ni + 1;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&b| b == b'*')
}

impl NameFilter {
    /// Whether the upstream's item called `original` is exposed: an empty include list admits
    /// everything, and an exclude match wins over an include match.
    pub fn admits(&self, original: &str) -> bool {
        let included =
            self.include.is_empty() || self.include.iter().any(|p| glob_match(p, original));
        included && !self.exclude.iter().any(|p| glob_match(p, original))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_patterns_match_exactly() {
        assert!(glob_match("get_time", "get_time"));
        assert!(!glob_match("get_time", "get_times"));
        assert!(!glob_match("get_time", "get_tim"));
        assert!(!glob_match("get_time", "Get_time"));
        assert!(glob_match("", ""));
        assert!(!glob_match("", "a"));
    }

    #[test]
    fn star_matches_any_run() {
        assert!(glob_match("*", ""));
        assert!(glob_match("*", "anything at all"));
        assert!(glob_match("get_*", "get_"));
        assert!(glob_match("get_*", "get_current_time"));
        assert!(!glob_match("get_*", "set_current_time"));
        assert!(glob_match("*_time", "get_current_time"));
        assert!(!glob_match("*_time", "get_current_times"));
        assert!(glob_match("a*b*c", "abc"));
        assert!(glob_match("a*b*c", "axxbyybzc"));
        assert!(!glob_match("a*b*c", "axxbyy"));
        assert!(glob_match("**x**", "x"));
        assert!(glob_match("*aab", "aaaab"), "needs backtracking");
        assert!(glob_match("é*ü", "éaü"));
    }

    #[test]
    fn other_glob_characters_are_literal() {
        assert!(glob_match("a?c", "a?c"));
        assert!(!glob_match("a?c", "abc"));
        assert!(glob_match("[x]", "[x]"));
        assert!(!glob_match("[x]", "x"));
    }

    fn filter(include: &[&str], exclude: &[&str]) -> NameFilter {
        NameFilter {
            include: include.iter().map(|s| s.to_string()).collect(),
            exclude: exclude.iter().map(|s| s.to_string()).collect(),
            rename: Default::default(),
        }
    }

    #[test]
    fn empty_filter_admits_everything() {
        assert!(NameFilter::default().admits("anything"));
        assert!(NameFilter::default().admits(""));
    }

    #[test]
    fn include_limits_and_exclude_wins() {
        let f = filter(&["get_*", "list"], &["get_secret*"]);
        assert!(f.admits("get_current_time"));
        assert!(f.admits("list"));
        assert!(!f.admits("convert_time"));
        assert!(!f.admits("get_secret_key"));
        let only_exclude = filter(&[], &["convert_time"]);
        assert!(only_exclude.admits("get_current_time"));
        assert!(!only_exclude.admits("convert_time"));
    }
}
