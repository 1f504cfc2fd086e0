//! What can go wrong in the store.

use std::io;
use std::path::PathBuf;

/// A store file or folder that could not be made or written, or a history
/// that could not be read or checked.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// `cannot create store/t` or `cannot write store/t/run/.results.json.partial`.
    #[error("cannot {action} {}", path.display())]
    File {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A history that cannot be read or checked: the message names it.
    #[error("{0}")]
    History(String),
    /// The web view could not start its runtime or accept connections.
    #[error("cannot serve: {0}")]
    Serve(#[source] io::Error),
}

impl StoreError {
    /// `cannot {action} {path}`, with the reason as its source.
    pub(crate) fn file(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(io::Error) -> StoreError {
        let path = path.into();
        move |source| StoreError::File { action, path, source }
    }
}
