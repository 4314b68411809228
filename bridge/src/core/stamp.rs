//! Timestamps as records and the API carry them: RFC 3339 in UTC, exactly as
//! chrono writes them (`2026-12-02T00:07:42.497779976Z`: the fraction only when
//! there is one, in 3, 6 or 9 digits), written and read without chrono's general
//! formatter and parser. With a dozen timestamps in a node record those made
//! writing and reading node records about half again as slow (chrono: ~325 ns to
//! write one through serde_json, ~165 ns to read one; 10,000 records written in
//! 146 ms with them, 94 ms without). Whatever is not in that one shape — a
//! year past 9999, a leap second, an offset other than `Z` — is left to chrono,
//! so what is written and accepted is what it was. For `#[serde(with = "stamp")]`,
//! and `stamp::option` on an `Option<Time>` (with `default`).

use std::fmt;

use chrono::{Datelike, NaiveDate, Timelike};
use serde::{Deserializer, Serialize, Serializer, de};

use super::Time;

/// The longest canonical form: `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ`.
const LONGEST: usize = 30;

pub fn serialize<S: Serializer>(t: &Time, s: S) -> Result<S::Ok, S::Error> {
    let mut buf = [0u8; LONGEST];
    match write(t, &mut buf) {
        Some(n) => s.serialize_str(std::str::from_utf8(&buf[..n]).expect("ASCII")),
        None => t.serialize(s),
    }
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Time, D::Error> {
    d.deserialize_str(StampVisitor)
}

pub mod option {
    use serde::{Deserializer, Serialize, Serializer, de};

    use super::{StampVisitor, Time};

    struct Stamp<'a>(&'a Time);

    impl Serialize for Stamp<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            super::serialize(self.0, s)
        }
    }

    pub fn serialize<S: Serializer>(t: &Option<Time>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_some(&Stamp(t)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Time>, D::Error> {
        d.deserialize_option(OptionVisitor)
    }

    struct OptionVisitor;

    impl<'de> de::Visitor<'de> for OptionVisitor {
        type Value = Option<Time>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an RFC 3339 timestamp or null")
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_str(StampVisitor).map(Some)
        }
    }
}

struct StampVisitor;

impl de::Visitor<'_> for StampVisitor {
    type Value = Time;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an RFC 3339 timestamp")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Time, E> {
        match read(s.as_bytes()) {
            Some(t) => Ok(t),
            None => s.parse().map_err(E::custom),
        }
    }
}

/// `t` in the canonical form into `out`, its length; `None` where chrono writes
/// something else (a year outside 0–9999, a leap second).
fn write(t: &Time, out: &mut [u8; LONGEST]) -> Option<usize> {
    let year = u32::try_from(t.year()).ok().filter(|y| *y <= 9999)?;
    let nanos = t.nanosecond();
    if nanos >= 1_000_000_000 {
        return None;
    }
    put(&mut out[0..4], year);
    out[4] = b'-';
    put(&mut out[5..7], t.month());
    out[7] = b'-';
    put(&mut out[8..10], t.day());
    out[10] = b'T';
    put(&mut out[11..13], t.hour());
    out[13] = b':';
    put(&mut out[14..16], t.minute());
    out[16] = b':';
    put(&mut out[17..19], t.second());
    let (fraction, digits) = if nanos == 0 {
        (0, 0)
    } else if nanos % 1_000_000 == 0 {
        (nanos / 1_000_000, 3)
    } else if nanos % 1_000 == 0 {
        (nanos / 1_000, 6)
    } else {
        (nanos, 9)
    };
    let mut n = 19;
    if digits > 0 {
        out[19] = b'.';
        put(&mut out[20..20 + digits], fraction);
        n = 20 + digits;
    }
    out[n] = b'Z';
    Some(n + 1)
}

/// `v` in decimal, zero-padded to fill `out`.
fn put(out: &mut [u8], mut v: u32) {
    for b in out.iter_mut().rev() {
        *b = b'0' + (v % 10) as u8;
        v /= 10;
    }
}

/// A timestamp in the canonical form (any fraction of 1 to 9 digits); `None`
/// for anything else, which chrono's parser then reads.
fn read(s: &[u8]) -> Option<Time> {
    if s.len() < 20 || s.len() > LONGEST || s[s.len() - 1] != b'Z' {
        return None;
    }
    let punctuation = [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':')];
    if punctuation.iter().any(|&(i, c)| s[i] != c) {
        return None;
    }
    let nanos = match &s[19..s.len() - 1] {
        [] => 0,
        [b'.', digits @ ..] if (1..=9).contains(&digits.len()) => {
            number(digits)? * 10u32.pow(9 - digits.len() as u32)
        }
        _ => return None,
    };
    NaiveDate::from_ymd_opt(
        number(&s[0..4])? as i32,
        number(&s[5..7])?,
        number(&s[8..10])?,
    )?
    .and_hms_nano_opt(
        number(&s[11..13])?,
        number(&s[14..16])?,
        number(&s[17..19])?,
        nanos,
    )
    .map(|t| t.and_utc())
}

