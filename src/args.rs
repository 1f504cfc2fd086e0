//! Command-line arguments. Libraries never see clap; this file turns words into
//! the options the libraries take.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use lockcheck_checker::import::{InputFormat, ModelChoice};
use lockcheck_checker::Purpose;
use lockcheck_commands::model::ModelRequest;
use lockcheck_commands::{AnalyzeRequest, CheckRequest, ConformanceRequest, MatrixRequest};
use lockcheck_workloads::payments::Protection;
use lockcheck_workloads::provider::{Profile, Variant};
use lockcheck_workloads::queue::QueueKind;
use lockcheck_workloads::{
    Backend, FaultKind, Pooler, RunOptions, Services, Shape, StallPoint, StorageKind, UrlService,
    Workload, World,
};

const EXIT_CODES: &str = "\
Exit codes:
  0   valid: every checker that applies found the history safe
  1   invalid: a checker found a violation
  2   unknown: a checker could not decide, or nothing could be checked, or a
      simulated run outgrew its memory budget (its history so far kept)
  64  usage error (bad arguments, or a run too large for the simulator or its memory)
  65  bad input data (a history that cannot be read; the message names file, line and field)
  69  a server a real backend needs is not installed or cannot be reached
  70  internal error (a bug in lockcheck: please report it)
  130, 143, 129  interrupted by SIGINT, SIGTERM, SIGHUP (check keeps the history so far)";

