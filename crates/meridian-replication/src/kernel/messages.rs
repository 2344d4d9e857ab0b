//! The wire type's old home: [`Msg`], [`KernelMsg`] and [`RemoteError`] live in
//! [`crate::msg`] now; this module keeps the old paths working.

pub use crate::msg::{KernelMsg, Msg, RemoteError};
