//! scontrol's operator and admin commands: `update NodeName=<hostlist> State=… Reason=…` (with
//! Drover's `Owner=` and `Ticket=` for the incident a drain or down opens) and
//! `reconfigure`, `reboot` and `cancel_reboot`, with Slurm's messages and exit codes. ctld
//! decides who may; these only parse, send and print.

use drover_shared::proto::client::{ErrorCode, NodeStateChange, NodeUpdate, RebootRequest, Request, Response};

/// Slurm's refusal of a drain or down without a reason.
const REASON_REQUIRED: &str = "You must specify a reason when DOWNING or DRAINING a node. Request denied";

/// Whether an `update` command line is about nodes (`NodeName=` among its words).
pub(crate) fn is_node_update(words: &[String]) -> bool {
    words.iter().any(|w| w.split_once('=').is_some_and(|(k, _)| k.eq_ignore_ascii_case("nodename")))
}

/// A parse failure, printed as it is; exit 1.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Refused(pub(crate) String);

/// Parses `NodeName=<hostlist> State=<state> [Reason=<text>]`.
pub(crate) fn parse_node_update(words: &[String]) -> Result<NodeUpdate, Refused> {
    let (mut nodes, mut state, mut reason, mut owner, mut ticket) = (None, None, None, None, None);
    for word in words {
        let Some((key, value)) = word.split_once('=') else { return Err(Refused(format!("Invalid input: {word}"))) };
        match key.to_ascii_lowercase().as_str() {
            "nodename" => nodes = Some(value.to_owned()),
            "reason" => reason = Some(value.to_owned()),
            // Drover's incident owner and ticket (not in Slurm).
            "owner" => owner = Some(value.to_owned()),
            "ticket" => ticket = Some(value.to_owned()),
            "state" => {
                state = Some(match value.to_ascii_uppercase().as_str() {
                    "DRAIN" => NodeStateChange::Drain,
                    "DOWN" => NodeStateChange::Down,
                    // IDLE brings a DOWN or drained node back as RESUME does (Slurm's own
                    // tests set it in their cleanup).
                    "RESUME" | "IDLE" => NodeStateChange::Resume,
                    "UNDRAIN" => NodeStateChange::Undrain,
                    "FAIL" | "FUTURE" | "POWER_DOWN" | "POWER_UP" | "NORESP" => {
                        return Err(Refused(format!("scontrol: error: State={value} is not supported yet")));
                    }
                    _ => return Err(Refused(format!("Invalid input: {word}\nRequest aborted"))),
                })
            }
            _ => return Err(Refused(format!("scontrol: error: update of node {key} is not supported yet"))),
        }
    }
    let nodes = nodes.filter(|n| !n.is_empty()).ok_or_else(|| Refused("Invalid input: NodeName=".into()))?;
    let state = state.ok_or_else(|| Refused("scontrol: error: no State= given; nothing to update".into()))?;
    let missing_reason = reason.as_deref().is_none_or(|r| r.trim().is_empty());
    if matches!(state, NodeStateChange::Drain | NodeStateChange::Down) && missing_reason {
        return Err(Refused(REASON_REQUIRED.into()));
    }
    Ok(NodeUpdate { nodes, state, reason, owner, ticket })
}

/// `scontrol update NodeName=…`.
pub(crate) fn update_node(words: &[String]) -> anyhow::Result<i32> {
    // State=CANCEL_REBOOT is `cancel_reboot` by another name (the other words are ignored).
    let value = |key: &str| {
        words.iter().find_map(|w| w.split_once('=').filter(|(k, _)| k.eq_ignore_ascii_case(key)).map(|(_, v)| v))
    };
    if value("state").is_some_and(|s| s.eq_ignore_ascii_case("CANCEL_REBOOT")) {
        let nodes = value("nodename").unwrap_or_default().to_owned();
        return print_outcome("slurm_update", crate::client::call(&Request::CancelReboot { nodes })?);
    }
    let update = match parse_node_update(words) {
        Ok(update) => update,
        Err(Refused(message)) => {
            eprintln!("{message}");
            return Ok(1);
        }
    };
    print_outcome("slurm_update", crate::client::call(&Request::UpdateNode(update))?)
}

/// `scontrol reconfigure`.
pub(crate) fn reconfigure() -> anyhow::Result<i32> {
    print_outcome("slurm_reconfigure", crate::client::call(&Request::Reconfigure)?)
}

/// Parses `reboot`'s words: `[ASAP] [nextstate=RESUME|DOWN] [reason=<text>] ALL|<NodeList>`, in
/// any order, the keywords without regard to case and `nextstate`'s value by its prefix.
pub(crate) fn parse_reboot(words: &[String]) -> Result<RebootRequest, Refused> {
    let mut request = RebootRequest { nodes: String::new(), asap: false, next_down: false, reason: None };
    for word in words {
        let key = word.split_once('=').map(|(k, v)| (k.to_ascii_lowercase(), v));
        match key {
            _ if word.eq_ignore_ascii_case("ASAP") => request.asap = true,
            Some((k, v)) if k == "nextstate" => {
                let upper = v.to_ascii_uppercase();
                request.next_down = match upper.as_str() {
                    s if !s.is_empty() && "RESUME".starts_with(s) => false,
                    s if !s.is_empty() && "DOWN".starts_with(s) => true,
                    _ => return Err(Refused(format!("Invalid state: {word}\nValid states: DOWN, RESUME"))),
                };
            }
            Some((k, v)) if k == "reason" => {
                if v.is_empty() {
                    return Err(Refused("missing reason".into()));
                }
                request.reason = Some(v.to_owned());
            }
            _ if !request.nodes.is_empty() => {
                return Err(Refused("too many arguments for keyword:reboot".into()));
            }
            _ => request.nodes = word.clone(),
        }
    }
    if request.nodes.is_empty() {
        return Err(Refused("Missing node list. Specify ALL|<NodeList>".into()));
    }
    Ok(request)
}

