//! The fault vocabulary both worlds share: every fault by its `--nemesis`
//! name, and the shapes a partition takes. A name means one thing in both
//! worlds. Each world carries a fault out its own way (the simulator's
//! network and hosts; the real world's proxy, signals and libfaketime) and
//! says which it cannot carry out and why.

/// A fault, in either world.
///
/// The order is the simulator's: it sorts the faults it is given, and a
/// seed's schedule depends on that order. A new fault goes at the end.
/// `pause` and `sigstop` share one slot of the schedule, where `pause`
/// stands ([`crate::Slot`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// A client stalls, longer than the TTL, at a point of its life (a GC
    /// pause): after its grant, before its write, and so on (`--pause-at`).
    Pause,
    /// The lock server's clock jumps forward, or drifts fast.
    Clock,
    /// The lock server crashes and restarts (its keys survive only with
    /// persistence).
    Kill,
    /// A lock server's links are slow: every client's requests to it and
    /// replies from it are late (the simulator delays the lock host's
    /// replies; the real world adds latency to every client's links to the
    /// lock server through its proxy). Also named `delay`.
    SlowNet,
    /// Requests or replies to the lock server are lost (simulated only).
    Loss,
    /// A client's clock jumps, forward or back (simulated only): harmless to
    /// every recipe that takes time from the server.
    Skew,
    /// The Redis primary crashes before shipping its latest writes to its
    /// async replica, and the replica is promoted (single-Redis backends).
    Failover,
    /// Links are cut: a client from every lock host, or cluster members
    /// from each other ([`Shape`]).
    Partition,
    /// A lock server stops for a while, reading nothing: SIGSTOP, later
    /// SIGCONT, of a real one; a simulated one leaves its requests unread.
    Sigstop,
    /// The SQL server ends the lock sessions (real postgres-* and mysql-*).
    ConnKill,
    /// SIGKILL of the user's lock program (real `--backend exec`).
    ClientKill,
    /// One client's links are slow, to its lock servers and to its storage:
    /// a write may reach the storage after the lease it was sent under
    /// ended (real only: through the proxy).
    SlowClient,
}

impl FaultKind {
    pub const ALL: [FaultKind; 12] = [
        FaultKind::Pause,
        FaultKind::Clock,
        FaultKind::Kill,
        FaultKind::SlowNet,
        FaultKind::Loss,
        FaultKind::Skew,
        FaultKind::Failover,
        FaultKind::Partition,
        FaultKind::Sigstop,
        FaultKind::ConnKill,
        FaultKind::ClientKill,
        FaultKind::SlowClient,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Pause => "pause",
            FaultKind::Clock => "clock",
            FaultKind::Kill => "kill",
            FaultKind::SlowNet => "slow-net",
            FaultKind::Loss => "loss",
            FaultKind::Skew => "skew",
            FaultKind::Failover => "failover",
            FaultKind::Partition => "partition",
            FaultKind::Sigstop => "sigstop",
            FaultKind::ConnKill => "conn-kill",
            FaultKind::ClientKill => "client-kill",
            FaultKind::SlowClient => "slow-client",
        }
    }

    /// A fault by its name, or by an older one (`delay` is `slow-net`).
    pub fn parse(name: &str) -> Option<FaultKind> {
        match name {
            "delay" => Some(FaultKind::SlowNet),
            name => FaultKind::ALL.into_iter().find(|kind| kind.name() == name),
        }
    }

    /// A `--nemesis` comma list: its faults in the order given, each once;
    /// `none` is no fault. An unknown name, or a list that names nothing
    /// (`""`, `,,,`), is an error that lists the known ones.
    pub fn parse_list(names: &str) -> Result<Vec<FaultKind>, String> {
        let known = || {
            let known: Vec<&str> = FaultKind::ALL.iter().map(|kind| kind.name()).collect();
            format!("the faults are {}, or none", known.join(", "))
        };
        let mut faults = Vec::new();
        let mut named = false;
        for name in names.split(',').map(str::trim).filter(|name| !name.is_empty()) {
            named = true;
            match FaultKind::parse(name) {
                Some(fault) if !faults.contains(&fault) => faults.push(fault),
                Some(_) => {}
                None if name == "none" => {}
                None => return Err(format!("unknown fault {name:?}: {}", known())),
            }
        }
        if !named {
            return Err(format!("--nemesis {names:?} names no fault: {}", known()));
        }
        Ok(faults)
    }
}

