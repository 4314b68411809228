//! `Config::parse` on arbitrary text and, when it parses, `Config::resolve`: neither
//! may panic (errors are fine).
//!
//! `resolve` reads the files the configuration names (`apiTokenFile`,
//! `nodeEventWebhooks[].secretFile`). A path naming something that is not a small
//! regular file (`/dev/zero`, a FIFO, `/proc/kmsg`) would make the harness hang or
//! run out of memory reading it, which is the operator's choice and not what this
//! target hunts, so such paths are pointed at a small token file first.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use hale::config::Config;
use libfuzzer_sys::fuzz_target;

static TOKEN: LazyLock<PathBuf> = LazyLock::new(|| {
    let p = std::env::temp_dir().join(format!("hale-fuzz-token-{}", std::process::id()));
    std::fs::write(&p, "fuzz-token\n").expect("write the token file");
    p
});

/// Whether reading `p` to a string is quick and bounded: it does not exist (an error),
/// or it is a non-empty regular file of at most 1 MiB.
fn safe(p: &Path) -> bool {
    match std::fs::metadata(p) {
        Err(_) => true,
        Ok(m) => m.is_file() && m.len() > 0 && m.len() <= 1 << 20,
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(mut config) = Config::parse("f", text) else {
        return;
    };
    if let Some(p) = &config.api_token_file
        && !safe(p)
    {
        config.api_token_file = Some(TOKEN.clone());
    }
    for w in &mut config.node_event_webhooks {
        if !safe(&w.secret_file) {
            w.secret_file = TOKEN.clone();
        }
    }
    let _ = config.resolve("f", text);
});