/// `scontrol reboot …`.
pub(crate) fn reboot(words: &[String]) -> anyhow::Result<i32> {
    let request = match parse_reboot(words) {
        Ok(request) => request,
        Err(Refused(message)) => {
            eprintln!("{message}");
            return Ok(1);
        }
    };
    match crate::client::call(&Request::RebootNodes(Box::new(request)))? {
        // Slurm's scontrol names the missing program itself, then the call's failure.
        Response::Error { code: ErrorCode::RebootProgramUndefined, .. } => {
            eprintln!("scontrol: error: RebootProgram isn't defined");
            eprintln!("scontrol_reboot_nodes error: Unspecified error");
            Ok(1)
        }
        response => print_outcome("scontrol_reboot_nodes", response),
    }
}

/// `scontrol cancel_reboot <NodeList>`.
pub(crate) fn cancel_reboot(words: &[String]) -> anyhow::Result<i32> {
    match words {
        [] => eprintln!("Missing node list. Specify ALL|<NodeList>"),
        [nodes] => {
            let request = Request::CancelReboot { nodes: nodes.clone() };
            return print_outcome("slurm_update", crate::client::call(&request)?);
        }
        _ => eprintln!("too many arguments for keyword:cancel_reboot"),
    }
    Ok(1)
}

/// Nothing on success; `<call> error: <message>` (and the loader's detail for a bad config) and
/// exit 1 otherwise.
fn print_outcome(call: &str, response: Response) -> anyhow::Result<i32> {
    match response {
        Response::Done => Ok(0),
        Response::Error { code, detail } => {
            match code {
                ErrorCode::NodeReasonRequired => eprintln!("{}", code.message()),
                ErrorCode::InvalidConfig => eprintln!("{call} error: {}\n{detail}", code.message()),
                // What was wrong with a value (a reason's control character, a bad owner or
                // ticket) says more than "Invalid job specification".
                ErrorCode::InvalidSpec if !detail.is_empty() => {
                    eprintln!("{call} error: {detail}")
                }
                _ => eprintln!("{call} error: {}", code.message()),
            }
            Ok(1)
        }
        other => anyhow::bail!("unexpected answer from the controller: {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split(' ').map(str::to_owned).collect()
    }

    #[test]
    fn node_update_words() {
        let drain = parse_node_update(&words("NodeName=n[1-2] State=drain Reason=bad_fan")).unwrap();
        assert_eq!(
            drain,
            NodeUpdate {
                nodes: "n[1-2]".into(),
                state: NodeStateChange::Drain,
                reason: Some("bad_fan".into()),
                owner: None,
                ticket: None,
            }
        );
        let resume = parse_node_update(&words("nodename=n1 state=RESUME")).unwrap();
        assert_eq!(resume.state, NodeStateChange::Resume);
        // Slurm's tests return nodes to service with State=IDLE.
        let idle = parse_node_update(&words("nodename=n1 state=idle")).unwrap();
        assert_eq!(idle.state, NodeStateChange::Resume);
        assert_eq!(parse_node_update(&words("NodeName=n1 State=DOWN")), Err(Refused(REASON_REQUIRED.into())));
        assert_eq!(parse_node_update(&words("NodeName=n1 State=DRAIN Reason=")), Err(Refused(REASON_REQUIRED.into())));
        assert_eq!(
            parse_node_update(&words("NodeName=n1 State=sleepy")),
            Err(Refused("Invalid input: State=sleepy\nRequest aborted".into()))
        );
        assert!(is_node_update(&words("State=DRAIN NodeName=n1")));
        assert!(parse_node_update(&words("NodeName=n1 State=CANCEL_REBOOT")).is_err(), "update_node sends it apart");
        assert!(!is_node_update(&words("JobId=5 TimeLimit=10")));
    }

    #[test]
    fn reboot_words() {
        let request = parse_reboot(&words("asap NextState=down Reason=kernel_5.15 n[1-3]")).unwrap();
        assert_eq!(
            request,
            RebootRequest { nodes: "n[1-3]".into(), asap: true, next_down: true, reason: Some("kernel_5.15".into()) }
        );
        let plain = parse_reboot(&words("ALL")).unwrap();
        assert_eq!(plain, RebootRequest { nodes: "ALL".into(), asap: false, next_down: false, reason: None });
        assert!(!parse_reboot(&words("nextstate=R n1")).unwrap().next_down, "a prefix of RESUME");
        assert_eq!(parse_reboot(&words("ASAP")), Err(Refused("Missing node list. Specify ALL|<NodeList>".into())));
        assert_eq!(
            parse_reboot(&words("nextstate=IDLE n1")),
            Err(Refused("Invalid state: nextstate=IDLE\nValid states: DOWN, RESUME".into()))
        );
        assert_eq!(parse_reboot(&words("reason= n1")), Err(Refused("missing reason".into())));
        assert_eq!(parse_reboot(&words("n1 n2")), Err(Refused("too many arguments for keyword:reboot".into())));
    }
}