#[derive(Debug, Parser)]
#[command(
    name = "lockcheck",
    version,
    about = "Find out whether a distributed lock really gives mutual exclusion, and whether storage is fenced against a stalled holder.",
    after_help = EXIT_CODES
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a test against a lock backend (simulated by default) under faults, and check its history.
    #[command(after_help = EXIT_CODES)]
    Check(Box<CheckArgs>),
    /// Check recorded histories (JSON Lines, see histories/README.md) and explain every violation.
    #[command(after_help = EXIT_CODES)]
    Analyze(AnalyzeArgs),
    /// Run the cells of the truth table (docs/truth-table.md) against real servers, or simulated ones with --sim: expected against found.
    #[command(
        after_help = "Exit codes: 0 every cell matches, 1 a cell does not, 64 usage error, 69 a server is missing or a cell could not run, 70 internal error."
    )]
    Matrix(MatrixArgs),
    /// List the lock backends of both worlds, each with the faults that strike it; with a name, why each other fault is refused.
    Backends(BackendsArgs),
    /// Render the HTML report (and a verdict) again, from a stored run's folder or any history file.
    #[command(after_help = EXIT_CODES)]
    Report(ReportArgs),
    /// Browse the stored runs on localhost: verdicts, commands, links to each report.
    Serve(ServeArgs),
    /// Write a synthetic history from a correct reference lock (for trying lockcheck out and benchmarks).
    Synth(SynthArgs),
    /// Measure how fast `analyze` checks a large synthetic history, and its peak memory.
    Bench(BenchArgs),
    /// Check porcupine's test histories (a copy you provide) and compare each verdict with the one its VERDICTS.txt lists.
    #[command(
        after_help = "Exit codes: 0 every verdict agrees, 1 a file disagrees (each one is listed), 64 usage error or no corpus in the folder, 65 a VERDICTS.txt that cannot be read."
    )]
    Conformance(ConformanceArgs),
    /// Explore every interleaving of a recipe within bounds (clients, operations, ticks, faults): each property holds, or its shortest counterexample is printed and written as a history.
    #[command(
        after_help = "Exit codes: 0 every property holds within the bounds, 1 one is violated, 2 one is unknown (stopped at --max-states), 64 usage error."
    )]
    Model(ModelArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// A report for people.
    Text,
    /// One JSON document with every verdict and violation.
    Json,
    /// JUnit XML: a test case per checker per key, for CI test reports.
    Junit,
    /// A Markdown summary, for a CI job summary ($GITHUB_STEP_SUMMARY).
    Markdown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum InputFormatArg {
    /// lockcheck's JSON Lines (histories/README.md).
    Jsonl,
    /// Jepsen/Knossos history.edn: mutex, register or cas-register operations.
    JepsenEdn,
    /// `INFO jepsen.util - …` log lines of a CAS register (porcupine's etcd corpus).
    JepsenLog,
    /// porcupine's key-value files (get, put, append).
    PorcupineKv,
}

impl From<Format> for lockcheck_commands::Format {
    fn from(format: Format) -> lockcheck_commands::Format {
        match format {
            Format::Text => lockcheck_commands::Format::Text,
            Format::Json => lockcheck_commands::Format::Json,
            Format::Junit => lockcheck_commands::Format::Junit,
            Format::Markdown => lockcheck_commands::Format::Markdown,
        }
    }
}

impl From<InputFormatArg> for InputFormat {
    fn from(format: InputFormatArg) -> InputFormat {
        match format {
            InputFormatArg::Jsonl => InputFormat::Jsonl,
            InputFormatArg::JepsenEdn => InputFormat::JepsenEdn,
            InputFormatArg::JepsenLog => InputFormat::JepsenLog,
            InputFormatArg::PorcupineKv => InputFormat::PorcupineKv,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModelArg {
    /// Per format: fenced-lease or mutex per lock (jsonl, edn mutex), cas-register
    /// (jepsen-log, edn with cas), register (edn without cas), kv (porcupine-kv).
    Auto,
    /// A lock without TTL: held until its holder releases it.
    Mutex,
    /// A lease: grants may lapse, tokens strictly increase.
    FencedLease,
    Register,
    CasRegister,
    /// Key-value, checked per key.
    Kv,
    /// Key-value, checked as one whole (far harder).
    KvUnpartitioned,
}

impl From<ModelArg> for ModelChoice {
    fn from(model: ModelArg) -> ModelChoice {
        match model {
            ModelArg::Auto => ModelChoice::Auto,
            ModelArg::Mutex => ModelChoice::Mutex,
            ModelArg::FencedLease => ModelChoice::FencedLease,
            ModelArg::Register => ModelChoice::Register,
            ModelArg::CasRegister => ModelChoice::CasRegister,
            ModelArg::Kv => ModelChoice::Kv,
            ModelArg::KvUnpartitioned => ModelChoice::KvUnpartitioned,
        }
    }
}

#[derive(Debug, Args)]
pub struct AnalyzeArgs {
    /// History files to check; `-` reads standard input.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Also write a self-contained HTML report (timeline, charts) of each
    /// JSON Lines history into this folder, named after the file.
    #[arg(long, value_name = "DIR")]
    pub html_dir: Option<PathBuf>,
    /// Format of the history files.
    #[arg(long, value_enum, default_value_t = InputFormatArg::Jsonl)]
    pub input_format: InputFormatArg,
    /// Model for the linearizability checker [default: the format's usual one]
    #[arg(long, value_enum, default_value_t = ModelArg::Auto)]
    pub model: ModelArg,
    /// How long a lock may stay unobtainable with no holder before liveness
    /// fails (e.g. 30s, 500ms, 2m) [default: 3 × the largest ttl_ms in the history]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub liveness_bound: Option<Duration>,
    /// Skip the linearizability search (the other checkers still run).
    #[arg(long)]
    pub no_linearizability: bool,
    /// Time the linearizability search may take per history before it gives
    /// up with an unknown verdict (e.g. 60s, 10m).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "60s")]
    pub linearizability_timeout: Duration,
    /// Keep searching every key after one is found not linearizable (by
    /// default the rest stop, and are reported unknown).
    #[arg(long)]
    pub all_keys: bool,
    /// Memory each linearizability search may use, in MiB, before it gives up
    /// with an unknown verdict.
    #[arg(long, value_name = "MIB", default_value_t = 2048)]
    pub linearizability_memory: usize,
    /// Violations kept as evidence per checker (all are counted).
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub max_violations: usize,
    /// Print reading and checking times and peak memory to standard error.
    #[arg(long)]
    pub stats: bool,
    /// The longest line a history may have (e.g. 64KiB, 1GiB): a longer one
    /// is an error naming its line (exit 65), found without reading it
    /// whole. Reading also stops after 1000 lines that are not operations.
    #[arg(long, value_name = "SIZE", value_parser = parse_line_cap, default_value = "16MiB")]
    pub max_line_bytes: u64,
    /// Fail (exit 1) a valid history whose faults reached no window where
    /// the lock could break: a vacuous pass.
    #[arg(long)]
    pub require_coverage: bool,
    /// correctness (a unit of work done twice fails the history) or
    /// efficiency (it is counted as cost; work never done still fails).
    #[arg(long, default_value = "correctness")]
    pub purpose: String,
}

/// `--purpose`, or what is wrong with it.
fn parse_purpose(name: &str) -> Result<Purpose, String> {
    Purpose::parse(name)
        .ok_or_else(|| format!("unknown purpose {name:?}: use correctness or efficiency"))
}

/// A cap on a line: a size of at least one byte.
impl AnalyzeArgs {
    /// What `analyze` is asked, or why the model does not fit the format.
    pub fn request(&self) -> Result<AnalyzeRequest, String> {
        let (input_format, model) =
            (InputFormat::from(self.input_format), ModelChoice::from(self.model));
        if !model.fits(input_format) {
            let name =
                self.input_format.to_possible_value().map(|value| value.get_name().to_string());
            return Err(format!(
                "the {model} model does not fit --input-format {}",
                name.unwrap_or_default()
            ));
        }
        Ok(AnalyzeRequest {
            files: self.files.clone(),
            format: self.format.into(),
            html_dir: self.html_dir.clone(),
            input_format,
            model,
            liveness_bound: self.liveness_bound,
            no_linearizability: self.no_linearizability,
            linearizability_timeout: self.linearizability_timeout,
            all_keys: self.all_keys,
            linearizability_memory: self.linearizability_memory,
            max_violations: self.max_violations,
            stats: self.stats,
            max_line_bytes: self.max_line_bytes,
            require_coverage: self.require_coverage,
            purpose: parse_purpose(&self.purpose)?,
        })
    }
}

fn parse_line_cap(text: &str) -> Result<u64, String> {
    match lockcheck_workloads::memory::parse_size(text)? {
        0 => Err(format!("{text:?} is no room for a line: give at least 1 byte")),
        size => Ok(size),
    }
}

#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// The lock backend (`lockcheck backends` lists them all, with the
    /// faults that strike each). Simulated: sim- and a backend's name:
    /// sim-redis, sim-lease-table, sim-redlock, sim-redis-semaphore,
    /// sim-etcd, sim-etcd-5, sim-consul and their broken variants. Real:
    /// redis, redis-fenced, redlock, redis-semaphore, etcd,
    /// postgres-advisory, postgres-advisory-xact, postgres-lease,
    /// mysql-get-lock, mysql-lease and the broken variants. Your own: exec
    /// (a program after --).
    #[arg(long, default_value = "sim-redis")]
    pub backend: String,
    /// mutex (contention on a few locks), fenced-write (holders write to the
    /// protected resource with their token), cron (replicas run a daily job
    /// under a lock per day: exactly once a day), cron-release (broken: the
    /// day's lock is released after the run) or unlocked-write (no lock at
    /// all: clients write as they like, and only the storage keeps them
    /// safe), payments (workers take orders from a queue that redelivers
    /// and charge each: the double charge; see --protection), lock-order
    /// (each client takes two locks, always in one order: no deadlock),
    /// lock-order-opposite (broken: every other client takes them in the
    /// opposite order, and two deadlock) or election (candidates campaign
    /// for one lock; the leader renews and stamps its work with its term).
    #[arg(long, default_value = "fenced-write")]
    pub workload: String,
    /// What the payments workload relies on to charge each order once:
    /// none, lock (a lock per order: a stall past its lease charges twice),
    /// fenced (the lock, and the charge is the order's row in a fenced
    /// table), idempotency-key (the provider dedupes by the order), unique
    /// (an insert under UNIQUE (order_id)), conditional (pending to paid),
    /// append (broken: an insert with no constraint).
    #[arg(long, default_value = "lock")]
    pub protection: String,
    /// The payments provider's idempotency semantics: ietf (the
    /// Idempotency-Key draft: 422 on a reused key with another body) or
    /// stripe (400 idempotency_error); both replay the first response and
    /// answer 409 while the first request is in flight.
    #[arg(long, default_value = "ietf")]
    pub provider: String,
    /// The provider itself: correct, or a broken one: no-dedupe,
    /// replay-any-body (replays the first response for another body),
    /// check-then-insert (a race: two requests at once both charge).
    #[arg(long, default_value = "correct")]
    pub provider_variant: String,
    /// The payments workload's real queue: postgres (a table taken with
    /// FOR UPDATE SKIP LOCKED, a job hidden for its visibility timeout) or
    /// rabbitmq (a job not acknowledged in time is requeued when its
    /// consumer's channel closes). The simulator's queue is the same
    /// model for both.
    #[arg(long, default_value = "postgres")]
    pub queue: String,
    /// correctness (duplicate work fails the run) or efficiency (duplicate
    /// work is counted as cost and reported; corruption and work never
    /// done still fail).
    #[arg(long, default_value = "correctness")]
    pub purpose: String,
    /// What holds the protected resources (docs/storage.md): table (a
    /// table, fenced unless --no-fencing: PostgreSQL's against real
    /// servers), or an S3 object per resource: s3-put (read, then a plain
    /// PUT: the last writer wins), s3-cas (read, then a PUT If-Match the
    /// ETag read, again on a 412), s3-create (write-once effects, PUT
    /// If-None-Match: *; for the cron workloads). Simulated S3 is in
    /// memory; real S3 is moto's server, which lockcheck starts.
    #[arg(long, default_value = "table")]
    pub storage: String,
    /// Faults, a comma list; or none. A name means the same in both worlds:
    /// pause (a client stalls past its TTL), sigstop (a lock server stops
    /// for a while), kill (a lock server crashes and restarts), clock (a
    /// lock server's clock jumps or drifts), slow-net (also named delay: a
    /// lock server's links are slow, for every client), partition,
    /// failover (a Redis primary dies and its async replica is promoted).
    /// Simulated only: loss, skew. Real only: conn-kill (the SQL server
    /// ends the lock sessions), slow-client (one client's links slow, to
    /// its lock servers and its storage), client-kill (--backend exec:
    /// SIGKILL of your lock program). Against real servers, sigstop is
    /// SIGSTOP, kill SIGKILL, partition and the slow links go through
    /// lockcheck's own TCP proxy, clock through libfaketime (Redis,
    /// PostgreSQL, MariaDB; etcd, written in Go, ignores it, so clock is
    /// refused for it). Each world refuses, with the reason, a fault it
    /// cannot carry out. [default: pause,sigstop,clock,kill,slow-net,loss
    /// on a simulated backend; pause on a real one]
    #[arg(long)]
    pub nemesis: Option<String>,
    /// A real backend's Redis (a comma list of five for redlock) [default:
    /// private redis-server instances the tool starts and stops itself].
    /// A URL with a password (redis://:pw@host) is better given in the
    /// environment: lockcheck prints and stores it with the password masked
    /// (redis://:***@host), and a replay whose URL reads so takes it from
    /// LOCKCHECK_REDIS_URL.
    #[arg(
        long,
        value_name = "URL",
        value_delimiter = ',',
        env = "LOCKCHECK_REDIS_URL",
        hide_env_values = true
    )]
    pub redis_url: Vec<String>,
    /// The PostgreSQL of the protected resources and of the postgres-*
    /// backends [default: a private server the tool starts]. Its password
    /// is masked wherever lockcheck prints or stores it; give the URL in
    /// LOCKCHECK_POSTGRES_URL to keep it off the command line (a replay
    /// line's masked URL is then taken from there).
    #[arg(long, value_name = "URL", env = "LOCKCHECK_POSTGRES_URL", hide_env_values = true)]
    pub postgres_url: Option<String>,
    /// The MySQL or MariaDB of the mysql-* backends [default: a private
    /// mariadbd the tool starts]. Its password is masked wherever lockcheck
    /// prints or stores it; give the URL in LOCKCHECK_MYSQL_URL to keep it
    /// off the command line (a replay line's masked URL is then taken from
    /// there).
    #[arg(long, value_name = "URL", env = "LOCKCHECK_MYSQL_URL", hide_env_values = true)]
    pub mysql_url: Option<String>,
    /// The etcd endpoints of the etcd backend, a comma list [default: a
    /// private etcd the tool starts]. Also read from LOCKCHECK_ETCD_URL;
    /// a password in an endpoint is masked as the others are.
    #[arg(
        long,
        value_name = "URL",
        value_delimiter = ',',
        env = "LOCKCHECK_ETCD_URL",
        hide_env_values = true
    )]
    pub etcd_url: Vec<String>,
    /// The ZooKeeper servers of the zookeeper backends, a comma list of
    /// zk://HOST:PORT [default: a private ZooKeeper lockcheck starts].
    /// Also read from LOCKCHECK_ZOOKEEPER_URL.
    #[arg(
        long,
        value_name = "URL",
        value_delimiter = ',',
        env = "LOCKCHECK_ZOOKEEPER_URL",
        hide_env_values = true
    )]
    pub zookeeper_url: Vec<String>,
    /// The RabbitMQ of the payments workload's rabbitmq queue [default:
    /// amqp://guest:guest@127.0.0.1:5672/%2f, where the run makes a vhost
    /// of its own]. Also read from LOCKCHECK_RABBITMQ_URL.
    #[arg(long, value_name = "URL", env = "LOCKCHECK_RABBITMQ_URL", hide_env_values = true)]
    pub rabbitmq_url: Option<String>,
    /// The shapes a partition takes, a comma list of client (a client cut
    /// off from every lock host), isolate-one (a member cut off from the
    /// others), halves (a minority and a majority of members), ring (each
    /// member sees only its neighbours; five members). The member shapes
    /// apply to the consensus backends (sim-etcd; against real servers,
    /// etcd, started as a cluster behind lockcheck's proxy: five members
    /// when ring is among the shapes, else three).
    #[arg(long, default_value = DEFAULT_PARTITION_SHAPES)]
    pub partition_shapes: String,
    /// Where the pause fault may strike a client, a comma list of
    /// after-grant (before the holder's work and write), in-flight (a
    /// request sent, its reply not yet read; the stall is the client's, so
    /// the reply's deadline waits it out), between-commands (of a recipe of
    /// several: SET and the fence's INCR, GET and DEL, a lease's grant and
    /// its lock), after-write, before-renew (the watchdog renews when the
    /// stall is over), before-release; or all. Each stall is drawn at one
    /// of them, and recorded with where it struck.
    #[arg(long, value_name = "POINTS", default_value = DEFAULT_PAUSE_AT)]
    pub pause_at: String,
    /// How long the clients run (e.g. 60s, 5m): simulated time, or wall
    /// time against real servers.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "60s")]
    pub time_limit: Duration,
    /// Logical clients.
    #[arg(long, default_value_t = 5)]
    pub clients: u32,
    /// Lock names (each protects one resource).
    #[arg(long, default_value_t = 2)]
    pub locks: u32,
    /// Lease TTL.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "1s")]
    pub ttl: Duration,
    /// The seed [default: a fresh one, printed first]
    #[arg(long)]
    pub seed: Option<u64>,
    /// Run this many seeds in a row (from --seed); each also picks which of
    /// the faults are on and how often (swarm testing).
    #[arg(long, default_value_t = 1, value_parser = parse_count)]
    pub seeds: u64,
    /// The memory a simulated run may use (e.g. 4GiB, 512MiB), at most the
    /// machine's: a run whose estimate is larger is refused before it
    /// starts, and one that outgrows it is stopped with its history so far
    /// kept (exit 2) [default: three quarters of the machine's memory]
    #[arg(long, value_name = "SIZE", value_parser = lockcheck_workloads::memory::parse_size)]
    pub max_memory: Option<u64>,
    /// Let a single seed pick its faults and rates too, as --seeds does.
    #[arg(long)]
    pub swarm: bool,
    /// Aims each fault at the holder whose window it breaks: a fault that
    /// is due waits, within its slack, for such a holder (docs/guide.md#where-a-fault-aims).
    /// On by default against real servers (they are always aimed: false is
    /// refused there), off by default in the simulator, whose pinned seeds
    /// are unaimed.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub aim: Option<bool>,
    /// No fencing tokens: grants carry none and the storage accepts any write.
    #[arg(long)]
    pub no_fencing: bool,
    /// The lock server keeps its keys across a restart (a lease table's
    /// database always does; a real Redis gets an fsynced append-only file).
    #[arg(long)]
    pub persistent: bool,
    /// A CI gate: the exit code follows only these checkers (a comma list,
    /// e.g. resource-safety,linearizability: a TTL lock loses mutual
    /// exclusion to any long enough stall, what matters is whether the
    /// storage stayed safe and the lock kept its own promises) [default:
    /// every checker]
    #[arg(long, value_delimiter = ',', value_name = "CHECKERS")]
    pub gate: Vec<String>,
    /// Fail (exit 1) a valid run whose faults reached no window where the
    /// lock could break (a vacuous pass), as a violation would.
    #[arg(long)]
    pub require_coverage: bool,
    /// PgBouncer between the clients and the PostgreSQL that holds their
    /// locks (real postgres-advisory and postgres-advisory-xact):
    /// transaction or session pooling. lockcheck starts Debian's pgbouncer
    /// itself, in front of its own PostgreSQL (docs/guide.md#pgbouncer)
    #[arg(long, value_name = "MODE")]
    pub pooler: Option<String>,
    /// --backend exec: the servers lockcheck starts for your program, a
    /// comma list of redis (redis*5: five, for a Redlock), postgres, mysql,
    /// etcd, moto (an S3 server); their URLs reach it as LOCKCHECK_REDIS_URL and the like
    /// (docs/exec-protocol.md)
    #[arg(long, value_delimiter = ',')]
    pub servers: Vec<String>,
    /// --backend exec: your lock program and its arguments, after --; one
    /// process per client speaking JSON Lines (docs/exec-protocol.md).
    #[arg(last = true, value_name = "PROGRAM")]
    pub exec: Vec<String>,
    /// Real servers, kill: how long a killed lock server stays down before
    /// its restart (0ms: at once) [default: half a TTL to two TTLs, drawn;
    /// at least 1.5 TTL for redlock: its delayed restart, which outlives
    /// every lease the instance granted]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub restart_delay: Option<Duration>,
    /// Time the linearizability search may take per run before it gives up
    /// with an unknown verdict for that checker.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "10s")]
    pub linearizability_timeout: Duration,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Where runs are stored (store/<test>/<time>/, with a `latest` link).
    #[arg(long, default_value = "store")]
    pub store: PathBuf,
    /// Do not store the run.
    #[arg(long)]
    pub no_store: bool,
    /// Do not look for a smaller run that fails the same way (by default the
    /// first failing seed is shrunk: shorter, fewer clients, locks, faults).
    #[arg(long)]
    pub no_shrink: bool,
    /// A simulated run: print, for each seed, its events, the process's
    /// memory when recording ended and at its peak (after the check) on
    /// standard error, as a `stats:` line.
    #[arg(long)]
    pub stats: bool,
}