/// How a partition splits the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Shape {
    /// One client cut off from every lock host (client↔server).
    Client,
    /// One member cut off from the other members (server↔server).
    IsolateOne,
    /// The members split into a minority and a majority.
    Halves,
    /// Each member sees only its two neighbours: every member is in a
    /// majority with them, and no two see the same majority (five members).
    Ring,
}

impl Shape {
    pub const ALL: [Shape; 4] = [Shape::Client, Shape::IsolateOne, Shape::Halves, Shape::Ring];

    pub fn name(self) -> &'static str {
        match self {
            Shape::Client => "client",
            Shape::IsolateOne => "isolate-one",
            Shape::Halves => "halves",
            Shape::Ring => "ring",
        }
    }

    pub fn parse(name: &str) -> Option<Shape> {
        Shape::ALL.into_iter().find(|shape| shape.name() == name)
    }

    /// A `--partition-shapes` comma list, in the order given: parsed once,
    /// at the edge, for both worlds. An unknown name, or a list that names
    /// none, is an error.
    pub fn parse_list(names: &str) -> Result<Vec<Shape>, String> {
        let mut shapes = Vec::new();
        for name in names.split(',').map(str::trim).filter(|name| !name.is_empty()) {
            let shape = Shape::parse(name).ok_or_else(|| {
                format!("unknown partition shape {name:?}: use client, isolate-one, halves or ring")
            })?;
            shapes.push(shape);
        }
        if shapes.is_empty() {
            return Err("--partition-shapes needs at least one shape".to_string());
        }
        Ok(shapes)
    }

    /// Shapes as a comma list, as `--partition-shapes` takes them.
    pub fn list(shapes: &[Shape]) -> String {
        let names: Vec<&str> = shapes.iter().map(|shape| shape.name()).collect();
        names.join(",")
    }

    /// Whether it splits anything among `servers` lock hosts, which talk to
    /// each other when they form a `cluster`.
    pub fn applies(self, servers: u32, cluster: bool) -> bool {
        match self {
            Shape::Client => true,
            Shape::IsolateOne | Shape::Halves => cluster && servers >= 3,
            Shape::Ring => cluster && servers >= 5,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{FaultKind, Shape};

    #[test]
    fn a_fault_reads_back_by_its_name_and_delay_is_slow_net() {
        for kind in FaultKind::ALL {
            assert_eq!(FaultKind::parse(kind.name()), Some(kind));
        }
        assert_eq!(FaultKind::parse("delay"), Some(FaultKind::SlowNet));
        assert_eq!(
            FaultKind::parse_list(" kill, pause,kill,delay ").unwrap(),
            [FaultKind::Kill, FaultKind::Pause, FaultKind::SlowNet]
        );
        assert_eq!(FaultKind::parse_list("none").unwrap(), []);
        for nothing in ["", ",,,", " , "] {
            let empty = FaultKind::parse_list(nothing).unwrap_err();
            assert!(empty.contains("names no fault") && empty.contains("or none"), "{empty}");
        }
        let unknown = FaultKind::parse_list("pause,gc").unwrap_err();
        assert!(
            unknown.starts_with("unknown fault \"gc\": the faults are pause, clock"),
            "{unknown}"
        );
    }

    #[test]
    fn the_simulated_faults_keep_their_order() {
        // The simulator sorts the faults it is given: this order is part of
        // every seed's schedule.
        let mut kinds = FaultKind::ALL.to_vec();
        kinds.sort();
        assert_eq!(kinds, FaultKind::ALL);
        assert_eq!(
            &FaultKind::ALL[..8],
            [
                FaultKind::Pause,
                FaultKind::Clock,
                FaultKind::Kill,
                FaultKind::SlowNet,
                FaultKind::Loss,
                FaultKind::Skew,
                FaultKind::Failover,
                FaultKind::Partition
            ]
        );
    }

    #[test]
    fn a_shape_reads_back_and_splits_only_a_cluster_large_enough() {
        for shape in Shape::ALL {
            assert_eq!(Shape::parse(shape.name()), Some(shape));
        }
        assert_eq!(Shape::parse("square"), None);
        assert!(Shape::Client.applies(1, false));
        assert!(!Shape::Halves.applies(5, false), "lock hosts that do not talk are not split");
        assert!(Shape::Halves.applies(3, true) && !Shape::Halves.applies(2, true));
        assert!(Shape::Ring.applies(5, true) && !Shape::Ring.applies(3, true));
    }
}
