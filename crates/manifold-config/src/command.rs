//! Finding the program an upstream's `command` names.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The program to spawn for `command`. A command containing `/` is a path: returned as is, or
/// joined onto `cwd` when it is relative and `cwd` is given (so it means the same thing on
/// every platform, whatever the spawn API does with relative paths). A bare name is looked up
/// in each directory of `PATH`, then next to the running executable, so that helper servers
/// shipped beside `manifold` are found; if neither has it the bare name comes back unchanged
/// and spawning reports that it was not found.
pub fn resolve_command(command: &str, cwd: Option<&Path>) -> PathBuf {
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf));
    resolve_in(
        command,
        cwd,
        std::env::var_os("PATH").as_deref(),
        exe_dir.as_deref(),
    )
}

/// [`resolve_command`] with the search path and the executable's directory passed in.
pub(crate) fn resolve_in(
    command: &str,
    cwd: Option<&Path>,
    path_var: Option<&OsStr>,
    exe_dir: Option<&Path>,
) -> PathBuf {
    if command.contains('/') {
        let path = Path::new(command);
        return match cwd {
            Some(cwd) if path.is_relative() => cwd.join(path),
            _ => path.to_path_buf(),
        };
    }
    if command.is_empty() {
        return PathBuf::new();
    }
    let path_dirs = path_var.map(std::env::split_paths).into_iter().flatten();
    path_dirs
        // An empty PATH entry traditionally means the current directory; searching it would
        // let whatever directory manifold runs in shadow real programs, so it is skipped.
        .filter(|dir| !dir.as_os_str().is_empty())
        .chain(exe_dir.map(Path::to_path_buf))
        .map(|dir| dir.join(command))
        .find(|candidate| is_executable(candidate))
        .unwrap_or_else(|| PathBuf::from(command))
}

#[cfg(unix)]
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::TempDir;

    #[test]
    fn paths_with_a_slash_are_kept() {
        assert_eq!(
            resolve_in("/usr/bin/env", None, None, None),
            PathBuf::from("/usr/bin/env")
        );
        assert_eq!(
            resolve_in("/usr/bin/env", Some(Path::new("/srv")), None, None),
            PathBuf::from("/usr/bin/env")
        );
        assert_eq!(
            resolve_in("./run.sh", None, None, None),
            PathBuf::from("./run.sh")
        );
        assert_eq!(
            resolve_in("bin/server", Some(Path::new("/srv/app")), None, None),
            PathBuf::from("/srv/app/bin/server")
        );
    }

    #[test]
    fn bare_names_are_found_on_path_in_order() {
        let first = TempDir::new("path-first");
        let second = TempDir::new("path-second");
        let in_second = second.executable("tool-b");
        let in_first = first.executable("tool-a");
        second.executable("tool-a");
        let path = std::env::join_paths([first.path(), second.path()]).unwrap_or_default();
        assert_eq!(resolve_in("tool-a", None, Some(&path), None), in_first);
        assert_eq!(resolve_in("tool-b", None, Some(&path), None), in_second);
    }

    #[test]
    fn non_executable_files_and_directories_are_skipped() {
        let dir = TempDir::new("not-exec");
        dir.file("plain", "not a program");
        std::fs::create_dir(dir.path().join("subdir")).unwrap();
        let path = dir.path().as_os_str();
        if cfg!(unix) {
            assert_eq!(
                resolve_in("plain", None, Some(path), None),
                PathBuf::from("plain")
            );
        }
        assert_eq!(
            resolve_in("subdir", None, Some(path), None),
            PathBuf::from("subdir")
        );
    }

    #[test]
    fn executable_directory_is_searched_after_path() {
        let on_path = TempDir::new("exe-path");
        let beside = TempDir::new("exe-dir");
        let helper = beside.executable("helper");
        let shadow = on_path.executable("shadowed");
        beside.executable("shadowed");
        let path = on_path.path().as_os_str();
        assert_eq!(
            resolve_in("helper", None, Some(path), Some(beside.path())),
            helper
        );
        assert_eq!(
            resolve_in("shadowed", None, Some(path), Some(beside.path())),
            shadow
        );
    }

    #[test]
    fn unknown_names_come_back_bare() {
        let dir = TempDir::new("empty");
        let path = dir.path().as_os_str();
        let got = resolve_in("no-such-program", None, Some(path), Some(dir.path()));
        assert_eq!(got, PathBuf::from("no-such-program"));
        assert_eq!(resolve_in("x", None, None, None), PathBuf::from("x"));
    }

    #[cfg(unix)]
    #[test]
    fn public_function_finds_a_real_program() {
        // `sh` is on PATH wherever these tests run; the result must be an absolute path to it.
        let sh = resolve_command("sh", None);
        assert!(sh.is_absolute() && sh.ends_with("sh"), "{}", sh.display());
        assert_eq!(
            resolve_command("no-such-program-xyz", None),
            PathBuf::from("no-such-program-xyz")
        );
    }
}
