//! Remote clients: a command on a host without ctld's Unix socket gets a short-lived token from
//! its node's noded (identity from `SO_PEERCRED` there) and presents it to ctld over TCP. The
//! token's user is who ctld serves; replayed, expired, forged and wrong-key tokens are refused,
//! and the refusals are audited. The connection is sealed with the token's secret, which noded
//! gives only to the token's owner: a token read in flight gets its reader nothing.

use drover_e2e::{Cluster, bin_dir, require_users, text};
use drover_shared::auth::{ClusterKey, NONCE_LEN};
use drover_shared::proto::client::{Request, Response};
use drover_shared::proto::frame::{
    MAX_FRAME, MAX_HANDSHAKE_FRAME, read_message, read_sealed, write_message, write_sealed,
};
use drover_shared::proto::seal::{End, Sealer, SessionKeys, verify_client_session_proof};
use drover_shared::proto::{Hello, HelloReply, MAGIC, PROTOCOL_VERSION, Role};
use drover_shared::token::{ClientToken, IssuedToken};
use std::os::unix::net::UnixStream;
use std::process::{Command, Output};
use std::time::Duration;

fn token_socket(cluster: &Cluster) -> std::path::PathBuf {
    cluster.home().join("noded-n1").join("token.sock")
}

/// Runs a command as `user` the way it runs on a compute node without ctld's socket.
fn remote(cluster: &Cluster, user: &str, command: &str, args: &[&str]) -> Output {
    let dir = cluster.workdir(Some(user));
    Command::new("setpriv")
        .args([&format!("--reuid={user}"), &format!("--regid={user}"), "--init-groups", "--"])
        .arg(cluster.home().join("bin").join(command))
        .args(args)
        .current_dir(&dir)
        .env("HOME", format!("/home/{user}"))
        .env("DROVER_CONF", cluster.home().join("cluster.toml"))
        .env("DROVER_SOCKET", "/nonexistent/ctld.sock")
        .env("DROVER_TOKEN_SOCKET", token_socket(cluster))
        .env_remove("DROVER_HOME")
        .output()
        .expect("running the command")
}

/// A token and its connection secret from n1's noded, for the test's own uid (root).
fn fetch_token(cluster: &Cluster) -> IssuedToken {
    let mut stream = UnixStream::connect(token_socket(cluster)).expect("token socket");
    read_message(&mut stream, MAX_HANDSHAKE_FRAME).expect("token")
}

/// Presents `token` to ctld's TCP port and pings over the sealed connection, with keys derived
/// from `session`: `Ok(cluster name)`, the refusal, or `Err("no answer")` when ctld dropped the
/// connection because the frames were not sealed with the token's secret.
fn present(cluster: &Cluster, token: ClientToken, session: &[u8]) -> Result<String, String> {
    let mut stream = std::net::TcpStream::connect(cluster.node_address()).expect("ctld's TCP port");
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let nonce = vec![5; NONCE_LEN];
    let role = Role::RemoteClient { token };
    let hello = Hello { magic: MAGIC, protocol_version: PROTOCOL_VERSION, role, nonce: nonce.clone() };
    write_message(&mut stream, &hello).unwrap();
    match read_message::<_, HelloReply>(&mut stream, MAX_HANDSHAKE_FRAME).unwrap() {
        HelloReply::Reject { message } => Err(message),
        HelloReply::Accept { nonce: server_nonce, proof, .. } => {
            let genuine = verify_client_session_proof(session, &nonce, &server_nonce, &proof);
            let mut sealer = Sealer::new(SessionKeys::for_client(session, End::Node, &nonce, &server_nonce));
            write_sealed(&mut stream, &Request::Ping, &mut sealer).unwrap();
            match read_sealed::<_, Response>(&mut stream, MAX_FRAME, &mut sealer) {
                Ok(Response::Pong { cluster, .. }) => {
                    assert!(genuine, "ctld served a connection whose proof did not match the secret");
                    Ok(cluster)
                }
                Ok(other) => panic!("{other:?}"),
                Err(_) => {
                    assert!(!genuine, "ctld proved the secret but dropped the sealed request");
                    Err("no answer".to_owned())
                }
            }
        }
    }
}

