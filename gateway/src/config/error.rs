//! Configuration errors that name the file, line and column.

use std::fmt;
use std::ops::Range;

/// One problem found in a configuration file, located.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// Why a configuration was refused. Nothing of it was applied.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{file}: cannot read: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{}", Located { file, problems })]
    Invalid {
        file: String,
        problems: Vec<Problem>,
    },
}

impl ConfigError {
    /// The located problems, empty for a read error.
    pub fn problems(&self) -> &[Problem] {
        match self {
            ConfigError::Read { .. } => &[],
            ConfigError::Invalid { problems, .. } => problems,
        }
    }
}

struct Located<'a> {
    file: &'a str,
    problems: &'a [Problem],
}

impl fmt::Display for Located<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}:{}:{}: {}", self.file, p.line, p.column, p.message)?;
        }
        Ok(())
    }
}

/// Maps byte offsets of a text to 1-based lines and columns (in characters).
pub struct Positions<'a> {
    text: &'a str,
}

impl<'a> Positions<'a> {
    pub fn new(text: &'a str) -> Self {
        Positions { text }
    }

    /// The problem at the start of `span`.
    pub fn problem(&self, span: Range<usize>, message: impl Into<String>) -> Problem {
        let (line, column) = self.line_column(span.start);
        Problem {
            line,
            column,
            message: message.into(),
        }
    }

    fn line_column(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = self.text.get(..offset).unwrap_or(self.text);
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
        (line, column)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_map_to_lines_and_columns() {
        let text = "a = 1\nbé = \"x\"\n";
        let p = Positions::new(text);
        assert_eq!(p.line_column(0), (1, 1));
        assert_eq!(p.line_column(4), (1, 5));
        assert_eq!(p.line_column(6), (2, 1));
        // "bé = " is 6 bytes and 5 characters: the quote is column 6.
        assert_eq!(p.line_column(12), (2, 6));
        assert_eq!(p.line_column(999), (3, 1));
    }

    #[test]
    fn display_names_file_line_and_column() {
        let e = ConfigError::Invalid {
            file: "picket.toml".into(),
            problems: vec![Problem {
                line: 3,
                column: 7,
                message: "bad".into(),
            }],
        };
        assert_eq!(e.to_string(), "picket.toml:3:7: bad");
    }
}
