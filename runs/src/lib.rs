//! lockcheck's runs, kept and watched: the run store (`store/<test>/<run>/`,
//! [`begin`] and [`finish`]), a stored run's report rendered again
//! ([`report`]), the read-only web view of the store ([`serve`]) and the
//! progress line on a terminal ([`Progress`]).

mod error;
pub mod progress;
pub mod report;
pub mod serve;
mod store;

pub use error::StoreError;
pub use progress::Progress;
pub use store::{
    begin, finish, interrupted, interrupted_at, last_words, stored_so_far, write_file, write_html,
    Run, Stored,
};
