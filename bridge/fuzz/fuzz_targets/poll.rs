//! `parse_v2` on arbitrary bytes; an answer that parses is polled into a fresh fleet
//! at `now`, then twice at `later`. Every step must keep the score invariants (see
//! `hale_fuzz::check`), and the second poll at `later` (the same answer at the same
//! time: no node's alerts changed) must not change any score. Run under the polling
//! configuration (watchdog required) and with `requireWatchdog: false`. Input
//! convention: `hale_fuzz::split`.
#![no_main]

use hale::alertmanager::parse_v2;
use hale_fuzz::{POLLING, POLLING_NO_WATCHDOG, check, fresh_fleet, score_changes, split};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let input = split(data);
    let Ok(alerts) = parse_v2(input.body) else {
        return;
    };
    for cfg in [&*POLLING, &*POLLING_NO_WATCHDOG] {
        let mut fleet = fresh_fleet(cfg, input.now);
        let out = fleet.poll(cfg, input.now, &alerts);
        check(cfg, &fleet, &out, "poll");
        let out = fleet.poll(cfg, input.later, &alerts);
        check(cfg, &fleet, &out, "poll later");
        let out = fleet.poll(cfg, input.later, &alerts);
        check(cfg, &fleet, &out, "poll later, again");
        let changed = score_changes(&out);
        assert!(
            changed.is_empty(),
            "the same answer polled again at {} changed scores: {changed:#?}",
            input.later
        );
    }
});