/// `check`'s partition shapes when none are given: every one.
pub const DEFAULT_PARTITION_SHAPES: &str = "client,isolate-one,halves,ring";

/// `--pause-at`'s default: a pause may strike anywhere.
pub const DEFAULT_PAUSE_AT: &str = "all";

/// Whether `url`'s password reads as lockcheck's mask (`postgres://u:***@h`,
/// or `redis://***@h` for a userinfo masked whole): a URL copied from a
/// replay line, its password to come from the environment.
fn masked(url: &str) -> bool {
    let mask = lockcheck_checker::redact::MASK;
    (url.contains(&format!(":{mask}@")) || url.contains(&format!("//{mask}@")))
        && lockcheck_checker::redact(url) == url
}

/// `given` with every masked URL (see [`masked`]) replaced by the one of the
/// same server in `variable`'s value (`from_env`, a comma list).
fn unmask(
    flag: &str,
    variable: &str,
    given: &[String],
    from_env: Option<&str>,
) -> Result<Vec<String>, String> {
    if !given.iter().any(|url| masked(url)) {
        return Ok(given.to_vec());
    }
    let Some(from_env) = from_env.filter(|value| !value.is_empty()) else {
        return Err(format!(
            "the password of {flag} is masked ({}): pass the URL, password and all, in {variable}",
            lockcheck_checker::redact::MASK
        ));
    };
    let candidates: Vec<&str> = from_env.split(',').collect();
    given
        .iter()
        .map(|url| {
            if !masked(url) {
                return Ok(url.clone());
            }
            candidates
                .iter()
                .find(|candidate| lockcheck_checker::redact(candidate) == *url)
                .map(|candidate| candidate.to_string())
                .ok_or_else(|| {
                    format!("{variable} holds no URL that {flag} {url} stands for (the same URL but its password)")
                })
        })
        .collect()
}

