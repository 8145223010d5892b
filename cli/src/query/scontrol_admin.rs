//! scontrol's operator and admin commands: `update NodeName=<hostlist> State=… Reason=…` (with
//! Drover's `Owner=` and `Ticket=` for the incident a drain or down opens) and
//! `reconfigure`, with Slurm's messages and exit codes. ctld decides who may; these only parse,
//! send and print.

use drover_shared::proto::client::{NodeStateChange, NodeUpdate, Request, Response};

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
                    "FAIL" | "FUTURE" | "POWER_DOWN" | "POWER_UP" | "NORESP" | "CANCEL_REBOOT" => {
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

/// Nothing on success; `<call> error: <message>` (and the loader's detail for a bad config) and
/// exit 1 otherwise.
fn print_outcome(call: &str, response: Response) -> anyhow::Result<i32> {
    match response {
        Response::Done => Ok(0),
        Response::Error { code, detail } => {
            match code {
                drover_shared::proto::client::ErrorCode::NodeReasonRequired => eprintln!("{}", code.message()),
                drover_shared::proto::client::ErrorCode::InvalidConfig => {
                    eprintln!("{call} error: {}\n{detail}", code.message())
                }
                // What was wrong with a value (a reason's control character, a bad owner or
                // ticket) says more than "Invalid job specification".
                drover_shared::proto::client::ErrorCode::InvalidSpec if !detail.is_empty() => {
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
        assert!(!is_node_update(&words("JobId=5 TimeLimit=10")));
    }
}
