//! Real lock backends (LOCKS.md §2) over real connections, the protected
//! resource storage in PostgreSQL, and the servers the tool starts itself.

pub mod etcd;
pub mod redis;
pub mod redlock;
pub mod servers;
pub mod sql;
pub mod storage;