impl CheckArgs {
    /// The services given by URL, each URL whose password is masked (copied
    /// from a replay line: `--postgres-url 'postgres://u:***@h/db'`) taken
    /// from its environment variable instead; what is wrong if one is not
    /// there.
    /// `--pooler`'s mode, if given.
    fn pooler(&self) -> Result<Option<Pooler>, String> {
        let Some(name) = &self.pooler else { return Ok(None) };
        Pooler::parse(name)
            .map(Some)
            .ok_or_else(|| format!("unknown pooler {name:?}: use transaction or session"))
    }

    pub fn services(&self) -> Result<Services, String> {
        let mut services = Services::default();
        for service in UrlService::ALL {
            let given = match service {
                UrlService::Postgres => self.postgres_url.iter().cloned().collect(),
                UrlService::Redis => self.redis_url.clone(),
                UrlService::Mysql => self.mysql_url.iter().cloned().collect(),
                UrlService::Etcd => self.etcd_url.clone(),
                UrlService::ZooKeeper => self.zookeeper_url.clone(),
                UrlService::Rabbitmq => self.rabbitmq_url.iter().cloned().collect(),
            };
            let variable = service.variable();
            let from_env = std::env::var(variable).ok();
            services.set(service, unmask(service.flag(), variable, &given, from_env.as_deref())?);
        }
        Ok(services)
    }

