//! The commit hale is built from, for `hale --version` and `hale_build_info`: a
//! rolling upgrade shows which replica runs which build. `unknown` where the
//! source is no git checkout (or git is missing).

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let date = git(&["show", "-s", "--format=%cs", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=HALE_COMMIT={commit}");
    println!("cargo:rustc-env=HALE_COMMIT_DATE={date}");
    println!("cargo:rerun-if-changed=build.rs");
    // Built again when HEAD moves: its file, the branch's ref and the packed refs
    // (only those that exist: a missing one would rebuild every time).
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        let branch = git(&["symbolic-ref", "-q", "HEAD"]);
        for file in ["HEAD", "packed-refs"]
            .into_iter()
            .map(str::to_string)
            .chain(branch)
        {
            let path = Path::new(&dir).join(file);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
}
