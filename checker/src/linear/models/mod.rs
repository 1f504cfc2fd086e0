//! The models lockcheck ships.

mod kv;
mod lock;
mod register;

pub use kv::{Kv, KvCall, KvInput, KvOutput, KvState, Text};
pub use lock::{FencedLease, LeaseState, LockCall, LockInput, LockOutput, Mutex, CRASHED_HOLDER};
pub use register::{CasRegister, Register, RegisterInput, RegisterOutput};