    pub fn workload(&self) -> Result<Workload, String> {
        Workload::parse(&self.workload).ok_or_else(|| {
            let names: Vec<&str> = Workload::ALL.into_iter().map(Workload::name).collect();
            format!("unknown workload {:?}: use one of {}", self.workload, names.join(", "))
        })
    }

    pub fn storage(&self) -> Result<StorageKind, String> {
        StorageKind::parse(&self.storage).ok_or_else(|| StorageKind::unknown(&self.storage))
    }

    /// The simulator's options, or what is wrong with the arguments.
    /// What `check` is asked: the run (its seed drawn when none is given)
    /// and what to do around it.
    pub fn request(&self) -> Result<CheckRequest, String> {
        let options = RunOptions {
            seed: self.seed.unwrap_or_else(lockcheck_commands::options::random_seed),
            ..self.run_options()?
        };
        Ok(CheckRequest {
            options,
            seeds: self.seeds,
            format: self.format.into(),
            store: (!self.no_store).then(|| self.store.clone()),
            shrink: !self.no_shrink,
            stats: self.stats,
            max_memory: self.max_memory,
            require_coverage: self.require_coverage,
        })
    }

    /// The run these arguments ask for, in the world its backend's name
    /// says, or what is wrong with them. A simulated run takes no servers
    /// (a URL in the environment is for real runs); the seed is the first
    /// one, 0 when none is given.
    pub fn run_options(&self) -> Result<RunOptions, String> {
        let Some((backend, world)) = Backend::parse(&self.backend) else {
            return Err(Backend::unknown(&self.backend));
        };
        lockcheck_commands::exit::check_gate(&self.gate)?;
        let defaults = RunOptions::new(world, backend);
        let faults = match self.nemesis.as_deref() {
            Some(names) => FaultKind::parse_list(names)?,
            None => defaults.faults.clone(),
        };
        let options = RunOptions {
            workload: self.workload()?,
            faults,
            partition_shapes: Shape::parse_list(&self.partition_shapes)?,
            swarm: self.swarm,
            time_limit: self.time_limit,
            clients: self.clients,
            locks: self.locks,
            ttl: self.ttl,
            seed: self.seed.unwrap_or_default(),
            fencing: !self.no_fencing,
            persistent: self.persistent,
            pause_at: StallPoint::parse_list(&self.pause_at)?,
            storage: self.storage()?,
            protection: Protection::parse(&self.protection)
                .ok_or_else(|| Protection::unknown(&self.protection))?,
            provider: Profile::parse(&self.provider).ok_or_else(|| {
                format!("unknown provider {:?}: use ietf or stripe", self.provider)
            })?,
            provider_variant: Variant::parse(&self.provider_variant).ok_or_else(|| {
                format!(
                    "unknown provider variant {:?}: use correct, no-dedupe, replay-any-body or check-then-insert",
                    self.provider_variant
                )
            })?,
            queue: QueueKind::parse(&self.queue).ok_or_else(|| {
                format!("unknown queue {:?}: use postgres or rabbitmq", self.queue)
            })?,
            purpose: parse_purpose(&self.purpose)?,
            linearizability_timeout: self.linearizability_timeout,
            gate: self.gate.clone(),
            aim: self.aim.unwrap_or(defaults.aim),
            ..defaults
        };
        match world {
            World::Simulated if self.pooler.is_some() => Err(
                "--pooler applies to real PostgreSQL backends only: the simulator has no pooler"
                    .to_string(),
            ),
            World::Simulated => {
                lockcheck_sim::Simulated::check(&options)?;
                Ok(options)
            }
            World::Real if self.swarm || self.seeds > 1 => {
                Err("--swarm and --seeds apply to the simulated backends only".to_string())
            }
            World::Real if self.aim == Some(false) => Err(
                "--aim=false applies to the simulated backends only: real faults are always aimed"
                    .to_string(),
            ),
            World::Real => Ok(RunOptions {
                pooler: self.pooler()?,
                restart_delay: self.restart_delay,
                services: self.services()?,
                servers: self.servers.clone(),
                exec: self.exec.clone(),
                ..options
            }),
        }
    }
}

