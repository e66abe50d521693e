//! The one log set-up of the binaries: `RUST_LOG` filters, `CRUCIBLE_LOG_FORMAT` picks human
//! lines (`text`, the default) or one JSON object a line (`json`, for log shippers), and
//! colours are only for a terminal: logs that go to a file or journald carry no escape codes.

use std::io::IsTerminal;

/// Where a binary's logs go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogTo {
    /// The services (`crucible-api`, `crucible-worker`): stdout, as the fmt default.
    Stdout,
    /// The CLI: its stdout is the commands' JSON, so logs must stay off it.
    Stderr,
}

/// The filter when `RUST_LOG` is unset or does not parse: our `info`, and only warnings from
/// the corpus index's search engine, whose `info` lines narrate its commits and merges.
pub const DEFAULT_LOG_FILTER: &str = "info,tantivy=warn";

/// The variable that picks the [`LogFormat`].
pub const LOG_FORMAT_ENV: &str = "CRUCIBLE_LOG_FORMAT";

/// How each log line is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines (`text`).
    #[default]
    Text,
    /// One JSON object a line (`json`): `timestamp`, `level`, `target`, `fields` (the message
    /// and the structured fields) and the spans, as tracing-subscriber writes them.
    Json,
}

/// Why the logs could not be set up: the process stops at start rather than log in a format
/// nobody asked for.
#[derive(Debug, thiserror::Error)]
pub enum LogSetupError {
    /// `CRUCIBLE_LOG_FORMAT` names no format.
    #[error("{LOG_FORMAT_ENV}={0:?} is not a log format: use `text` (the default) or `json`")]
    UnknownFormat(String),
    /// `CRUCIBLE_LOG_FORMAT` is not UTF-8, so it names no format either.
    #[error("{LOG_FORMAT_ENV} is not valid UTF-8: use `text` (the default) or `json`")]
    NotUnicode,
}

impl LogFormat {
    /// Pure: the format a value of `CRUCIBLE_LOG_FORMAT` names (case aside); unset or blank is
    /// [`LogFormat::Text`].
    pub fn parse(value: Option<&str>) -> Result<Self, LogSetupError> {
        match value.map(str::trim).filter(|v| !v.is_empty()) {
            None => Ok(LogFormat::Text),
            Some(v) if v.eq_ignore_ascii_case("text") => Ok(LogFormat::Text),
            Some(v) if v.eq_ignore_ascii_case("json") => Ok(LogFormat::Json),
            Some(v) => Err(LogSetupError::UnknownFormat(v.to_owned())),
        }
    }

    /// The format this process's environment asks for.
    pub fn from_env() -> Result<Self, LogSetupError> {
        match std::env::var(LOG_FORMAT_ENV) {
            Ok(v) => Self::parse(Some(&v)),
            Err(std::env::VarError::NotPresent) => Ok(LogFormat::Text),
            Err(std::env::VarError::NotUnicode(_)) => Err(LogSetupError::NotUnicode),
        }
    }
}

/// Pure: whether lines in `format` to a stream are coloured: text to a terminal only, and not
/// when `NO_COLOR` is set to anything but empty (https://no-color.org; setting colours at all
/// overrides tracing-subscriber's own reading of it, so it is read here).
pub fn colours(format: LogFormat, terminal: bool, no_color: Option<&str>) -> bool {
    format == LogFormat::Text && terminal && no_color.is_none_or(str::is_empty)
}

/// Installs the global subscriber: lines in the format of `CRUCIBLE_LOG_FORMAT` filtered by
/// `RUST_LOG` ([`DEFAULT_LOG_FILTER`] when it is unset or does not parse), coloured only on a
/// terminal ([`colours`]). Call it first thing: an unknown format is an error to stop on.
pub fn init_tracing(to: LogTo) -> Result<(), LogSetupError> {
    let format = LogFormat::from_env()?;
    let terminal = match to {
        LogTo::Stdout => std::io::stdout().is_terminal(),
        LogTo::Stderr => std::io::stderr().is_terminal(),
    };
    let no_color = std::env::var("NO_COLOR").ok();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| DEFAULT_LOG_FILTER.into()),
        )
        .with_ansi(colours(format, terminal, no_color.as_deref()));
    match (format, to) {
        (LogFormat::Text, LogTo::Stdout) => builder.init(),
        (LogFormat::Text, LogTo::Stderr) => builder.with_writer(std::io::stderr).init(),
        (LogFormat::Json, LogTo::Stdout) => builder.json().init(),
        (LogFormat::Json, LogTo::Stderr) => builder.json().with_writer(std::io::stderr).init(),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_is_text_unless_json_is_asked_for() {
        for unset in [None, Some(""), Some("  ")] {
            assert_eq!(LogFormat::parse(unset).unwrap(), LogFormat::Text);
        }
        assert_eq!(LogFormat::parse(Some("text")).unwrap(), LogFormat::Text);
        assert_eq!(LogFormat::parse(Some(" JSON ")).unwrap(), LogFormat::Json);
        let refused = LogFormat::parse(Some("logfmt")).unwrap_err().to_string();
        assert!(
            refused.contains("CRUCIBLE_LOG_FORMAT=\"logfmt\"") && refused.contains("`json`"),
            "{refused}"
        );
    }

    #[test]
    fn only_text_to_a_terminal_is_coloured() {
        assert!(colours(LogFormat::Text, true, None));
        assert!(colours(LogFormat::Text, true, Some("")));
        assert!(!colours(LogFormat::Text, false, None), "a file or journald");
        assert!(!colours(LogFormat::Text, true, Some("1")), "NO_COLOR");
        assert!(!colours(LogFormat::Json, true, None));
    }
}
