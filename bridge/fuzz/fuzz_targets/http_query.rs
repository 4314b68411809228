//! `hale::http::event_query` and `hale::http::node_query` on arbitrary query strings:
//! neither may panic. `event_query` runs at the input's `now` (see `hale_fuzz::split`)
//! and at the first and last instants of years 1..=9999.
#![no_main]

use hale::http::{event_query, node_query};
use hale_fuzz::{max_time, min_time, split};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let input = split(data);
    let raw = String::from_utf8_lossy(input.body);
    for now in [input.now, min_time(), max_time()] {
        if let Ok(q) = event_query(&raw, now) {
            assert!(q.page_size >= 1, "{q:?}");
            if let Some(since) = q.since {
                let _ = chrono::DateTime::from_timestamp_millis(since);
            }
        }
    }
    if let Ok(q) = node_query(&raw) {
        assert!(q.page_size >= 1, "{q:?}");
    }
});