#[derive(Debug, Args)]
pub struct BackendsArgs {
    /// One backend (e.g. redis, sim-etcd): every fault, and why it applies
    /// or is refused.
    pub name: Option<String>,
}

#[derive(Debug, Args)]
pub struct MatrixArgs {
    /// The simulated cells (deterministic, no servers); without it, the
    /// real-server cells, on servers lockcheck starts itself.
    #[arg(long)]
    pub sim: bool,
    /// Only the cells of these backends (a comma list, e.g. sim-etcd,sim-etcd-5
    /// or redis,etcd).
    #[arg(long, value_delimiter = ',')]
    pub backends: Vec<String>,
    /// Only the cells of these workloads (a comma list, e.g. payments,cron).
    #[arg(long, value_delimiter = ',')]
    pub workloads: Vec<String>,
    /// Only the cells of these protections (a comma list, e.g. lock,unique;
    /// a cell of a workload without one counts as lock).
    #[arg(long, value_delimiter = ',')]
    pub protections: Vec<String>,
    /// Leave out the cells whose runs each take longer than this, for a
    /// quicker sample (e.g. 30s leaves out the 60 s etcd cut-off cell); a
    /// cell with no time of its own, as every simulated one, is kept
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub longest_run: Option<Duration>,
    /// A violated cell must show within this many seeds [default: 50
    /// simulated, 3 real]
    #[arg(long)]
    pub violated_within: Option<u64>,
    /// A safe cell must stay clean over this many seeds [default: 200
    /// simulated, 1 real]
    #[arg(long)]
    pub safe_seeds: Option<u64>,
    /// Time per run: simulated time with --sim, wall time against real
    /// servers [default: 30s simulated; each real cell has its own, 5 to
    /// 60 s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub time_limit: Option<Duration>,
    /// Time the linearizability search may take per run [default: 10s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub linearizability_timeout: Option<Duration>,
    /// Instead of the table: how many runs each violated cell needs to
    /// show, over this many samples of its seeds (the k-th from seed
    /// k*1000), with their median and maximum
    #[arg(long, value_name = "SAMPLES")]
    pub runs_needed: Option<u64>,
}

impl MatrixArgs {
    pub fn request(&self) -> MatrixRequest {
        MatrixRequest {
            backends: self.backends.clone(),
            workloads: self.workloads.clone(),
            protections: self.protections.clone(),
            longest_run: self.longest_run,
            violated_within: self.violated_within,
            safe_seeds: self.safe_seeds,
            time_limit: self.time_limit,
            linearizability_timeout: self.linearizability_timeout,
            runs_needed: self.runs_needed,
        }
    }
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A stored run's folder (store/<test>/<time>-seed-<n>) or a history
    /// file (JSON Lines).
    pub path: PathBuf,
    /// Where to write the HTML report [default: report.html in the run's
    /// folder; beside a history file, with .html for its extension]
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// The verdict's format on standard output.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Time the linearizability search may take.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "10s")]
    pub linearizability_timeout: Duration,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The store to browse.
    #[arg(long, default_value = "store")]
    pub store: PathBuf,
    /// The port on 127.0.0.1 (0: any free one, printed).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
}

#[derive(Debug, Args)]
pub struct SynthArgs {
    /// Client operations (each an invoke and a completion).
    #[arg(long, default_value_t = 10_000)]
    pub ops: usize,
    #[arg(long, default_value_t = 8)]
    pub clients: u32,
    /// Lock names; each protects one resource.
    #[arg(long, default_value_t = 4)]
    pub keys: u32,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[arg(long, default_value_t = 10_000)]
    pub ttl_ms: u64,
    /// Grants and writes carry no fencing token.
    #[arg(long)]
    pub unfenced: bool,
    /// Where to write the history [default: standard output]
    #[arg(long, short)]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// What to measure: `analyze` (reading and every checker on large
    /// synthetic histories), `porcupine` (the linearizability checker on
    /// porcupine's own test histories, per file), `lease` (the linearizability
    /// checker on a large fenced-lease history), `sim` (the simulator),
    /// `memory` (the simulator's memory per client and simulated second),
    /// `real` (real Redis and PostgreSQL), `one-lock` and `hard` (long and
    /// hard histories of one lock), `sweep` (false alarms of `matrix --sim`),
    /// `model` (the model checker); those six are not in the default list.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "analyze,porcupine,lease,sim")]
    pub only: Vec<BenchPart>,
    /// porcupine's test data, for `porcupine` (folders jepsen/ and kv/, each
    /// with a VERDICTS.txt); without it that part is skipped.
    #[arg(long, value_name = "DIR", alias = "anchors")]
    pub porcupine: Option<PathBuf>,
    /// Seeds of the default `check` run that `sim` measures.
    #[arg(long, default_value_t = 10)]
    pub sim_seeds: u64,
    /// Backends `sim` measures (comma list).
    #[arg(long, value_delimiter = ',', default_value = "sim-redis,sim-redlock")]
    pub sim_backends: Vec<String>,
    /// Seeds per safe cell that `sweep` runs (from 0).
    #[arg(long, default_value_t = 2000)]
    pub sweep_seeds: u64,
    /// Backends whose safe cells `sweep` runs (comma list) [default: all]
    #[arg(long, value_delimiter = ',')]
    pub sweep_backends: Vec<String>,
    /// Size of the `lease` history, in client operations.
    #[arg(long, default_value_t = 1_000_000)]
    pub lease_ops: usize,
    /// History sizes for `analyze`, in client operations (comma list).
    #[arg(long, value_delimiter = ',', default_value = "250000,500000,1000000")]
    pub ops: Vec<usize>,
    #[arg(long, default_value_t = 64)]
    pub clients: u32,
    #[arg(long, default_value_t = 1000)]
    pub keys: u32,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Runs per size; the fastest is reported.
    #[arg(long, default_value_t = 3)]
    pub runs: u32,
    /// Folder for the generated histories [default: a temporary folder]
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// History sizes for `one-lock`, in client operations (comma list).
    #[arg(long, value_delimiter = ',', default_value = "1000000,10000000")]
    pub one_lock_ops: Vec<usize>,
    /// The linearizability bound of each `one-lock` and `hard` check.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "60s")]
    pub hard_timeout: Duration,
    /// Another checker to run on each `one-lock` and `hard` history, beside
    /// lockcheck: a shell command, given the history file as its last
    /// argument (porcupine with a small driver, say); its wall time, exit
    /// code and first line of output are printed.
    #[arg(long, value_name = "CMD")]
    pub compare_with: Option<String>,
}

