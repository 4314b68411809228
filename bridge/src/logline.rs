//! How a record's fields read in the text log: as logfmt, so that no text an
//! alert, an operator or another server gave can pass for a field, or for a
//! record, of its own. A value is quoted where it holds white space, `=` or `"`
//! (a text field always, as it always was), the message where it holds `=` or
//! `"`; inside, a line break reads `\n`, another control character `\x1b`, an
//! invisible character or a bidirectional override `\u{202e}`, and in quotes a
//! quote `\"` and a backslash `\\`.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;

use crate::core::labels::invisible;

/// The text log's field formatter.
pub struct Logfmt;

impl<'writer> FormatFields<'writer> for Logfmt {
    fn format_fields<R: RecordFields>(
        &self,
        mut writer: Writer<'writer>,
        fields: R,
    ) -> fmt::Result {
        let mut line = Line::default();
        fields.record(&mut line);
        writer.write_str(&line.out)
    }
}

#[derive(Default)]
struct Line {
    out: String,
}

impl Visit for Line {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.field(field.name(), value, true);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.field(field.name(), &format!("{value:?}"), false);
    }
}

impl Line {
    fn field(&mut self, name: &str, value: &str, text: bool) {
        // What the `log` crate's records carry besides (their target, file, line)
        // is said by the record's own header.
        if name.starts_with("log.") {
            return;
        }
        if !self.out.is_empty() {
            self.out.push(' ');
        }
        if name == "message" {
            write_value(&mut self.out, value, value.contains(['=', '"']));
            return;
        }
        self.out.push_str(name.strip_prefix("r#").unwrap_or(name));
        self.out.push('=');
        let quoted = text
            || value.is_empty()
            || value.contains(|c: char| c.is_whitespace() || c == '=' || c == '"');
        write_value(&mut self.out, value, quoted);
    }
}

fn write_value(out: &mut String, value: &str, quoted: bool) {
    if quoted {
        out.push('"');
    }
    for c in value.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' if quoted => out.push_str("\\t"),
            '"' | '\\' if quoted => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if invisible(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    if quoted {
        out.push('"');
    }
}

#[cfg(test)]
mod tests {
    use tracing::info;

    /// What `log` writes through a text subscriber with [`super::Logfmt`], header
    /// aside.
    fn logged(log: impl FnOnce()) -> String {
        crate::captured(log)
            .strip_suffix('\n')
            .expect("one record, one line")
            .to_string()
    }

    #[test]
    fn a_value_cannot_pass_for_a_field_or_a_record() {
        let node = "sp ace node=victim event=\"FAKE\"";
        let message = "disk failing node=victim event=\"NODE_UNCORDONED\" by=operator";
        assert_eq!(
            logged(|| info!(node = %node, event = "CONDITION_RAISED", "{message}")),
            r#""disk failing node=victim event=\"NODE_UNCORDONED\" by=operator" node="sp ace node=victim event=\"FAKE\"" event="CONDITION_RAISED""#
        );
        // Every control character escaped, NUL and VT included: `grep` reads
        // the log as text, and no record starts inside another.
        assert_eq!(
            logged(|| info!(node = %"n1", "a\u{0}b\u{b}c\nINFO forged\r\u{1b}[31m\u{85}")),
            r"a\x00b\x0bc\nINFO forged\r\x1b[31m\x85 node=n1"
        );
        // So are invisible characters and separators, some viewers' line breaks.
        assert_eq!(
            logged(|| info!(summary = %"x\u{2028}y\u{E0041}\u{202E}z", "m")),
            r#"m summary="x\u{2028}y\u{e0041}\u{202e}z""#
        );
        // Quoted, a backslash cannot end the quote early.
        assert_eq!(
            logged(|| info!(error = %"bad \\\" node=victim", "poll failed")),
            r#"poll failed error="bad \\\" node=victim""#
        );
    }

    #[test]
    fn plain_values_read_as_before() {
        assert_eq!(
            logged(|| info!(failed = 3, nodes = 12, "inventory failed")),
            "inventory failed failed=3 nodes=12"
        );
        assert_eq!(
            logged(|| info!(error = %"connection refused", action = "reboot", "not done")),
            r#"not done error="connection refused" action="reboot""#
        );
        assert_eq!(logged(|| info!(reason = %"", "m")), r#"m reason="""#);
        assert_eq!(
            logged(|| info!("résumé: ノード-14 ok")),
            "résumé: ノード-14 ok"
        );
    }
}
