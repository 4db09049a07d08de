//! The shell's own errors: a kind a program can match, with a stable name, and a message for
//! people. The core's refusals keep their own types ([`halo_core::state::UpdateError`],
//! [`halo_core::catalog::CatalogError`], …) and the API's are [`crate::service::api::ApiError`];
//! this is for the gateway's files, keys, logs and configuration.

/// What went wrong, for a program to match on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A file or directory that cannot be opened, read, written, renamed or synced.
    File,
    /// A secret file (a credential, a key) that others can read, or a directory others can
    /// write to.
    Permissions,
    /// A record that is not what its file says it is: not UTF-8, over its size limit, not JSON,
    /// not a receipt, a broken chain.
    Record,
    /// A signing or verifying key that cannot be read, or a signature that does not verify.
    Key,
    /// A configuration or command-line value that cannot be used.
    Config,
    /// The operating system refused something the gateway needs (randomness, a stream).
    System,
}

impl ErrorKind {
    /// The stable name (upper snake case), as logs and JSON output print it.
    pub const fn name(self) -> &'static str {
        match self {
            ErrorKind::File => "FILE",
            ErrorKind::Permissions => "PERMISSIONS",
            ErrorKind::Record => "RECORD",
            ErrorKind::Key => "KEY",
            ErrorKind::Config => "CONFIG",
            ErrorKind::System => "SYSTEM",
        }
    }
}

/// An error of the gateway's shell: its [`ErrorKind`] and a one-line message naming what it is
/// about (the file, the line, the key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    /// An error of `kind` with its message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
        }
    }

    /// A [`ErrorKind::File`] error.
    pub fn file(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::File, message)
    }

    /// A [`ErrorKind::Record`] error.
    pub fn record(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Record, message)
    }

    /// A [`ErrorKind::Key`] error.
    pub fn key(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Key, message)
    }

    /// A [`ErrorKind::Config`] error.
    pub fn config(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Config, message)
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message for people.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// The command line prints the message; a caller that only reports keeps its words.
impl From<Error> for String {
    fn from(e: Error) -> String {
        e.message
    }
}
