//! etcd: one member, or a cluster of members on loopback (its peers
//! talking directly, or through the fault-injecting proxy so a test can
//! partition them), each in its own folder.
//!
//! etcd is a statically linked Go program, which reads the clock through
//! the vDSO or raw system calls, never through libc, so `LD_PRELOAD` has no
//! effect on it and a faked clock would silently stay real: starting etcd
//! with `faketime` is an error.

use std::ffi::OsString;
use std::fs;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Instant;

use super::{
    read_reply, release_ports, reserve_ports, EnvUrls, Launch, ManagedServer, Package, ServerKind,
    ServerOptions, Site, PORT_ATTEMPTS, STOP_GRACE,
};
use crate::proxy::Proxy;
use crate::RealError;

// Named like the enum variant it replaced, so that callers read the same.
#[allow(non_upper_case_globals)]
impl ServerKind {
    /// etcd: a client port and a peer port. Its member id is bound to its
    /// peer URL, so a start retried on new ports begins with no data.
    pub const Etcd: ServerKind = ServerKind {
        name: "etcd",
        aliases: &[],
        binaries: &["etcd"],
        package: Package::Debian("etcd-server"),
        bin_dir: None,
        root_user: None,
        stop_signal: "TERM",
        ignores_faketime: Some("a static Go binary reads the clock without libc"),
        ports: 2,
        durable: true,
        data_knows_ports: true,
        several: false,
        pools: false,
        url: |port| format!("http://127.0.0.1:{port}"),
        prepare: |_| Ok(None),
        args,
        probe,
        exec_env: &[("LOCKCHECK_ETCD_ENDPOINTS", EnvUrls::Joined)],
    };
}

/// A cluster of one, named `default`.
fn args(site: &Site) -> Vec<OsString> {
    let cluster = format!("default=http://127.0.0.1:{}", site.ports[1]);
    member_args(site, "default", &cluster, &token(site.id))
}

/// The cluster token of a cluster whose first member is server `id`.
fn token(id: u64) -> String {
    format!("lockcheck-{}-{}", std::process::id(), id)
}

/// How to run one member `name` of `cluster` (`name=peer-url,…`).
fn member_args(site: &Site, name: &str, cluster: &str, token: &str) -> Vec<OsString> {
    let client = format!("http://127.0.0.1:{}", site.ports[0]);
    let peer = format!("http://127.0.0.1:{}", site.ports[1]);
    // The URL the cluster knows this member by: a proxy's listener when
    // its peers talk through one, else the port it listens on.
    let advertised = cluster
        .split(',')
        .find_map(|member| member.strip_prefix(name)?.strip_prefix('='))
        .unwrap_or(&peer);
    let mut args: Vec<OsString> = vec!["--name".into(), name.into()];
    args.extend(["--data-dir".into(), site.data().into_os_string()]);
    for (option, value) in [
        ("--listen-client-urls", client.as_str()),
        ("--advertise-client-urls", &client),
        ("--listen-peer-urls", &peer),
        ("--initial-advertise-peer-urls", advertised),
        ("--initial-cluster", cluster),
        ("--initial-cluster-state", "new"),
        ("--initial-cluster-token", token),
    ] {
        args.extend([option.into(), value.into()]);
    }
    args
}