#[derive(Debug, Args)]
pub struct ConformanceArgs {
    /// porcupine's test data: a folder with jepsen/ (etcd_NNN.log, Jepsen log
    /// lines of a CAS register) and kv/ (cNN-ok.txt, cNN-bad.txt), each with a
    /// VERDICTS.txt of `file linearizable` or `file not-linearizable` lines.
    #[arg(long, value_name = "DIR")]
    pub porcupine: PathBuf,
    /// Time the linearizability search may take per file before it gives up
    /// (an unknown verdict, which counts as a disagreement).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "60s")]
    pub linearizability_timeout: Duration,
}

impl ConformanceArgs {
    pub fn request(&self) -> ConformanceRequest {
        ConformanceRequest {
            porcupine: self.porcupine.clone(),
            linearizability_timeout: self.linearizability_timeout,
        }
    }
}

#[derive(Debug, Args)]
pub struct ModelArgs {
    /// The recipe to explore: redis, redlock, lease-table, etcd, … (a wrong name lists them all).
    #[arg(long, value_name = "NAME")]
    pub recipe: String,
    /// Clients, each running the recipe.
    #[arg(long, default_value_t = 2)]
    pub clients: u8,
    /// Acquire attempts per client (a granted one writes with its token, then releases).
    #[arg(long, default_value_t = 2)]
    pub ops: u8,
    /// Renewals each holder makes before its write, as a watchdog does (a refused one ends the hold).
    #[arg(long, default_value_t = 0)]
    pub renewals: u8,
    /// Ticks of time the exploration may reach.
    #[arg(long, default_value_t = 6)]
    pub ticks: u8,
    /// Faults, comma-separated, each with an optional count: pause, clock, kill, loss, skew (`pause=2`).
    #[arg(long, value_name = "LIST", default_value = "none")]
    pub faults: String,
    /// Grants carry no token and the resource checks none.
    #[arg(long)]
    pub no_fencing: bool,
    /// The lock server's restart keeps its keys.
    #[arg(long)]
    pub persistent: bool,
    /// The lease, in ticks (a holder releases within one tick less).
    #[arg(long, default_value_t = 3)]
    pub ttl_ticks: u8,
    /// One tick in ms, for the histories written.
    #[arg(long, default_value_t = 250)]
    pub tick_ms: u64,
    /// Stop after generating this many states, repeats included: a property not yet broken is then unknown.
    #[arg(long, default_value_t = 20_000_000)]
    pub max_states: usize,
    /// Only these properties (default all): mutual-exclusion, resource-safety, fence-monotonicity, liveness.
    #[arg(long, value_name = "LIST", default_value = "")]
    pub property: String,
    /// Depth first, with symmetry reduction over clients: fewer states for a proof; a counterexample then need not be the shortest.
    #[arg(long)]
    pub symmetry: bool,
    /// Write each counterexample as a history here (RECIPE-PROPERTY.jsonl), for `analyze` and `report`.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

impl ModelArgs {
    pub fn request(&self) -> ModelRequest {
        ModelRequest {
            recipe: self.recipe.clone(),
            clients: self.clients,
            ops: self.ops,
            renewals: self.renewals,
            ticks: self.ticks,
            faults: self.faults.clone(),
            no_fencing: self.no_fencing,
            persistent: self.persistent,
            ttl_ticks: self.ttl_ticks,
            tick_ms: self.tick_ms,
            max_states: self.max_states,
            properties: self.property.clone(),
            symmetry: self.symmetry,
            out: self.out.clone(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchPart {
    Analyze,
    Porcupine,
    Lease,
    /// The simulator: the default `check` run over several seeds.
    Sim,
    /// The simulator's memory per client and per simulated second, from
    /// 5 to 5,000 clients, against the estimate `check` refuses a run by.
    /// Not in the default list.
    Memory,
    /// Real servers (started for the run): lock operations per second with
    /// 32 clients beside redis-benchmark and pgbench on the same server.
    Real,
    /// Long histories of a single lock (--one-lock-ops), one client and
    /// eight. Not in the default list.
    OneLock,
    /// Hard mutex histories of one lock: many clients, effects at random
    /// instants inside the operations, a share of them crashed (`info`).
    /// Not in the default list.
    Hard,
    /// Every safe cell of `matrix --sim`, at its defaults, over
    /// --sweep-seeds seeds on every core: each violation found is a false
    /// alarm (exit 1). Not in the default list.
    Sweep,
    /// The model checker on one core: states per second, time to a
    /// counterexample, time to a proof. Not in the default list.
    Model,
}

/// A count of at least 1.
pub fn parse_count(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(0) => Err("must be at least 1".to_string()),
        Ok(count) => Ok(count),
        Err(_) => Err(format!("{text:?} is not a whole number of at least 1")),
    }
}

/// `30s`, `1500ms`, `2m`, `1h`, or a plain number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration: write e.g. 30s, 500ms or 2m"))?;
    let seconds = match unit.trim() {
        "" | "s" => number,
        "ms" => number / 1e3,
        "us" | "µs" => number / 1e6,
        "ns" => number / 1e9,
        "m" | "min" => number * 60.0,
        "h" => number * 3600.0,
        other => {
            return Err(format!("unknown unit {other:?} in {text:?}: use ns, us, ms, s, m or h"))
        }
    };
    if !seconds.is_finite() || !(0.0..=1e9).contains(&seconds) {
        return Err(format!("{text:?} is out of range"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("2.5"), Ok(Duration::from_millis(2500)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("3 parsecs").is_err());
        assert!(parse_duration("-1s").is_err());
    }
}

#[cfg(test)]
mod secret_tests {
    use super::*;

    #[test]
    fn a_masked_url_is_taken_from_the_environment() {
        let given = vec!["postgres://u:***@h/db".to_string()];
        let real = "postgres://u:hunter2@h/db";
        assert_eq!(
            unmask("--postgres-url", "LOCKCHECK_POSTGRES_URL", &given, Some(real)),
            Ok(vec![real.to_string()])
        );
        let missing = unmask("--postgres-url", "LOCKCHECK_POSTGRES_URL", &given, None);
        assert!(
            missing.as_ref().is_err_and(|message| message.contains("LOCKCHECK_POSTGRES_URL")),
            "{missing:?}"
        );
        let other = unmask("--postgres-url", "V", &given, Some("postgres://u:pw@other/db"));
        assert!(other.is_err(), "{other:?}");
        // A URL with its password, or none, is used as given.
        for url in ["postgres://u:pw@h/db", "postgres://u@h/db", "redis://h:1"] {
            let given = vec![url.to_string()];
            assert_eq!(unmask("--x", "V", &given, None), Ok(given.clone()));
        }
        // A userinfo masked whole (a Redis password without its colon).
        let given = vec!["redis://***@h:6379".to_string()];
        assert_eq!(
            unmask("--redis-url", "V", &given, Some("redis://S3cretPW@h:6379")),
            Ok(vec!["redis://S3cretPW@h:6379".to_string()])
        );
        assert!(unmask("--redis-url", "V", &given, None).is_err());
        let list: Vec<String> = ["redis://:***@a:1", "redis://b:2", "redis://:***@c:3"]
            .iter()
            .map(|url| url.to_string())
            .collect();
        assert_eq!(
            unmask("--redis-url", "V", &list, Some("redis://:x@c:3,redis://:y@a:1")),
            Ok(vec![
                "redis://:y@a:1".to_string(),
                "redis://b:2".to_string(),
                "redis://:x@c:3".to_string()
            ])
        );
    }
}

/// The one replay line ([`RunOptions::replay`]) read back by this command
/// line: every option that shapes a run comes back the same.
#[cfg(test)]
mod replay_tests {
    use std::time::Duration;

    use clap::Parser;
    use lockcheck_real::matrix::cells;
    use lockcheck_workloads::{Backend, RunOptions, World};

    use super::{CheckArgs, Cli, Command};

    fn check_args(line: &str) -> CheckArgs {
        let words = ["lockcheck", "check"].into_iter().chain(line.split_whitespace());
        match Cli::try_parse_from(words) {
            Ok(Cli { command: Command::Check(check) }) => *check,
            other => panic!("{line}: {other:?}"),
        }
    }

    /// What `lockcheck check ARGS` runs.
    fn parsed(line: &str) -> RunOptions {
        check_args(line).run_options().unwrap_or_else(|error| panic!("{line}: {error}"))
    }

    #[test]
    fn the_defaults_are_check_defaults_in_both_worlds() {
        assert_eq!(parsed("--backend redis"), RunOptions::new(World::Real, Backend::Redis));
        assert_eq!(parsed("--backend sim-redis"), RunOptions::default());
    }

    #[test]
    fn a_replay_line_replays_the_same_options_in_both_worlds() {
        for line in [
            "--backend redis",
            "--backend etcd --nemesis partition --partition-shapes client --ttl 2s",
            "--backend redis --nemesis pause,kill --clients 3 --locks 1 --time-limit 2500ms --no-fencing --persistent --restart-delay 0ms --gate mutual-exclusion",
            "--backend redlock --nemesis kill --linearizability-timeout 3s --workload mutex",
            "--backend redis --storage s3-cas --pause-at after-grant --redis-url redis://127.0.0.1:1",
            "--backend exec --servers redis*5 -- python3 lock.py --flag",
            "--backend sim-redis",
            "--backend sim-etcd-5 --nemesis partition --partition-shapes ring,halves --swarm",
            "--backend sim-consul --storage s3-put --no-fencing --pause-at in-flight --ttl 1500ms",
        ] {
            let options = parsed(&format!("{line} --seed 7"));
            let replay = options.replay().to_string();
            let arguments = replay.strip_prefix("lockcheck check ").expect("a check line");
            assert_eq!(parsed(arguments), options, "{line}\nreplays as {replay}");
        }
    }

    #[test]
    fn each_real_cell_replays_as_the_line_the_matrix_prints() {
        for cell in cells() {
            let options = lockcheck_real::matrix::cell_options(
                &cell,
                Duration::from_millis(2500),
                Duration::from_secs(3),
                3,
            );
            let line = options.replay().to_string();
            let arguments = line.strip_prefix("lockcheck check ").expect("a check line");
            assert_eq!(parsed(arguments), options, "{line}");
        }
    }
}