/// Decimal digits as a number; `None` if any is not a digit.
fn number(digits: &[u8]) -> Option<u32> {
    digits.iter().try_fold(0u32, |n, &b| {
        b.is_ascii_digit().then(|| n * 10 + u32::from(b - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Utc};
    use serde::{Deserialize, Serialize};

    use super::*;

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct Fast {
        #[serde(with = "super")]
        at: Time,
        #[serde(default, with = "super::option")]
        maybe: Option<Time>,
    }

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct Chrono {
        at: Time,
        maybe: Option<Time>,
    }

    /// Timestamps of every shape: whole seconds, milli-, micro- and nanosecond
    /// fractions, the ends of the four-digit years, a leap second, years chrono
    /// writes with a sign.
    fn shapes() -> Vec<Time> {
        let base: Time = "2026-12-02T00:07:42.497779976Z".parse().unwrap();
        let mut out = vec![
            base,
            DateTime::<Utc>::UNIX_EPOCH,
            "0000-01-01T00:00:00Z".parse().unwrap(),
            "9999-12-31T23:59:59.999999999Z".parse().unwrap(),
            "2016-12-31T23:59:60.5Z".parse().unwrap(),
            "+10000-01-01T00:00:00Z".parse().unwrap(),
            "-0001-06-30T12:00:00.25Z".parse().unwrap(),
        ];
        let mut rng: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..20_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let secs = (rng % 4_000_000_000) as i64 - 1_000_000_000;
            let nanos = match rng % 4 {
                0 => 0,
                1 => (rng >> 8) % 1000 * 1_000_000,
                2 => (rng >> 8) % 1_000_000 * 1_000,
                _ => (rng >> 8) % 1_000_000_000,
            };
            out.push(DateTime::from_timestamp(secs, nanos as u32).unwrap());
        }
        out
    }

    #[test]
    fn written_as_chrono_writes_them() {
        for (i, t) in shapes().into_iter().enumerate() {
            let maybe = (i % 3 != 0).then_some(t);
            let fast = serde_json::to_string(&Fast { at: t, maybe }).unwrap();
            let chrono = serde_json::to_string(&Chrono { at: t, maybe }).unwrap();
            assert_eq!(fast, chrono);
        }
    }

    #[test]
    fn read_as_chrono_reads_them() {
        for (i, t) in shapes().into_iter().enumerate() {
            let maybe = (i % 3 != 0).then_some(t);
            let text = serde_json::to_string(&Chrono { at: t, maybe }).unwrap();
            let fast: Fast = serde_json::from_str(&text).unwrap();
            assert_eq!((fast.at, fast.maybe), (t, maybe), "{text}");
        }
    }

    /// Each shape chrono also takes, and the ones neither takes.
    #[test]
    fn other_shapes_are_chronos_to_read() {
        let read = |s: &str| serde_json::from_str::<Fast>(&format!(r#"{{"at":"{s}"}}"#));
        let chrono =
            |s: &str| serde_json::from_str::<Chrono>(&format!(r#"{{"at":"{s}","maybe":null}}"#));
        for s in [
            "2026-12-02T01:07:42+01:00",
            "2026-12-02T00:07:42.5z",
            "2026-12-02 00:07:42Z",
            "2026-12-02T00:07:42.1234567891Z",
            "2016-12-31T23:59:60Z",
            "2026-12-02T00:07:42.Z",
            "2026-02-30T00:00:00Z",
            "2026-12-02T24:00:00Z",
            "2026-1a-02T00:00:00Z",
            "not a time",
            "",
        ] {
            match (read(s), chrono(s)) {
                (Ok(fast), Ok(chrono)) => assert_eq!(fast.at, chrono.at, "{s}"),
                (Err(_), Err(_)) => {}
                (fast, chrono) => panic!("{s}: {fast:?} against chrono's {chrono:?}"),
            }
        }
        assert_eq!(
            read("2026-12-02T00:07:42.5Z").unwrap().at,
            "2026-12-02T00:07:42.500Z".parse::<Time>().unwrap()
        );
        let absent: Fast = serde_json::from_str(r#"{"at":"2026-12-02T00:07:42Z"}"#).unwrap();
        assert_eq!(absent.maybe, None);
        let null: Fast =
            serde_json::from_str(r#"{"at":"2026-12-02T00:07:42Z","maybe":null}"#).unwrap();
        assert_eq!(null.maybe, None);
    }
}
