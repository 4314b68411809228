//! The commit hale is built from, for `hale --version` and `hale_build_info`: a
//! rolling upgrade shows which replica runs which build. `HALE_COMMIT` (and
//! `HALE_COMMIT_DATE`) set in the build's environment name it where the source
//! is no git checkout (an image built from a tarball); else git says it, or
//! `unknown` without git.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

/// `name` from the environment, else from git, else `unknown`.
fn said(name: &str, args: &[&str]) -> String {
    println!("cargo:rerun-if-env-changed={name}");
    std::env::var(name)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .or_else(|| git(args))
        .unwrap_or_else(|| "unknown".into())
}

fn main() {
    let commit = said("HALE_COMMIT", &["rev-parse", "--short=12", "HEAD"]);
    let date = said("HALE_COMMIT_DATE", &["show", "-s", "--format=%cs", "HEAD"]);
    println!("cargo:rustc-env=HALE_COMMIT={commit}");
    println!("cargo:rustc-env=HALE_COMMIT_DATE={date}");
    println!("cargo:rerun-if-changed=build.rs");
    // Built again when HEAD moves: its file (a worktree's own), and the branch's
    // ref and the packed refs (kept in the common directory) — only those that
    // exist, as a missing one would build again every time; a ref packed since
    // is seen by the packed refs changing.
    let own = git(&["rev-parse", "--absolute-git-dir"]);
    let common = git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]).or(own.clone());
    let branch = git(&["symbolic-ref", "-q", "HEAD"]);
    let watched = own
        .iter()
        .map(|dir| Path::new(dir).join("HEAD"))
        .chain(common.iter().flat_map(|dir| {
            std::iter::once(Path::new(dir).join("packed-refs"))
                .chain(branch.iter().map(move |b| Path::new(dir).join(b)))
        }));
    for path in watched.filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}
