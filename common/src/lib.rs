//! calvin-common: what calvin's processes share beneath the edge and the
//! agent (DESIGN's "small shared crate"), so that no crate reaches sideways
//! into another for it.
//!
//! - [`unix_socket`]: private Unix sockets (the agent's control socket, the
//!   gateway's send-file socket).
//! - [`control_client`]: the client of the agent's control API; its JSON is
//!   [`calvin_proto::control`].
//! - [`config_check`]: a configuration file's every problem, with its key
//!   and line (`check-config` and the checks at start).
//! - [`LogFormat`]: `--log-format text|json`, which every binary takes;
//!   [`tell`] and [`say`] write a program's own lines (its facts, its
//!   notes and errors) in that format.
//!
//! With the `runtime` feature (the edge and the agent):
//! - [`quic`]: the crypto provider, the QUIC transport settings, the
//!   endpoint's packet size and the UDP socket both ends use;
//! - [`tunnel_stream`]: a QUIC bidi stream as one byte stream;
//! - [`process`]: the tokio runtime, the open-files limit, the log and the
//!   shutdown signals.

#[cfg(feature = "runtime")]
pub mod batched_log;
pub mod config_check;
pub mod control_client;
pub mod metrics_http;
#[cfg(feature = "runtime")]
pub mod process;
#[cfg(feature = "runtime")]
pub mod quic;
#[cfg(feature = "runtime")]
pub mod tunnel_stream;
pub mod unix_socket;

/// How log lines are written: for people, or one JSON object per line for
/// a log pipeline (`--log-format text|json`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// `--log-format text|json` (or `CALVIN_LOG_FORMAT`), flattened into every
/// binary's command line.
#[cfg(feature = "cli")]
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct LogArgs {
    /// How log lines are written (stderr): text, or json (one object per line)
    #[arg(
        long = "log-format",
        global = true,
        value_name = "FORMAT",
        default_value = "text",
        env = "CALVIN_LOG_FORMAT"
    )]
    pub format: LogFormat,
}

#[cfg(feature = "cli")]
pub use tracing::Level;

#[cfg(feature = "cli")]
/// Writes a line a person reads on stderr (a fatal error, a problem in a
/// configuration): as it is in text, or as a log object of `level` in JSON
/// (every line of a JSON log parses). It is the program's own output (a
/// note to its user, a warning of what it found), not a log event: never
/// filtered out.
pub fn say(format: LogFormat, level: tracing::Level, line: &str) {
    let text = match format {
        LogFormat::Text => format!("{line}\n"),
        LogFormat::Json => format!("{}\n", log_object(level, line, &[])),
    };
    write_flushed(&mut std::io::stderr().lock(), &text);
}

#[cfg(feature = "cli")]
/// With `--log-format json`, a panic's message is a log object too (its
/// default hook writes plain lines).
pub fn json_panics(format: LogFormat) {
    if format == LogFormat::Json {
        std::panic::set_hook(Box::new(|info| {
            say(
                LogFormat::Json,
                tracing::Level::ERROR,
                &format!("panic: {info}"),
            );
        }));
    }
}

#[cfg(feature = "cli")]
/// The running program's name as the target of its own JSON lines
/// (`calvin-edge`: `calvin_edge`, as its log events' crate is named).
fn program_target() -> &'static str {
    static TARGET: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TARGET.get_or_init(|| {
        std::env::current_exe()
            .ok()
            .and_then(|exe| {
                exe.file_stem()
                    .map(|s| s.to_string_lossy().replace('-', "_"))
            })
            .unwrap_or_else(|| "calvin".to_owned())
    })
}

/// A fact a process tells its user and their scripts: an address it
/// listens on, a file it made, its URL. In text, the line `"{label} {value}"`
/// (the value alone when the label is empty); in JSON, the field `key`.
#[cfg(feature = "cli")]
pub struct Fact<'a> {
    pub key: &'a str,
    pub label: &'a str,
    pub value: String,
}

#[cfg(feature = "cli")]
impl<'a> Fact<'a> {
    pub fn new(key: &'a str, label: &'a str, value: impl std::fmt::Display) -> Self {
        Self {
            key,
            label,
            value: value.to_string(),
        }
    }
}

