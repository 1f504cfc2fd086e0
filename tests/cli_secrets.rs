//! Passwords stay secret: a real run given URLs with a password (the
//! machine's PostgreSQL trusts every password; Redis has none, so one given
//! is refused) never prints nor stores it, in any format, nor in a driver's
//! connection error, nor in the pages `serve` answers; its stored files are
//! its owner's only (0600); its replay line shows the URL masked, and runs
//! as it is with the URL in LOCKCHECK_POSTGRES_URL.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

mod common;
use common::{both, lockcheck};

const SECRET: &str = "Hunter2Sekrit";
const VARIABLES: [&str; 4] =
    ["LOCKCHECK_POSTGRES_URL", "LOCKCHECK_REDIS_URL", "LOCKCHECK_MYSQL_URL", "LOCKCHECK_ETCD_URL"];

fn postgres_url() -> String {
    format!("postgres://postgres:{SECRET}@127.0.0.1:5432/test")
}

/// `lockcheck ARGS…` with none of the URL variables but `env`.
fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lockcheck"));
    for variable in VARIABLES {
        command.env_remove(variable);
    }
    command.args(args).envs(env.iter().copied()).output().expect("the lockcheck binary runs")
}

fn store(name: &str) -> PathBuf {
    let store =
        std::env::temp_dir().join(format!("lockcheck-secrets-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&store);
    store
}

fn assert_no_secret(output: &Output) {
    assert!(!both(output).contains(SECRET), "the password was printed:\n{}", both(output));
}

/// The run folders' files hold no password, are 0600, and the command
/// shows the URL masked with where its password goes.
fn assert_stored_clean(store: &Path) -> PathBuf {
    let found = common::files_under(store);
    assert!(found.iter().any(|path| path.ends_with("command")), "{found:?}");
    for path in &found {
        let text = String::from_utf8_lossy(&std::fs::read(path).expect("read")).to_string();
        assert!(!text.contains(SECRET), "{} holds the password:\n{text}", path.display());
        let mode = std::fs::metadata(path).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{} is {mode:o}", path.display());
    }
    let command = found.iter().find(|path| path.ends_with("command")).expect("a command");
    let text = std::fs::read_to_string(command).expect("read");
    assert!(
        text.contains("--postgres-url 'postgres://postgres:***@127.0.0.1:5432/test'"),
        "{text}"
    );
    assert!(text.contains("password redacted: pass the URL in LOCKCHECK_POSTGRES_URL"), "{text}");
    command.parent().expect("its run").to_path_buf()
}

#[test]
fn a_password_in_a_url_is_printed_and_stored_nowhere() {
    let url = postgres_url();
    for format in ["text", "json", "junit", "markdown"] {
        let store = store(format);
        let store_arg = store.display().to_string();
        let output = run(
            &[
                "check",
                "--backend",
                "postgres-lease",
                "--time-limit",
                "2s",
                "--seed",
                "5",
                "--postgres-url",
                &url,
                "--format",
                format,
                "--store",
                &store_arg,
            ],
            &[],
        );
        assert!(matches!(output.status.code(), Some(0 | 1)), "{format}: {}", both(&output));
        assert_no_secret(&output);
        assert!(
            String::from_utf8_lossy(&output.stdout).contains("verdict")
                || format != "text" && !output.stdout.is_empty(),
            "{format}: {}",
            both(&output)
        );
        let run_dir = assert_stored_clean(&store);
        if format == "text" {
            // Its report, rendered again, and the pages served of it.
            let report = lockcheck(&["report", &run_dir.display().to_string()]);
            assert_no_secret(&report);
            assert_stored_clean(&store);
            served_pages_are_clean(&store, &run_dir);
        }
        let _ = std::fs::remove_dir_all(&store);
    }
}

/// `lockcheck serve` on `store`: its index and the run's files.
fn served_pages_are_clean(store: &Path, run_dir: &Path) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockcheck"))
        .args(["serve", "--port", "0", "--store"])
        .arg(store)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve runs");
    let mut first = String::new();
    let stdout = child.stdout.take().expect("stdout");
    BufReader::new(stdout).read_line(&mut first).expect("its address");
    let address = first
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_string();
    let relative = run_dir.strip_prefix(store).expect("under the store");
    let base = format!("/runs/{}", relative.display());
    for page in [
        "/".to_string(),
        format!("{base}/command"),
        format!("{base}/results.json"),
        format!("{base}/report.html"),
    ] {
        let mut stream = std::net::TcpStream::connect(&address).expect("connected");
        write!(stream, "GET {page} HTTP/1.1\r\nHost: {address}\r\n\r\n").expect("asked");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("answered");
        assert!(answer.starts_with("HTTP/1.1 200"), "{page}: {answer}");
        assert!(!answer.contains(SECRET), "{page} shows the password:\n{answer}");
        if page.ends_with("command") || page == "/" {
            assert!(answer.contains("postgres://postgres:***@127.0.0.1"), "{page}: {answer}");
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn connection_errors_quote_urls_without_their_password() {
    let refused = format!("postgres://postgres:{SECRET}@127.0.0.1:1/test");
    let redis = format!("redis://:{SECRET}@127.0.0.1:6379");
    let settings = format!("host=127.0.0.1 port=1 user=postgres password={SECRET}");
    for args in [
        vec!["--backend", "postgres-lease", "--postgres-url", &refused],
        vec!["--backend", "postgres-lease", "--postgres-url", &settings],
        // Redis here has no password: AUTH is refused.
        vec!["--backend", "redis", "--redis-url", &redis, "--postgres-url", &refused],
    ] {
        let mut all = vec!["check", "--time-limit", "2s", "--no-store"];
        all.extend(args.iter().copied());
        let output = run(&all, &[]);
        assert_eq!(output.status.code(), Some(69), "{args:?}: {}", both(&output));
        assert_no_secret(&output);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("cannot connect"), "{args:?}: {stderr}");
        assert!(
            stderr.contains(":***@127.0.0.1") || stderr.contains("password=***"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn a_replay_line_runs_with_the_url_in_the_environment() {
    let masked = "postgres://postgres:***@127.0.0.1:5432/test";
    let store = store("replay");
    let store_arg = store.display().to_string();
    let args = [
        "check",
        "--backend",
        "postgres-lease",
        "--time-limit",
        "1s",
        "--postgres-url",
        masked,
        "--store",
        &store_arg,
    ];
    // Without the variable: a usage error that says where it goes.
    let refused = run(&args, &[]);
    assert_eq!(refused.status.code(), Some(64), "{}", both(&refused));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("LOCKCHECK_POSTGRES_URL"),
        "{}",
        both(&refused)
    );
    let url = postgres_url();
    let replayed = run(&args, &[("LOCKCHECK_POSTGRES_URL", &url)]);
    assert!(matches!(replayed.status.code(), Some(0 | 1)), "{}", both(&replayed));
    assert_no_secret(&replayed);
    assert_stored_clean(&store);
    // The variable alone, no option: the same URL, masked all the same.
    let _ = std::fs::remove_dir_all(&store);
    let alone = run(
        &["check", "--backend", "postgres-lease", "--time-limit", "1s", "--store", &store_arg],
        &[("LOCKCHECK_POSTGRES_URL", &url)],
    );
    assert!(matches!(alone.status.code(), Some(0 | 1)), "{}", both(&alone));
    assert_no_secret(&alone);
    assert_stored_clean(&store);
    let _ = std::fs::remove_dir_all(&store);
}

/// A Redis URL whose userinfo has no colon (`redis://PASSWORD@host`: some
/// Redis clients read it as the password) is masked whole in everything a
/// run prints and stores; a plain PostgreSQL user name stays.
#[test]
fn a_userinfo_without_a_colon_is_masked_whole_under_redis() {
    let store = store("userinfo");
    let store_arg = store.display().to_string();
    let redis = format!("redis://{SECRET}@127.0.0.1:6379");
    let output = run(
        &[
            "check",
            "--backend",
            "redis",
            "--time-limit",
            "1s",
            "--seed",
            "3",
            "--redis-url",
            &redis,
            "--postgres-url",
            "postgres://postgres@127.0.0.1:5432/test",
            "--store",
            &store_arg,
        ],
        &[],
    );
    assert!(matches!(output.status.code(), Some(0 | 1)), "{}", both(&output));
    assert_no_secret(&output);
    let found = common::files_under(&store);
    let command = found.iter().find(|path| path.ends_with("command")).expect("a command");
    for path in &found {
        let text = String::from_utf8_lossy(&std::fs::read(path).expect("read")).to_string();
        assert!(!text.contains(SECRET), "{} holds the password:\n{text}", path.display());
    }
    let text = std::fs::read_to_string(command).expect("read");
    assert!(text.contains("redis://***@127.0.0.1:6379"), "{text}");
    assert!(!text.contains("postgres://***@"), "a user name was masked: {text}");
    let _ = std::fs::remove_dir_all(&store);
}