/// `GET /health` says `"health":"true"` once the member has a leader.
fn probe(stream: &mut TcpStream, port: u16) -> Result<(), String> {
    let request =
        format!("GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).map_err(|error| format!("write: {error}"))?;
    let reply = read_reply(stream, 64 * 1024, false)?;
    let reply = String::from_utf8_lossy(&reply);
    match reply.contains("\"health\":\"true\"") {
        true => Ok(()),
        false => Err(format!("/health answered {:?}", reply.lines().last().unwrap_or_default())),
    }
}

impl ManagedServer {
    /// Starts an etcd cluster of `members` (3 for a partition test): every
    /// member is one server, its URL its client URL.
    pub fn start_etcd_cluster(
        members: usize,
        options: &ServerOptions,
    ) -> Result<Vec<ManagedServer>, RealError> {
        ManagedServer::start_etcd_members(members, options, None)
    }

    /// Starts an etcd cluster of `members` whose peer traffic goes through
    /// `proxy`, so a test can partition the members: member `i` is the node
    /// `etcd-i` of the proxy (its etcd `--name` stays `member-i`). Each
    /// member advertises a [`Proxy::route_peers`] listener as its peer URL
    /// and listens on its real port; once the cluster runs, each member's id
    /// is aliased to its node name, so the peer connections are attributed
    /// to their links. Clients reach the members through the proxy by the
    /// URLs a route per client gives (a listener per client and
    /// member), or directly at [`ManagedServer::url`].
    pub fn start_etcd_cluster_behind(
        members: usize,
        options: &ServerOptions,
        proxy: &Proxy,
    ) -> Result<Vec<ManagedServer>, RealError> {
        ManagedServer::start_etcd_members(members, options, Some(proxy))
    }

    /// An etcd cluster whose members dial each other directly, or through
    /// `proxy`'s peer listeners. Started again on new ports when a member
    /// could not bind its own (another process took it after we chose it).
    fn start_etcd_members(
        members: usize,
        options: &ServerOptions,
        proxy: Option<&Proxy>,
    ) -> Result<Vec<ManagedServer>, RealError> {
        let mut servers = Vec::with_capacity(members);
        if members == 0 {
            return Ok(servers);
        }
        for _ in 0..members {
            servers.push(ManagedServer::create(ServerKind::Etcd, options)?);
        }
        let deadline = Instant::now() + options.ready_timeout;
        for attempt in 1..=PORT_ATTEMPTS {
            if ManagedServer::launch_etcd_members(&mut servers, proxy, deadline)? {
                break;
            }
            if attempt == PORT_ATTEMPTS {
                return Err(servers[0].error("no free port"));
            }
            for server in &mut servers {
                server.kill_process();
                release_ports(&std::mem::take(&mut server.ports));
                // Its member id is bound to the old peer URLs.
                let _ = fs::remove_dir_all(server.data_dir());
            }
        }
        if let Some(proxy) = proxy {
            for (name, id) in servers[0].etcd_member_ids()? {
                // etcd's rafthttp sends its id as lowercase hex, unpadded.
                let at = name.strip_prefix("member-").unwrap_or(&name);
                proxy.alias(&format!("{id:x}"), &format!("etcd-{at}"));
            }
        }
        Ok(servers)
    }

    /// Gives the members new ports, runs them and waits until every one is
    /// ready; `false` when one could not bind its port.
    fn launch_etcd_members(
        servers: &mut [ManagedServer],
        proxy: Option<&Proxy>,
        deadline: Instant,
    ) -> Result<bool, RealError> {
        let mut cluster = Vec::with_capacity(servers.len());
        for (at, server) in servers.iter_mut().enumerate() {
            server.ports =
                reserve_ports(ServerKind::Etcd.ports).map_err(|error| server.error(error))?;
            let peer = SocketAddr::from((Ipv4Addr::LOCALHOST, server.ports[1]));
            // A retry leaves the earlier attempt's listener unused.
            let advertised = match proxy {
                Some(proxy) => proxy.route_peers(&format!("etcd-{at}"), peer)?,
                None => peer,
            };
            cluster.push(format!("member-{at}=http://{advertised}"));
        }
        let cluster = cluster.join(",");
        let token = token(servers[0].id);
        for (at, server) in servers.iter_mut().enumerate() {
            let args = member_args(&server.site(), &format!("member-{at}"), &cluster, &token);
            server.launch = Launch { program: server.programs.server.clone(), args };
            server.spawn()?;
        }
        // No member is healthy before a majority has started and elected.
        for server in servers.iter_mut() {
            match server.wait_ready(deadline) {
                Ok(()) => {}
                Err(failure) if failure.port_taken => return Ok(false),
                Err(failure) => return Err(server.error(failure.reason)),
            }
        }
        Ok(true)
    }

    /// The cluster's members as etcd lists them: each one's `--name` and
    /// id. Asked of etcd's JSON gateway (3.4 serves `/v3/`), which spells
    /// the 64-bit ids as decimal strings.
    fn etcd_member_ids(&self) -> Result<Vec<(String, u64)>, RealError> {
        let failed = |reason: String| self.error(format!("cannot list the members: {reason}"));
        let port = self.port();
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port))
            .map_err(|error| failed(format!("connect: {error}")))?;
        let timeouts = stream
            .set_read_timeout(Some(STOP_GRACE))
            .and_then(|()| stream.set_write_timeout(Some(STOP_GRACE)));
        timeouts.map_err(|error| failed(error.to_string()))?;
        let request = format!(
            "POST /v3/cluster/member/list HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
        );
        stream.write_all(request.as_bytes()).map_err(|error| failed(format!("write: {error}")))?;
        let reply = read_reply(&mut stream, 1024 * 1024, false).map_err(failed)?;
        let reply = String::from_utf8_lossy(&reply);
        // The JSON document, whether or not the body came in one chunk.
        let json = match (reply.find('{'), reply.rfind('}')) {
            (Some(start), Some(end)) if start < end => &reply[start..=end],
            _ => return Err(failed(format!("answered {reply:?}"))),
        };
        let list: serde_json::Value =
            serde_json::from_str(json).map_err(|error| failed(format!("{error} in {json}")))?;
        let members = list["members"].as_array().cloned().unwrap_or_default();
        let ids: Vec<(String, u64)> = members
            .iter()
            .filter_map(|member| {
                let id = &member["ID"];
                let id = id.as_u64().or_else(|| id.as_str()?.parse().ok())?;
                Some((member["name"].as_str()?.to_string(), id))
            })
            .collect();
        match ids.is_empty() {
            true => Err(failed(format!("no member in {json}"))),
            false => Ok(ids),
        }
    }
}
