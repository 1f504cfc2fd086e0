//! What every world's catalogue of backends answers: each backend's name,
//! its help line, and why a fault cannot strike it. The simulator's
//! (`lockcheck_sim::Backend`) and the real world's
//! (`lockcheck_real::RealBackend`) each keep one entry a backend, with what
//! that world needs besides (its hosts or servers, its tuning, how its
//! clients are built); `lockcheck backends` and the matrices read both
//! through this trait.

use crate::FaultKind;

/// A world's catalogue of backends.
pub trait Catalogue: Copy + Sized + 'static {
    /// The world, as a listing names it: `simulated`, `real`.
    const WORLD: &'static str;
    /// Every backend, in the order a listing gives them.
    fn all() -> &'static [Self];
    /// Its `--backend` name.
    fn name(self) -> &'static str;
    /// One line on what it is.
    fn help(self) -> &'static str;
    /// Why `fault` cannot strike it in this world, if it cannot.
    fn refuses(self, fault: FaultKind) -> Option<String>;
    /// A backend by its name.
    fn parse(name: &str) -> Option<Self> {
        Self::all().iter().copied().find(|backend| backend.name() == name)
    }
    /// The faults that can strike it, in the vocabulary's order.
    fn faults(self) -> Vec<FaultKind> {
        FaultKind::ALL.into_iter().filter(|&fault| self.refuses(fault).is_none()).collect()
    }
}
