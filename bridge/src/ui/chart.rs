//! The score trend on a node's page, drawn as SVG on the server from the node's
//! `SCORE_CHANGED` events: a step line (a score holds until it changes) and a
//! dot at every change, carrying its time and score.

use std::fmt::Write;

use crate::core::Time;

/// A change of score: from `previous` to `score` at `at`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Change {
    pub at: Time,
    pub score: u8,
    pub previous: u8,
}

const WIDTH: f64 = 800.0;
const HEIGHT: f64 = 220.0;
const LEFT: f64 = 36.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 8.0;
const BOTTOM: f64 = 24.0;

/// The chart of `changes` (oldest first) over the window `from..to`; `now_score`
/// carries the line on when the window holds no change.
pub fn trend(changes: &[Change], from: Time, to: Time, now_score: Option<u8>) -> String {
    let span = (to - from).num_milliseconds().max(1) as f64;
    let x = |t: Time| {
        let along = ((t - from).num_milliseconds() as f64 / span).clamp(0.0, 1.0);
        LEFT + along * (WIDTH - LEFT - RIGHT)
    };
    let y = |score: u8| TOP + (100.0 - f64::from(score.min(100))) / 100.0 * (HEIGHT - TOP - BOTTOM);
    let mut svg = format!(
        r#"<svg class="trend" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="Score trend" xmlns="http://www.w3.org/2000/svg">"#
    );
    for level in [0u8, 25, 50, 75, 100] {
        let _ = write!(
            svg,
            r#"<line class="grid" x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}"/><text class="axis" x="{}" y="{:.1}" text-anchor="end">{level}</text>"#,
            WIDTH - RIGHT,
            LEFT - 6.0,
            y(level) + 4.0,
            y = y(level),
        );
    }
    for (t, anchor) in [(from, "start"), (to, "end")] {
        let _ = write!(
            svg,
            r#"<text class="axis" x="{:.1}" y="{}" text-anchor="{anchor}">{}</text>"#,
            x(t),
            HEIGHT - 6.0,
            t.format("%Y-%m-%d %H:%M UTC")
        );
    }
    let start = changes.first().map(|c| c.previous).or(now_score);
    if let Some(level) = start {
        let mut path = format!("M{:.1},{:.1}", x(from), y(level));
        for c in changes {
            let _ = write!(path, " H{:.1} V{:.1}", x(c.at), y(c.score));
        }
        let _ = write!(path, " H{:.1}", x(to));
        let _ = write!(svg, r#"<path class="line" d="{path}"/>"#);
    }
    for c in changes {
        let at = c.at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let _ = write!(
            svg,
            r#"<circle class="point" cx="{:.1}" cy="{:.1}" r="3.5" data-at="{at}" data-score="{}"><title>{} at {}</title></circle>"#,
            x(c.at),
            y(c.score),
            c.score,
            c.score,
            c.at.format("%Y-%m-%d %H:%M:%S UTC")
        );
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn every_change_is_a_point_on_a_step_line() {
        let noon = chrono::Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap();
        let t = |m: i64| noon + chrono::TimeDelta::minutes(m);
        let changes = [
            Change {
                at: t(15),
                score: 75,
                previous: 100,
            },
            Change {
                at: t(30),
                score: 40,
                previous: 75,
            },
        ];
        let svg = trend(&changes, t(0), t(60), Some(40));
        assert_eq!(svg.matches("<circle").count(), 2);
        assert!(svg.contains(r#"data-at="2026-12-01T12:15:00.000Z" data-score="75""#));
        assert!(svg.contains(r#"data-at="2026-12-01T12:30:00.000Z" data-score="40""#));
        // From the window's start at the first change's previous score (100: the
        // top), stepping at 15 and 30 minutes, on to the end.
        assert!(
            svg.contains(r#"d="M36.0,8.0 H225.0 V55.0 H414.0 V120.8 H792.0""#),
            "{svg}"
        );
        // No change in the window: the current score, flat; none at all: no line.
        let flat = trend(&[], t(0), t(60), Some(90));
        assert!(flat.contains(r#"d="M36.0,26.8 H792.0""#), "{flat}");
        assert!(!trend(&[], t(0), t(60), None).contains("<path"));
    }
}
