//! The vocabulary's statements (see the parent module's documentation), parsed.

use anyhow::{anyhow, bail, Result};

use super::SOURCES;

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Style {
    Snake,
    Camel,
    Kebab,
    Prefixed,
}

#[derive(Debug, Default)]
pub(super) struct Group {
    pub(super) name: String,
    pub(super) nouns: Vec<(String, String)>,
    pub(super) ops: Vec<Op>,
}

#[derive(Debug)]
pub(super) struct Op {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) hint: char,
    pub(super) descriptions: Vec<String>,
    pub(super) params: Vec<Param>,
}

#[derive(Debug)]
pub(super) struct Param {
    pub(super) name: String,
    pub(super) kind: char,
    pub(super) required: bool,
    pub(super) text: String,
}

#[derive(Debug)]
pub(super) struct UpstreamSpec {
    pub(super) key: String,
    pub(super) display: String,
    pub(super) style: Style,
    pub(super) annotated: bool,
    pub(super) instructions: Vec<String>,
    pub(super) uses: Vec<Use>,
}

#[derive(Debug)]
pub(super) struct Use {
    pub(super) group: usize,
    pub(super) noun: usize,
    pub(super) only: Vec<String>,
    pub(super) skip: Vec<String>,
}

/// The parsed vocabulary.
pub(super) struct Spec {
    pub(super) groups: Vec<Group>,
    pub(super) upstreams: Vec<UpstreamSpec>,
}

impl Spec {
    pub(super) fn parse() -> Result<Spec> {
        let mut spec = Spec {
            groups: Vec::new(),
            upstreams: Vec::new(),
        };
        for (file, text) in SOURCES {
            for (n, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                spec.statement(line)
                    .map_err(|e| anyhow!("catalog/{file}:{}: {e}", n + 1))?;
            }
        }
        Ok(spec)
    }

    fn statement(&mut self, line: &str) -> Result<()> {
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        match word {
            "group" => self.groups.push(Group {
                name: rest.to_owned(),
                ..Group::default()
            }),
            "nouns" => self.group()?.nouns = nouns(rest)?,
            "op" => {
                let parts: Vec<&str> = rest.split(' ').collect();
                let [id, name, hint] = parts[..] else {
                    bail!("expected `op ID NAME HINT`")
                };
                let hint = hint.chars().next().filter(|h| "rwd".contains(*h));
                let hint = hint.ok_or_else(|| anyhow!("hint must be r, w or d"))?;
                self.group()?.ops.push(Op {
                    id: id.to_owned(),
                    name: name.to_owned(),
                    hint,
                    descriptions: Vec::new(),
                    params: Vec::new(),
                });
            }
            "d" => self.op()?.descriptions.push(rest.to_owned()),
            "p" | "p!" => {
                let mut parts = rest.splitn(3, ' ');
                let (Some(name), Some(kind), Some(text)) =
                    (parts.next(), parts.next(), parts.next())
                else {
                    bail!("expected `p NAME TYPE TEXT`")
                };
                let kind = kind.chars().next().filter(|k| "sinbao".contains(*k));
                let kind = kind.ok_or_else(|| anyhow!("unknown parameter type"))?;
                let param = Param {
                    name: name.to_owned(),
                    kind,
                    required: word == "p!",
                    text: text.to_owned(),
                };
                self.op()?.params.push(param);
            }
            "upstream" => self.upstream(rest)?,
            "i" => self.last_upstream()?.instructions.push(rest.to_owned()),
            "use" => {
                let using = self.using(rest)?;
                self.last_upstream()?.uses.push(using);
            }
            _ => bail!("unknown statement {word:?}"),
        }
        Ok(())
    }

    fn group(&mut self) -> Result<&mut Group> {
        self.groups
            .last_mut()
            .ok_or_else(|| anyhow!("no group yet"))
    }

    fn op(&mut self) -> Result<&mut Op> {
        self.group()?
            .ops
            .last_mut()
            .ok_or_else(|| anyhow!("no op yet"))
    }

    fn last_upstream(&mut self) -> Result<&mut UpstreamSpec> {
        self.upstreams
            .last_mut()
            .ok_or_else(|| anyhow!("no upstream yet"))
    }

    fn upstream(&mut self, rest: &str) -> Result<()> {
        let (key, rest) = rest
            .split_once(" \"")
            .ok_or_else(|| anyhow!("expected a name"))?;
        let (display, rest) = rest
            .split_once('"')
            .ok_or_else(|| anyhow!("unclosed name"))?;
        let mut words = rest.split_whitespace();
        let style = match words.next() {
            Some("snake") => Style::Snake,
            Some("camel") => Style::Camel,
            Some("kebab") => Style::Kebab,
            Some("prefixed") => Style::Prefixed,
            other => bail!("unknown style {other:?}"),
        };
        self.upstreams.push(UpstreamSpec {
            key: key.to_owned(),
            display: display.to_owned(),
            style,
            annotated: words.next() == Some("ann"),
            instructions: Vec::new(),
            uses: Vec::new(),
        });
        Ok(())
    }

    fn using(&self, rest: &str) -> Result<Use> {
        let mut words = rest.split_whitespace();
        let name = words.next().ok_or_else(|| anyhow!("expected a group"))?;
        let group = (self.groups.iter().position(|g| g.name == name))
            .ok_or_else(|| anyhow!("unknown group {name:?}"))?;
        let mut using = Use {
            group,
            noun: 0,
            only: Vec::new(),
            skip: Vec::new(),
        };
        for word in words {
            let list = |v: &str| v.split(',').map(str::to_owned).collect::<Vec<_>>();
            match word.split_once('=') {
                Some(("noun", n)) => using.noun = n.parse()?,
                Some(("only", ops)) => using.only = list(ops),
                Some(("skip", ops)) => using.skip = list(ops),
                _ => bail!("unknown option {word:?}"),
            }
        }
        let g = &self.groups[group];
        if using.noun >= g.nouns.len() {
            bail!("group {name} has no noun {}", using.noun);
        }
        for id in using.only.iter().chain(&using.skip) {
            if !g.ops.iter().any(|o| &o.id == id) {
                bail!("group {name} has no op {id:?}");
            }
        }
        Ok(using)
    }
}

fn nouns(text: &str) -> Result<Vec<(String, String)>> {
    text.split('|')
        .map(|pair| {
            let (one, many) = pair
                .trim()
                .split_once('/')
                .ok_or_else(|| anyhow!("expected singular/plural"))?;
            Ok((one.to_owned(), many.to_owned()))
        })
        .collect()
}
