//! Pairing invokes with completions for the imported formats, which (unlike
//! JSON Lines histories) become operations for a model directly.

use rustc_hash::FxHashMap;

use crate::linear::Operation;

/// How an imported operation completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Completion {
    Ok,
    Fail,
    Info,
}

/// Joins each invoke with the next completion of the same process.
#[derive(Debug)]
pub(crate) struct Pairer<I> {
    open: FxHashMap<i64, (I, u64)>,
}

impl<I> Pairer<I> {
    pub(crate) fn new() -> Self {
        Pairer { open: FxHashMap::default() }
    }

    /// Opens an operation; an error if the process already has one open.
    pub(crate) fn invoke(&mut self, process: i64, input: I, position: u64) -> Result<(), String> {
        if self.open.insert(process, (input, position)).is_some() {
            return Err(format!(
                "process {process} invokes while its previous operation is still open"
            ));
        }
        Ok(())
    }

    /// Closes the process's open operation, giving its input and position.
    pub(crate) fn complete(&mut self, process: i64) -> Result<(I, u64), String> {
        self.open
            .remove(&process)
            .ok_or_else(|| format!("process {process} completes an operation it never invoked"))
    }

    /// Operations never completed, as unknown, in invocation order.
    pub(crate) fn unfinished<O>(self) -> Vec<Operation<I, O>> {
        let mut open: Vec<(i64, (I, u64))> = self.open.into_iter().collect();
        open.sort_by_key(|(_, (_, position))| *position);
        open.into_iter()
            .map(|(client, (input, call))| Operation {
                client,
                input,
                output: None,
                call,
                ret: None,
            })
            .collect()
    }
}
