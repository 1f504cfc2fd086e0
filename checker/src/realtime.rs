//! Real-time precedence: operation A precedes B when A completed before B was
//! invoked. Both the fence and the resource checkers ask "of everything that
//! completed before this was invoked, which carried the largest token?".

/// An interval of the history by event index, with a value.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timed<T> {
    pub invoke: u64,
    pub completion: u64,
    pub value: T,
}

/// For each item, the position of the item with the largest value among those
/// that completed before it was invoked (the earliest such on ties), if any.
/// O(n log n) time, O(n) memory.
pub(crate) fn largest_preceding<T: Ord + Copy>(items: &[Timed<T>]) -> Vec<Option<usize>> {
    let mut by_completion: Vec<usize> = (0..items.len()).collect();
    by_completion.sort_unstable_by_key(|&at| items[at].completion);
    let mut by_invoke: Vec<usize> = (0..items.len()).collect();
    by_invoke.sort_unstable_by_key(|&at| items[at].invoke);
    let mut result = vec![None; items.len()];
    let mut best: Option<usize> = None;
    let mut completed = by_completion.iter().peekable();
    for &at in &by_invoke {
        while let Some(&&done) = completed.peek() {
            if items[done].completion >= items[at].invoke {
                break;
            }
            if best.is_none_or(|best| items[done].value > items[best].value) {
                best = Some(done);
            }
            completed.next();
        }
        result[at] = best;
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_items_completed_before_the_invoke_count() {
        let items = [
            Timed { invoke: 0, completion: 2, value: 5 },
            Timed { invoke: 1, completion: 4, value: 9 }, // concurrent with the first
            Timed { invoke: 3, completion: 6, value: 1 }, // after the first only
            Timed { invoke: 7, completion: 8, value: 2 }, // after all
        ];
        assert_eq!(largest_preceding(&items), [None, None, Some(0), Some(1)]);
    }
}
