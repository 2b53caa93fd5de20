//! `manifold pin`: start the upstreams and write the lock file of their tool and prompt
//! definitions and skill entries; and the binary's side of checking them: reading the lock file for `serve`
//! and `check`, and how `check` shows what does not match.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use manifold_catalog::{
    Catalog, Kind, Lock, Pin, Pinning, UpstreamDef, UpstreamPins, UpstreamState,
};
use manifold_config::PinningSettings;

use crate::run;

pub fn pin(path: &Path) -> anyhow::Result<ExitCode> {
    let (config, defs) = run::load_unpinned(path)?;
    let lock_path = manifold_config::lock_path(&config.source, config.pinning.as_ref());
    let lock = run::with_started(&config, &defs, |catalog, _| lock_of(path, catalog))?;
    write_lock(&lock_path, &lock)?;
    let tools: usize = lock.upstreams.values().map(|p| p.tools.len()).sum();
    let prompts: usize = lock.upstreams.values().map(|p| p.prompts.len()).sum();
    let skills: usize = lock.upstreams.values().map(|p| p.skills.len()).sum();
    println!(
        "pinned {tools} tools, {prompts} prompts and {skills} skills of {} upstreams: {}",
        lock.upstreams.len(),
        lock_path.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// The pins of every upstream, or an error naming each that is not up: a lock file that
/// leaves one out would hold all its tools at the next start.
fn lock_of(path: &Path, catalog: &Catalog) -> anyhow::Result<Lock> {
    let mut lock = Lock::default();
    let mut failed = Vec::new();
    for (i, def) in catalog.defs().iter().enumerate() {
        let problem = match catalog.state(i) {
            UpstreamState::Up => {
                let pins = catalog
                    .slice(i)
                    .map(|s| UpstreamPins::with_skills(&s.tools, &s.prompts, &s.skills))
                    .unwrap_or_default();
                lock.upstreams.insert(def.key.clone(), pins);
                continue;
            }
            UpstreamState::Starting => "did not finish starting in time".to_owned(),
            UpstreamState::Down { reason } => reason.clone(),
        };
        failed.push(format!(
            "{}: upstreams.{}: {problem}",
            path.display(),
            def.key
        ));
    }
    if !failed.is_empty() {
        anyhow::bail!("{}\nnothing was written", failed.join("\n"));
    }
    Ok(lock)
}

/// Writes `lock` to the lock file at `path` as `manifold pin` does: rendered one member a
/// line, and swapped in whole.
pub fn write_lock(path: &Path, lock: &Lock) -> anyhow::Result<()> {
    let text = lock.render().context("cannot write the lock file")?;
    write_atomically(path, &text)
}

/// Pins one item anew in the lock file at `path` (the console's re-pin of a held tool):
/// every other pin stays as it was written, and the file is written as `manifold pin` writes
/// it. `upstream` is the upstream's key, `original` the item's own name (or a skill's URI).
pub fn repin(
    path: &Path,
    upstream: &str,
    kind: Kind,
    original: &str,
    pin: Pin,
) -> anyhow::Result<()> {
    let file = path.display();
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{file}: cannot read the lock file"))?;
    let mut lock = Lock::parse(&text).map_err(|problem| anyhow::anyhow!("{file}: {problem}"))?;
    let pins = lock.upstreams.entry(upstream.to_owned()).or_default();
    let map = match kind {
        Kind::Tools => &mut pins.tools,
        Kind::Prompts => &mut pins.prompts,
        Kind::Skills => &mut pins.skills,
        Kind::Resources | Kind::ResourceTemplates => {
            anyhow::bail!("only tools, prompts and skills are pinned")
        }
    };
    map.insert(original.to_owned(), pin);
    write_lock(path, &lock)
}

/// Writes `text` to a file beside `path` and renames it over `path`, so that a reader (or a
/// crash) never sees half a lock file.
fn write_atomically(path: &Path, text: &str) -> anyhow::Result<()> {
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    std::fs::write(&partial, text)
        .with_context(|| format!("{}: cannot write the lock file", path.display()))?;
    std::fs::rename(&partial, path)
        .with_context(|| format!("{}: cannot write the lock file", path.display()))
}

/// `defs` with each upstream's pins from the lock file (none for an upstream the file does
/// not name: its every tool and prompt is new).
pub fn with_pins(
    defs: &Arc<[UpstreamDef]>,
    settings: &PinningSettings,
) -> anyhow::Result<Arc<[UpstreamDef]>> {
    let file = settings.lock.display();
    let text = std::fs::read_to_string(&settings.lock).with_context(|| {
        format!(
            "{file}: cannot read the lock file named by [pinning]; run manifold pin to write it"
        )
    })?;
    let mut lock = Lock::parse(&text).map_err(|problem| anyhow::anyhow!("{file}: {problem}"))?;
    Ok(defs
        .iter()
        .map(|def| {
            let pinning = Pinning {
                on_change: settings.on_change,
                on_new: settings.on_new,
                pins: lock.upstreams.remove(&def.key).unwrap_or_default(),
            };
            UpstreamDef {
                pinning: Some(Arc::new(pinning)),
                ..def.clone()
            }
        })
        .collect())
}

/// `check`'s report of every tool and prompt that does not match its pin, with its diff.
pub fn render_drift(catalog: &Catalog, lock: &Path) -> String {
    let drift = catalog.drift();
    let mut out = format!(
        "pinning ({}): {} not as pinned\n",
        lock.display(),
        drift.len()
    );
    for d in drift {
        let verdict = match (d.held, d.pinned.is_some()) {
            (true, _) => "HELD",
            (false, true) => "served (on_change = \"warn\")",
            (false, false) => "served unpinned (on_new = \"allow\")",
        };
        let _ = writeln!(
            out,
            "  {} {:?} -> {}:{}: {verdict}: {}",
            kind_word(d.kind),
            d.exposed,
            catalog.defs()[d.upstream].key,
            d.original,
            d.reason()
        );
        for line in d.diff().lines() {
            let _ = writeln!(out, "    {line}");
        }
    }
    out
}

/// A problem for each tool or prompt that `serve` would hold.
pub fn held_problems(path: &Path, catalog: &Catalog) -> Vec<String> {
    (catalog.drift().iter().filter(|d| d.held))
        .map(|d| {
            format!(
                "{}: pinning: {} {:?} of upstreams.{} would be held: {}; review it and run manifold pin",
                path.display(),
                kind_word(d.kind),
                d.original,
                catalog.defs()[d.upstream].key,
                d.reason()
            )
        })
        .collect()
}

fn kind_word(kind: Kind) -> &'static str {
    match kind {
        Kind::Tools => "tool",
        Kind::Skills => "skill",
        _ => "prompt",
    }
}
