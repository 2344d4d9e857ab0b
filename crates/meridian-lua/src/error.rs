//! The crate's one error type; each variant's text is the Redis error reply (code included).
//! Also the error a Redis API function raises inside a script ([`ErrorReply`]) and how any
//! interpreter error becomes a message.

/// Why a script could not be loaded or the interpreter built.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The body does not compile (`Error compiling script (new function): …`).
    #[error("ERR Error compiling script (new function): {0}")]
    Compile(String),
    /// The `#!` line names another engine, an unknown flag or option.
    #[error("ERR {0}")]
    Shebang(String),
    /// The interpreter failed outside any script (out of memory building it).
    #[error("ERR {0}")]
    Interpreter(String),
}

impl From<mlua::Error> for Error {
    fn from(e: mlua::Error) -> Self {
        Error::Interpreter(message_of(&e))
    }
}

/// An error a Redis API function raises: its text is the reply (code included), and the
/// script's position is added as for any error.
#[derive(Debug)]
pub(crate) struct ErrorReply(String);

impl std::fmt::Display for ErrorReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ErrorReply {}

pub(crate) fn reply_error(msg: String) -> mlua::Error {
    mlua::Error::external(ErrorReply(msg))
}

/// The reply text of an [`ErrorReply`] raised by a Redis API function, if `e` is one.
pub(crate) fn reply_of(e: &mlua::Error) -> Option<String> {
    match e {
        mlua::Error::CallbackError { cause, .. } => reply_of(cause),
        mlua::Error::ExternalError(x) => x.downcast_ref::<ErrorReply>().map(|r| r.0.clone()),
        _ => None,
    }
}

/// The message of an interpreter error, without mlua's decorations (tracebacks, prefixes);
/// an [`ErrorReply`]'s text as it is.
pub(crate) fn message_of(e: &mlua::Error) -> String {
    if let Some(reply) = reply_of(e) {
        return reply;
    }
    match e {
        mlua::Error::CallbackError { cause, .. } => message_of(cause),
        mlua::Error::RuntimeError(m) => m.clone(),
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        mlua::Error::MemoryError(_) => "not enough memory".into(),
        other => other.to_string(),
    }
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;
