//! `${VAR}` interpolation: `${VAR}` is replaced from the environment, `$$` is a literal `$`,
//! and any other `$` is kept as it is (so `$HOME` or a trailing `$` pass through untouched).

use crate::EnvLookup;

/// Returns `text` with every `${VAR}` replaced, or the problem (without the key, which the
/// caller knows) when a variable is unset or a `${` is never closed.
pub(crate) fn interpolate(text: &str, env: EnvLookup<'_>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        let after = &rest[dollar + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(tail) = after.strip_prefix('{') {
            let close = tail.find('}').ok_or_else(|| {
                "unterminated `${` (no closing `}`); write `$$` for a literal `$`".to_owned()
            })?;
            out.push_str(&lookup(&tail[..close], env)?);
            rest = &tail[close + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

fn lookup(name: &str, env: EnvLookup<'_>) -> Result<String, String> {
    if name.is_empty() {
        return Err("empty variable name in `${}`".to_owned());
    }
    env(name).ok_or_else(|| format!("environment variable {name} is not set"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "HOME" => Some("/home/me".to_owned()),
            "EMPTY" => Some(String::new()),
            "DOLLAR" => Some("${HOME}".to_owned()),
            _ => None,
        }
    }

    fn run(text: &str) -> Result<String, String> {
        interpolate(text, &env)
    }

    #[test]
    fn replaces_set_variables() {
        assert_eq!(run("${HOME}/bin").as_deref(), Ok("/home/me/bin"));
        assert_eq!(run("a${HOME}b${HOME}").as_deref(), Ok("a/home/meb/home/me"));
        assert_eq!(run("x${EMPTY}y").as_deref(), Ok("xy"));
        assert_eq!(run("plain").as_deref(), Ok("plain"));
        assert_eq!(run("").as_deref(), Ok(""));
    }

    #[test]
    fn values_are_not_interpolated_again() {
        assert_eq!(run("${DOLLAR}").as_deref(), Ok("${HOME}"));
    }

    #[test]
    fn double_dollar_is_a_literal_dollar() {
        assert_eq!(run("$$").as_deref(), Ok("$"));
        assert_eq!(run("$${HOME}").as_deref(), Ok("${HOME}"));
        assert_eq!(run("cost: $$5").as_deref(), Ok("cost: $5"));
        assert_eq!(run("$$$$").as_deref(), Ok("$$"));
    }

    #[test]
    fn other_dollars_are_kept() {
        assert_eq!(run("$HOME").as_deref(), Ok("$HOME"));
        assert_eq!(run("end$").as_deref(), Ok("end$"));
        assert_eq!(run("é$é").as_deref(), Ok("é$é"));
    }

    #[test]
    fn missing_variable_is_named() {
        assert_eq!(
            run("${GITHUB_TOKEN}"),
            Err("environment variable GITHUB_TOKEN is not set".into())
        );
    }

    #[test]
    fn unterminated_and_empty_are_errors() {
        let err = run("${HOME").unwrap_err();
        assert!(err.contains("unterminated `${`"), "{err}");
        assert!(run("abc ${").unwrap_err().contains("unterminated"));
        assert_eq!(run("${}"), Err("empty variable name in `${}`".into()));
    }
}