#[cfg(feature = "cli")]
/// Tells `facts` on stdout, where scripts and tests read them: a line each
/// in text; in JSON, one object shaped as the log's lines (`timestamp`,
/// `level`, `message`, each fact a field, `target`), so that every line
/// the process writes parses, whichever stream it is read from (a
/// collector of stdout and stderr together, as Kubernetes' and journald's
/// are).
pub fn tell(format: LogFormat, message: &str, facts: &[Fact<'_>]) {
    let text = match format {
        LogFormat::Text => facts
            .iter()
            .map(|f| match f.label {
                "" => format!("{}\n", f.value),
                label => format!("{label} {}\n", f.value),
            })
            .collect(),
        LogFormat::Json => {
            let fields: Vec<_> = facts
                .iter()
                .map(|f| (f.key, LogField::Str(&f.value)))
                .collect();
            format!("{}\n", log_object(tracing::Level::INFO, message, &fields))
        }
    };
    write_flushed(&mut std::io::stdout().lock(), &text);
}

#[cfg(feature = "cli")]
fn write_flushed(out: &mut impl std::io::Write, text: &str) {
    // A closed stdout or stderr (the reader went away) is not this
    // program's failure.
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

#[cfg(feature = "cli")]
/// A line of the JSON log from the program itself (its target), without
/// its newline.
fn log_object(level: tracing::Level, message: &str, fields: &[(&str, LogField<'_>)]) -> String {
    let mut line = Vec::new();
    write_log_line(
        &mut line,
        LogFormat::Json,
        level,
        program_target(),
        message,
        fields,
    );
    line.pop();
    String::from_utf8_lossy(&line).into_owned()
}

#[cfg(feature = "cli")]
/// A field's value in a log line, as a tracing event records it.
pub enum LogField<'a> {
    Str(&'a str),
    /// Written as it displays (in JSON, quoted but not escaped: for values
    /// with nothing to escape, such as addresses and methods).
    Display(&'a dyn std::fmt::Display),
    Number(u64),
    Float(f64),
}

#[cfg(feature = "cli")]
/// Appends one log line, newline included, to `out`, as tracing-subscriber
/// writes an event: in text `time  LEVEL target: message key=value...`, in
/// JSON an object in its order (the time in its clock's format, the level,
/// the message, the fields, the target). One place knows that shape: the
/// program's own JSON lines ([`say`], [`tell`]) and the edge's access log,
/// which writes a line per request without tracing's formatter.
pub fn write_log_line(
    out: &mut Vec<u8>,
    format: LogFormat,
    level: tracing::Level,
    target: &str,
    message: &str,
    fields: &[(&str, LogField<'_>)],
) {
    use std::fmt::Write as _;
    use tracing_subscriber::fmt::time::FormatTime;
    /// A `fmt::Write` over the line's bytes (which cannot fail).
    struct Bytes<'a>(&'a mut Vec<u8>);
    impl std::fmt::Write for Bytes<'_> {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.0.extend_from_slice(s.as_bytes());
            Ok(())
        }
    }
    let json = |out: &mut Vec<u8>, s: &str| {
        let _ = serde_json::to_writer(&mut *out, s);
    };
    let timestamp = |out: &mut Vec<u8>| {
        let _ = tracing_subscriber::fmt::time::SystemTime.format_time(
            &mut tracing_subscriber::fmt::format::Writer::new(&mut Bytes(out)),
        );
    };
    match format {
        LogFormat::Text => {
            timestamp(out);
            let _ = write!(Bytes(out), " {:>5} {target}: {message}", level.as_str());
            for (key, value) in fields {
                let mut w = Bytes(out);
                let _ = match value {
                    LogField::Str(s) => write!(w, " {key}={s:?}"),
                    LogField::Display(d) => write!(w, " {key}={d}"),
                    LogField::Number(n) => write!(w, " {key}={n}"),
                    LogField::Float(f) => write!(w, " {key}={f}"),
                };
            }
        }
        LogFormat::Json => {
            out.extend_from_slice(b"{\"timestamp\":\"");
            timestamp(out);
            out.extend_from_slice(b"\",\"level\":");
            json(out, level.as_str());
            out.extend_from_slice(b",\"message\":");
            json(out, message);
            for (key, value) in fields {
                out.push(b',');
                json(out, key);
                out.push(b':');
                let mut w = Bytes(out);
                let _ = match value {
                    LogField::Str(s) => {
                        json(w.0, s);
                        Ok(())
                    }
                    LogField::Display(d) => write!(w, "\"{d}\""),
                    LogField::Number(n) => write!(w, "{n}"),
                    LogField::Float(f) => write!(w, "{f}"),
                };
            }
            out.extend_from_slice(b",\"target\":");
            json(out, target);
            out.push(b'}');
        }
    }
    out.push(b'\n');
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            _ => Err(format!("{s:?} is not a log format: text or json")),
        }
    }
}
