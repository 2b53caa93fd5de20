//! Where the binaries are, and the configs that put Manifold in front of fixture upstreams.

use std::path::{Path, PathBuf};

/// Paths of the programs under test and a scratch directory for configs.
pub struct Setup {
    pub manifold: String,
    pub fixture: String,
    pub dir: PathBuf,
}

impl Setup {
    pub fn new(manifold: Option<String>, fixture: Option<String>) -> anyhow::Result<Self> {
        let here = std::env::current_exe()?;
        let bin_dir = here.parent().map(Path::to_path_buf).unwrap_or_default();
        let pick = |given: Option<String>, name: &str| {
            given.unwrap_or_else(|| bin_dir.join(name).display().to_string())
        };
        let dir = std::env::temp_dir().join(format!("manifold-load-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(Self {
            manifold: pick(manifold, "manifold"),
            fixture: pick(fixture, "manifold-fixture"),
            dir,
        })
    }

    /// Arguments of the fixture named `name` with `extra` flags.
    pub fn fixture_args(name: &str, extra: &[&str]) -> Vec<String> {
        let mut args = vec!["--name".to_owned(), name.to_owned()];
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        args
    }

    /// Writes a config with `count` fixture upstreams `{base}{i}` (or just `base` when
    /// `count` is 1), each with `tools` echo-like tools only when `tools` > 0. Returns the
    /// arguments of `manifold serve`.
    pub fn manifold_args(
        &self,
        tag: &str,
        base: &str,
        count: usize,
        tools: usize,
    ) -> anyhow::Result<Vec<String>> {
        let mut text = String::from("[server]\npage_size = 0\n\n");
        for i in 0..count {
            let key = if count == 1 {
                base.to_owned()
            } else {
                format!("{base}{i}")
            };
            let mut args = vec![format!("{:?}", "--name"), format!("{key:?}")];
            if tools > 0 {
                args.push(format!("{:?}", "--extra-tools"));
                args.push(format!("\"{tools}\""));
            }
            text.push_str(&format!(
                "[upstreams.{key}]\ncommand = {:?}\nargs = [{}]\n",
                self.fixture,
                args.join(", ")
            ));
            if tools > 0 {
                text.push_str(&format!(
                    "[upstreams.{key}.tools]\ninclude = [\"tool_*\"]\n"
                ));
            }
        }
        let path = self.dir.join(format!("{tag}.toml"));
        std::fs::write(&path, text)?;
        Ok(vec![
            "serve".into(),
            "--config".into(),
            path.display().to_string(),
        ])
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
