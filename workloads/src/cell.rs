//! A cell of a truth table, in either world: a backend of that world's
//! catalogue under faults, with the verdict it must get and why. The
//! simulated table (`lockcheck_sim::cells`) and the real one
//! (`lockcheck_real::matrix::cells`) are lists of these; both are judged by
//! [`Expect::judge_runs`].

use std::time::Duration;

use lockcheck_checker::Expect;

use crate::fault::{FaultKind, Shape};
use crate::payments::Protection;
use crate::provider::Variant;
use crate::queue::QueueKind;
use crate::run_options::Pooler;
use crate::stall::StallPoint;
use crate::workload::Workload;

/// One cell.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell<B> {
    pub backend: B,
    pub workload: Workload,
    /// The faults that strike (none: a run without faults).
    pub faults: &'static [FaultKind],
    /// The shapes a partition may take (every one: [`Shape::ALL`]).
    pub shapes: &'static [Shape],
    /// Where a pause may strike (every point: [`StallPoint::ALL`]).
    pub pause_at: &'static [StallPoint],
    pub fencing: bool,
    pub persistent: bool,
    /// The lease, when not the matrix's default.
    pub ttl: Option<Duration>,
    /// How long a killed server stays down, when not drawn.
    pub restart_delay: Option<Duration>,
    /// Time per run, when not the matrix's.
    pub time_limit: Option<Duration>,
    /// Runs a violated cell may take, when not the matrix's number: a fault
    /// that needs a holder in the middle of a long job shows less often.
    pub runs: Option<u64>,
    pub expect: Expect,
    /// Why the cell comes out so, in a few words.
    pub note: &'static str,
    /// The payments workload's protection and provider (the others ignore
    /// them).
    pub protection: Protection,
    pub provider_variant: Variant,
    /// The payments workload's real queue.
    pub queue: QueueKind,
    /// PgBouncer between the clients and their PostgreSQL (real only).
    pub pooler: Option<Pooler>,
}

impl<B> Cell<B> {
    /// `backend` under `faults`, with every other setting the default: the
    /// fenced-write workload, fencing on, no persistence, every partition
    /// shape.
    pub const fn new(
        backend: B,
        faults: &'static [FaultKind],
        expect: Expect,
        note: &'static str,
    ) -> Cell<B> {
        Cell {
            backend,
            workload: Workload::FencedWrite,
            faults,
            shapes: &Shape::ALL,
            pause_at: &StallPoint::ALL,
            fencing: true,
            persistent: false,
            ttl: None,
            restart_delay: None,
            time_limit: None,
            runs: None,
            expect,
            note,
            protection: Protection::Lock,
            provider_variant: Variant::Correct,
            queue: QueueKind::Postgres,
            pooler: None,
        }
    }

    /// The same cell as a payments workload relying on `protection`.
    pub fn with_payments(self, protection: Protection) -> Cell<B> {
        Cell { workload: Workload::Payments, protection, ..self }
    }

    /// The same cell with this provider.
    pub fn with_provider(self, provider_variant: Variant) -> Cell<B> {
        Cell { provider_variant, ..self }
    }

    /// The same cell taking its jobs from this real queue.
    pub fn with_queue(self, queue: QueueKind) -> Cell<B> {
        Cell { queue, ..self }
    }

    /// The same cell with partitions of these shapes only.
    pub fn with_shapes(self, shapes: &'static [Shape]) -> Cell<B> {
        Cell { shapes, ..self }
    }

    /// The same cell with pauses at these points only.
    pub fn with_pause_at(self, pause_at: &'static [StallPoint]) -> Cell<B> {
        Cell { pause_at, ..self }
    }

    /// The same cell with this lease.
    pub fn with_ttl_ms(self, ttl_ms: u64) -> Cell<B> {
        Cell { ttl: Some(Duration::from_millis(ttl_ms)), ..self }
    }

    /// The same cell with a killed server down this long.
    pub fn with_restart_delay_ms(self, delay_ms: u64) -> Cell<B> {
        Cell { restart_delay: Some(Duration::from_millis(delay_ms)), ..self }
    }

    /// The same cell without fencing tokens.
    pub fn without_fencing(self) -> Cell<B> {
        Cell { fencing: false, ..self }
    }

    /// The same cell with a lock server that keeps its keys across a
    /// restart.
    pub fn through(self, pooler: Pooler) -> Cell<B> {
        Cell { pooler: Some(pooler), ..self }
    }

    pub fn with_persistence(self) -> Cell<B> {
        Cell { persistent: true, ..self }
    }
}
