//! `parse_webhook` on arbitrary bytes; a delivery that parses is applied to a fresh
//! fleet under the polling configuration and under webhook-only mode, then applied
//! again `later` and followed by a tick at `later`. Every step must keep the score
//! invariants (see `hale_fuzz::check`). Input convention: `hale_fuzz::split`.
#![no_main]

use hale::alertmanager::parse_webhook;
use hale_fuzz::{POLLING, WEBHOOK_ONLY, check, fresh_fleet, split};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let input = split(data);
    let Ok(delivery) = parse_webhook(input.body) else {
        return;
    };
    for cfg in [&*POLLING, &*WEBHOOK_ONLY] {
        let mut fleet = fresh_fleet(cfg, input.now);
        let out = fleet.webhook(cfg, input.now, &delivery.alerts);
        check(cfg, &fleet, &out, "webhook");
        let out = fleet.webhook(cfg, input.later, &delivery.alerts);
        check(cfg, &fleet, &out, "webhook again, later");
        let out = fleet.tick(cfg, input.later);
        check(cfg, &fleet, &out, "tick, later");
    }
});
