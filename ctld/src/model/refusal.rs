//! A refused client request: Slurm's error code (what the client prints its message from) and
//! the detail for the log and the client. Validation, the core's checks and the dispatch all
//! refuse with this one type; it becomes a `Response::Error` with the same two fields, so the
//! wire bytes do not depend on where the refusal was made.

use drover_shared::proto::client::{ErrorCode, Response};

/// A request ctld refuses: the code the client shows and the detail that explains it. A refused
/// request changes no state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{detail}")]
pub(crate) struct Refusal {
    pub(crate) code: ErrorCode,
    pub(crate) detail: String,
}

impl Refusal {
    pub(crate) fn new(code: ErrorCode, detail: impl Into<String>) -> Refusal {
        Refusal { code, detail: detail.into() }
    }
}

impl From<Refusal> for Response {
    fn from(Refusal { code, detail }: Refusal) -> Response {
        Response::Error { code, detail }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_answers_its_code_and_detail_unchanged() {
        let refusal = Refusal::new(ErrorCode::InvalidQos, "QOS gold is not allowed in partition p");
        assert_eq!(refusal.to_string(), "QOS gold is not allowed in partition p");
        let answer: Response = refusal.into();
        assert_eq!(
            answer,
            Response::Error { code: ErrorCode::InvalidQos, detail: "QOS gold is not allowed in partition p".into() }
        );
    }
}