/// alice submits from "her compute node" through a token; the job is hers, bob cannot cancel it
/// from there either, and the audit log says where the requests came from.
#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn remote_clients_act_as_the_user_their_noded_vouches_for() {
    require_users();
    let cluster = Cluster::start();
    let _ = bin_dir();
    let out = remote(&cluster, "alice", "sbatch", &["--parsable", "--begin=now+3600", "--wrap", "true"]);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    let job_id = text(&out.stdout).trim().to_owned();
    assert_eq!(cluster.ok("squeue", &["-h", "-j", &job_id, "-o", "%u|%T"]).trim(), "alice|PENDING");
    let out = remote(&cluster, "alice", "squeue", &["-h", "-o", "%i"]);
    assert_eq!(text(&out.stdout).trim(), job_id, "{}", text(&out.stderr));
    let out = remote(&cluster, "bob", "scancel", &[&job_id]);
    assert_eq!(
        text(&out.stderr),
        format!("scancel: error: Kill job error on job id {job_id}: Access/permission denied\n")
    );
    let out = remote(&cluster, "bob", "scontrol", &["update", "NodeName=n1", "State=DRAIN", "Reason=x"]);
    assert_eq!(text(&out.stderr), "slurm_update error: Access/permission denied\n");
    assert!(remote(&cluster, "alice", "scancel", &[&job_id]).status.success());
    cluster.wait_state(job_id.parse().unwrap(), "CANCELLED", Duration::from_secs(30));

    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let audit = loop {
        let audit = cluster.ok("drover", &["audit", "-P", "-n", "--job", &job_id]);
        if audit.lines().count() >= 3 || std::time::Instant::now() > deadline {
            break audit;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let fields: Vec<Vec<&str>> = audit.lines().map(|l| l.split('|').collect()).collect();
    let row = |user: &str, action: &str, outcome: &str| {
        fields.iter().any(|f| f[1] == user && f[3] == "host:n1" && f[4] == action && f[6] == outcome)
    };
    assert!(row("alice", "submit", "ok"), "{audit}");
    assert!(row("bob", "cancel", "Access/permission denied"), "{audit}");
    assert!(row("alice", "cancel", "ok"), "{audit}");
}

/// Each token works once, within its lifetime, and only if signed with the cluster key.
#[test]
fn replayed_expired_and_forged_tokens_are_refused() {
    let cluster = Cluster::start();
    let IssuedToken { token, session } = fetch_token(&cluster);
    assert_eq!((token.uid, token.host.as_str()), (0, "n1"));
    assert_eq!(present(&cluster, token.clone(), &session), Ok("testcluster".to_owned()));
    assert_eq!(present(&cluster, token, &session), Err("token already used".to_owned()));
    // A token read in flight, without the secret noded gave its owner: ctld cannot prove itself
    // to the thief, and drops the first request, which is not sealed with the secret.
    let stolen = fetch_token(&cluster);
    assert_eq!(present(&cluster, stolen.token, &[0; 32]), Err("no answer".to_owned()));

    let key = ClusterKey::load(&cluster.home().join("cluster.key")).expect("cluster key");
    let now = drover_shared::now();
    let expired = ClientToken::issue(&key, 0, 0, "n1", now - 120, 60).unwrap();
    assert_eq!(present(&cluster, expired, &[]), Err("token expired".to_owned()));
    let too_long = ClientToken::issue(&key, 0, 0, "n1", now, 86_400).unwrap();
    assert_eq!(present(&cluster, too_long, &[]), Err("token not valid yet or valid for too long".to_owned()));
    let unknown_host = ClientToken::issue(&key, 0, 0, "n9", now, 30).unwrap();
    assert_eq!(present(&cluster, unknown_host, &[]), Err("token from unknown host n9".to_owned()));

    let dir = tempfile::tempdir().unwrap();
    let wrong = ClusterKey::generate(&dir.path().join("other.key")).unwrap();
    let forged = ClientToken::issue(&wrong, 0, 0, "n1", now, 30).unwrap();
    assert_eq!(present(&cluster, forged, &[]), Err("token not signed with the cluster key".to_owned()));
    let mut raised = fetch_token(&cluster);
    raised.token.uid = 1;
    assert_eq!(
        present(&cluster, raised.token, &raised.session),
        Err("token not signed with the cluster key".to_owned())
    );
    // A fresh token still works; the refusals are in the audit log.
    let fresh = fetch_token(&cluster);
    assert_eq!(present(&cluster, fresh.token, &fresh.session), Ok("testcluster".to_owned()));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let audit = cluster.ok("drover", &["audit", "-P", "-n", "--action", "connect"]);
        let refused = audit.lines().filter(|l| l.contains("|Access/permission denied|")).count();
        if refused == 6 {
            assert!(audit.contains("token already used") && audit.contains("token expired"), "{audit}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "expected 6 refused connects:\n{audit}");
        std::thread::sleep(Duration::from_millis(200));
    }
}
