//! The node's own log, and what a value from outside may not do to it.
//!
//! Log lines carry values the operator did not write: a label's key and
//! value, a service's or a container's name, an Ingress's fields, a peer's
//! name, a client's header. A CR or LF in one of them, written as it is,
//! ends the line and starts a forged one (`configuration reloaded`,
//! `replica ejected`); an escape sequence rewrites the operator's
//! terminal. So the human format writes every field, the message
//! included, through [`EscapedFields`]: a control character (and the
//! Unicode line and paragraph separators) is written escaped, as Rust
//! escapes it (`\n`, `\r`, `\u{1b}`), whichever way the value was
//! recorded. The JSON format escapes by itself (a JSON string holds no raw
//! control character).

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;

/// Field formatting for the human log: as tracing-subscriber's default
/// (the message, then `name=value`), each value escaped ([`Escaped`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct EscapedFields;

impl<'w> FormatFields<'w> for EscapedFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut visitor = Visitor {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct Visitor<'w> {
    writer: Writer<'w>,
    first: bool,
    result: fmt::Result,
}

impl Visitor<'_> {
    fn write(&mut self, field: &Field, value: &str) {
        if self.result.is_err() {
            return;
        }
        let separator = if self.first { "" } else { " " };
        self.first = false;
        let name = field.name();
        self.result = if name == "message" {
            write!(self.writer, "{separator}{}", Escaped(value))
        } else {
            let name = name.strip_prefix("r#").unwrap_or(name);
            write!(self.writer, "{separator}{name}={}", Escaped(value))
        };
    }
}

impl Visit for Visitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.write(field, value);
        } else {
            // As the default writes a string field: quoted.
            self.write(field, &format!("{value:?}"));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.write(field, &format!("{value:?}"));
    }
}

/// Text with its control characters escaped: what a log line may hold of
/// a value from outside.
#[derive(Debug, Clone, Copy)]
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') {
                write!(f, "{}", c.escape_default())?;
            } else {
                f.write_char(c)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Captured;

    #[test]
    fn no_value_breaks_a_line_or_writes_an_escape_sequence() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .fmt_fields(EscapedFields)
            .with_writer(move || writer.clone())
            .finish();
        let forged = "web\r\n2026-12-05T10:00:00Z  INFO configuration reloaded\u{1b}[2J";
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(
                route = %forged,
                by = forged,
                reason = ?forged,
                "route {forged} refused"
            );
        });
        let text = captured.text();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(!text.contains('\r') && !text.contains('\u{1b}'), "{text}");
        assert!(
            text.contains(
                r"route web\r\n2026-12-05T10:00:00Z  INFO configuration reloaded\u{1b}[2J refused"
            ),
            "{text}"
        );
        assert!(
            text.contains(r"route=web\r\n2026-12-05T10:00:00Z  INFO configuration reloaded"),
            "{text}"
        );
        // A string field is quoted, as by default; a Debug one as it
        // writes itself.
        assert!(text.contains(r#"by="web\r\n"#), "{text}");
        assert!(text.contains(r#"reason="web\r\n"#), "{text}");
        assert_eq!(Escaped("a\u{2028}b\tc").to_string(), r"a\u{2028}b\tc");
    }
}
