//! Any bytes, read as the `jepsen_edn` format and, when they are a history,
//! checked by every checker: an error or a verdict, never a panic or a hang.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockcheck_checker::import::InputFormat;

#[path = "../common.rs"]
mod common;

fuzz_target!(|data: &[u8]| common::import_and_check(InputFormat::JepsenEdn, data));
